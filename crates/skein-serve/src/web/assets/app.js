// The skein web view: a workbench over the server's /api routes.
//
// Everything shown is model or user output, so the DOM is built with
// element constructors and text nodes only (util.js): no markup string ever
// carries data. Views are chosen by the URL fragment:
//   #/                      conversations
//   #/c/CONV                a conversation's family tree
//   #/c/CONV/n/NODE         ... with a message's details and actions open
//                           (NODE may be any unique prefix, such as the 12
//                           digits the CLI prints)
//   #/compare/NODE/NODE     two branches from their common ancestor, with
//                           word differences
//   #/search/TEXT           messages containing TEXT
//   #/replays               replays, and a form to start one
//   #/replays/new/CONV      ... with the form open on a conversation's turns
//   #/replays/ID            one replay's report, polled while it runs

import {
  $, $$, ApiError, api, badge, bytes, clear, conversationLabel, conversationLink, duration, el, enc, idCode, loadSession,
  nodeLink, optionsText, plural, short, textOf, time, timeEl, tokens, dollars, percent,
} from './util.js';
import { actionPanel } from './actions.js';
import { wordDiff } from './diff.js';
import { installKeys, toggleKeys } from './keys.js';
import * as live from './live.js';
import { replaysView, replayView } from './replays.js';

// ---------------------------------------------------------------- routing

const view = () => $('#view');
let current = { name: null };
let renderToken = 0;

/**
 * The breadcrumb. It shortens from the middle (style.css): the crumbs
 * between the first and the last are cut first, their whole text in their
 * title.
 */
function crumbs(...items) {
  const nav = clear($('#crumbs'));
  const shown = items.filter(Boolean);
  shown.forEach((item, i) => {
    if (i > 0 && i < shown.length - 1) {
      item.classList.add('crumb-middle');
      if (!item.title) item.title = item.textContent;
    }
    nav.appendChild(el('span', { class: 'sep' }, '/'));
    nav.appendChild(item);
  });
}

function showError(error) {
  clear(view()).appendChild(el('div', { class: 'error', id: 'error', role: 'alert' },
    el('strong', {}, error.status === 404 ? 'Not found. ' : 'Error. '), error.message,
    el('p', {}, el('a', { href: '#/' }, 'Back to the conversations'))));
}

async function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] !== 'search' && $('#search')) $('#search').value = '';
  const token = ++renderToken;
  const stale = () => token !== renderToken;
  try {
    if (parts.length === 0) {
      await listView(stale);
    } else if (parts[0] === 'c' && parts.length >= 2) {
      const node = parts[2] === 'n' ? parts[3] : null;
      await familyView(parts[1], node, stale);
    } else if (parts[0] === 'compare' && parts.length === 3) {
      await compareView(parts[1], parts[2], stale);
    } else if (parts[0] === 'search') {
      await searchView(parts.slice(1).join('/'), stale);
    } else if (parts[0] === 'replays' && (parts.length === 1 || parts[1] === 'new')) {
      await replaysRoute(parts[2] || null, stale);
    } else if (parts[0] === 'replays' && parts.length === 2) {
      await replayRoute(parts[1], stale);
    } else {
      throw new ApiError(404, `there is no page at ${location.hash}`);
    }
  } catch (error) {
    if (!stale()) {
      current = { name: null };
      showError(error);
    }
  }
}

// ---------------------------------------------------------------- conversations

function originCell(c) {
  const origin = c.origin;
  if (!origin) return el('span', { class: 'muted' }, '—');
  const parts = [];
  if (origin.rerun) parts.push('rerun ', el('code', {}, short(origin.rerun)));
  else parts.push('fork');
  if (origin.conversation) {
    parts.push(' of ', el('a', { href: `#/c/${origin.conversation}` }, el('code', {}, short(origin.conversation))));
  }
  if (origin.node) parts.push(' at ', el('code', {}, short(origin.node)));
  return el('span', {}, parts);
}

/** Where a conversation came from, with whole ids: the origin cell's title. */
function originText(origin) {
  if (!origin) return '';
  return [origin.rerun ? `rerun ${origin.rerun}` : 'fork', origin.conversation ? `of ${origin.conversation}` : null,
    origin.node ? `at ${origin.node}` : null].filter(Boolean).join(' ');
}

// Live: the list and an open family follow turns from any process
// (live.js: the server's event stream, else polling). The list redraws its
// first page when untouched (no filter typed, no page loaded below the
// first), else offers to; a family redraws its tree and keeps the message
// open in the details.
function listSignature(list) {
  return list.conversations.map((c) => `${c.id}:${c.head}:${c.updated_ms}`).join(',');
}

let refreshing = null;

/** Refresh what is shown, once at a time, coalescing events that arrive meanwhile. */
function refreshShown() {
  if (refreshing) {
    refreshing.again = true;
    return;
  }
  refreshing = { again: false };
  const run = current.name === 'list' ? refreshList : current.name === 'family' ? refreshFamily : null;
  Promise.resolve(run ? run().catch(() => {
    // A failed refresh changes nothing on the page; the next event may work.
  }) : null).finally(() => {
    const again = refreshing.again;
    refreshing = null;
    if (again) refreshShown();
  });
}

async function refreshList() {
  const token = renderToken;
  const list = await api('/api/conversations');
  if (token !== renderToken || current.name !== 'list' || listSignature(list) === current.signature) return;
  const filter = $('#filter');
  const touched = (filter && filter.value.trim() !== '') || current.loadedMore;
  if (!touched) {
    await route();
    return;
  }
  const notice = $('#list-changed');
  if (notice) notice.hidden = false;
}

async function listView(stale) {
  if (current.name !== 'list') clear(view()).appendChild(el('p', { class: 'placeholder' }, 'Loading…'));
  const list = await api('/api/conversations');
  if (stale()) return;
  current = { name: 'list', signature: listSignature(list) };
  crumbs(el('span', {}, 'conversations'));
  document.title = 'skein · conversations';
  const root = clear(view());
  const section = el('section', { id: 'list-view' });
  root.appendChild(section);
  const count = el('p', { class: 'muted', id: 'list-count' });
  section.appendChild(el('div', { class: 'view-head' }, el('h1', {}, 'Conversations'), count));
  const counted = (shown, more) => {
    count.textContent = more ? `the ${shown} most recently updated (more below)` : plural(shown, 'conversation');
  };
  counted(list.conversations.length, Boolean(list.next));
  if (list.conversations.length === 0) {
    section.appendChild(el('p', { class: 'empty' },
      'No conversations yet. Record one with ', el('code', {}, 'skein prompt "…"'),
      ' or through the recording proxy: it shows here as it is recorded.'));
    return;
  }
  const filter = el('input', {
    id: 'filter', type: 'search', placeholder: 'Filter by name, id, model, head or text', autocomplete: 'off',
    'aria-label': 'filter conversations',
  });
  const makeRow = (c) => {
    const row = el('tr', { data: { conversationId: c.id } },
      el('td', { class: 'name', title: c.name || c.title || '' }, el('a', { href: `#/c/${c.id}` },
        c.name || (c.title ? el('span', { class: 'title' }, c.title) : el('span', { class: 'muted' }, '(unnamed)')))),
      el('td', { class: 'preview', title: c.preview || '' }, c.preview || ''),
      el('td', { class: 'id' }, idCode(c.id)),
      el('td', { class: 'head' }, c.head ? idCode(c.head) : el('span', { class: 'muted' }, 'empty')),
      el('td', { class: 'num' }, String(c.len)),
      el('td', { class: 'updated' }, timeEl(c.updated_ms)),
      el('td', { class: 'origin', title: originText(c.origin) }, originCell(c)),
      el('td', { class: 'model', title: c.model || '' }, c.model || el('span', { class: 'muted' }, '—')));
    row.dataset.search = [c.name || '', c.title || '', c.id, c.head || '', c.model || '', c.preview || ''].join(' ').toLowerCase();
    row.addEventListener('click', (event) => {
      if (event.target.closest('a')) return;
      location.hash = `#/c/${c.id}`;
    });
    return row;
  };
  const rows = list.conversations.map(makeRow);
  // The server lists a page at a time; each page names the next.
  let next = list.next;
  const matches = (row) => {
    const needle = filter.value.trim().toLowerCase();
    return needle === '' || row.dataset.search.includes(needle);
  };
  const nothing = el('p', { class: 'empty', id: 'filter-empty', role: 'status', hidden: true });
  const filtered = () => {
    let shown = 0;
    for (const row of rows) {
      row.hidden = !matches(row);
      if (!row.hidden) shown += 1;
    }
    nothing.hidden = shown > 0;
    nothing.textContent = shown > 0 ? '' : `No conversation ${next ? 'loaded so far ' : ''}matches “${filter.value.trim()}”.`
      + (next ? ' Load more to look further, or search the messages.' : '');
  };
  filter.addEventListener('input', filtered);
  filter.addEventListener('change', filtered);
  const body = el('tbody', {}, rows);
  const changed = el('p', { class: 'warning', id: 'list-changed', hidden: true },
    'Conversations have changed since this list was drawn. ',
    el('button', { type: 'button', on: { click: () => route() } }, 'Refresh'));
  section.appendChild(el('div', { class: 'toolbar' }, filter, changed));
  section.append(el('div', { class: 'table-frame' }, el('table', { id: 'conversations', class: 'listing' },
    el('thead', {}, el('tr', {},
      [['name', 'Name'], ['preview', 'Last message'], ['id', 'Id'], ['head', 'Head'], ['num', 'Messages'], ['updated', 'Updated'],
        ['origin', 'Origin'], ['model', 'Model']].map(([key, h]) => el('th', { scope: 'col', class: key }, h)))),
    body)), nothing);
  if (!next) return;
  const more = el('button', { id: 'load-more', type: 'button' }, 'Load more');
  const failure = el('p', { class: 'error', role: 'alert', hidden: true });
  more.addEventListener('click', async () => {
    more.disabled = true;
    failure.hidden = true;
    try {
      const page = await api(next);
      if (current.name !== 'list' || !more.isConnected) return;
      current.loadedMore = true;
      for (const c of page.conversations) {
        const row = makeRow(c);
        row.hidden = !matches(row);
        rows.push(row);
        body.appendChild(row);
      }
      next = page.next;
      counted(rows.length, Boolean(next));
      if (filter.value.trim()) filtered();
      if (!next) more.remove();
    } catch (error) {
      failure.textContent = error.message;
      failure.hidden = false;
    } finally {
      more.disabled = false;
    }
  });
  section.appendChild(el('div', { class: 'toolbar' }, more, failure));
}

// ---------------------------------------------------------------- family tree

async function familyView(conversationId, nodeId, stale) {
  if (current.name === 'family' && current.asked === conversationId) {
    await selectNode(nodeId, stale);
    return;
  }
  await loadFamily(conversationId, nodeId, null, stale);
}

async function loadFamily(conversationId, nodeId, limit, stale) {
  clear(view()).appendChild(el('p', { class: 'placeholder' }, 'Loading…'));
  const query = limit ? `?limit=${limit}` : '';
  const family = await api(`/api/conversations/${enc(conversationId)}/family${query}`);
  if (stale()) return;
  // The note of the last action survives the move to the family it made.
  const activity = current.activity || null;
  current = { name: 'family', asked: conversationId, family, selected: null, signature: familySignature(family), activity };
  renderFamily(family);
  await selectNode(nodeId, stale);
}

/** What a redraw would change: the nodes, where conversations stand, reruns' verdicts. */
function familySignature(family) {
  return JSON.stringify([family.nodes.map((n) => [n.id, n.heads]), family.branches.map((b) => [b.id, b.rerun, b.replay]),
    family.conversations.map((c) => [c.id, c.head, c.name])]);
}

/**
 * Fetch the open family again and, when it changed, redraw its tree with
 * the same branches expanded, keeping the details (and any action in
 * progress there) as they are. `select` (a node id) is selected after.
 */
async function refreshFamily(select) {
  const token = renderToken;
  const { asked } = current;
  const limit = current.family.limit;
  const family = await api(`/api/conversations/${enc(asked)}/family?limit=${limit}`);
  if (token !== renderToken || current.name !== 'family' || current.asked !== asked) return;
  const signature = familySignature(family);
  if (signature !== current.signature) {
    const open = new Set($$('#tree .branch:not(.collapsed)').map((b) => b.dataset.branchId));
    const openGroups = new Set($$('#tree details.replay-group[open]').map((g) => g.dataset.from));
    current.family = family;
    current.signature = signature;
    renderFamily(family, { open, openGroups, details: $('#details') });
    markSelected(current.selected);
  }
  if (select) {
    const target = `#/c/${asked}/n/${select}`;
    if (location.hash === target) route();
    else location.hash = target;
  }
}

/** Show more of a truncated family, keeping the selection. */
function showMore() {
  const { asked, selected, family } = current;
  const token = ++renderToken;
  loadFamily(asked, selected, Math.min(family.limit * 5, family.max_limit), () => token !== renderToken).catch(showError);
}

function renderFamily(family, keep) {
  // Members, then the conversations that only share messages by content.
  const sharing = new Set(family.shares.map((c) => c.id));
  const byId = new Map(family.conversations.concat(family.shares).map((c) => [c.id, c]));
  const focus = byId.get(family.focus);
  const nodes = new Map(family.nodes.map((n) => [n.id, n]));
  const branches = new Map(family.branches.map((b) => [b.id, b]));
  const startingAt = new Map();
  for (const b of family.branches) {
    if (!b.from) continue;
    if (!startingAt.has(b.from)) startingAt.set(b.from, []);
    startingAt.get(b.from).push(b);
  }
  // Reruns by the turn they re-ran (`turn_node`, the turn's reply), to
  // mark that turn's row.
  const rerunsAt = new Map();
  for (const b of family.branches) {
    const at = b.rerun && b.rerun.turn_node;
    if (!at) continue;
    if (!rerunsAt.has(at)) rerunsAt.set(at, []);
    rerunsAt.get(at).push(b);
  }
  current.nodes = nodes;
  current.branches = branches;
  current.byConversation = byId;

  familyCrumbs(current.selected);
  document.title = `skein · ${conversationLabel(focus)}`;

  // Open the branches on the way to the focus conversation's head.
  const open = new Set(keep ? keep.open : []);
  if (focus.head && nodes.has(focus.head)) openChain(nodes.get(focus.head).branch, branches, open);

  const section = el('section', { id: 'family-view', data: { conversationId: family.focus } });
  const tree = el('div', { id: 'tree', class: 'tree', role: 'tree', 'aria-label': 'conversation graph' });
  const details = keep && keep.details ? keep.details : el('aside', { id: 'details', class: 'details' },
    el('p', { class: 'placeholder' }, 'Select a message to see its parts, the runs that produced it, and what you can do from it.'));

  const entry = (c, kind, note) => el('li', {
    data: { conversationId: c.id, relation: kind === 'shares' ? 'shares' : 'member' },
    class: c.id === family.focus ? 'focus' : '',
  },
  badge(kind, `kind-${kind}`), ' ', conversationLink(c), ' ',
  el('span', { class: 'muted' }, `${plural(c.len, 'message')} · updated `), timeEl(c.updated_ms),
  note ? el('span', { class: 'muted' }, ` · ${note}`) : null);
  const memberList = el('ul', { class: 'members' },
    family.conversations.map((c) => entry(c, memberKind(c))),
    family.shares.map((c) => entry(c, 'shares',
      'shares its first messages with this family by content; not forked from it')));
  const listed = family.conversations.length + family.shares.length;
  // The summary in pieces that each stay on one line (a date, a cost).
  const pieces = [
    `${plural(family.conversations.length, 'conversation')}${family.more_conversations ? ' and more' : ''}`,
    family.shares.length
      ? `${plural(family.shares.length, 'conversation')}${family.more_shares ? ' and more' : ''} sharing messages` : null,
    `${family.branches.length} ${family.branches.length === 1 ? 'branch' : 'branches'}`,
    plural(family.nodes.length, 'message'),
    focus.model ? `model ${focus.model}` : null,
    familyCost(family.usage),
  ].filter(Boolean);
  // A large family's list, or any list on a short window, would push the
  // tree off the screen: fold it.
  const members = el('details', { id: 'members', open: listed <= 8 && window.innerHeight >= 700 },
    el('summary', {}, pieces.map((piece, i) => [i ? ' · ' : '', el('span', { class: 'piece', title: piece }, piece)])),
    memberList);

  const head = el('div', { class: 'view-head' },
    el('h1', { id: 'family-title' }, conversationLabel(focus),
      focus.name ? [' ', el('code', { class: 'muted', title: focus.id }, focus.short)] : null),
    family.truncated ? el('p', { class: 'warning', id: 'truncated' },
      `This family has more than the ${family.limit} messages shown: this conversation's latest come first, then as much of the rest as fits. `,
      family.limit < family.max_limit
        ? el('button', { id: 'show-more', type: 'button', on: { click: showMore } },
          `Show up to ${Math.min(family.limit * 5, family.max_limit)}`)
        : `(${family.max_limit} is the most the server shows at once.)`) : null,
    members,
    current.activity ? activityLine(current.activity) : el('p', { id: 'activity', class: 'activity', hidden: true }),
    el('div', { class: 'toolbar' },
      el('button', { id: 'expand-all', type: 'button', on: { click: () => setAll(false) } }, 'Expand all'),
      el('button', { id: 'collapse-all', type: 'button', on: { click: () => setAll(true) } }, 'Collapse all'),
      el('a', { id: 'replay-family', href: `#/replays/new/${family.focus}`, title: 'replay this conversation\'s turns with a change' }, 'Replay…'),
      compareBar(family, byId)));

  for (const rootId of family.roots) {
    const node = nodes.get(rootId);
    const branch = node && branches.get(node.branch);
    const openGroups = new Set(keep && keep.openGroups ? keep.openGroups : []);
    if (branch) tree.appendChild(renderBranch(branch, { family, nodes, startingAt, byId, sharing, open, openGroups, rerunsAt }));
  }
  if (family.roots.length === 0) {
    tree.appendChild(el('p', { class: 'empty' }, 'This conversation has no messages yet.'));
  }
  // One tab stop for the whole tree: the selected row, else the first.
  const firstRow = $('.node-row', tree);
  if (firstRow) firstRow.tabIndex = 0;

  const shown = $('#family-view');
  if (keep && keep.details && shown && details.isConnected) {
    // A live redraw: the head and the tree change in place, the details
    // (and whatever is being typed there) stay.
    $('.view-head', shown).replaceWith(head);
    $('#tree', shown).replaceWith(tree);
    return;
  }
  section.append(head, el('div', { class: 'split' }, tree, details));
  clear(view()).appendChild(section);
}

/** How a member joined: by a fork (or reply branch), from a rerun, or first. */
function memberKind(c) {
  if (!c.origin || !c.origin.conversation) return 'conversation';
  return c.origin.rerun ? 'rerun' : 'fork';
}

/** Mark a branch and every branch it leaves from as open. */
function openChain(branchId, branches, open) {
  let b = branches.get(branchId);
  while (b && !open.has(b.id)) {
    open.add(b.id);
    b = b.parent ? branches.get(b.parent) : null;
  }
}

function branchSize(branch, startingAt) {
  // Messages in the branch and everything that leaves it.
  let count = 0;
  const stack = [branch];
  while (stack.length) {
    const b = stack.pop();
    count += b.nodes.length;
    for (const id of b.nodes) for (const sub of startingAt.get(id) || []) stack.push(sub);
  }
  return count;
}

function renderBranch(branch, ctx) {
  const collapsible = branch.kind !== 'root';
  const collapsed = collapsible && !ctx.open.has(branch.id);
  // The lane is drawn by what the branch shows: a rerun's request that
  // starts a line of its own (its system text differs) is still a rerun.
  const lane = branch.rerun ? 'rerun' : branch.replay ? 'replay' : branch.kind;
  const section = el('section', {
    class: `branch kind-${branch.kind} lane-${lane}${collapsed ? ' collapsed' : ''}`,
    data: {
      branchId: branch.id, kind: branch.kind, conversationId: branch.conversation,
      rerun: branch.rerun ? branch.rerun.id : null, replay: branch.replay ? branch.replay.id : null,
    },
  });
  const count = branchSize(branch, ctx.startingAt);
  const toggle = collapsible ? el('button', {
    type: 'button', class: 'toggle', 'aria-expanded': String(!collapsed),
    'aria-label': `${branch.kind} branch ${branch.label}`,
    title: collapsed ? 'expand this branch' : 'collapse this branch',
    data: { branchToggle: branch.id },
    on: { click: () => setCollapsed(section, !section.classList.contains('collapsed')) },
  }) : null;
  const conversation = branch.conversation ? ctx.byId.get(branch.conversation) : null;
  const header = el('header', { class: 'branch-head' },
    toggle,
    branch.kind === 'shares'
      ? el('span', { title: 'not a continuation: this conversation only shares the messages before it by content' },
        badge('shares messages', 'kind-shares'))
      : branch.rerun ? badge('rerun', 'kind-rerun') : badge(branch.kind, `kind-${branch.kind}`),
    el('span', { class: 'branch-label' },
      conversation ? el('a', { href: `#/c/${conversation.id}`, data: { conversationId: conversation.id } }, branch.label)
        : branch.label),
    el('span', { class: 'muted branch-meta' },
      plural(count, 'message'), branch.from ? [' from ', el('code', {}, short(branch.from))] : null),
    branch.rerun ? rerunBadges(branch.rerun) : null,
    branch.replay ? el('a', {
      href: `#/replays/${branch.replay.id}`, class: 'replay-link', title: 'the replay this answer came from, turn by turn',
    }, badge(branch.replay.result, `replay-result result-${branch.replay.result}`)) : null);
  header.addEventListener('dblclick', () => collapsible && setCollapsed(section, !section.classList.contains('collapsed')));
  section.appendChild(header);

  const list = el('ol', { class: 'nodes' });
  // A root branch whose first message has a parent starts where the
  // server cut the family short.
  const first = ctx.nodes.get(branch.nodes[0]);
  if (!branch.parent && first && first.parent) {
    list.appendChild(el('li', { class: 'cut muted', data: { earlier: first.depth } },
      `… ${plural(first.depth, 'earlier message')} not shown`));
  }
  for (const id of branch.nodes) {
    const node = ctx.nodes.get(id);
    if (!node) continue;
    const heads = node.heads.map((cid) => ctx.byId.get(cid)).filter(Boolean);
    const row = el('div', {
      class: `node-row role-${node.role}`, tabindex: '-1', role: 'treeitem',
      data: { nodeId: node.id, role: node.role, depth: node.depth },
      title: node.id,
    },
    el('span', { class: `role role-${node.role}` }, node.role),
    el('span', { class: 'preview' }, node.preview || el('span', { class: 'muted' }, '(empty)')),
    heads.map((c) => el('span', {
      class: `head-mark${c.id === ctx.family.focus ? ' focus' : ''}${ctx.sharing.has(c.id) ? ' shares' : ''}`,
      data: { conversationId: c.id },
      title: ctx.sharing.has(c.id)
        ? `head of conversation ${c.id}, which only shares messages with this family`
        : `head of conversation ${c.id}`,
    }, '◀ ', conversationLabel(c), ctx.sharing.has(c.id) ? ' (shares)' : null)),
    (ctx.rerunsAt.get(id) || []).map((b) => el('button', {
      type: 'button', class: 'rerun-mark', data: { rerun: b.rerun.id },
      title: 'this turn was re-run: show the rerun',
      on: {
        click: (event) => {
          event.stopPropagation();
          const target = $(`#tree .branch[data-branch-id="${CSS.escape(b.id)}"]`);
          if (!target) return;
          setCollapsed(target, false);
          target.scrollIntoView({ block: 'nearest' });
        },
      },
    }, '↻ re-run ', rerunBadges(b.rerun))),
    el('code', { class: 'node-id' }, short(node.id)));
    row.addEventListener('click', () => {
      location.hash = `#/c/${current.asked}/n/${node.id}`;
    });
    const item = el('li', { class: 'node' }, row);
    const leaving = ctx.startingAt.get(id);
    if (leaving) {
      // A turn's replayed answers fold into one row, however many replays.
      const replayed = leaving.filter((b) => b.replay);
      item.appendChild(el('div', { class: 'children' },
        leaving.filter((b) => !b.replay).map((b) => renderBranch(b, ctx)),
        replayed.length ? replayGroup(id, replayed, ctx) : null));
    }
    list.appendChild(item);
  }
  section.appendChild(list);
  return section;
}

/**
 * The replayed answers of the turn asked at `from`, as one row that
 * expands: "3 replays: 2 changed, 1 held" (a replay comparing models gives
 * a turn one answer per model: "1 replay, 3 answers: ...").
 */
function replayGroup(from, branches, ctx) {
  const counts = new Map();
  for (const b of branches) counts.set(b.replay.result, (counts.get(b.replay.result) || 0) + 1);
  const replays = new Set(branches.map((b) => b.replay.id)).size;
  const what = replays === branches.length
    ? plural(replays, 'replay') : `${plural(replays, 'replay')}, ${plural(branches.length, 'answer')}`;
  const results = [...counts].map(([result, n]) => `${n} ${result}`).join(', ');
  const open = ctx.openGroups.has(from) || branches.some((b) => ctx.open.has(b.id));
  return el('details', { class: 'replay-group', open, data: { from } },
    el('summary', { class: 'replay-group-head', title: 'the replays of this turn: expand to see each answer' },
      badge('replays', 'kind-replay'), ' ', el('span', { class: 'replay-group-label' }, `${what}: ${results}`)),
    branches.map((b) => renderBranch(b, ctx)));
}

function rerunBadges(rerun) {
  return el('span', { class: 'rerun-info' },
    rerun.ablation && rerun.ablation.length ? badge(`without ${rerun.ablation.join(', ')}`, 'ablation') : null,
    rerun.verdict ? badge(rerun.verdict, `verdict verdict-${rerun.verdict}`)
      : el('span', { class: 'muted', title: 'a verdict needs a baseline' }, ' no verdict'));
}

function setCollapsed(section, collapsed) {
  section.classList.toggle('collapsed', collapsed);
  const toggle = $(':scope > .branch-head > .toggle', section);
  if (toggle) {
    toggle.setAttribute('aria-expanded', String(!collapsed));
    toggle.title = collapsed ? 'expand this branch' : 'collapse this branch';
  }
}

function setAll(collapsed) {
  for (const group of $$('#tree details.replay-group')) group.open = !collapsed;
  for (const section of $$('#tree .branch')) {
    if (section.dataset.kind !== 'root') setCollapsed(section, collapsed);
  }
}

function compareBar(family, byId) {
  // One choice per branch end: where each line of the graph stops.
  const options = family.branches.map((b) => {
    const end = b.nodes[b.nodes.length - 1];
    const c = b.conversation ? byId.get(b.conversation) : null;
    return { value: end, text: `${b.kind} · ${c ? conversationLabel(c) : b.label} · ${short(end)}`, conversation: b.conversation };
  });
  const a = el('select', { id: 'compare-a', 'aria-label': 'first branch' },
    options.map((o) => el('option', { value: o.value }, o.text)));
  const b = el('select', { id: 'compare-b', 'aria-label': 'second branch' },
    options.map((o) => el('option', { value: o.value }, o.text)));
  const focusOption = options.findIndex((o) => o.conversation === family.focus);
  a.selectedIndex = Math.max(focusOption, 0);
  b.selectedIndex = options.findIndex((_, i) => i !== a.selectedIndex);
  const go = el('button', {
    id: 'compare-go', type: 'button',
    on: { click: () => { if (a.value && b.value) location.hash = `#/compare/${a.value}/${b.value}`; } },
  }, 'Compare');
  if (options.length < 2) {
    return el('span', { class: 'compare-bar muted' }, 'one branch: nothing to compare');
  }
  return el('span', { class: 'compare-bar' }, el('label', {}, 'Compare ', a), el('label', {}, ' with ', b), ' ', go);
}

// ---------------------------------------------------------------- node details

/** The tree's row for a node id or any prefix of one (the CLI prints 12 digits). */
function rowFor(nodeId) {
  if (!nodeId) return null;
  const exact = $(`#tree .node-row[data-node-id="${CSS.escape(nodeId)}"]`);
  if (exact) return exact;
  const matching = $$('#tree .node-row').filter((r) => r.dataset.nodeId.startsWith(nodeId.toLowerCase()));
  return matching.length === 1 ? matching[0] : null;
}

/** Highlight a node's row (expanding the branches on its way) without loading its details. */
function markSelected(nodeId) {
  for (const row of $$('#tree .node-row.selected')) {
    row.classList.remove('selected');
    row.removeAttribute('aria-selected');
  }
  const row = rowFor(nodeId);
  if (!row) return null;
  for (const stop of $$('#tree .node-row[tabindex="0"]')) stop.tabIndex = -1;
  row.tabIndex = 0;
  let section = row.closest('.branch');
  while (section) {
    setCollapsed(section, false);
    section = section.parentElement && section.parentElement.closest('.branch');
  }
  for (let group = row.closest('details.replay-group'); group;
    group = group.parentElement && group.parentElement.closest('details.replay-group')) group.open = true;
  row.classList.add('selected');
  row.setAttribute('aria-selected', 'true');
  return row;
}

function familyCrumbs(nodeId) {
  const focus = current.byConversation.get(current.family.focus);
  crumbs(el('a', { href: '#/' }, 'conversations'),
    nodeId ? el('a', { href: `#/c/${current.asked}` }, conversationLabel(focus)) : el('span', {}, conversationLabel(focus)),
    nodeId ? el('span', { id: 'crumb-node' }, 'message ', el('code', {}, short(nodeId))) : null);
}

async function selectNode(nodeId, stale) {
  const details = $('#details');
  if (!details) return;
  // A narrow window shows the details as a sheet while a message is selected.
  $('#family-view').classList.toggle('selecting', Boolean(nodeId));
  if (!nodeId) {
    markSelected(null);
    familyCrumbs(null);
    current.selected = null;
    delete details.dataset.nodeId;
    clear(details).appendChild(el('p', { class: 'placeholder' }, 'Select a message to see its parts, the runs that produced it, and what you can do from it.'));
    return;
  }
  let row = markSelected(nodeId);
  if (row) {
    row.focus({ preventScroll: true });
    row.scrollIntoView({ block: 'nearest' });
  }
  familyCrumbs(nodeId);
  clear(details).appendChild(el('p', { class: 'placeholder' }, 'Loading…'));
  try {
    const node = await api(`/api/nodes/${enc(nodeId)}`);
    if (stale()) return;
    current.selected = node.id;
    familyCrumbs(node.id);
    if (!row) {
      row = markSelected(node.id);
      if (row) row.scrollIntoView({ block: 'nearest' });
    }
    renderNode(details, node);
  } catch (error) {
    if (stale()) return;
    clear(details).appendChild(el('div', { class: 'error', role: 'alert' }, error.message));
  }
}

function renderNode(details, node) {
  const focus = current.asked;
  clear(details);
  details.dataset.nodeId = node.id;
  details.append(
    el('button', {
      type: 'button', class: 'details-close', id: 'details-close', 'aria-label': 'close the details', title: 'close (Esc)',
      on: { click: closeDetails },
    }, '×'),
    el('h2', {}, badge(node.role, `role role-${node.role}`), ' message'),
    el('p', {}, el('code', { class: 'full-id', id: 'node-id', title: node.id }, node.id)),
    el('dl', { class: 'facts' },
      el('dt', {}, 'parent'), el('dd', {}, node.parent ? nodeLink(focus, node.parent) : el('span', { class: 'muted' }, 'none (a root)')),
      el('dt', {}, 'depth'), el('dd', {}, String(node.depth)),
      el('dt', {}, 'children'), el('dd', {}, node.children.length
        ? node.children.map((c, i) => [i ? ' ' : '', nodeLink(focus, c)])
        : el('span', { class: 'muted' }, 'none')),
      node.heads.length ? [el('dt', {}, 'head of'), el('dd', {}, node.heads.map((c, i) => [i ? ', ' : '', conversationLink(c)]))] : null,
      node.replays && node.replays.length ? [el('dt', {}, 'replayed in'), el('dd', { id: 'node-replays' }, node.replays.map((r, i) => [i ? ' ' : '',
        el('a', { href: `#/replays/${r.replay}`, class: 'replay-link', data: { replay: r.replay } }, el('code', {}, short(r.replay)), ' ', badge(r.result))]))] : null),
    el('h3', {}, plural(node.parts.length, 'part')),
    el('ol', { class: 'parts', id: 'parts' }, node.parts.map((p, i) => el('li', {}, renderPart(p, i, node.id)))),
    actionPanel(node, { model: modelFor(node), landed }),
    el('h3', {}, node.runs.length ? `Produced by ${plural(node.runs.length, 'run')}` : 'Runs'),
    node.runs.length
      ? el('div', { id: 'runs' }, groupRuns(node.runs).map((group) => renderRun(group[0], focus, group)))
      : el('p', { class: 'muted', id: 'runs' }, node.role === 'assistant'
        ? 'No run record produced this message (it was imported or written directly).'
        : `No run produces a ${node.role} message: it was part of a request.`));
}

/** Close the open message's details (on a narrow window, its sheet): the family without a selection. */
function closeDetails() {
  if (current.name !== 'family' || !current.selected) return false;
  location.hash = `#/c/${current.asked}`;
  return true;
}

/** The model the actions default to: the conversation's this message belongs to. */
function modelFor(node) {
  const byId = current.byConversation;
  const headed = node.heads.find((c) => c.model);
  if (headed) return headed.model;
  const shown = current.nodes.get(node.id);
  const branch = shown && current.branches.get(shown.branch);
  const owner = branch && branch.conversation && byId.get(branch.conversation);
  if (owner && owner.model) return owner.model;
  const focus = byId.get(current.family.focus);
  return (focus && focus.model) || (node.runs[0] && node.runs[0].model) || null;
}

/** An action wrote something: say so above the tree, redraw the family, select what it made. */
function landed(result) {
  current.activity = result;
  const line = $('#activity');
  if (line) line.replaceWith(activityLine(result));
  if (result.node) {
    refreshFamily(result.node).catch(showError);
  } else if (result.what === 'rerun') {
    refreshFamily(null).catch(showError);
  } else if (result.conversation) {
    location.hash = `#/c/${result.conversation}`;
  }
}

function activityLine(result) {
  const what = {
    reply: 'Replied', fork: 'Forked', edit: 'Edited and forked', regenerate: 'Regenerated', rerun: 'Re-ran the turn',
    'rerun fork': 'Forked from the counterfactual',
  }[result.what] || result.what;
  return el('p', {
    id: 'activity', class: 'activity', role: 'status',
    data: { what: result.what, node: result.node, conversation: result.conversation, deltas: result.deltas, verdict: result.verdict },
  },
  el('strong', {}, what), ': ',
  result.what === 'rerun'
    ? [result.verdict ? ['verdict ', badge(result.verdict, `verdict verdict-${result.verdict}`)] : 'no verdict',
      ', shown on the rerun in the tree below']
    : [result.node ? ['message ', el('code', {}, short(result.node))] : null,
      result.conversation ? [result.branched ? ' in the new conversation ' : ' in conversation ', el('code', {}, short(result.conversation))] : null,
      result.deltas ? ` · ${plural(result.deltas, 'chunk')} streamed` : null]);
}

/**
 * Identical runs together: the same call (model, provider, options, tools,
 * annotations, the message answered) with the same outcome (status, error,
 * usage), whenever and from whichever conversation it was made. A repeated
 * call shows once, counted.
 */
function groupRuns(runs) {
  const groups = new Map();
  for (const run of runs) {
    const key = JSON.stringify([run.model, run.requested_model, run.provider, run.profile, run.backend, run.status,
      run.error, run.usage, run.tools, run.annotations, run.options, run.input_head, run.request]);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(run);
  }
  return [...groups.values()];
}

function renderPart(part, index, nodeId) {
  const box = el('div', { class: `part part-${part.type}`, data: { partIndex: index, partType: part.type } });
  switch (part.type) {
    case 'text':
      box.append(el('div', { class: 'part-head' }, badge('text'), el('span', { class: 'muted' }, plural([...part.text].length, 'character'))),
        el('pre', { class: 'text' }, part.text));
      break;
    case 'tool_call': {
      box.append(el('div', { class: 'part-head' }, badge('tool call', 'tool'), el('strong', { class: 'tool-name' }, part.name),
        el('span', { class: 'muted' }, ' id '), el('code', { class: 'call-id' }, part.id)),
      el('pre', { class: 'arguments' }, part.arguments));
      const pretty = prettyJson(part.arguments);
      if (pretty === null) box.appendChild(el('p', { class: 'warning' }, 'These arguments are not valid JSON (shown exactly as the model wrote them).'));
      else if (pretty !== part.arguments) box.appendChild(el('details', {}, el('summary', {}, 'formatted'), el('pre', {}, pretty)));
      break;
    }
    case 'tool_result':
      box.append(el('div', { class: 'part-head' },
        badge('tool result', part.is_error ? 'error-badge' : 'tool'),
        part.is_error ? badge('error', 'error-badge is-error') : null,
        el('span', { class: 'muted' }, ' for call '), el('code', { class: 'call-id' }, part.call_id)),
      el('pre', { class: `text${part.is_error ? ' is-error' : ''}` }, part.content));
      box.dataset.isError = String(part.is_error);
      break;
    case 'attachment':
      box.append(el('div', { class: 'part-head' }, badge('attachment'),
        el('span', { class: 'media-type' }, part.media_type), el('span', { class: 'muted size' }, ` · ${bytes(part.size)}`),
        ' ', el('a', { href: `/api/nodes/${nodeId}/parts/${index}`, download: '' }, 'download')));
      break;
    case 'erased':
      box.append(el('div', { class: 'part-head' }, badge('erased', 'error-badge'),
        el('span', { class: 'muted' }, ` ${part.was.replace('_', ' ')} erased by ${part.erased_by} on ${new Date(part.erased_at_ms).toISOString()}`)),
      el('p', { class: 'erased-reason' }, `why: ${part.reason}`),
      el('p', { class: 'muted' }, 'content digest ', el('code', {}, part.digest)));
      break;
    default:
      box.append(el('div', { class: 'part-head' }, badge(part.kind || part.type), el('span', { class: 'muted' }, 'a part this version cannot show')));
  }
  return box;
}

function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (_) {
    return null;
  }
}

/** The family's cost, said to be a lower bound when runs lack usage or a price. */
function familyCost(usage) {
  const cost = usage.cost;
  const gaps = [];
  if (cost.unmeasured.length) gaps.push(`${plural(cost.unmeasured.length, 'run')} without usage`);
  if (cost.unpriced.length) gaps.push(`${plural(cost.unpriced.length, 'run')} without a price`);
  const hit = usage.cache_read_tokens ? `, ${percent(usage.cache_hit_rate)} cache hits` : '';
  return `${plural(usage.runs, 'run')} cost ${gaps.length ? 'at least ' : ''}${dollars(cost.dollars)}${hit}`
    + (gaps.length ? ` (${gaps.join(', ')})` : '') + ` at prices of ${cost.prices_date}`;
}

function renderRun(run, focus, group) {
  const u = run.usage;
  const options = Object.entries(run.options || {});
  return el('article', { class: `run status-${run.status}`, data: { runId: run.id, status: run.status } },
    el('header', {}, badge(run.status, `status status-${run.status}`), ' ',
      el('strong', { class: 'model', title: run.model }, run.model), el('span', { class: 'muted' }, ` via ${run.provider}`),
      group && group.length > 1 ? badge(`× ${group.length} identical runs`, 'repeat') : null,
      el('code', { class: 'run-id', title: run.id }, short(run.id))),
    group && group.length > 1 ? el('details', { class: 'run-group' },
      el('summary', {}, `${group.length} runs with the same model, options, request and outcome`),
      el('ul', {}, group.map((r) => el('li', { data: { runId: r.id } },
        el('code', { title: r.id }, short(r.id)), ` · ${time(r.started_ms)} · took ${duration(r.duration_ms)}`,
        r.conversation ? [' · conversation ', el('a', { href: `#/c/${r.conversation}` }, el('code', {}, short(r.conversation)))] : null)))) : null,
    run.error ? el('pre', { class: 'text is-error' }, run.error) : null,
    el('dl', { class: 'facts' },
      el('dt', {}, 'started'), el('dd', {}, time(run.started_ms)),
      el('dt', {}, 'took'), el('dd', { class: 'duration' }, duration(run.duration_ms)),
      run.requested_model ? [el('dt', {}, 'asked for'), el('dd', { class: 'requested-model one-line', title: run.requested_model }, run.requested_model)] : null,
      run.response_model && run.response_model !== run.model ? [el('dt', {}, 'answered by'), el('dd', { class: 'response-model one-line', title: run.response_model }, run.response_model)] : null,
      run.profile ? [el('dt', {}, 'profile'), el('dd', { class: 'one-line', title: run.profile }, run.profile)] : null,
      run.backend ? [el('dt', {}, 'backend'), el('dd', { class: 'one-line', title: run.backend }, run.backend)] : null,
      run.conversation ? [el('dt', {}, 'conversation'), el('dd', {}, el('a', { href: `#/c/${run.conversation}` }, el('code', {}, short(run.conversation))))] : null,
      run.input_head ? [el('dt', {}, 'answered'), el('dd', {}, nodeLink(focus, run.input_head))] : null,
      run.finish_reason ? [el('dt', {}, 'finished'), el('dd', {}, run.finish_reason)] : null,
      options.length ? [el('dt', {}, 'options'), el('dd', { class: 'options' }, optionsText(run.options))] : null),
    el('table', { class: 'usage' },
      el('thead', {}, el('tr', {}, ['input', 'output', 'cache read', 'cache write', 'cache hit', 'cost'].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, el('tr', {},
        el('td', { class: 'num input-tokens' }, tokens(u.input_tokens)),
        el('td', { class: 'num output-tokens' }, tokens(u.output_tokens)),
        el('td', { class: 'num' }, tokens(u.cache_read_tokens)),
        el('td', { class: 'num' }, tokens(u.cache_write_tokens)),
        el('td', { class: 'num cache-hit' }, percent(u.cache_hit_rate)),
        el('td', { class: 'num run-cost', title: u.cost === null ? 'no price for this model, or no usage reported' : '' },
          (u.cost_partial ? 'at least ' : '') + dollars(u.cost))))),
    u.complete ? null : el('p', { class: 'warning' }, 'Usage is incomplete: some attempt of this run did not report it.'),
    el('div', { class: 'tools' },
      el('h4', { class: run.tools.length ? '' : 'none' }, run.tools.length ? `Tools offered (${run.tools.length})` : 'No tools offered'),
      run.tools.length ? el('ul', {}, run.tools.map((t) => el('li', { class: 'tool', data: { tool: t.name } },
        el('code', {}, t.name), t.description ? ` — ${t.description}` : '',
        el('details', {}, el('summary', {}, 'input schema'), el('pre', {}, JSON.stringify(t.input_schema, null, 2)))))) : null),
    run.annotations.length ? el('div', { class: 'annotations' }, el('h4', {}, 'Annotations'),
      el('ul', {}, run.annotations.map((a) => el('li', {}, nodeLink(focus, a.node), ` part ${a.part}: `, a.annotations.join('; '))))) : null,
    run.request ? requestBody(run.request) : null,
    run.relations.length ? el('div', { class: 'relations' }, el('h4', {}, 'Relations'),
      el('ul', {}, run.relations.map((r) => el('li', {}, el('span', { class: 'relation-kind' }, r.kind), ' → ', el('code', {}, r.target))))) : null);
}

/** The exact request body a client sent the recording proxy, formatted when it is JSON. */
function requestBody(request) {
  const pretty = prettyJson(request);
  return el('details', { class: 'request-body' },
    el('summary', {}, `Request body, exactly as the client sent it (${bytes(new TextEncoder().encode(request).length)})`),
    el('pre', {}, pretty === null ? request : pretty));
}

// ---------------------------------------------------------------- keyboard

/** The rows j and k step through: the list's shown rows, or the tree's visible messages. */
function steppable() {
  if (current.name === 'list') return $$('#conversations tbody tr').filter((r) => !r.hidden);
  if (current.name === 'family') return $$('#tree .node-row').filter((r) => r.offsetParent !== null);
  return [];
}

/** The list's cursor row: moved by j and k, opened by Enter. */
function listCursor() {
  return $('#conversations tbody tr.cursor:not([hidden])');
}

/**
 * The keys' actions (keys.js) in the view shown: in the list j and k move
 * a cursor and Enter opens its conversation; in a family j and k select
 * the next or previous visible message (its details follow), Enter opens
 * the details of the message in focus, r and f its reply and fork forms.
 */
const keyActions = {
  move(step) {
    const rows = steppable();
    if (rows.length === 0) return false;
    const at = rows.indexOf(current.name === 'list' ? listCursor() : $('#tree .node-row.selected'));
    const next = rows[at < 0 ? (step > 0 ? 0 : rows.length - 1) : Math.min(rows.length - 1, Math.max(0, at + step))];
    if (current.name === 'list') {
      for (const row of $$('#conversations tbody tr.cursor')) {
        row.classList.remove('cursor');
        row.removeAttribute('aria-selected');
      }
      next.classList.add('cursor');
      next.setAttribute('aria-selected', 'true');
      next.scrollIntoView({ block: 'nearest' });
    } else {
      location.hash = `#/c/${current.asked}/n/${next.dataset.nodeId}`;
    }
    return true;
  },
  open(target) {
    if (current.name === 'list') {
      const row = listCursor();
      if (row) location.hash = `#/c/${row.dataset.conversationId}`;
      return Boolean(row);
    }
    if (current.name !== 'family') return false;
    const row = (target && target.closest && target.closest('#tree .node-row')) || rowFor(current.selected);
    if (!row) return false;
    if (row.dataset.nodeId === current.selected) {
      const details = $('#details');
      details.scrollIntoView({ block: 'nearest' });
      details.tabIndex = -1;
      details.focus({ preventScroll: true });
    } else {
      location.hash = `#/c/${current.asked}/n/${row.dataset.nodeId}`;
    }
    return true;
  },
  act(kind) {
    if (current.name !== 'family' || !current.selected) return false;
    const button = $(`#details[data-node-id="${CSS.escape(current.selected)}"] #actions button[data-action="${kind}"]`);
    if (!button) return false;
    button.click();
    return true;
  },
  close: closeDetails,
};

// ---------------------------------------------------------------- compare

async function compareView(a, b, stale) {
  clear(view()).appendChild(el('p', { class: 'placeholder' }, 'Loading…'));
  const cmp = await api(`/api/compare?a=${enc(a)}&b=${enc(b)}`);
  if (stale()) return;
  // Remember the family the comparison was opened from, for the way back
  // and for the reruns attached to its turns.
  const back = current.name === 'family'
    ? { id: current.asked, label: conversationLabel(current.byConversation.get(current.family.focus)), family: current.family }
    : (current.back || null);
  const [family, runs] = await Promise.all([back ? back.family : familyOf(cmp), runDetails(cmp)]);
  if (stale()) return;
  current = { name: 'compare', back };
  const backLink = back ? el('a', { href: `#/c/${back.id}` }, back.label) : el('a', { href: '#/' }, 'conversations');
  crumbs(backLink, el('span', {}, `compare ${short(cmp.a.head)} with ${short(cmp.b.head)}`));
  document.title = 'skein · compare';
  const reruns = rerunsByNode(family);

  const sideHead = (side, name) => el('div', { class: 'compare-side-head', data: { side: name, nodeId: side.head } },
    el('h2', {}, name.toUpperCase(), ' ', el('code', { title: side.head }, short(side.head))),
    side.heads.length ? el('p', {}, 'head of ', side.heads.map((c, i) => [i ? ', ' : '', conversationLink(c)]))
      : el('p', { class: 'muted' }, 'not a conversation head'),
    el('p', { class: 'muted' }, `${plural(side.nodes.length + side.omitted, 'message')} after the common ancestor`));

  const shared = cmp.ancestor
    ? el('details', { id: 'compare-ancestor', class: 'shared' },
      el('summary', {}, `Shared history: ${plural(cmp.shared.length + cmp.shared_omitted, 'message')}, up to `, el('code', {}, short(cmp.ancestor))),
      el('ol', { class: 'shared-list' }, cmp.shared.map((n) => el('li', { data: { nodeId: n.id } },
        el('span', { class: `role role-${n.role}` }, n.role), ' ', el('span', { class: 'preview' }, n.preview),
        reruns.has(n.id) ? rerunNotes(reruns.get(n.id)) : null))))
    : el('p', { id: 'compare-ancestor', class: 'shared muted' }, 'These threads share no message.');

  const rows = Math.max(cmp.a.nodes.length, cmp.b.nodes.length);
  const grid = el('div', { class: 'compare-grid', id: 'compare-grid' });
  const cell = { back, runs, reruns };
  for (let i = 0; i < rows; i++) {
    const left = cmp.a.nodes[i];
    const right = cmp.b.nodes[i];
    // Word differences between the texts of the two messages in this row.
    const diff = left && right && left.id !== right.id ? wordDiff(textOf(left.parts), textOf(right.parts)) : null;
    grid.append(compareCell(left, 'a', cell, diff && diff.a), compareCell(right, 'b', cell, diff && diff.b));
  }
  const omitted = (side) => (side.omitted ? el('p', { class: 'warning' }, `${side.omitted} later messages are not shown.`) : null);
  if (cmp.shared_omitted && cmp.ancestor) {
    $('ol', shared).prepend(el('li', { class: 'cut muted' }, `… ${plural(cmp.shared_omitted, 'earlier message')} not shown`));
  }
  const section = el('section', { id: 'compare-view' },
    el('div', { class: 'view-head' }, el('h1', {}, 'Compare branches'),
      el('p', { class: 'muted' }, 'Aligned at their last common message; words one side lacks are highlighted.')),
    shared,
    el('div', { class: 'compare-heads' }, sideHead(cmp.a, 'a'), sideHead(cmp.b, 'b')),
    rows ? grid : el('p', { class: 'muted' }, 'Nothing after the common ancestor: one thread contains the other.'),
    el('div', { class: 'compare-heads' }, el('div', {}, omitted(cmp.a)), el('div', {}, omitted(cmp.b))));
  clear(view()).appendChild(section);
}

/** The family of a conversation either side heads, for its reruns; `null` when neither heads one. */
async function familyOf(cmp) {
  const owner = cmp.a.heads[0] || cmp.b.heads[0];
  if (!owner) return null;
  try {
    return await api(`/api/conversations/${enc(owner.id)}/family`);
  } catch (_) {
    return null;
  }
}

/** The full records of the runs shown (for their options), at most 60. */
async function runDetails(cmp) {
  const ids = [...new Set([...cmp.a.nodes, ...cmp.b.nodes].flatMap((n) => n.runs.map((r) => r.id)))].slice(0, 60);
  const records = await Promise.all(ids.map((id) => api(`/api/runs/${enc(id)}`).catch(() => null)));
  return new Map(records.filter(Boolean).map((r) => [r.id, r]));
}

/**
 * Reruns by the nodes they concern: a rerun branch's messages (its request
 * without the ablated parts and its answer) and, when the server names it
 * (`turn_node`), the reply of the turn it re-ran.
 */
function rerunsByNode(family) {
  const byNode = new Map();
  if (!family) return byNode;
  const add = (id, note) => {
    if (!byNode.has(id)) byNode.set(id, []);
    byNode.get(id).push(note);
  };
  for (const b of family.branches) {
    if (!b.rerun) continue;
    if (b.rerun.turn_node) add(b.rerun.turn_node, { ...b.rerun, at: 'turn' });
    for (const id of b.nodes) add(id, { ...b.rerun, at: 'rerun' });
  }
  return byNode;
}

function rerunNotes(notes) {
  return el('span', { class: 'rerun-notes' }, notes.map((r) => el('span', {
    class: 'rerun-note', data: { rerun: r.id, at: r.at },
    title: r.at === 'turn' ? `this turn was re-run (rerun ${r.id})` : `part of rerun ${r.id}`,
  }, r.at === 'turn' ? ' re-run ' : ' rerun ', rerunBadges(r))));
}

function compareCell(node, side, ctx, diff) {
  if (!node) return el('div', { class: 'compare-cell empty-cell', data: { side } });
  const id = el('code', { class: 'node-id', title: node.id }, short(node.id));
  let textShown = false;
  const parts = node.parts.map((p, i) => {
    if (p.type !== 'text' || !diff) return renderPart(p, i, node.id);
    if (textShown) return null;
    textShown = true;
    return el('div', { class: 'part part-text diffed', data: { partIndex: i, partType: 'text' } },
      el('pre', { class: 'text' }, diff.map((seg) => (seg.changed ? el('mark', { class: `diff diff-${side}` }, seg.text) : seg.text))));
  });
  return el('div', { class: `compare-cell role-${node.role}`, data: { side, nodeId: node.id } },
    el('div', { class: 'cell-head' }, el('span', { class: `role role-${node.role}` }, node.role),
      ctx.back ? el('a', { href: `#/c/${ctx.back.id}/n/${node.id}`, title: 'show in the family tree' }, id) : id,
      ctx.reruns.has(node.id) ? rerunNotes(ctx.reruns.get(node.id)) : null),
    node.runs.map((r) => runLabel(r, ctx.runs.get(r.id))),
    parts);
}

/** A run in one line: model, options, status, tokens, time. */
function runLabel(summary, record) {
  const options = record ? optionsText(record.options) : '';
  return el('p', { class: 'muted run-summary', data: { runId: summary.id } },
    el('strong', { class: 'model' }, summary.model),
    options ? [' · ', el('span', { class: 'options' }, options)] : null,
    ` · ${summary.status} · ${tokens(summary.input_tokens)} in / ${tokens(summary.output_tokens)} out tokens · ${duration(summary.duration_ms)}`,
    record ? ` · ${time(record.started_ms)}` : null);
}

// ---------------------------------------------------------------- replays

async function replaysRoute(conversation, stale) {
  if (current.name !== 'replays') clear(view()).appendChild(el('p', { class: 'placeholder' }, 'Loading…'));
  crumbs(el('a', { href: '#/' }, 'conversations'), el('span', {}, 'replays'));
  document.title = 'skein · replays';
  await replaysView(view(), stale, conversation);
  if (!stale()) current = { name: 'replays' };
}

async function replayRoute(id, stale) {
  clear(view()).appendChild(el('p', { class: 'placeholder' }, 'Loading…'));
  crumbs(el('a', { href: '#/' }, 'conversations'), el('a', { href: '#/replays' }, 'replays'), el('span', {}, short(id)));
  document.title = `skein · replay ${short(id)}`;
  current = { name: 'replay' };
  await replayView(view(), id, stale);
}

// ---------------------------------------------------------------- search

const SEARCH_LIMIT = 100;

async function searchView(query, stale) {
  const box = $('#search');
  if (box && box.value !== query) box.value = query;
  crumbs(el('a', { href: '#/' }, 'conversations'), el('span', {}, 'search'));
  document.title = `skein · search ${query}`;
  const section = el('section', { id: 'search-view' },
    el('div', { class: 'view-head' }, el('h1', {}, 'Search'), el('p', { class: 'muted', id: 'search-count' }, 'Searching…')));
  clear(view()).appendChild(section);
  current = { name: 'search' };
  if (!query.trim()) {
    $('#search-count').textContent = 'Type words to find the messages that contain them.';
    return;
  }
  let found;
  try {
    found = await api(`/api/search?q=${enc(query)}&limit=${SEARCH_LIMIT}`);
  } catch (error) {
    if (stale()) return;
    // 400: a query the store refuses (it says why).
    $('#search-count').textContent = error.message;
    $('#search-count').className = 'error';
    return;
  }
  if (stale()) return;
  const words = query.toLowerCase().split(/\s+/).map((w) => w.replace(/["*]/g, '')).filter((w) => w.length > 1);
  $('#search-count').textContent = found.results.length === 0
    ? `No message contains “${query}”.`
    : `${plural(found.results.length, 'message')}${found.truncated ? `: the newest ${found.results.length}; more match` : ''}`;
  section.appendChild(el('ol', { class: 'search-results', id: 'search-results' }, found.results.map((r) => {
    const where = [el('span', { class: `role role-${r.role}` }, r.role), ' ',
      el('strong', {}, r.conversation ? r.conversation_name || short(r.conversation) : '(in no conversation)'), ' ',
      el('code', { class: 'muted' }, short(r.node))];
    return el('li', { class: 'search-result', data: { nodeId: r.node, conversationId: r.conversation } },
      r.conversation ? el('a', { href: `#/c/${r.conversation}/n/${r.node}`, class: 'search-link' }, where) : where,
      el('p', { class: 'snippet' }, r.highlights ? marked(r.snippet || '', r.highlights) : highlight(r.snippet || '', words)));
  })));
}

/** Text with the server's highlight ranges (UTF-16 offsets, as JavaScript counts) marked. */
function marked(text, ranges) {
  const out = [];
  let at = 0;
  for (const [start, end] of ranges.slice().sort((x, y) => x[0] - y[0])) {
    if (start < at || end > text.length) continue;
    if (start > at) out.push(text.slice(at, start));
    out.push(el('mark', { class: 'hit' }, text.slice(start, end)));
    at = end;
  }
  out.push(text.slice(at));
  return out;
}

/** Text with the searched words marked (text nodes and <mark> only). */
function highlight(text, words) {
  if (words.length === 0) return text;
  const lower = text.toLowerCase();
  const out = [];
  let at = 0;
  while (at < text.length) {
    let next = -1;
    let word = '';
    for (const w of words) {
      const i = lower.indexOf(w, at);
      if (i >= 0 && (next < 0 || i < next)) { next = i; word = w; }
    }
    if (next < 0) break;
    if (next > at) out.push(text.slice(at, next));
    out.push(el('mark', { class: 'hit' }, text.slice(next, next + word.length)));
    at = next + word.length;
  }
  out.push(text.slice(at));
  return out;
}

// ---------------------------------------------------------------- start

async function start() {
  // A token given in the address has been turned into a cookie by the
  // server: keep it out of the address bar and of the history.
  if (new URLSearchParams(location.search).has('token')) {
    history.replaceState(null, '', location.pathname + location.hash);
  }
  window.addEventListener('hashchange', route);
  const search = $('#search-form');
  search.addEventListener('submit', (event) => {
    event.preventDefault();
    const query = $('#search').value.trim();
    if (query) location.hash = `#/search/${enc(query)}`;
  });
  installKeys(keyActions);
  $('#keys-button').addEventListener('click', () => toggleKeys());
  live.subscribe(refreshShown, refreshShown);
  try {
    await loadSession();
  } catch (_) {
    // Without a session the page still reads; the actions say why they are off.
  }
  route();
  live.start();
  try {
    const info = await api('/api/info');
    $('#database').textContent = info.database;
    $('#database').title = `skein ${info.version} · database ${info.database}`;
  } catch (_) {
    // The view reports the error itself.
  }
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
