// Nodes panel: every node of the cluster with its accelerator, memory, disk and health. Reads
// `/state` (nodeIdentities, nodeSystem, nodeMemory, nodeDisk, nodeHealth, masterNodeId) and `/admin/clusters`
// (each node's health and status, and the peers it could not reach).

import {html} from './preact-htm.js';
import {bytesOf, fmtBytes, short} from './format.js';

function level(health) {
  if (!health) return {level: 'unknown', reasons: []};
  if (typeof health === 'string') return {level: health, reasons: []};
  return {level: health.level || 'unknown', reasons: health.reasons || []};
}

// One row per node, merged from both sources (either may lag the other by a poll).
export function nodeRows(state, cluster) {
  const ids = new Set(Object.keys((state && state.nodeIdentities) || {}));
  for (const n of (cluster && cluster.nodes) || []) ids.add(n.nodeId);
  const byId = Object.fromEntries(((cluster && cluster.nodes) || []).map((n) => [n.nodeId, n]));
  const st = state || {};
  return [...ids].sort().map((id) => {
    const c = byId[id] || {};
    const mem = (st.nodeMemory || {})[id] || {};
    const disk = (st.nodeDisk || {})[id] || {};
    // /admin/clusters' level also counts the node's own warnings and whether it answered;
    // /state's gives the reasons.
    const fromState = level((st.nodeHealth || {})[id]);
    const health = {level: c.health || fromState.level, reasons: fromState.reasons};
    return {
      id,
      name: c.friendlyName || ((st.nodeIdentities || {})[id] || {}).friendlyName || short(id),
      master: id === (st.masterNodeId || (cluster && cluster.masterNodeId)),
      status: c.status || null,
      ramTotal: bytesOf(c.ramTotal) ?? bytesOf(mem.ramTotal),
      ramAvailable: bytesOf(c.ramAvailable) ?? bytesOf(mem.ramAvailable),
      diskTotal: bytesOf(c.diskTotal) ?? bytesOf(disk.total),
      diskAvailable: bytesOf(c.diskAvailable) ?? bytesOf(disk.available),
      accelerator: ((st.nodeSystem || {})[id] || {}).accelerator || null,
      ...health,
    };
  });
}

function Meter({label, total, available}) {
  const used = total != null && available != null ? total - available : null;
  const pct = total ? Math.max(0, Math.min(100, (100 * used) / total)) : 0;
  return html`<div class="meter">
    <div class="meter-label"><span>${label}</span>
      <span>${fmtBytes(used)} used of ${fmtBytes(total)} (${fmtBytes(available)} free)</span></div>
    <div class="bar"><div class=${`fill ${pct > 90 ? 'hot' : ''}`} style=${{width: `${pct}%`}}></div></div>
  </div>`;
}

const KINDS = {cpu: 'CPU', cuda: 'CUDA', metal: 'Metal'};

// "CUDA · NVIDIA H200 · 139.8 GB", "CPU · AMD EPYC", and the install's problem when there is one.
export function acceleratorText(acc) {
  if (!acc) return null;
  const parts = [KINDS[acc.kind] || acc.kind, acc.count > 1 ? `${acc.count} x ${acc.name}` : acc.name];
  const mem = bytesOf(acc.memory);
  if (acc.kind !== 'cpu' && mem) parts.push(fmtBytes(mem));
  return parts.filter(Boolean).join(' · ');
}

function NodeCard({node}) {
  return html`<article class="card node" data-testid="node" data-node-id=${node.id}>
    <header>
      <h3>${node.name}</h3>
      ${node.master ? html`<span class="badge master">master</span>` : null}
      <span class=${`badge health-${node.level}`} data-testid="node-health">${node.level}</span>
      ${node.status ? html`<span class=${`badge ${node.status}`} data-testid="node-status">${node.status}</span>` : null}
    </header>
    <div class="muted mono">${node.id}</div>
    ${node.accelerator ? html`<div data-testid="node-accelerator">${acceleratorText(node.accelerator)}
      ${node.accelerator.note ? html`<div class="error">${node.accelerator.note}</div>` : null}</div>` : null}
    <${Meter} label="Memory" total=${node.ramTotal} available=${node.ramAvailable} />
    <${Meter} label="Disk" total=${node.diskTotal} available=${node.diskAvailable} />
    ${node.reasons.length ? html`<ul class="reasons">${node.reasons.map((r) => html`
      <li class=${`health-${node.level}`}><strong>${r.code}</strong>: ${r.message}
        ${r.remediation ? html`<div class="muted">${r.remediation}</div>` : null}</li>`)}</ul>` : null}
    ${node.level !== 'ok' && !node.reasons.length ? html`<div class="muted">
      ${`The node's own warnings: GET /v1/diagnostics/cluster/${node.id}`}</div>` : null}
  </article>`;
}

export function NodesPanel({state, cluster}) {
  const rows = nodeRows(state, cluster);
  const unreachable = (cluster && cluster.unreachableNodes) || [];
  return html`<div>
    <div class="cards">${rows.map((n) => html`<${NodeCard} key=${n.id} node=${n} />`)}</div>
    ${!rows.length ? html`<p class="muted">No nodes known yet.</p>` : null}
    ${unreachable.map((u) => html`<div class="error" data-testid="unreachable-node">
      Unreachable node <span class="mono">${u.nodeId}</span> ${u.url ? `(${u.url})` : ''}: ${u.error}</div>`)}
  </div>`;
}
