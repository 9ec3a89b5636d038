// A streamed chat completion (`POST /v1/chat/completions`, `stream: true`) read frame by frame
// from upstream's SSE framing: comments (`: command_id <id>`, keep-alives), `data: {chunk}`,
// an error event `data: {"error": {...}}`, then `data: [DONE]`.

import {ApiError, authHeaders, errorOf} from './api.js';

// Splits a buffer into complete frames (blank-line separated) and the incomplete rest.
export function splitFrames(buffer) {
  const parts = buffer.split(/\r?\n\r?\n/);
  return {frames: parts.slice(0, -1), rest: parts[parts.length - 1]};
}

// One frame as {comment} or {data} (data: the parsed JSON, or the string "[DONE]").
export function parseFrame(frame) {
  const data = [];
  for (const line of frame.split(/\r?\n/)) {
    if (line.startsWith(':')) return {comment: line.slice(1).trim()};
    if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
  }
  if (!data.length) return {};
  const text = data.join('\n');
  return {data: text === '[DONE]' ? text : JSON.parse(text)};
}

// Calls `on.command(id)`, `on.delta(text)`, `on.done(finishReason, usage)` and `on.stats(generation
// stats: the engine's prompt_tps, generation_tps, ...)` as the stream goes; an error (refused
// request, error event) is thrown as an ApiError.
export async function streamChat(body, on, signal) {
  const what = 'POST /v1/chat/completions';
  let resp;
  try {
    resp = await fetch('/v1/chat/completions', {
      method: 'POST', signal, headers: authHeaders({'Content-Type': 'application/json'}),
      body: JSON.stringify({...body, stream: true}),
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(what, 0, 'Unreachable', `the node did not answer (${e.message})`);
  }
  if (!resp.ok) throw await errorOf(what, resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) throw new ApiError(what, 0, 'Incomplete', 'the stream ended before [DONE]');
    const split = splitFrames(buffer + value);
    buffer = split.rest;
    for (const frame of split.frames) {
      const {comment, data} = parseFrame(frame);
      if (comment && comment.startsWith('command_id ')) on.command(comment.slice(11).trim());
      if (comment && comment.startsWith('generation_stats ') && on.stats) on.stats(JSON.parse(comment.slice(17)));
      if (data === undefined) continue;
      if (data === '[DONE]') return;
      if (data.error) {
        throw new ApiError(`${what} (stream)`, data.error.code || 500, data.error.type || 'Error',
                           data.error.message || 'the stream failed');
      }
      const choice = (data.choices || [])[0] || {};
      const text = (choice.delta && (choice.delta.content || choice.delta.reasoning_content)) || '';
      if (text) on.delta(text);
      if (choice.finish_reason) on.done(choice.finish_reason, data.usage || null);
    }
  }
}
