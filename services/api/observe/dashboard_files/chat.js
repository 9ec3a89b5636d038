// Chat panel: a conversation with a placed model, streamed from `POST /v1/chat/completions`
// (`stream: true`). Stop aborts the request (the API cancels it when the client goes). The
// API's refusals and the stream's error events are shown under the conversation.

import {html, useRef, useState} from './preact-htm.js';
import {streamChat} from './sse.js';
import {ErrorLine} from './errors.js';
import {fmtRate, untag} from './format.js';

function placedModels(state) {
  const ids = Object.values((state && state.instances) || {})
    .map((t) => (untag(t)[1].shardAssignments || {}).modelId).filter(Boolean);
  return [...new Set(ids)].sort();
}

export function ChatPanel({state}) {
  const models = placedModels(state);
  const [chosen, setModel] = useState('');
  const [maxTokens, setMaxTokens] = useState(256);
  const [draft, setDraft] = useState('');
  const [messages, setMessages] = useState([]);
  const [error, setError] = useState(null);
  const [stats, setStats] = useState(null);
  const running = useRef(null);
  const [busy, setBusy] = useState(false);
  const model = models.includes(chosen) ? chosen : models[0] || '';

  const send = async () => {
    const text = draft.trim();
    if (!text || !model || busy) return;
    const history = [...messages, {role: 'user', content: text}];
    setMessages([...history, {role: 'assistant', content: ''}]);
    setDraft('');
    setError(null);
    setStats(null);
    setBusy(true);
    const ctl = new AbortController();
    running.current = ctl;
    const started = performance.now();
    let first = null;
    let pieces = 0;
    const append = (piece) => setMessages((ms) => [...ms.slice(0, -1),
                                                  {...ms[ms.length - 1], content: ms[ms.length - 1].content + piece}]);
    try {
      await streamChat({model, messages: history, max_tokens: maxTokens}, {
        command: () => {},
        delta: (piece) => { first = first ?? performance.now(); pieces += 1; append(piece); },
        done: (finish, usage) => setStats({finish, tokens: usage ? usage.completion_tokens : pieces,
                                           ttft: ((first ?? started) - started) / 1000, tps: null}),
        stats: (engine) => setStats((st) => st && {...st, tps: engine.generation_tps}),  // the engine's decode rate
      }, ctl.signal);
    } catch (e) {
      if (e.name !== 'AbortError') setError(e);
    }
    running.current = null;
    setBusy(false);
  };

  return html`<div class="chat">
    <div class="row">
      <label>Model <select data-testid="chat-model" value=${model} onChange=${(e) => setModel(e.target.value)}>
        ${models.map((m) => html`<option value=${m}>${m}</option>`)}</select></label>
      <label>max tokens <input type="number" min="1" data-testid="chat-max-tokens" value=${maxTokens}
        onInput=${(e) => setMaxTokens(parseInt(e.target.value, 10) || 1)} /></label>
      <button onClick=${() => { setMessages([]); setStats(null); setError(null); }} disabled=${busy}>Clear</button>
    </div>
    ${!models.length ? html`<p class="muted">Place a model to chat with it.</p>` : null}
    <div class="messages" data-testid="chat-messages">
      ${messages.map((m) => html`<div class=${`message ${m.role}`} data-testid=${`chat-${m.role}`}>
        <span class="role">${m.role}</span><pre>${m.content}</pre></div>`)}
    </div>
    ${stats ? html`<div class="muted" data-testid="chat-stats">
      ${`${stats.tokens} tokens, the first after ${stats.ttft.toFixed(2)} s, ${fmtRate(stats.tps)} tok/s decoding `
        + `(finish: ${stats.finish})`}
    </div>` : null}
    <${ErrorLine} error=${error} />
    <form class="row" onSubmit=${(e) => { e.preventDefault(); send(); }}>
      <textarea data-testid="chat-input" rows="2" placeholder="Say something" value=${draft}
        onInput=${(e) => setDraft(e.target.value)}
        onKeyDown=${(e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); send(); } }}></textarea>
      ${busy ? html`<button type="button" onClick=${() => running.current && running.current.abort()}
                            data-testid="chat-stop">Stop</button>`
             : html`<button type="submit" disabled=${!model} data-testid="chat-send">Send</button>`}
    </form>
  </div>`;
}
