// Live updates: `/api/events` (server-sent events) says `turn` whenever a
// conversation moves, from any process on the database (after `ready`;
// `lagged` when this page fell behind). Listeners get each
// one; while the stream is down (a server without it, a dropped
// connection) they are asked to poll instead, every POLL_MS, until it is
// back. The header's `#live` shows which.

import { $ } from './util.js';

const POLL_MS = 3000;
const listeners = new Set();
let connected = false;
let poller = null;
let received = 0;

/** Call `onTurn(event)` on every turn; `poll()` while the stream is down. Returns a stop function. */
export function subscribe(onTurn, poll) {
  const entry = { onTurn, poll };
  listeners.add(entry);
  return () => listeners.delete(entry);
}

function show() {
  const badge = $('#live');
  if (!badge) return;
  badge.dataset.state = connected ? 'live' : 'polling';
  badge.dataset.events = String(received);
  badge.textContent = connected ? '● live' : '○ polling';
  badge.title = connected
    ? 'updates arrive as turns land, from any process on this database'
    : 'the update stream is not connected: the page checks for changes every few seconds';
}

function startPolling() {
  if (poller) return;
  poller = setInterval(() => {
    if (document.hidden) return;
    for (const entry of listeners) if (entry.poll) entry.poll();
  }, POLL_MS);
}

function stopPolling() {
  clearInterval(poller);
  poller = null;
}

export function start() {
  show();
  startPolling();
  if (!window.EventSource) return;
  let source = open();
  // A page the browser keeps for going back to holds no stream: the
  // server serves a few at once, and the browser as few connections to
  // one host.
  window.addEventListener('pagehide', () => {
    source.close();
    connected = false;
  });
  window.addEventListener('pageshow', (event) => {
    if (!event.persisted) return;
    source = open();
    startPolling();
    show();
  });
}

function open() {
  const source = new EventSource('/api/events', { withCredentials: true });
  // `ready` says the server knows where the database stands: every write
  // after it is reported. Anything before it is caught by one refresh.
  const ready = () => {
    connected = true;
    stopPolling();
    show();
    for (const entry of listeners) if (entry.poll) entry.poll();
  };
  source.addEventListener('ready', ready);
  // Too slow to keep up: some events were dropped, so look again.
  source.addEventListener('lagged', ready);
  source.addEventListener('error', () => {
    // The browser reconnects by itself unless the server refused the
    // stream (CLOSED); either way poll until it is open again.
    connected = false;
    startPolling();
    show();
  });
  source.addEventListener('turn', (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch (_) {
      return;
    }
    received += 1;
    show();
    for (const entry of listeners) entry.onTurn(event);
  });
  return source;
}
