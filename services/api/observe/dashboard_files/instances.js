// Instances panel: each placed instance as a card with its ranks, their phase (prefill /
// decode / streaming / idle / loading), live tok/s and active requests, and a delete button.
// The instances and runner statuses come from `/state`; phases, tok/s and load from the pools
// of `/admin/clusters` (a card still shows, without live figures, while that call fails).

import {html, useState} from './preact-htm.js';
import {del} from './api.js';
import {ErrorLine} from './errors.js';
import {fmtRate, short, untag} from './format.js';

const READY = new Set(['RunnerReady', 'RunnerRunning']);

// Upstream's dashboard labels, from the runners' statuses.
export function statusLabel(kinds) {
  if (!kinds.length) return 'Pending';
  if (kinds.some((k) => k === 'RunnerFailed')) return 'Failed';
  if (kinds.some((k) => k === 'RunnerShuttingDown' || k === 'RunnerShutdown')) return 'Shutting Down';
  if (kinds.every((k) => READY.has(k))) return kinds.some((k) => k === 'RunnerRunning') ? 'Running' : 'Ready';
  if (kinds.some((k) => k === 'RunnerWarmingUp')) return 'Warming Up';
  return 'Loading';
}

// One view per instance: /state's instances, with /admin/clusters' pool figures where known.
export function instanceViews(state, clusters) {
  const pools = {};
  for (const c of clusters || []) for (const p of c.pools || []) pools[p.instanceId] = p;
  const names = {};
  for (const [id, ident] of Object.entries((state && state.nodeIdentities) || {})) names[id] = ident.friendlyName;
  for (const c of clusters || []) for (const n of c.nodes || []) names[n.nodeId] = n.friendlyName || names[n.nodeId];
  const runners = (state && state.runners) || {};
  const views = [];
  const seen = new Set();
  for (const [id, tagged] of Object.entries((state && state.instances) || {})) {
    const [kind, inst] = untag(tagged);
    const sa = inst.shardAssignments || {};
    const nodeOf = Object.fromEntries(Object.entries(sa.nodeToRunner || {}).map(([n, r]) => [r, n]));
    const pool = pools[id] || null;
    const poolRanks = Object.fromEntries(((pool && pool.ranks) || []).map((r) => [r.runnerId, r]));
    const ranks = Object.entries(sa.runnerToShard || {}).map(([rid, shardTagged]) => {
      const [shardKind, shard] = untag(shardTagged);
      const [status, detail] = untag(runners[rid]);
      const live = poolRanks[rid] || {};
      const nodeId = nodeOf[rid] || live.nodeId;
      return {runnerId: rid, nodeId, node: names[nodeId] || short(nodeId), rank: shard.deviceRank ?? live.deviceRank,
              sharding: (shardKind || '').replace('ShardMetadata', ''), layers: [shard.startLayer, shard.endLayer],
              status: status || live.status || 'unknown', detail, phase: live.phase || null,
              tps: live.tokensPerSecond, active: live.active, waiting: live.waiting};
    }).sort((a, b) => a.rank - b.rank);
    seen.add(id);
    const first = (ranks[0] && ranks[0].detail) || {};
    views.push({id, modelId: sa.modelId || (pool && pool.modelId), meta: (kind || '').replace('Instance', ''),
                sharding: (pool && pool.sharding) || (ranks[0] && ranks[0].sharding), worldSize: ranks.length,
                ranks, pool, status: statusLabel(ranks.map((r) => r.status)),
                engine: inst.engine || 'mlx',
                enginePath: first.enginePath || null, speculation: first.speculation || null});
  }
  for (const [id, pool] of Object.entries(pools)) {  // a pool the state does not list yet
    if (seen.has(id)) continue;
    const ranks = (pool.ranks || []).map((r) => ({...r, rank: r.deviceRank, node: names[r.nodeId] || short(r.nodeId),
                                                  tps: r.tokensPerSecond, layers: []}));
    views.push({id, modelId: pool.modelId, meta: '', sharding: pool.sharding, worldSize: pool.worldSize,
                ranks, pool, status: statusLabel(ranks.map((r) => r.status))});
  }
  return views.sort((a, b) => `${a.modelId}${a.id}`.localeCompare(`${b.modelId}${b.id}`));
}

function Phase({phase}) {
  if (!phase) return html`<span class="muted">–</span>`;
  return html`<span class=${`phase phase-${phase}`} data-testid="phase">${phase}</span>`;
}

function RankRow({r}) {
  const [layerFrom, layerTo] = r.layers;
  const note = r.detail && r.detail.errorMessage ? r.detail.errorMessage
    : r.detail && r.detail.totalLayers ? `${r.detail.layersLoaded}/${r.detail.totalLayers} layers` : '';
  return html`<tr data-testid="rank" data-runner-id=${r.runnerId}>
    <td>${r.rank}</td><td>${r.node}</td>
    <td><span class=${`status status-${r.status}`}>${String(r.status).replace('Runner', '')}</span>
      ${note ? html` <span class="muted">${note}</span>` : null}</td>
    <td><${Phase} phase=${r.phase} /></td>
    <td class="num">${fmtRate(r.tps)}</td>
    <td class="num">${r.active ?? '–'}${r.waiting ? ` (+${r.waiting})` : ''}</td>
    <td class="muted">${layerFrom != null ? `${layerFrom}–${layerTo}` : ''}</td>
  </tr>`;
}

function InstanceCard({view, onTimeline}) {
  const [confirming, setConfirming] = useState(false);
  const [deleting, setDeleting] = useState(null);
  const [error, setError] = useState(null);
  const pool = view.pool || {};
  const remove = async () => {
    setConfirming(false);
    setError(null);
    try {
      const reply = await del(`/instance/${encodeURIComponent(view.id)}`);
      setDeleting(reply.command_id || true);
    } catch (e) { setError(e); }
  };
  return html`<article class="card instance" data-testid="instance" data-instance-id=${view.id}
                       data-model-id=${view.modelId}>
    <header>
      <h3>${view.modelId}</h3>
      <span class=${`badge status-${view.status.replace(' ', '')}`} data-testid="instance-status">${view.status}</span>
      ${view.pool ? html`<span class=${`badge ${pool.serving ? 'serving' : 'not-serving'}`}>
        ${pool.serving ? 'serving' : 'not serving'}</span>` : null}
      <${Phase} phase=${pool.phase} />
    </header>
    <div class="muted">${view.sharding || '?'} · ${view.meta || 'MlxRing'} · ${view.worldSize} rank${view.worldSize === 1 ? '' : 's'}
      · <span data-testid="engine">${view.engine || 'mlx'}</span>
      · <span class="mono">${view.id}</span></div>
    ${view.speculation ? html`<div data-testid="speculation">speculative decoding: ${view.speculation}</div>` : null}
    ${view.enginePath ? html`<div class="muted" data-testid="engine-path">${view.enginePath}</div>` : null}
    <div class="figures">
      <div class="figure"><span class="big" data-testid="tps">${fmtRate(pool.tokensPerSecond)}</span> tok/s</div>
      <div class="figure"><span class="big" data-testid="active">${pool.activeRequests ?? '–'}</span> active</div>
      <div class="figure"><span class="big">${pool.waitingRequests ?? '–'}</span> waiting</div>
    </div>
    <table class="ranks">
      <thead><tr><th>rank</th><th>node</th><th>status</th><th>phase</th><th>tok/s</th><th>active</th><th>layers</th></tr></thead>
      <tbody>${view.ranks.map((r) => html`<${RankRow} key=${r.runnerId} r=${r} />`)}</tbody>
    </table>
    <footer>
      <button onClick=${() => onTimeline(view.id)} data-testid="show-timeline">Timeline</button>
      ${confirming
        ? html`<button class="danger" onClick=${remove} data-testid="confirm-delete">Really delete?</button>
               <button onClick=${() => setConfirming(false)}>Keep</button>`
        : html`<button class="danger" onClick=${() => setConfirming(true)} data-testid="delete"
                       disabled=${!!deleting}>${deleting ? 'Deleting…' : 'Delete'}</button>`}
    </footer>
    <${ErrorLine} error=${error} />
  </article>`;
}

// What went away lately and what took its place (/state's deletedInstances), newest first: a
// lost node's or failed runner's instance placed again, one given up, an operator's deletion.
export function deletionViews(state) {
  const CAUSES = {node_lost: 'node lost', runner_failed: 'runner failed', engine_refused: 'engine refused',
                  given_up: 'given up', operator: 'deleted'};
  return Object.entries((state && state.deletedInstances) || {}).map(([id, d]) => ({
    id, modelId: d.modelId, cause: CAUSES[d.cause] || d.cause || 'deleted', reason: d.reason, at: d.deletedAt,
    outcome: d.replacedBy ? `replaced by ${d.replacedBy}` : d.recreateAt ? `placing again at ${d.recreateAt}` : '',
  })).sort((a, b) => String(b.at).localeCompare(String(a.at)));
}

function Deletions({state}) {
  const rows = deletionViews(state);
  if (!rows.length) return null;
  return html`<details class="deletions" data-testid="deletions"><summary>Recent changes (${rows.length})</summary>
    <table><thead><tr><th>instance</th><th>model</th><th>what</th><th>then</th><th>why</th></tr></thead>
      <tbody>${rows.map((r) => html`<tr key=${r.id} data-testid="deletion" data-instance-id=${r.id}>
        <td class="mono">${short(r.id)}</td><td>${r.modelId}</td><td>${r.cause}</td>
        <td class="mono" data-testid="deletion-outcome">${r.outcome}</td><td class="muted">${r.reason}</td></tr>`)}
      </tbody></table></details>`;
}

export function InstancesPanel({state, clusters, onTimeline}) {
  const views = instanceViews(state, clusters);
  const cards = views.length
    ? html`<div class="cards">${views.map((v) => html`<${InstanceCard} key=${v.id} view=${v}
                                                                      onTimeline=${onTimeline} />`)}</div>`
    : html`<p class="muted" data-testid="no-instances">No instance is placed.</p>`;
  return html`${cards}<${Deletions} state=${state} />`;
}
