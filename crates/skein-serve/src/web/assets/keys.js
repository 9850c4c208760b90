// The page's keyboard: j/k (and the arrow keys in the tree) move through
// the conversations of the list or the messages of a family, Enter opens,
// r and f open the reply and fork forms of the selected message, / goes to
// the search box, Escape closes, and ? shows the overlay that lists them
// (KEYS, the one place they are written down). What each key does in a
// view is the view's business: app.js passes the actions in.

import { $, el } from './util.js';

/** Every key the page answers, as the overlay lists it. */
export const KEYS = [
  ['j', '↓', 'next message in a family, next conversation in the list'],
  ['k', '↑', 'previous message, previous conversation'],
  ['Enter', null, 'open the conversation under the cursor, or the selected message\'s details'],
  ['r', null, 'reply to the selected message'],
  ['f', null, 'fork a conversation at the selected message'],
  ['/', null, 'search the messages'],
  ['Esc', null, 'close this overlay, or the message\'s details'],
  ['?', null, 'show or hide these keys'],
];

/** Whether a key pressed in `target` is typing, which the page leaves alone. */
const typing = (target) => Boolean(target.closest && target.closest('input, textarea, select, [contenteditable]'));

/** The overlay, made on first use. */
function overlay() {
  let shown = $('#keys-help');
  if (shown) return shown;
  const close = el('button', { type: 'button', id: 'keys-close', class: 'details-close', 'aria-label': 'close', title: 'close (Esc)' }, '×');
  shown = el('div', { id: 'keys-help', class: 'overlay', hidden: true },
    el('div', { class: 'overlay-panel', role: 'dialog', 'aria-modal': 'true', 'aria-labelledby': 'keys-title' },
      close,
      el('h2', { id: 'keys-title' }, 'Keyboard'),
      el('table', { class: 'keys' }, el('tbody', {}, KEYS.map(([key, also, what]) => el('tr', { data: { key } },
        el('th', { scope: 'row' }, el('kbd', {}, key), also ? [' ', el('kbd', {}, also)] : null),
        el('td', {}, what))))),
      el('p', { class: 'muted' }, 'Keys are ignored while you type in a field; Esc leaves it.')));
  close.addEventListener('click', () => toggleKeys(false));
  shown.addEventListener('click', (event) => {
    if (event.target === shown) toggleKeys(false);
  });
  document.body.appendChild(shown);
  return shown;
}

/** Show the overlay (`true`), hide it (`false`), or switch it. */
export function toggleKeys(show) {
  const shown = overlay();
  shown.hidden = show === undefined ? !shown.hidden : !show;
  if (!shown.hidden) $('#keys-close').focus();
}

/**
 * Answer the keys on the whole page. `actions` are the current view's:
 * `move(step)`, `open(target)`, `act(kind)` and `close()`, each returning
 * whether it did something (and so whether the key is taken from the
 * browser).
 */
export function installKeys(actions) {
  document.addEventListener('keydown', (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
    const help = $('#keys-help');
    const helpOpen = help && !help.hidden;
    if (event.key === 'Escape') {
      if (helpOpen) toggleKeys(false);
      else if (typing(event.target)) event.target.blur();
      else if (!actions.close()) return;
      event.preventDefault();
      return;
    }
    if (typing(event.target)) return;
    if (helpOpen && event.key !== '?') return;
    const inTree = Boolean(event.target.closest('#tree'));
    let done;
    switch (event.key) {
      case 'j': done = actions.move(1); break;
      case 'k': done = actions.move(-1); break;
      case 'ArrowDown': done = inTree && actions.move(1); break;
      case 'ArrowUp': done = inTree && actions.move(-1); break;
      case 'Enter':
        // Links and buttons open themselves.
        done = !event.target.closest('a, button, summary') && actions.open(event.target);
        break;
      case 'r': done = actions.act('reply'); break;
      case 'f': done = actions.act('fork'); break;
      case '/': {
        const search = $('#search');
        search.focus();
        search.select();
        done = true;
        break;
      }
      case '?': toggleKeys(); done = true; break;
      default: done = false;
    }
    if (done) event.preventDefault();
  });
}
