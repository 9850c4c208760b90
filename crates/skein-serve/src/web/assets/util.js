// The page's shared helpers: building DOM from text nodes, talking to the
// server's /api (reads, CSRF-guarded writes, streamed replies), and
// formatting.
//
// Everything shown is model or user output, so the DOM is built with
// element constructors and text nodes only: no markup string ever carries
// data (the server's content security policy would refuse inline script
// anyway).

// ---------------------------------------------------------------- DOM

/** An element with attributes, properties and children (strings become text nodes). */
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'data') {
      for (const [name, v] of Object.entries(value)) {
        if (v !== null && v !== undefined) node.dataset[name] = String(v);
      }
    } else if (key === 'on') {
      for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    } else if (key === 'text') node.textContent = String(value);
    else if (key === 'value') node.value = String(value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

export function append(parent, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else if (child instanceof Node) parent.appendChild(child);
    else parent.appendChild(document.createTextNode(String(child)));
  }
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export const $ = (selector, root) => (root || document).querySelector(selector);
export const $$ = (selector, root) => Array.from((root || document).querySelectorAll(selector));

// ---------------------------------------------------------------- API

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const unreachable = () => new ApiError(0, 'cannot reach the skein server (is `skein serve` still running?)');

/** The error a failed response carries: the server's JSON `error`, else its status. */
async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    // Not JSON: the access guard answers 401 in plain text.
  }
  const message = body && body.error ? body.error
    : response.status === 401 ? 'this server needs its token: open the page with ?token=TOKEN'
      : `${response.status} ${response.statusText}`;
  return new ApiError(response.status, message);
}

export async function api(path) {
  let response;
  try {
    response = await fetch(path, { headers: { Accept: 'application/json' }, credentials: 'same-origin' });
  } catch (_) {
    throw unreachable();
  }
  if (!response.ok) throw await failure(response);
  return response.json();
}

// The session: the CSRF token writes carry, whether the server takes
// writes at all, and the models the page may offer.
let session = null;

/** `GET /api/session`, once; `null` when this server offers no writes. */
export async function loadSession() {
  try {
    session = await api('/api/session');
  } catch (error) {
    if (error.status !== 404) throw error;
    session = null;
  }
  return session;
}

export const currentSession = () => session;

/** Why writes are off, or `null` when the page may write. */
export function writesOff() {
  if (!session) return 'this server takes no writes (it predates the workbench)';
  if (session.read_only) return 'this server is read-only (skein serve --read-only)';
  return null;
}

function postRequest(path, body, accept) {
  return fetch(path, {
    method: 'POST',
    credentials: 'same-origin',
    headers: {
      Accept: accept,
      'Content-Type': 'application/json',
      'X-Skein-Csrf': session ? session.csrf : '',
    },
    body: JSON.stringify(body || {}),
  });
}

/**
 * A write. Streaming actions answer server-sent events (`start`, `delta`,
 * `done`, `error`); each is passed to `on[event]` as it arrives, and the
 * promise resolves with `done`'s payload. A JSON answer resolves with its
 * body. An `error` event, a failed status or a stream that ends without
 * `done` rejects with an ApiError.
 */
export async function post(path, body, on) {
  let response;
  try {
    response = await postRequest(path, body, 'text/event-stream, application/json');
  } catch (_) {
    throw unreachable();
  }
  if (!response.ok) throw await failure(response);
  const type = response.headers.get('Content-Type') || '';
  if (!type.startsWith('text/event-stream')) return response.json();
  return readEvents(response, on || {});
}

async function readEvents(response, on) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let done = null;
  const dispatch = (block) => {
    let name = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') name = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length === 0) return;
    let payload;
    try {
      payload = JSON.parse(data.join('\n'));
    } catch (_) {
      throw new ApiError(0, `the server sent an unreadable ${name} event`);
    }
    if (name === 'error') throw new ApiError(0, payload.message || 'the action failed');
    if (name === 'done') done = payload;
    if (on[name]) on[name](payload);
  };
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (_) {
      throw new ApiError(0, 'the connection closed while the reply was streaming');
    }
    if (chunk.value) buffer += decoder.decode(chunk.value, { stream: !chunk.done });
    buffer = buffer.replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      dispatch(block);
    }
    if (chunk.done) break;
  }
  if (buffer.trim()) dispatch(buffer);
  if (!done) throw new ApiError(0, 'the reply stream ended before the reply was complete');
  return done;
}

export const enc = encodeURIComponent;

// ---------------------------------------------------------------- formatting

export const short = (id) => (id ? String(id).slice(0, 12) : '');

export function time(ms) {
  if (ms === null || ms === undefined) return '';
  return new Date(ms).toLocaleString(undefined, {
    year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
}

export function ago(ms) {
  const seconds = Math.round((Date.now() - ms) / 1000);
  if (seconds < 45) return 'just now';
  const steps = [[60, 'minute'], [3600, 'hour'], [86400, 'day'], [2592000, 'month'], [31536000, 'year']];
  let unit = 'minute';
  let size = 60;
  for (const [s, u] of steps) {
    if (seconds >= s) { size = s; unit = u; }
  }
  const n = Math.round(seconds / size);
  return `${n} ${unit}${n === 1 ? '' : 's'} ago`;
}

export function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

export function bytes(n) {
  if (n < 1024) return `${n} bytes`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

export const tokens = (n) => (n === null || n === undefined ? '—' : String(n));
/** Dollars, or a dash when there is no figure (no price, no usage): never a zero. */
export const dollars = (n) => (n === null || n === undefined ? '—' : `$${n.toFixed(6)}`);
/** A share as a percentage, or a dash. */
export const percent = (n) => (n === null || n === undefined ? '—' : `${(n * 100).toFixed(1)}%`);
export const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
/** A conversation's name, else its first prompt (`title`), else its id. */
export const conversationLabel = (c) => c.name || c.title || c.short;

/** Sampling options as `key=value` words. */
export const optionsText = (options) => Object.entries(options || {})
  .filter(([, v]) => v !== null && v !== undefined)
  .map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(' ');

export function timeEl(ms) {
  return el('time', { datetime: new Date(ms).toISOString(), title: time(ms) }, ago(ms));
}

/**
 * An id as its first 12 digits and an ellipsis (`code.id` in the style
 * sheet): the whole id is the element's text, so a copy takes it whole,
 * and its title, so hovering shows it.
 */
export function idCode(id, attrs) {
  return el('code', { ...(attrs || {}), class: `id${attrs && attrs.class ? ` ${attrs.class}` : ''}`, title: id }, id);
}

export function nodeLink(focus, id, text) {
  return el('a', { href: `#/c/${focus}/n/${id}`, class: 'node-link', data: { nodeId: id } }, el('code', {}, text || short(id)));
}

export function conversationLink(c) {
  return el('a', { href: `#/c/${c.id}`, class: 'conversation-link', data: { conversationId: c.id } },
    conversationLabel(c));
}

export function badge(text, kind) {
  return el('span', { class: `badge ${kind || ''}` }, text);
}

/** The text of a message's text parts, joined by blank lines. */
export const textOf = (parts) => parts.filter((p) => p.type === 'text').map((p) => p.text).join('\n\n');
