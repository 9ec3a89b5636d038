// Timeline panel: the cross-rank view of one instance from `/v1/diagnostics/cluster/timeline`:
// where each rank is now (phase, seconds in it, last progress) and every flight recorder entry
// of its ranks merged by time, one column per rank, so a rank that stopped while the others
// wait shows at a glance. Peers that could not be asked are listed, never hidden.

import {html} from './preact-htm.js';
import {usePoll} from './poll.js';
import {ErrorLine} from './errors.js';
import {fmtTime, short} from './format.js';

const STALL_S = 5;  // a working rank records an entry about every second
const SHOWN = 60;
// Phases of a request in flight, and those of them a rank leaves as soon as its peers answer.
const WORKING = new Set(['task_submission', 'task_agreement', 'prompt_build', 'vision_preprocess', 'kv_cache_lookup',
                         'prefill_barrier', 'prefill_pipeline', 'prefill_stream', 'decode_barrier',
                         'decode_wait_first_token', 'decode_stream', 'parser']);
const WAITING = new Set(['task_agreement', 'prefill_barrier', 'decode_barrier', 'decode_wait_first_token']);

// Seconds since the runner's last flight-recorder entry, on the API's clock (null: none yet).
export function silentFor(runner, generatedAt) {
  const last = Date.parse(runner.lastProgressAt);
  const now = Date.parse(generatedAt);
  return isFinite(last) && isFinite(now) ? Math.max(0, (now - last) / 1000) : null;
}

// Why a rank looks stuck, or null: silent mid-request (frozen, dead, wedged), or waiting on its
// peers for longer than a step takes (ranks that disagree: the signature of a distributed hang).
export function stuckReason(runner, generatedAt) {
  if (!WORKING.has(runner.phase)) return null;
  const silent = silentFor(runner, generatedAt);
  if (silent != null && silent >= STALL_S) return `no entry for ${silent.toFixed(0)} s in ${runner.phase}`;
  if (WAITING.has(runner.phase) && runner.secondsInPhase >= STALL_S) {
    return `waiting in ${runner.phase} for ${Number(runner.secondsInPhase).toFixed(0)} s`
      + (runner.phaseDetail ? ` (${runner.phaseDetail})` : '');
  }
  return null;
}

function RunnerRow({r, names, at}) {
  const silent = silentFor(r, at);
  return html`<tr class=${stuckReason(r, at) ? 'stuck' : ''} data-testid="timeline-runner" data-runner-id=${r.runnerId}>
    <td>${r.deviceRank}/${r.worldSize}</td><td>${names[r.nodeId] || short(r.nodeId)}</td>
    <td class="mono">${short(r.runnerId)}</td>
    <td>${r.pid ?? '–'} ${r.processAlive ? '' : html`<span class="health-error">dead</span>`}</td>
    <td>${r.statusKind}</td><td><span class=${`phase phase-${r.phase}`}>${r.phase}</span>
      ${r.phaseDetail ? html` <span class="muted">${r.phaseDetail}</span>` : null}</td>
    <td class="num" data-testid="seconds-in-phase">${Number(r.secondsInPhase || 0).toFixed(1)} s</td>
    <td data-testid="silent-for">${silent == null ? '–' : `${silent.toFixed(1)} s ago`}</td>
    <td class="mono">${short(r.activeTaskId)}</td>
  </tr>`;
}

export function TimelinePanel({instanceId, names, onClose}) {
  const poll = usePoll('/v1/diagnostics/cluster/timeline', 2000);
  const data = poll.data;
  const runners = ((data && data.runners) || []).filter((r) => !instanceId || r.instanceId === instanceId);
  const column = Object.fromEntries(runners.map((r, i) => [r.runnerId, i]));
  const entries = ((data && data.timeline) || []).filter((e) => e.runnerId in column).slice(-SHOWN);
  const at = data && data.generatedAt;
  const stuck = runners.map((r) => [r, stuckReason(r, at)]).filter(([, why]) => why);
  return html`<div class="timeline" data-testid="timeline">
    <header>
      <h3>Timeline ${instanceId ? html`of <span class="mono">${instanceId}</span>` : 'of every runner'}</h3>
      <button onClick=${onClose}>Close</button>
    </header>
    <${ErrorLine} error=${poll.error} />
    ${data ? html`<div class="muted">built ${fmtTime(data.generatedAt)} by ${names[data.localNodeId] || short(data.localNodeId)},
      master ${names[data.masterNodeId] || short(data.masterNodeId) || 'unknown'}</div>` : null}
    ${((data && data.unreachableNodes) || []).map((u) => html`<div class="error" data-testid="timeline-unreachable">
      Unreachable: <span class="mono">${u.nodeId}</span> ${u.url || ''}: ${u.error}</div>`)}
    ${stuck.map(([r, why]) => html`<div class="warn" data-testid="stuck-rank">
      ${`Rank ${r.deviceRank} on ${names[r.nodeId] || short(r.nodeId)}: ${why}.`}</div>`)}
    ${data && !runners.length ? html`<p class="muted">No runner of this instance reported yet.</p>` : null}
    ${runners.length ? html`<table class="runners">
      <thead><tr><th>rank</th><th>node</th><th>runner</th><th>pid</th><th>status</th><th>phase</th>
        <th>in phase</th><th>last progress</th><th>task</th></tr></thead>
      <tbody>${runners.map((r) => html`<${RunnerRow} key=${r.runnerId} r=${r} names=${names} at=${at} />`)}</tbody>
    </table>` : null}
    ${entries.length ? html`<table class="entries">
      <thead><tr><th>at (UTC)</th>${runners.map((r) => html`<th>rank ${r.deviceRank} · ${names[r.nodeId] || short(r.nodeId)}</th>`)}</tr></thead>
      <tbody>${entries.map((e) => html`<tr data-testid="timeline-entry">
        <td class="mono">${fmtTime(e.at)}</td>
        ${runners.map((r, i) => (i === column[e.runnerId]
          ? html`<td><span class=${`phase phase-${e.phase}`}>${e.phase}</span> ${e.event}
              ${e.detail ? html` <span class="muted">${e.detail}</span>` : null}</td>`
          : html`<td></td>`))}
      </tr>`)}</tbody>
    </table>` : null}
  </div>`;
}
