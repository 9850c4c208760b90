// The skein web view: a read-only page over the server's /api routes.
//
// Everything shown is model or user output, so the DOM is built with
// element constructors and text nodes only: no markup string ever carries
// data (the server's content security policy would refuse inline script
// anyway). Views are chosen by the URL fragment:
//   #/                      conversations
//   #/c/CONV                a conversation's family tree
//   #/c/CONV/n/NODE         ... with a node's details open
//   #/compare/NODE/NODE     two branches from their common ancestor
'use strict';

(() => {
  // ---------------------------------------------------------------- DOM

  /** An element with attributes, properties and children (strings become text nodes). */
  function el(tag, attrs, ...children) {
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
      else node.setAttribute(key, value === true ? '' : String(value));
    }
    append(node, children);
    return node;
  }

  function append(parent, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(parent, child);
      else if (child instanceof Node) parent.appendChild(child);
      else parent.appendChild(document.createTextNode(String(child)));
    }
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  const $ = (selector, root) => (root || document).querySelector(selector);
  const $$ = (selector, root) => Array.from((root || document).querySelectorAll(selector));

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(path) {
    let response;
    try {
      response = await fetch(path, { headers: { Accept: 'application/json' }, credentials: 'same-origin' });
    } catch (error) {
      throw new ApiError(0, 'cannot reach the skein server (is `skein serve` still running?)');
    }
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      // Not JSON: the access guard answers 401 in plain text.
    }
    if (!response.ok) {
      const message = body && body.error ? body.error
        : response.status === 401 ? 'this server needs its token: open the page with ?token=TOKEN'
        : `${response.status} ${response.statusText}`;
      throw new ApiError(response.status, message);
    }
    return body;
  }

  const enc = encodeURIComponent;

  // ---------------------------------------------------------------- formatting

  const short = (id) => (id ? String(id).slice(0, 12) : '');

  function time(ms) {
    if (ms === null || ms === undefined) return '';
    return new Date(ms).toLocaleString(undefined, {
      year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit',
    });
  }

  function ago(ms) {
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

  function duration(ms) {
    if (ms === null || ms === undefined) return '—';
    if (ms < 1000) return `${ms} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
    return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  }

  function bytes(n) {
    if (n < 1024) return `${n} bytes`;
    if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
    return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  }

  const tokens = (n) => (n === null || n === undefined ? '—' : String(n));
  const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
  const conversationLabel = (c) => c.name || c.title || c.short;

  function timeEl(ms) {
    return el('time', { datetime: new Date(ms).toISOString(), title: time(ms) }, ago(ms));
  }

  function nodeLink(focus, id, text) {
    return el('a', { href: `#/c/${focus}/n/${id}`, class: 'node-link', data: { nodeId: id } }, el('code', {}, text || short(id)));
  }

  function conversationLink(c) {
    return el('a', { href: `#/c/${c.id}`, class: 'conversation-link', data: { conversationId: c.id } },
      conversationLabel(c));
  }

  function badge(text, kind) {
    return el('span', { class: `badge ${kind || ''}` }, text);
  }

  // ---------------------------------------------------------------- routing

  const view = () => $('#view');
  let current = { name: null };
  let renderToken = 0;

  function crumbs(...items) {
    const nav = clear($('#crumbs'));
    for (const item of items) {
      nav.appendChild(el('span', { class: 'sep' }, '/'));
      nav.appendChild(item);
    }
  }

  function showError(error) {
    clear(view()).appendChild(el('div', { class: 'error', id: 'error', role: 'alert' },
      el('strong', {}, error.status === 404 ? 'Not found. ' : 'Error. '), error.message,
      el('p', {}, el('a', { href: '#/' }, 'Back to the conversations'))));
  }

  async function route() {
    const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
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

  // The list follows new turns (the recording proxy's among them): while it
  // is shown, in a visible tab, untouched (no filter typed, no page loaded
  // below the first), its first page is fetched again every few seconds and
  // the view redrawn when that page changed.
  const LIST_REFRESH_MS = 3000;
  let listWatch = null;

  function listSignature(list) {
    return list.conversations.map((c) => `${c.id}:${c.head}:${c.updated_ms}`).join(',');
  }

  function watchList(signature, token) {
    clearTimeout(listWatch);
    listWatch = setTimeout(async () => {
      if (token !== renderToken || current.name !== 'list') return;
      const filter = $('#filter');
      const touched = (filter && filter.value.trim() !== '') || current.loadedMore;
      if (!document.hidden && !touched) {
        try {
          const list = await api('/api/conversations');
          if (token !== renderToken || current.name !== 'list') return;
          if (listSignature(list) !== signature) {
            route();
            return;
          }
        } catch (_) {
          // A failed poll changes nothing on the page; the next one may work.
        }
      }
      watchList(signature, token);
    }, LIST_REFRESH_MS);
  }

  async function listView(stale) {
    if (current.name !== 'list') clear(view()).appendChild(el('p', { class: 'placeholder' }, 'Loading…'));
    const list = await api('/api/conversations');
    if (stale()) return;
    current = { name: 'list' };
    watchList(listSignature(list), renderToken);
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
        el('td', { class: 'name' }, el('a', { href: `#/c/${c.id}` }, c.name || (c.title ? el('span', { class: 'title' }, c.title) : el('span', { class: 'muted' }, '(unnamed)')))),
        el('td', { class: 'preview' }, c.preview || ''),
        el('td', {}, el('code', { title: c.id }, c.short)),
        el('td', {}, c.head ? el('code', { title: c.head }, short(c.head)) : el('span', { class: 'muted' }, 'empty')),
        el('td', { class: 'num' }, String(c.len)),
        el('td', {}, timeEl(c.updated_ms)),
        el('td', {}, originCell(c)),
        el('td', { class: 'model', title: c.model }, c.model || el('span', { class: 'muted' }, '—')));
      row.dataset.search = [c.name || '', c.title || '', c.id, c.head || '', c.model || '', c.preview || ''].join(' ').toLowerCase();
      row.addEventListener('click', (event) => {
        if (event.target.closest('a')) return;
        location.hash = `#/c/${c.id}`;
      });
      return row;
    };
    const rows = list.conversations.map(makeRow);
    const matches = (row) => {
      const needle = filter.value.trim().toLowerCase();
      return needle === '' || row.dataset.search.includes(needle);
    };
    filter.addEventListener('input', () => {
      for (const row of rows) row.hidden = !matches(row);
    });
    const body = el('tbody', {}, rows);
    section.appendChild(el('div', { class: 'toolbar' }, filter));
    section.appendChild(el('table', { id: 'conversations', class: 'listing' },
      el('thead', {}, el('tr', {},
        ['Name', 'Last message', 'Id', 'Head', 'Messages', 'Updated', 'Origin', 'Model'].map((h) => el('th', { scope: 'col' }, h)))),
      body));
    // The server lists a page at a time; each page names the next.
    let next = list.next;
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
    current = { name: 'family', asked: conversationId, family, selected: null };
    renderFamily(family);
    await selectNode(nodeId, stale);
  }

  /** Show more of a truncated family, keeping the selection. */
  function showMore() {
    const { asked, selected, family } = current;
    const token = ++renderToken;
    loadFamily(asked, selected, Math.min(family.limit * 5, family.max_limit), () => token !== renderToken).catch(showError);
  }

  function renderFamily(family) {
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
    current.nodes = nodes;
    current.branches = branches;
    current.byConversation = byId;

    crumbs(el('a', { href: '#/' }, 'conversations'), el('span', {}, conversationLabel(focus)));
    document.title = `skein · ${conversationLabel(focus)}`;

    // Open the branches on the way to the focus conversation's head.
    const open = new Set();
    if (focus.head && nodes.has(focus.head)) openChain(nodes.get(focus.head).branch, branches, open);

    const section = el('section', { id: 'family-view', data: { conversationId: family.focus } });
    const tree = el('div', { id: 'tree', class: 'tree', role: 'tree', 'aria-label': 'conversation graph' });
    const details = el('aside', { id: 'details', class: 'details' },
      el('p', { class: 'placeholder' }, 'Select a message to see its parts and the runs that produced it.'));

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
    // A large family's list would push the tree off the screen: fold it.
    const members = el('details', { id: 'members', open: listed <= 8 },
      el('summary', {},
        `${plural(family.conversations.length, 'conversation')}${family.more_conversations ? ' and more' : ''}`,
        family.shares.length
          ? ` · ${plural(family.shares.length, 'conversation')}${family.more_shares ? ' and more' : ''} sharing messages`
          : '',
        ` · ${family.branches.length} ${family.branches.length === 1 ? 'branch' : 'branches'}`
          + ` · ${plural(family.nodes.length, 'message')}`,
        focus.model ? ` · model ${focus.model}` : ''),
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
      el('div', { class: 'toolbar' },
        el('button', { id: 'expand-all', type: 'button', on: { click: () => setAll(false) } }, 'Expand all'),
        el('button', { id: 'collapse-all', type: 'button', on: { click: () => setAll(true) } }, 'Collapse all'),
        compareBar(family, byId)));

    for (const rootId of family.roots) {
      const node = nodes.get(rootId);
      const branch = node && branches.get(node.branch);
      if (branch) tree.appendChild(renderBranch(branch, { family, nodes, startingAt, byId, sharing, open }));
    }
    if (family.roots.length === 0) {
      tree.appendChild(el('p', { class: 'empty' }, 'This conversation has no messages yet.'));
    }
    tree.addEventListener('keydown', treeKeys);
    // One tab stop for the whole tree: the selected row, else the first.
    const firstRow = $('.node-row', tree);
    if (firstRow) firstRow.tabIndex = 0;

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
    const section = el('section', {
      class: `branch kind-${branch.kind}${collapsed ? ' collapsed' : ''}`,
      data: { branchId: branch.id, kind: branch.kind, conversationId: branch.conversation },
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
        : badge(branch.kind, `kind-${branch.kind}`),
      el('span', { class: 'branch-label' },
        conversation ? el('a', { href: `#/c/${conversation.id}`, data: { conversationId: conversation.id } }, branch.label)
          : branch.label),
      el('span', { class: 'muted branch-meta' },
        plural(count, 'message'), branch.from ? [' from ', el('code', {}, short(branch.from))] : null),
      branch.rerun ? rerunBadges(branch.rerun) : null);
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
      el('code', { class: 'node-id' }, short(node.id)));
      row.addEventListener('click', () => {
        location.hash = `#/c/${current.asked}/n/${node.id}`;
      });
      const item = el('li', { class: 'node' }, row);
      const leaving = ctx.startingAt.get(id);
      if (leaving) item.appendChild(el('div', { class: 'children' }, leaving.map((b) => renderBranch(b, ctx))));
      list.appendChild(item);
    }
    section.appendChild(list);
    return section;
  }

  function rerunBadges(rerun) {
    return el('span', { class: 'rerun-info' },
      rerun.ablation && rerun.ablation.length ? badge(`without ${rerun.ablation.join(', ')}`, 'ablation') : null,
      rerun.verdict ? badge(rerun.verdict, `verdict verdict-${rerun.verdict}`) : null);
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
    for (const section of $$('#tree .branch')) {
      if (section.dataset.kind !== 'root') setCollapsed(section, collapsed);
    }
  }

  function treeKeys(event) {
    const row = event.target.closest('.node-row');
    if (!row) return;
    const visible = $$('#tree .node-row').filter((r) => r.offsetParent !== null);
    const at = visible.indexOf(row);
    let next = null;
    if (event.key === 'ArrowDown' || event.key === 'j') next = visible[at + 1];
    else if (event.key === 'ArrowUp' || event.key === 'k') next = visible[at - 1];
    else if (event.key === 'Enter') next = row;
    else return;
    event.preventDefault();
    if (next) location.hash = `#/c/${current.asked}/n/${next.dataset.nodeId}`;
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

  async function selectNode(nodeId, stale) {
    for (const row of $$('#tree .node-row.selected')) {
      row.classList.remove('selected');
      row.removeAttribute('aria-selected');
    }
    const details = $('#details');
    if (!details) return;
    if (!nodeId) {
      current.selected = null;
      delete details.dataset.nodeId;
      clear(details).appendChild(el('p', { class: 'placeholder' }, 'Select a message to see its parts and the runs that produced it.'));
      return;
    }
    const row = $(`#tree .node-row[data-node-id="${CSS.escape(nodeId)}"]`);
    if (row) {
      for (const stop of $$('#tree .node-row[tabindex="0"]')) stop.tabIndex = -1;
      row.tabIndex = 0;
      let section = row.closest('.branch');
      while (section) {
        setCollapsed(section, false);
        section = section.parentElement && section.parentElement.closest('.branch');
      }
      row.classList.add('selected');
      row.setAttribute('aria-selected', 'true');
      row.focus({ preventScroll: true });
      row.scrollIntoView({ block: 'nearest' });
    }
    clear(details).appendChild(el('p', { class: 'placeholder' }, 'Loading…'));
    try {
      const node = await api(`/api/nodes/${enc(nodeId)}`);
      if (stale()) return;
      current.selected = node.id;
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
      el('h2', {}, badge(node.role, `role role-${node.role}`), ' message'),
      el('p', {}, el('code', { class: 'full-id', id: 'node-id' }, node.id)),
      el('dl', { class: 'facts' },
        el('dt', {}, 'parent'), el('dd', {}, node.parent ? nodeLink(focus, node.parent) : el('span', { class: 'muted' }, 'none (a root)')),
        el('dt', {}, 'depth'), el('dd', {}, String(node.depth)),
        el('dt', {}, 'children'), el('dd', {}, node.children.length
          ? node.children.map((c, i) => [i ? ' ' : '', nodeLink(focus, c)])
          : el('span', { class: 'muted' }, 'none')),
        node.heads.length ? [el('dt', {}, 'head of'), el('dd', {}, node.heads.map((c, i) => [i ? ', ' : '', conversationLink(c)]))] : null),
      el('h3', {}, plural(node.parts.length, 'part')),
      el('ol', { class: 'parts', id: 'parts' }, node.parts.map((p, i) => el('li', {}, renderPart(p, i, node.id)))),
      el('h3', {}, node.runs.length ? `Produced by ${plural(node.runs.length, 'run')}` : 'Runs'),
      node.runs.length
        ? el('div', { id: 'runs' }, node.runs.map((run) => renderRun(run, focus)))
        : el('p', { class: 'muted', id: 'runs' }, node.role === 'assistant'
          ? 'No run record produced this message (it was imported or written directly).'
          : `No run produces a ${node.role} message: it was part of a request.`));
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

  function renderRun(run, focus) {
    const u = run.usage;
    const options = Object.entries(run.options || {});
    return el('article', { class: `run status-${run.status}`, data: { runId: run.id, status: run.status } },
      el('header', {}, badge(run.status, `status status-${run.status}`), ' ',
        el('strong', { class: 'model' }, run.model), el('span', { class: 'muted' }, ` via ${run.provider}`),
        el('code', { class: 'run-id', title: run.id }, short(run.id))),
      run.error ? el('pre', { class: 'text is-error' }, run.error) : null,
      el('dl', { class: 'facts' },
        el('dt', {}, 'started'), el('dd', {}, time(run.started_ms)),
        el('dt', {}, 'took'), el('dd', { class: 'duration' }, duration(run.duration_ms)),
        run.requested_model ? [el('dt', {}, 'asked for'), el('dd', { class: 'requested-model' }, run.requested_model)] : null,
        run.profile ? [el('dt', {}, 'profile'), el('dd', {}, run.profile)] : null,
        run.backend ? [el('dt', {}, 'backend'), el('dd', {}, run.backend)] : null,
        run.conversation ? [el('dt', {}, 'conversation'), el('dd', {}, el('a', { href: `#/c/${run.conversation}` }, el('code', {}, short(run.conversation))))] : null,
        run.input_head ? [el('dt', {}, 'answered'), el('dd', {}, nodeLink(focus, run.input_head))] : null,
        options.length ? [el('dt', {}, 'options'), el('dd', {}, options.map(([k, v]) => `${k}=${v}`).join(' '))] : null),
      el('table', { class: 'usage' },
        el('thead', {}, el('tr', {}, ['input', 'output', 'cache read', 'cache write'].map((h) => el('th', { scope: 'col' }, h)))),
        el('tbody', {}, el('tr', {},
          el('td', { class: 'num input-tokens' }, tokens(u.input_tokens)),
          el('td', { class: 'num output-tokens' }, tokens(u.output_tokens)),
          el('td', { class: 'num' }, tokens(u.cache_read_tokens)),
          el('td', { class: 'num' }, tokens(u.cache_write_tokens))))),
      u.complete ? null : el('p', { class: 'warning' }, 'Usage is incomplete: some attempt of this run did not report it.'),
      el('div', { class: 'tools' },
        el('h4', { class: run.tools.length ? '' : 'none' }, run.tools.length ? `Tools offered (${run.tools.length})` : 'No tools offered'),
        run.tools.length ? el('ul', {}, run.tools.map((t) => el('li', { class: 'tool', data: { tool: t.name } },
          el('code', {}, t.name), t.description ? ` — ${t.description}` : '',
          el('details', {}, el('summary', {}, 'input schema'), el('pre', {}, JSON.stringify(t.input_schema, null, 2)))))) : null),
      run.annotations.length ? el('div', { class: 'annotations' }, el('h4', {}, 'Annotations'),
        el('ul', {}, run.annotations.map((a) => el('li', {}, nodeLink(focus, a.node), ` part ${a.part}: `, a.annotations.join('; '))))) : null,
      run.relations.length ? el('div', { class: 'relations' }, el('h4', {}, 'Relations'),
        el('ul', {}, run.relations.map((r) => el('li', {}, el('span', { class: 'relation-kind' }, r.kind), ' → ', el('code', {}, r.target))))) : null);
  }

  // ---------------------------------------------------------------- compare

  async function compareView(a, b, stale) {
    clear(view()).appendChild(el('p', { class: 'placeholder' }, 'Loading…'));
    const cmp = await api(`/api/compare?a=${enc(a)}&b=${enc(b)}`);
    if (stale()) return;
    // Remember the family the comparison was opened from, for the way back.
    const back = current.name === 'family'
      ? { id: current.asked, label: conversationLabel(current.byConversation.get(current.family.focus)) }
      : (current.back || null);
    current = { name: 'compare', back };
    const backLink = back ? el('a', { href: `#/c/${back.id}` }, back.label) : el('a', { href: '#/' }, 'conversations');
    crumbs(backLink, el('span', {}, `compare ${short(cmp.a.head)} with ${short(cmp.b.head)}`));
    document.title = 'skein · compare';

    const sideHead = (side, name) => el('div', { class: 'compare-side-head', data: { side: name, nodeId: side.head } },
      el('h2', {}, name.toUpperCase(), ' ', el('code', { title: side.head }, short(side.head))),
      side.heads.length ? el('p', {}, 'head of ', side.heads.map((c, i) => [i ? ', ' : '', conversationLink(c)]))
        : el('p', { class: 'muted' }, 'not a conversation head'),
      el('p', { class: 'muted' }, `${plural(side.nodes.length + side.omitted, 'message')} after the common ancestor`));

    const shared = cmp.ancestor
      ? el('details', { id: 'compare-ancestor', class: 'shared' },
        el('summary', {}, `Shared history: ${plural(cmp.shared.length + cmp.shared_omitted, 'message')}, up to `, el('code', {}, short(cmp.ancestor))),
        el('ol', { class: 'shared-list' }, cmp.shared.map((n) => el('li', { data: { nodeId: n.id } },
          el('span', { class: `role role-${n.role}` }, n.role), ' ', el('span', { class: 'preview' }, n.preview)))))
      : el('p', { id: 'compare-ancestor', class: 'shared muted' }, 'These threads share no message.');

    const rows = Math.max(cmp.a.nodes.length, cmp.b.nodes.length);
    const grid = el('div', { class: 'compare-grid', id: 'compare-grid' });
    for (let i = 0; i < rows; i++) {
      grid.append(compareCell(cmp.a.nodes[i], 'a', back), compareCell(cmp.b.nodes[i], 'b', back));
    }
    const omitted = (side) => (side.omitted ? el('p', { class: 'warning' }, `${side.omitted} later messages are not shown.`) : null);
    if (cmp.shared_omitted && cmp.ancestor) {
      $('ol', shared).prepend(el('li', { class: 'cut muted' }, `… ${plural(cmp.shared_omitted, 'earlier message')} not shown`));
    }
    const section = el('section', { id: 'compare-view' },
      el('div', { class: 'view-head' }, el('h1', {}, 'Compare branches')),
      shared,
      el('div', { class: 'compare-heads' }, sideHead(cmp.a, 'a'), sideHead(cmp.b, 'b')),
      rows ? grid : el('p', { class: 'muted' }, 'Nothing after the common ancestor: one thread contains the other.'),
      el('div', { class: 'compare-heads' }, el('div', {}, omitted(cmp.a)), el('div', {}, omitted(cmp.b))));
    clear(view()).appendChild(section);
  }

  function compareCell(node, side, back) {
    if (!node) return el('div', { class: 'compare-cell empty-cell', data: { side } });
    const id = el('code', { class: 'node-id', title: node.id }, short(node.id));
    return el('div', { class: `compare-cell role-${node.role}`, data: { side, nodeId: node.id } },
      el('div', { class: 'cell-head' }, el('span', { class: `role role-${node.role}` }, node.role),
        back ? el('a', { href: `#/c/${back.id}/n/${node.id}`, title: 'show in the family tree' }, id) : id,
        node.runs.map((r) => el('span', { class: 'muted run-summary' },
          ` ${r.model} · ${r.status} · ${tokens(r.input_tokens)} in / ${tokens(r.output_tokens)} out tokens · ${duration(r.duration_ms)}`))),
      node.parts.map((p, i) => renderPart(p, i, node.id)));
  }

  // ---------------------------------------------------------------- start

  async function start() {
    // A token given in the address has been turned into a cookie by the
    // server: keep it out of the address bar and of the history.
    if (new URLSearchParams(location.search).has('token')) {
      history.replaceState(null, '', location.pathname + location.hash);
    }
    window.addEventListener('hashchange', route);
    route();
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
})();
