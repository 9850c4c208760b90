// The replay pages: every replay (#/replays), starting one over chosen
// turns (conversations, families, labels, a cases file pasted or chosen)
// with a change (#/replays/new, or #/replays/new/CONV from a
// conversation), and one replay's report (#/replays/ID): per turn the
// original and the replayed answer side by side with their word
// differences, the comparator's decision and why, tokens, latency and cost;
// a replay comparing models as a matrix (a row per turn, worst first, a
// column per model) under each model's totals.
// A replay runs on the server; its page polls /api/replays/ID/progress while
// turns are left and redraws the report as they finish. A label goes on a
// turn, or on every turn of the replay with a result, from its page
// (/api/labels/NAME, as `skein label add|rm` puts it).

import {
  ApiError, api, badge, clear, currentSession, dollars, el, enc, plural, post, short, timeEl, writesOff,
} from './util.js';
import { wordDiff } from './diff.js';

const POLL_MS = 1000;

/** Words from a comma- or space-separated field. */
const words = (text) => text.split(/[\s,]+/).map((w) => w.trim()).filter(Boolean);

const finishedOf = (totals) => totals.done + totals.diverged + totals.failed;

/**
 * What a replay changes, in words: the server's (`changes`: the model
 * change first, "smollm2 → openai:gpt-4o-mini", then "system prompt
 * replaced", "tool weather removed"), else read from its change alone.
 */
export function changesOf(r) {
  if (r.changes && r.changes.length) return r.changes;
  return [`on ${r.model}`, ...(changeText(r.change) === 'nothing else' ? [] : [changeText(r.change)])];
}

/** The model change (bold) and the rest of the change. */
function changeEl(r) {
  const [model, ...rest] = changesOf(r);
  return el('span', { class: 'replay-change' }, el('strong', { class: 'model' }, model),
    rest.length ? ` · ${rest.join(' · ')}` : '');
}

/** What a replay's change JSON changes besides the model, in a few words. */
export function changeText(change) {
  const parts = [];
  const options = Object.entries((change && change.options) || {}).filter(([, v]) => v !== null && v !== undefined);
  if (options.length) parts.push(options.map(([k, v]) => `${k}=${v}`).join(' '));
  if (change && change.system !== undefined && change.system !== null) parts.push('another system prompt');
  if (change && change.remove_tools && change.remove_tools.length) parts.push(`without tools ${change.remove_tools.join(', ')}`);
  if (change && change.add_tools && change.add_tools.length) parts.push(`with tools ${change.add_tools.map((t) => t.name).join(', ')}`);
  if (change && change.remove_sources && change.remove_sources.length) parts.push(`without sources ${change.remove_sources.join(', ')}`);
  const replaced = Object.keys((change && change.replace_sources) || {});
  if (replaced.length) parts.push(`sources replaced ${replaced.join(', ')}`);
  if (change && change.prompt_version) parts.push(`prompt ${change.prompt_version.id}@${change.prompt_version.version}`);
  return parts.length ? parts.join(' · ') : 'nothing else';
}

/** Which turns a replay took, in a few words. */
export function selectionText(selection) {
  const s = selection || {};
  const parts = [];
  const list = (key, one) => {
    if (s[key] && s[key].length) parts.push(`${plural(s[key].length, one)} ${s[key].map((v) => (typeof v === 'string' ? short(v) : short(v.turn))).join(', ')}`);
  };
  list('conversations', 'conversation');
  list('families', 'family');
  list('turns', 'turn');
  if (s.labels && s.labels.length) parts.push(`label ${s.labels.join(', ')}`);
  if (s.cases && s.cases.length) parts.push(plural(s.cases.length, 'case'));
  if (s.search) parts.push(`matching “${s.search}”`);
  if (s.clients && s.clients.length) parts.push(`client ${s.clients.join(', ')}`);
  if (s.since_ms) parts.push(`since ${new Date(s.since_ms).toISOString().slice(0, 10)}`);
  if (s.until_ms) parts.push(`until ${new Date(s.until_ms).toISOString().slice(0, 10)}`);
  return parts.join(' · ') || 'every turn';
}

function stateText(r) {
  const finished = finishedOf(r.totals);
  if (finished >= r.selected) return 'finished';
  const state = r.working || r.state === 'running' ? 'running' : 'stopped';
  return `${state} · ${finished} of ${r.selected}`;
}

/**
 * The results as a bar: changed, diverged, failed, held and not yet
 * replayed, each as wide as its share of the turns, with the counts in
 * words beside it (and for a screen reader).
 */
export function resultsBar(totals, selected, id) {
  const parts = [
    ['changed', totals.changed], ['diverged', totals.diverged], ['failed', totals.failed],
    ['held', totals.held], ['pending', Math.max(0, selected - finishedOf(totals))],
  ];
  const said = parts.filter(([, n]) => n > 0).map(([what, n]) => `${n} ${what === 'pending' ? 'to replay' : what}`).join(' · ') || 'no turns';
  const total = Math.max(1, selected);
  return el('span', { class: 'results', ...(id ? { id } : {}) },
    el('span', { class: 'results-bar', role: 'img', 'aria-label': said, title: said },
      parts.filter(([, n]) => n > 0).map(([what, n]) => {
        const part = el('span', { class: `results-part results-${what}`, data: { part: what, count: n } });
        // Through the CSSOM: the page's policy refuses style attributes.
        part.style.width = `${(100 * n) / total}%`;
        return part;
      })),
    el('span', { class: 'results-text' }, said));
}

// ---------------------------------------------------------------- the list

export async function replaysView(root, stale, prefill) {
  const page = await api('/api/replays');
  if (stale()) return;
  const section = el('section', { id: 'replays-view' },
    el('div', { class: 'view-head' }, el('h1', {}, 'Replays'),
      el('p', { class: 'muted' }, 'Recorded turns sent again with one change, each judged against its original.')));
  section.appendChild(newReplay(prefill));
  if (page.replays.length === 0) {
    section.appendChild(el('p', { class: 'empty', id: 'replays-empty' },
      'No replays yet. Start one above, or with ', el('code', {}, 'skein replay --cid NAME -m MODEL'), '.'));
  } else {
    const body = el('tbody', {}, page.replays.map(replayRow));
    section.appendChild(el('div', { class: 'table-frame' }, el('table', { id: 'replays', class: 'replay-list' },
      el('thead', {}, el('tr', {}, ['Replay', 'Started', 'Change', 'Turns', 'Results', 'State']
        .map((h) => el('th', { scope: 'col' }, h)))),
      body)));
    if (page.next) section.appendChild(moreButton(page.next, body, stale));
  }
  clear(root).appendChild(section);
}

function replayRow(r) {
  return el('tr', { data: { replayId: r.id } },
    el('td', {}, el('a', { href: `#/replays/${r.id}` }, el('code', { title: r.id }, r.short))),
    el('td', {}, timeEl(r.created_ms)),
    el('td', { class: 'wrap' }, changeEl(r)),
    el('td', { class: 'wrap' }, (r.models || []).length > 1
      ? `${plural(r.selected / r.models.length, 'turn')} × ${r.models.length} models: ` : `${plural(r.selected, 'turn')}: `,
    r.selection_text || selectionText(r.selection)),
    el('td', { class: 'wrap results-cell' }, resultsBar(r.totals, r.selected)),
    el('td', { class: 'replay-state' }, stateText(r)));
}

/** "Older replays": the next page's rows, appended, while there are more. */
function moreButton(next, body, stale) {
  let address = next;
  const problem = el('span', { class: 'error', role: 'alert', hidden: true });
  const more = el('button', { type: 'button', id: 'replays-more' }, 'Older replays');
  more.addEventListener('click', async () => {
    more.disabled = true;
    try {
      const page = await api(address);
      if (stale()) return;
      for (const r of page.replays) body.appendChild(replayRow(r));
      address = page.next;
      more.hidden = !address;
    } catch (error) {
      problem.textContent = error.message;
      problem.hidden = false;
    } finally {
      more.disabled = false;
    }
  });
  return el('div', { class: 'toolbar' }, more, problem);
}

/** The form that starts a replay (open when a conversation is given). */
function newReplay(prefill) {
  const off = writesOff();
  const box = el('details', { id: 'new-replay', class: 'new-replay', open: Boolean(prefill) },
    el('summary', {}, 'New replay'));
  if (off) {
    box.appendChild(el('p', { class: 'muted' }, `Replays cannot be started here: ${off}.`));
    return box;
  }
  const input = (id, placeholder, value) => el('input', { id, type: 'text', autocomplete: 'off', placeholder, value: value || '' });
  const conversations = input('replay-conversations', 'ids or names', prefill);
  const families = input('replay-families', 'ids or names: every conversation of their families');
  const labels = input('replay-labels', 'label names');
  const search = input('replay-search', 'only turns with these words');
  const cases = el('textarea', {
    id: 'replay-cases', rows: '3', 'aria-label': 'cases', placeholder: 'a cases file (skein label export): one JSON case a line',
  });
  // A file chosen here is read into the field, where it can be checked first.
  const casesFile = el('input', { id: 'replay-cases-file', type: 'file', accept: '.jsonl,.json,.ndjson,application/json', 'aria-label': 'cases file' });
  casesFile.addEventListener('change', async () => {
    const [file] = casesFile.files;
    if (file) cases.value = await file.text();
  });
  const session = currentSession();
  const model = el('select', { id: 'replay-model', 'aria-label': 'model' },
    session.models.map((m) => el('option', { value: m.name }, m.label || m.name)));
  model.value = session.default_model;
  const compareModels = input('replay-compare-models', 'other models, space-separated');
  const system = el('textarea', { id: 'replay-system', rows: '2', 'aria-label': 'system prompt', placeholder: 'leave empty to keep the recorded one' });
  const removeTools = input('replay-remove-tools', 'tool names');
  const ignore = input('replay-ignore', 'source ids');
  const replaceSources = el('textarea', {
    id: 'replay-replace-sources', rows: '2', 'aria-label': 'replace sources', placeholder: 'hotel = The hotel is the Ritz.',
  });
  const addTools = el('textarea', {
    id: 'replay-add-tools', rows: '3', 'aria-label': 'add tools',
    placeholder: '[{"name": "lookup", "description": "…", "input_schema": {"type": "object"}}]',
  });
  const promptVersion = input('replay-prompt-version', 'ID@VERSION, e.g. summarize@2');
  const options = input('replay-options', 'temperature=0 seed=1 max_tokens=200');
  const compare = input('replay-compare', 'default: specifics, embedding');
  // The comparators come from the server's registry, so one added there is listed here.
  const comparators = el('select', { id: 'replay-comparators', 'aria-label': 'add a comparator' },
    el('option', { value: '' }, 'add a comparator…'),
    (session.comparators || []).map((c) => el('option', { value: c.usage, title: c.about }, `${c.usage}: ${c.about}`)));
  comparators.addEventListener('change', () => {
    if (!comparators.value) return;
    compare.value = [...words(compare.value), comparators.value].join(' ');
    comparators.value = '';
    compare.focus();
  });
  const problem = el('p', { class: 'error', id: 'replay-error', role: 'alert', hidden: true });
  const submit = el('button', { id: 'replay-submit', type: 'submit', class: 'primary' }, 'Start the replay');
  const row = (label, control, note) => el('label', { class: 'field' }, el('span', { class: 'field-label' }, label), control,
    note ? el('span', { class: 'muted field-note' }, note) : null);
  const form = el('form', { class: 'action-form', id: 'replay-form' },
    el('p', { class: 'intro muted' }, 'Each chosen turn is sent again as recorded, with only what you change here; its tool calls are answered from the recording.'),
    el('fieldset', { class: 'sources' }, el('legend', {}, 'Turns'),
      row('conversations', conversations), row('families', families), row('labels', labels),
      row('cases', el('span', { class: 'cases-input' }, cases, casesFile), 'stored here first, then replayed, each judged by its own comparators'),
      row('search', search)),
    el('fieldset', { class: 'sources' }, el('legend', {}, 'Change'),
      row('model', model),
      row('compare with', compareModels, 'each turn replayed once on every model, one report'),
      row('system', system, 'replaces the recorded system messages'),
      row('prompt version', promptVersion, 'a configured prompt rendered at this version, with the recorded variables'),
      row('remove tools', removeTools),
      row('add tools', addTools, 'JSON: a tool or a list of tools, offered besides or in place of the recorded one of its name'),
      row('ignore', ignore, 'sources whose parts are left out'),
      row('replace sources', replaceSources, 'one per line: ID = new text'),
      row('options', options, 'key=value, space-separated')),
    row('compare', el('span', { class: 'compare-controls' }, compare, comparators), 'asked in order; the first that says changed decides'),
    el('div', { class: 'toolbar' }, submit), problem);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    submit.disabled = true;
    problem.hidden = true;
    try {
      const others = words(compareModels.value);
      const body = {
        model: others.length ? undefined : (model.value || undefined),
        models: others.length ? [model.value || session.default_model, ...others] : [],
        conversations: words(conversations.value),
        families: words(families.value),
        labels: words(labels.value),
        cases: cases.value.trim() ? cases.value : undefined,
        search: search.value.trim() || undefined,
        system: system.value.trim() ? system.value : undefined,
        remove_tools: words(removeTools.value),
        ignore: words(ignore.value),
        replace_sources: parseReplacements(replaceSources.value),
        add_tools: parseTools(addTools.value),
        prompt_version: promptVersion.value.trim() || undefined,
        options: parseOptions(options.value),
        compare: words(compare.value),
      };
      const started = await post('/api/replays', body);
      location.hash = `#/replays/${started.id}`;
    } catch (error) {
      problem.textContent = error.message;
      problem.hidden = false;
    } finally {
      submit.disabled = false;
    }
  });
  box.appendChild(form);
  return box;
}

/** `ID = text` lines into the sources a replay replaces. */
function parseReplacements(text) {
  const replaced = {};
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const at = line.indexOf('=');
    const id = at < 0 ? '' : line.slice(0, at).trim();
    if (!id) throw new ApiError(400, `replace sources: each line is ID = new text; "${line.trim()}" is not`);
    if (id in replaced) throw new ApiError(400, `replace sources: source "${id}" is replaced twice`);
    replaced[id] = line.slice(at + 1).trim();
  }
  return replaced;
}

/** The tools to add: a JSON tool or a list of them (empty: none). */
function parseTools(text) {
  if (!text.trim()) return [];
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new ApiError(400, `add tools: not JSON (${error.message})`);
  }
  const tools = Array.isArray(parsed) ? parsed : [parsed];
  for (const tool of tools) {
    if (!tool || typeof tool !== 'object' || typeof tool.name !== 'string' || !tool.name) {
      throw new ApiError(400, 'add tools: each tool is {"name", "description", "input_schema"}');
    }
  }
  return tools;
}

/** `key=value` words into generation options (numbers as numbers). */
function parseOptions(text) {
  const options = {};
  for (const word of words(text)) {
    const at = word.indexOf('=');
    if (at <= 0) throw new ApiError(400, `options are key=value words; "${word}" is not`);
    const raw = word.slice(at + 1);
    options[word.slice(0, at)] = raw !== '' && !Number.isNaN(Number(raw)) ? Number(raw) : raw;
  }
  return options;
}

// ---------------------------------------------------------------- one replay

export async function replayView(root, id, stale) {
  let report = await api(`/api/replays/${enc(id)}`);
  if (stale()) return null;
  draw(root, report);
  // While turns are left, poll their progress and redraw as they finish.
  for (;;) {
    const shown = finishedOf(report.totals);
    if (shown >= report.selected) return report;
    await new Promise((resolve) => { setTimeout(resolve, POLL_MS); });
    if (stale()) return null;
    let progress;
    try {
      progress = await api(`/api/replays/${enc(report.replay)}/progress`);
    } catch (_) {
      continue;
    }
    if (stale()) return null;
    if (finishedOf(progress.totals) === shown && progress.working === report.working) continue;
    report = await api(`/api/replays/${enc(report.replay)}`);
    if (stale()) return null;
    draw(root, report);
  }
}

function draw(root, report) {
  const finished = finishedOf(report.totals);
  const t = report.totals;
  const compared = (report.model_totals || []).length > 0;
  const selected = compared
    ? `${plural(report.selected / report.models.length, 'turn')} × ${report.models.length} models of `
    : `${plural(report.selected, 'turn')} of `;
  const section = el('section', { id: 'replay-view', data: { replayId: report.replay, finished: finished >= report.selected } },
    el('div', { class: 'view-head' },
      el('h1', {}, 'Replay ', el('code', { title: report.replay }, short(report.replay))),
      el('p', { id: 'replay-change' }, changeEl(report)),
      el('p', { class: 'muted' }, selected,
        report.selection_text || selectionText(report.selection), ' · started ', timeEl(report.created_ms))),
    el('div', { id: 'replay-results' }, resultsBar(t, report.selected, 'replay-bar')),
    progressLine(report, finished),
    report.embedder_fallback ? el('p', { class: 'muted', id: 'replay-embedder-note' }, report.embedder_fallback) : null,
    el('p', { id: 'replay-totals', class: 'replay-totals' },
      badge(`${t.changed} changed`, 'verdict-confirmed'), ' ', badge(`${t.held} held`, 'verdict-not-confirmed'), ' ',
      badge(`${t.diverged} diverged`, 'status-cancelled'), ' ', badge(`${t.failed} failed`, 'status-failed'),
      ` · ${tokenDelta(report.turns)} · `, el('span', { id: 'replay-cost' }, costLine(report.cost.original, report.cost.replay))),
    labelForm({ replay: report.replay }, 'replay-label', true),
    compared ? [modelTotals(report), matrix(report)]
      : report.turns.length ? el('ol', { class: 'replay-turns', id: 'replay-turns' }, report.turns.map(turnCard))
        : el('p', { class: 'muted' }, 'No turns.'));
  clear(root).appendChild(section);
}

/** A replay comparing models: per model its results, tokens, latency and cost. */
function modelTotals(report) {
  const signed = (n) => `${n >= 0 ? '+' : ''}${n}`;
  const tokens = (u) => u.input_tokens + u.output_tokens;
  return el('table', { class: 'replay-models', id: 'replay-models' },
    el('thead', {}, el('tr', {}, ['model', 'changed', 'held', 'diverged', 'failed', 'tokens', 'latency', 'cost']
      .map((name) => el('th', { scope: 'col' }, name)))),
    el('tbody', {}, report.model_totals.map((m) => el('tr', { data: { model: m.model } },
      el('th', { scope: 'row' }, m.model),
      el('td', {}, String(m.totals.changed)), el('td', {}, String(m.totals.held)),
      el('td', {}, String(m.totals.diverged)), el('td', {}, String(m.totals.failed)),
      el('td', {}, signed(tokens(m.usage) - tokens(m.original_usage))),
      el('td', {}, `${signed(m.usage.latency_ms - m.original_usage.latency_ms)} ms`),
      el('td', {}, costLine(m.cost.original, m.cost.replay).replace(/^cost /, ''))))));
}

/**
 * A replay comparing models as a matrix: a row per turn, worst first (by
 * its worst model: the report's order, a turn's rows together), a column
 * per model with its result, why (as the cell's title) and its answer
 * beside the original.
 */
function matrix(report) {
  const turns = new Map();
  for (const turn of report.turns) {
    if (!turns.has(turn.turn_node)) turns.set(turn.turn_node, []);
    turns.get(turn.turn_node).push(turn);
  }
  const usage = (u) => (u ? `${u.input_tokens + u.output_tokens} tokens · ${u.latency_ms} ms` : '');
  const rows = [...turns.values()].map((rowTurns) => {
    const first = rowTurns[0];
    return el('tr', { data: { turnNode: first.turn_node } },
      el('th', { scope: 'row' },
        el('strong', {}, `turn ${Math.floor(first.seq / report.models.length)}`),
        first.conversation ? [' ', el('a', { class: 'conversation-name', href: `#/c/${first.conversation}/n/${first.turn_node}`, title: first.conversation },
          first.conversation_name || short(first.conversation))] : null,
        first.question !== null && first.question !== undefined ? el('p', { class: 'question', title: first.question }, first.question) : null),
      report.models.map((model) => {
        const turn = rowTurns.find((t) => t.model === model);
        if (!turn) return el('td', { class: 'muted' }, '—');
        return el('td', { class: `result-${turn.result}`, data: { model, result: turn.result }, title: turn.why || '' },
          badge(turn.result, resultKind(turn.result)),
          turn.answer_node ? [' ', el('a', {
            href: `#/compare/${turn.turn_node}/${turn.answer_node}`, class: 'answer-link', title: 'the replayed answer beside the original',
          }, el('code', {}, short(turn.answer_node)))] : null,
          el('div', { class: 'muted run-summary' }, usage(turn.usage)));
      }));
  });
  return el('table', { class: 'replay-matrix', id: 'replay-matrix' },
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'turn'), report.models.map((model) => el('th', { scope: 'col' }, model)))),
    el('tbody', {}, rows));
}

function progressLine(report, finished) {
  if (finished >= report.selected) return null;
  const off = writesOff();
  const resume = el('button', { id: 'replay-resume', type: 'button' }, 'Resume here');
  const problem = el('span', { class: 'error', role: 'alert', hidden: true });
  resume.addEventListener('click', async () => {
    resume.disabled = true;
    try {
      await post(`/api/replays/${enc(report.replay)}/resume`, {});
      resume.textContent = 'Resumed';
    } catch (error) {
      problem.textContent = error.message;
      problem.hidden = false;
      resume.disabled = false;
    }
  });
  return el('div', { class: 'toolbar', id: 'replay-progress-line' },
    el('progress', { id: 'replay-progress', max: String(report.selected), value: String(finished) }),
    el('span', { id: 'replay-progress-text' }, `${finished} of ${plural(report.selected, 'turn')} replayed`),
    report.working ? el('span', { class: 'muted' }, '· running on this server')
      : [el('span', { class: 'muted' }, '· no worker of this server is on it'), off ? null : resume, problem]);
}

function tokenDelta(turns) {
  let delta = 0;
  for (const turn of turns) {
    if (turn.usage && turn.original_usage) {
      delta += (turn.usage.input_tokens + turn.usage.output_tokens)
        - (turn.original_usage.input_tokens + turn.original_usage.output_tokens);
    }
  }
  return `tokens ${delta >= 0 ? '+' : ''}${delta}`;
}

/** A cost, "at least" when some run had no usage or no price. */
function priced(cost) {
  return cost.complete ? dollars(cost.dollars) : `at least ${dollars(cost.dollars)}`;
}

/** Whole and zero: what models of this machine cost. */
const isFree = (cost) => cost.complete && cost.dollars === 0;

function costLine(original, replay) {
  if (isFree(original) && isFree(replay)) return 'cost $0';
  const delta = replay.dollars - original.dollars;
  return `cost ${priced(original)} → ${priced(replay)} (${delta < 0 ? '-' : '+'}${dollars(Math.abs(delta))})`;
}

function turnCard(turn) {
  const original = turn.original || '';
  const answer = turn.answer || '';
  const diff = original && answer && original !== answer ? wordDiff(original, answer) : null;
  const text = (value, segments, side) => el('pre', { class: 'text' },
    segments ? segments.map((seg) => (seg.changed ? el('mark', { class: `diff diff-${side}` }, seg.text) : seg.text)) : value);
  const originalLink = turn.conversation
    ? el('a', { href: `#/c/${turn.conversation}/n/${turn.turn_node}`, class: 'original-link', title: 'the original answer in its family tree' },
      el('code', {}, short(turn.turn_node)))
    : el('code', { title: turn.turn_node }, short(turn.turn_node));
  const answerLink = turn.answer_node
    ? el('a', { href: `#/compare/${turn.turn_node}/${turn.answer_node}`, class: 'answer-link', title: 'the replayed answer beside the original, from their common message' },
      el('code', {}, short(turn.answer_node)))
    : el('span', { class: 'muted' }, 'no answer');
  const usage = (u) => (u ? `${u.input_tokens + u.output_tokens} tokens · ${u.latency_ms} ms` : '—');
  return el('li', { class: `replay-turn result-${turn.result}`, data: { seq: turn.seq, result: turn.result, turnNode: turn.turn_node } },
    el('div', { class: 'cell-head' }, badge(turn.result, resultKind(turn.result)), el('strong', {}, `turn ${turn.seq}`),
      turn.conversation ? el('a', {
        class: 'conversation-name', href: `#/c/${turn.conversation}`, title: turn.conversation,
      }, turn.conversation_name || short(turn.conversation)) : null,
      turn.comparator ? el('span', { class: 'muted comparator' }, `decided by ${turn.comparator}`) : null),
    turn.question !== null && turn.question !== undefined
      ? el('p', { class: 'question', title: turn.question }, el('span', { class: 'role role-user' }, 'asked'), ' ', turn.question)
      : null,
    turn.why ? el('p', { class: 'why' }, turn.why) : null,
    labelForm({ turns: [turn.turn_node] }, `turn-label-${turn.seq}`, false),
    el('div', { class: 'compare-grid replay-answers' },
      el('div', { class: 'compare-cell', data: { side: 'original' } },
        el('div', { class: 'cell-head' }, el('span', { class: 'role role-assistant' }, 'original'), originalLink),
        el('p', { class: 'muted run-summary' }, usage(turn.original_usage), turn.original_cost && !isFree(turn.original_cost) ? ` · ${priced(turn.original_cost)}` : ''),
        text(original, diff && diff.a, 'a')),
      el('div', { class: 'compare-cell', data: { side: 'replay' } },
        el('div', { class: 'cell-head' }, el('span', { class: 'role role-assistant' }, 'replay'), answerLink),
        el('p', { class: 'muted run-summary' }, usage(turn.usage), turn.cost && !isFree(turn.cost) ? ` · ${priced(turn.cost)}` : ''),
        text(answer, diff && diff.b, 'b'))));
}

/**
 * A label put on turns or taken off: this turn's (by its original answer),
 * or, for the whole replay, every turn it re-sent with the result chosen.
 */
function labelForm(target, id, whole) {
  if (writesOff()) return null;
  const name = el('input', {
    id: `${id}-name`, type: 'text', autocomplete: 'off', placeholder: 'label', 'aria-label': whole ? 'label for the replay\'s turns' : 'label for this turn',
  });
  const results = whole ? el('select', { id: `${id}-results`, 'aria-label': 'which turns' },
    [['', 'every turn'], ['changed', 'changed turns'], ['held', 'held turns'], ['diverged', 'diverged turns'], ['failed', 'failed turns']]
      .map(([value, text]) => el('option', { value }, text))) : null;
  const add = el('button', { type: 'submit', id: `${id}-add` }, 'Label');
  const remove = el('button', { type: 'button', id: `${id}-remove` }, 'Unlabel');
  const said = el('span', { class: 'muted', id: `${id}-said`, role: 'status' });
  const act = async (path, verb) => {
    said.classList.remove('error');
    const label = name.value.trim();
    if (!label) {
      said.textContent = 'give the label a name';
      said.classList.add('error');
      return;
    }
    add.disabled = true;
    remove.disabled = true;
    try {
      const body = { ...target };
      if (results && results.value) body.results = [results.value];
      const done = await post(`/api/labels/${enc(label)}${path}`, body);
      said.textContent = `${verb} ${plural(done.changed, 'turn')} “${done.label}”`;
    } catch (error) {
      said.textContent = error.message;
      said.classList.add('error');
    } finally {
      add.disabled = false;
      remove.disabled = false;
    }
  };
  const form = el('form', { class: 'toolbar label-form', id },
    whole ? el('span', { class: 'muted' }, 'Keep its turns as cases:') : null, name, results, add, remove, said);
  form.addEventListener('submit', (event) => { event.preventDefault(); act('', 'labelled'); });
  remove.addEventListener('click', () => act('/remove', 'unlabelled'));
  return form;
}

function resultKind(result) {
  switch (result) {
    case 'changed': return 'verdict-confirmed';
    case 'held': return 'verdict-not-confirmed';
    case 'failed': return 'status-failed';
    default: return 'status-cancelled';
  }
}
