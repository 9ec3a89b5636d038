// Every HTTP call the dashboard makes goes through here. An answer that is not 2xx becomes an
// ApiError carrying upstream's envelope ({"error": {"message", "type", "code"}}), which the
// panels show to the user as it is: nothing is swallowed.

export class ApiError extends Error {
  constructor(what, status, type, message, body = null) {
    super(message);
    this.what = what;      // "GET /state": which call failed
    this.status = status;  // HTTP status (0: the node did not answer)
    this.type = type;      // the envelope's type (HTTP reason phrase)
    this.body = body;      // the parsed JSON answer, when it was JSON
  }
}

// The API key the user typed (a node with `api.keys` answers 401/403 without one). Kept in
// sessionStorage: this tab only, gone when it closes, never in a URL or a cookie.
const KEY_ITEM = 'skulk.apiKey';

export function apiKey() {
  try { return sessionStorage.getItem(KEY_ITEM) || ''; } catch { return ''; }
}

export function setApiKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY_ITEM, key); else sessionStorage.removeItem(KEY_ITEM);
  } catch { /* storage disabled: the key is not kept */ }
}

// Every call's headers: the key as a bearer token when there is one.
export function authHeaders(extra = {}) {
  const key = apiKey();
  return key ? {...extra, Authorization: `Bearer ${key}`} : extra;
}

export async function errorOf(what, resp) {
  const text = await resp.text();
  let body = null;
  try { body = JSON.parse(text); } catch { /* not JSON: the text itself is shown */ }
  const env = body && typeof body.error === 'object' && body.error ? body.error : null;
  return new ApiError(what, resp.status, (env && env.type) || resp.statusText || 'Error',
                      (env && env.message) || text.slice(0, 300) || '(no message)', body);
}

export async function call(method, path, body, signal) {
  const what = `${method} ${path}`;
  let resp;
  try {
    resp = await fetch(path, {
      method, signal, cache: 'no-store',
      headers: authHeaders(body === undefined ? {} : {'Content-Type': 'application/json'}),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(what, 0, 'Unreachable', `the node did not answer (${e.message})`);
  }
  if (!resp.ok) throw await errorOf(what, resp);
  return resp.json();
}

export const get = (path, signal) => call('GET', path, undefined, signal);

// `GET /health`: its 503 `{"status": "draining"}` (the node finishes its requests before an
// in-place restart) is an answer to show as the node's status, not an error.
export async function getHealth(path, signal) {
  try {
    return await get(path, signal);
  } catch (e) {
    if (e instanceof ApiError && e.status === 503 && e.body && e.body.status === 'draining') return e.body;
    throw e;
  }
}
export const post = (path, body) => call('POST', path, body);
export const del = (path) => call('DELETE', path);
