// Place panel: pick a model (`GET /v1/models`), see every placement the cluster could make and
// why not where it cannot (`GET /instance/previews`: the typed refusals are shown as the API
// words them), and place one (`POST /place_instance`). A custom placement shows the API's
// refusal when the cluster cannot honour it.

import {html, useEffect, useState} from './preact-htm.js';
import {post} from './api.js';
import {usePoll} from './poll.js';
import {ErrorLine} from './errors.js';
import {fmtBytes, short, untag} from './format.js';

function PreviewRow({p, names, onPlace, busy}) {
  const [, inst] = untag(p.instance);
  const nodes = Object.keys((inst.shardAssignments || {}).nodeToRunner || {});
  const width = nodes.length;
  const delta = p.memory_delta_by_node || {};
  return html`<tr data-testid="preview" data-sharding=${p.sharding} data-meta=${p.instance_meta}
                  data-width=${width || ''} class=${p.error ? 'refused' : ''}>
    <td>${p.sharding}</td><td>${p.instance_meta}</td>
    ${p.error
      ? html`<td colspan="2" class="refusal" data-testid="refusal">${p.error}</td><td></td>`
      : html`<td>${width} node${width === 1 ? '' : 's'}: ${nodes.map((n) => names[n] || short(n)).join(', ')}</td>
             <td>${nodes.map((n) => fmtBytes(delta[n])).join(' + ')}</td>
             <td><button onClick=${() => onPlace({sharding: p.sharding, instance_meta: p.instance_meta, min_nodes: width})}
                         disabled=${busy} data-testid="place">Place</button></td>`}
  </tr>`;
}

export function PlacePanel({state}) {
  const models = usePoll('/v1/models', 10000);
  const [modelId, setModelId] = useState('');
  const [busy, setBusy] = useState(false);
  const [placed, setPlaced] = useState(null);
  const [error, setError] = useState(null);
  const [custom, setCustom] = useState({sharding: 'Pipeline', instance_meta: 'MlxRing', min_nodes: 1});
  const list = (models.data && models.data.data) || [];
  useEffect(() => {
    if (!modelId && list.length) setModelId(list[0].id);
  }, [list.length]);
  const previews = usePoll(modelId ? `/instance/previews?model_id=${encodeURIComponent(modelId)}` : '',
                           3000, !!modelId);
  const names = Object.fromEntries(Object.entries((state && state.nodeIdentities) || {})
    .map(([id, i]) => [id, i.friendlyName]));

  const place = async (params) => {
    setBusy(true);
    setError(null);
    setPlaced(null);
    try {
      const reply = await post('/place_instance', {model_id: modelId, ...params});
      setPlaced({...params, instanceId: reply.instance_id, commandId: reply.command_id});
    } catch (e) { setError(e); }
    setBusy(false);
  };

  return html`<div class="place">
    <${ErrorLine} error=${models.error} />
    <label>Model <select data-testid="place-model" value=${modelId} onChange=${(e) => setModelId(e.target.value)}>
      ${list.map((m) => html`<option value=${m.id}>${m.id} (${m.storage_size_megabytes} MB)</option>`)}
    </select></label>
    ${!list.length && !models.error ? html`<p class="muted">No models on this node's disk.</p>` : null}
    <${ErrorLine} error=${previews.error} />
    ${previews.data ? html`<table class="previews">
      <thead><tr><th>sharding</th><th>kind</th><th>nodes</th><th>memory per node</th><th></th></tr></thead>
      <tbody>${previews.data.previews.map((p) => html`<${PreviewRow} p=${p} names=${names} onPlace=${place} busy=${busy} />`)}</tbody>
    </table>` : null}
    <form class="custom" onSubmit=${(e) => { e.preventDefault(); place(custom); }}>
      <span>Custom:</span>
      <select data-testid="custom-sharding" value=${custom.sharding}
              onChange=${(e) => setCustom({...custom, sharding: e.target.value})}>
        <option value="Pipeline">Pipeline</option><option value="Tensor">Tensor</option></select>
      <select value=${custom.instance_meta} onChange=${(e) => setCustom({...custom, instance_meta: e.target.value})}>
        <option value="MlxRing">MlxRing</option><option value="MlxJaccl">MlxJaccl</option></select>
      <label>min nodes <input type="number" min="1" data-testid="custom-min-nodes" value=${custom.min_nodes}
        onInput=${(e) => setCustom({...custom, min_nodes: parseInt(e.target.value, 10) || 1})} /></label>
      <button type="submit" disabled=${busy || !modelId} data-testid="custom-place">Place</button>
    </form>
    ${placed ? html`<div class="ok" data-testid="placed">Placing ${modelId} (${placed.sharding}, ${placed.min_nodes}+ nodes):
      instance <span class="mono">${placed.instanceId}</span></div>` : null}
    <${ErrorLine} error=${error} />
  </div>`;
}
