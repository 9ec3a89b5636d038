// The dashboard's entry: polls the cluster (`/state`, `/admin/clusters`, `/health`) every
// second and lays out the panels. Each panel is its own module; see docs/dashboard.md.

import {html, render, useEffect, useState} from './preact-htm.js';
import {usePoll} from './poll.js';
import {ErrorBanner} from './errors.js';
import {NodesPanel} from './nodes.js';
import {InstancesPanel} from './instances.js';
import {PlacePanel} from './place.js';
import {TimelinePanel} from './timeline.js';
import {ChatPanel} from './chat.js';
import {short} from './format.js';
import {apiKey, getHealth, setApiKey} from './api.js';

const POLL_MS = 1000;
// Upstream's dashboard routes, each a section of this one page.
const SECTIONS = {'/cluster': 'nodes', '/operator': 'nodes', '/model-store': 'model-store', '/chat': 'chat'};

function scrollToPath(path) {
  const id = SECTIONS[path.replace(/\/$/, '')];
  const el = id && document.getElementById(id);
  if (el) el.scrollIntoView();
}

function Nav() {
  const go = (e, path) => {
    e.preventDefault();
    history.pushState(null, '', path);
    scrollToPath(path);
  };
  return html`<nav>${Object.entries({'/cluster': 'Cluster', '/model-store': 'Place', '/chat': 'Chat'})
    .map(([path, label]) => html`<a href=${path} onClick=${(e) => go(e, path)}>${label}</a>`)}</nav>`;
}

// The API key for a node with `api.keys` (an admin key shows everything; an inference key only
// chats). It applies from the next poll; "Forget" drops it from this tab.
function KeyBox() {
  const [saved, setSaved] = useState(apiKey() !== '');
  const [text, setText] = useState('');
  const use = (e) => {
    e.preventDefault();
    setApiKey(text.trim());
    setSaved(text.trim() !== '');
    setText('');
  };
  const forget = () => { setApiKey(''); setSaved(false); };
  return html`<form class="keybox" onSubmit=${use} data-testid="api-key">
    ${saved ? html`<span class="muted">API key set for this tab</span>
                   <button type="button" onClick=${forget}>Forget key</button>`
            : html`<input type="password" autocomplete="off" aria-label="API key" placeholder="API key (nodes with api.keys)"
                     value=${text} onInput=${(e) => setText(e.target.value)} />
                   <button type="submit">Use key</button>`}
  </form>`;
}

function Summary({state, cluster, health}) {
  const names = Object.fromEntries(Object.entries((state && state.nodeIdentities) || {})
    .map(([id, i]) => [id, i.friendlyName]));
  const master = (state && state.masterNodeId) || (cluster && cluster.masterNodeId);
  return html`<div class="summary" data-testid="summary">
    ${cluster ? html`<span>cluster <strong>${cluster.namespace}</strong></span>` : null}
    <span>master <strong>${names[master] || short(master) || '–'}</strong></span>
    <span>${Object.keys(names).length} node(s)</span>
    ${health ? html`<span>this node <span class=${`badge ${health.status}`} data-testid="health">${health.status}</span></span>
                    <span class="muted">v${health.version}</span>` : null}
  </div>`;
}

function App() {
  const state = usePoll('/state', POLL_MS);
  const clusters = usePoll('/admin/clusters', POLL_MS);
  const health = usePoll('/health', 2 * POLL_MS, true, getHealth);
  const [timelineFor, setTimelineFor] = useState(null);
  useEffect(() => scrollToPath(location.pathname), []);
  useEffect(() => {
    const onPop = () => scrollToPath(location.pathname);
    addEventListener('popstate', onPop);
    return () => removeEventListener('popstate', onPop);
  }, []);
  const list = (clusters.data && clusters.data.clusters) || [];
  const names = Object.fromEntries(Object.entries((state.data && state.data.nodeIdentities) || {})
    .map(([id, i]) => [id, i.friendlyName]));
  const showTimeline = (id) => {
    setTimelineFor(id);
    requestAnimationFrame(() => document.getElementById('timeline')?.scrollIntoView());
  };
  return html`
    <header class="top"><h1>Skulk</h1><${Summary} state=${state.data} cluster=${list[0]} health=${health.data} />
      <${KeyBox} /><${Nav} /></header>
    <${ErrorBanner} errors=${[state.error, clusters.error, health.error]} />
    ${((state.data && state.data.clusterWarnings) || []).map((w) => html`<div class="error" data-testid="cluster-warning"
      key=${w.code}><strong>${w.code}</strong>: ${w.message}</div>`)}
    <main>
      <section id="nodes"><h2>Nodes</h2><${NodesPanel} state=${state.data} cluster=${list[0]} /></section>
      <section id="instances"><h2>Instances</h2>
        <${InstancesPanel} state=${state.data} clusters=${list} onTimeline=${showTimeline} /></section>
      ${timelineFor ? html`<section id="timeline">
        <${TimelinePanel} instanceId=${timelineFor} names=${names} onClose=${() => setTimelineFor(null)} /></section>`
        : null}
      <section id="model-store"><h2>Place a model</h2><${PlacePanel} state=${state.data} /></section>
      <section id="chat"><h2>Chat</h2><${ChatPanel} state=${state.data} /></section>
    </main>`;
}

const root = document.getElementById('app');
root.textContent = '';  // the page's "Loading…" placeholder
render(html`<${App} />`, root);
