// How an API error looks on the page: which call, the status and type, and the API's message.

import {html} from './preact-htm.js';

export function ErrorLine({error}) {
  if (!error) return null;
  const code = error.status ? `${error.status} ${error.type || ''}` : (error.type || 'Error');
  return html`<div class="error" role="alert" data-testid="api-error">
    <strong>${error.what || 'error'}</strong> <span class="code">${code}</span>: ${error.message}
  </div>`;
}

export function ErrorBanner({errors}) {
  const shown = errors.filter(Boolean);
  if (!shown.length) return null;
  return html`<div class="banner">${shown.map((e) => html`<${ErrorLine} error=${e} />`)}</div>`;
}
