// The actions at a message of a family: reply (continue at a head, else
// branch), fork with a name, edit a user message and fork, regenerate an
// assistant message, and for a recorded turn re-run it without chosen
// sources and fork from the counterfactual. Every one goes through the
// server's turn layer and only adds nodes and bookmarks. Replies stream
// into the panel as they are produced; when one lands, `ctx.landed` redraws
// the family and selects the new message.

import {
  ApiError, api, badge, clear, currentSession, el, enc, optionsText, plural, post, short, textOf, writesOff,
} from './util.js';

/**
 * The actions panel for `node` (as `/api/nodes/{id}` returns it). `ctx`:
 * `model` (the conversation's model, the picker's default), `options`
 * (its sampling options), `landed(result)` once an action has written
 * something.
 */
export function actionPanel(node, ctx) {
  const off = writesOff();
  const section = el('section', { id: 'actions', class: 'actions', data: { nodeId: node.id } },
    el('h3', {}, 'Act on this message'));
  if (off) {
    section.appendChild(el('p', { class: 'muted', id: 'actions-off' }, `No actions: ${off}.`));
    return section;
  }
  const form = el('div', { id: 'action-form' });
  const output = el('div', { id: 'action-output' });
  const open = (kind) => {
    for (const b of section.querySelectorAll('.action-buttons button')) {
      b.setAttribute('aria-pressed', String(b.dataset.action === kind));
    }
    clear(output);
    clear(form).appendChild(FORMS[kind](node, ctx, output));
    const first = form.querySelector('textarea, input:not([type=checkbox])');
    if (first) first.focus();
  };
  const button = (kind, label, title) => el('button', {
    type: 'button', data: { action: kind }, title, 'aria-pressed': 'false', on: { click: () => open(kind) },
  }, label);
  const heads = node.heads || [];
  section.append(
    el('div', { class: 'action-buttons toolbar' },
      button('reply', 'Reply', heads.length
        ? `continues ${heads.map((c) => c.name || c.short).join(', ')}`
        : 'this message heads no conversation: the reply starts a branch'),
      button('fork', 'Fork…', 'a new conversation whose history ends here'),
      node.role === 'user' ? button('edit', 'Edit and fork…', 'change this message and branch from its parent') : null,
      node.role === 'assistant' ? button('regenerate', 'Regenerate…', 'another reply to the same request') : null,
      node.role === 'assistant' && recordsSources(node)
        ? button('rerun', 'Re-run without…', 'replay this turn without chosen sources and compare') : null),
    form, output);
  return section;
}

// Whether a rerun could leave something out of the turn that made `node`:
// a run of it offered tools or tagged parts of its request as sources (a
// recorded chat's). Without, a rerun has nothing to ignore.
function recordsSources(node) {
  return node.runs.some((run) => run.tools.length > 0
    || run.annotations.some((part) => part.annotations.some((a) => a.startsWith('source:'))));
}

// ---------------------------------------------------------------- form parts

function modelPicker(ctx) {
  const session = currentSession();
  const models = session.models.slice();
  let wanted = ctx.model || session.default_model;
  // The server takes only the models it offers: a conversation's own model
  // that it does not offer is chosen by sending none (the conversation's).
  if (wanted && !models.some((m) => m.name === wanted)) {
    models.unshift({ name: '', label: `${wanted} (the conversation's)` });
    wanted = '';
  }
  const select = el('select', { id: 'action-model', 'aria-label': 'model' },
    models.map((m) => el('option', { value: m.name }, m.label || m.name)));
  select.value = wanted || '';
  if (!select.value && models.length) select.selectedIndex = 0;
  return select;
}

/** `key=value` words into an options object; numbers and booleans as such. */
function parseOptions(text) {
  const options = {};
  for (const word of text.trim().split(/\s+/).filter(Boolean)) {
    const at = word.indexOf('=');
    if (at <= 0) throw new ApiError(400, `options are key=value words; "${word}" is not`);
    const raw = word.slice(at + 1);
    let value = raw;
    if (raw === 'true' || raw === 'false') value = raw === 'true';
    else if (raw !== '' && !Number.isNaN(Number(raw))) value = Number(raw);
    options[word.slice(0, at)] = value;
  }
  return options;
}

function field(label, control, note) {
  return el('label', { class: 'field' }, el('span', { class: 'field-label' }, label), control,
    note ? el('span', { class: 'muted field-note' }, note) : null);
}

/** The model, options and (when `named`) name fields, and a reader for them. */
function modelFields(ctx, named) {
  const model = modelPicker(ctx);
  const options = el('input', {
    id: 'action-options', type: 'text', autocomplete: 'off', value: optionsText(ctx.options),
    placeholder: 'temperature=0.7 max_tokens=200',
  });
  const name = named ? el('input', { id: 'action-name', type: 'text', autocomplete: 'off', placeholder: 'optional' }) : null;
  const nodes = [field('model', model), field('options', options, 'key=value, space-separated'),
    named ? field('name', name, 'of the new conversation') : null];
  const read = () => {
    const body = { model: model.value || undefined, options: parseOptions(options.value) };
    if (name && name.value.trim()) body.name = name.value.trim();
    return body;
  };
  return { nodes, read };
}

function textArea(value, label) {
  return el('textarea', { id: 'action-text', rows: '4', 'aria-label': label, value: value || '' });
}

function submitRow(label, run) {
  const submit = el('button', { id: 'action-submit', type: 'submit', class: 'primary' }, label);
  const problem = el('p', { class: 'error', id: 'action-error', role: 'alert', hidden: true });
  return {
    nodes: [el('div', { class: 'toolbar' }, submit), problem],
    wire(form) {
      form.addEventListener('submit', async (event) => {
        event.preventDefault();
        submit.disabled = true;
        problem.hidden = true;
        try {
          await run();
        } catch (error) {
          problem.textContent = error.message;
          problem.hidden = false;
        } finally {
          submit.disabled = false;
        }
      });
    },
  };
}

function actionForm(kind, intro, nodes, label, run) {
  const submit = submitRow(label, run);
  const form = el('form', { class: `action-form action-${kind}`, data: { action: kind } },
    el('p', { class: 'muted intro' }, intro), nodes, submit.nodes);
  submit.wire(form);
  return form;
}

// ---------------------------------------------------------------- streaming

/** POST a streaming action, showing the reply as it arrives; then hand the result to `ctx.landed`. */
async function streamInto(output, path, body, ctx, what) {
  const status = el('p', { class: 'muted', id: 'stream-status' }, 'Waiting for the model…');
  const text = el('pre', { class: 'text streaming', id: 'stream-text' });
  const box = el('div', { class: 'stream', id: 'stream', data: { state: 'streaming', deltas: 0 } }, status, text);
  clear(output).appendChild(box);
  let deltas = 0;
  let started = null;
  const done = await post(path, body, {
    start: (event) => {
      started = event;
      status.textContent = event.branched
        ? `Branching from ${short(event.from)} into a new conversation ${short(event.conversation)}…`
        : `Continuing conversation ${short(event.conversation)}…`;
    },
    delta: (event) => {
      deltas += 1;
      box.dataset.deltas = String(deltas);
      text.appendChild(document.createTextNode(event.text));
    },
  }).catch((error) => {
    box.dataset.state = 'failed';
    status.textContent = 'Failed.';
    throw error;
  });
  if (!done.node) {
    // A JSON answer (a fork without text): nothing streamed.
    box.dataset.state = 'done';
    status.textContent = `Forked into conversation ${short(done.conversation)}.`;
    ctx.landed({ what, conversation: done.conversation, node: null, deltas: 0, branched: true });
    return;
  }
  box.dataset.state = 'done';
  status.textContent = `Done (${done.finish_reason || 'finished'}) · ${plural(deltas, 'chunk')} streamed · message ${short(done.node)}`;
  ctx.landed({
    what, conversation: done.conversation, node: done.node, run: done.run, deltas,
    branched: Boolean(done.branched || (started && started.branched)), text: done.text,
  });
}

// ---------------------------------------------------------------- the actions

const FORMS = {
  reply(node, ctx, output) {
    const heads = node.heads || [];
    const text = textArea('', 'your message');
    const fields = modelFields(ctx, heads.length === 0);
    return actionForm('reply',
      heads.length
        ? `Continues ${heads.map((c) => c.name || c.title || c.short).join(', ')}: this message is its head.`
        : 'This message heads no conversation: the reply starts a new branch from it.',
      [field('message', text), fields.nodes], 'Send',
      () => {
        if (!text.value.trim()) throw new ApiError(400, 'write a message first');
        return streamInto(output, `/api/nodes/${enc(node.id)}/reply`, { text: text.value, ...fields.read() }, ctx, 'reply');
      });
  },

  fork(node, ctx, output) {
    const name = el('input', { id: 'action-name', type: 'text', autocomplete: 'off', placeholder: 'optional' });
    const text = textArea('', 'first message (optional)');
    const fields = modelFields(ctx, false);
    return actionForm('fork',
      'A new conversation whose history ends at this message. With a message, it is sent at once.',
      [field('name', name), field('message', text, 'optional'), fields.nodes], 'Fork',
      () => {
        const body = { name: name.value.trim() || undefined };
        if (text.value.trim()) Object.assign(body, fields.read(), { text: text.value });
        return streamInto(output, `/api/nodes/${enc(node.id)}/fork`, body, ctx, 'fork');
      });
  },

  edit(node, ctx, output) {
    const text = textArea(textOf(node.parts), 'the edited message');
    const fields = modelFields(ctx, true);
    return actionForm('edit',
      node.parent
        ? `The edited message branches from its parent ${short(node.parent)}; this one stays as it is.`
        : 'The edited message starts a new root; this one stays as it is.',
      [field('message', text), fields.nodes], 'Edit and fork',
      () => {
        if (!text.value.trim()) throw new ApiError(400, 'the message is empty');
        return streamInto(output, `/api/nodes/${enc(node.id)}/edit`, { text: text.value, ...fields.read() }, ctx, 'edit');
      });
  },

  regenerate(node, ctx, output) {
    const run = node.runs[0];
    const fields = modelFields({ ...ctx, options: run ? run.options : ctx.options }, false);
    return actionForm('regenerate',
      'Another reply to the same request, beside this one; choose the same or another model and options.',
      [fields.nodes], 'Regenerate',
      () => streamInto(output, `/api/nodes/${enc(node.id)}/regenerate`, fields.read(), ctx, 'regenerate'));
  },

  rerun(node, ctx, output) {
    const box = el('div', { class: 'rerun-form' }, el('p', { class: 'placeholder' }, 'Loading the turn’s sources…'));
    api(`/api/nodes/${enc(node.id)}/report`).then((report) => {
      clear(box).appendChild(rerunForm(node, report, ctx, output));
    }, (error) => {
      clear(box).appendChild(el('p', { class: error.status === 404 ? 'muted' : 'error', id: 'rerun-unavailable' },
        error.status === 404
          ? 'Not a recorded turn: only turns recorded by the turn layer (skein prompt, chat, the proxy) can be re-run.'
          : error.message));
    });
    return box;
  },
};

function rerunForm(node, report, ctx, output) {
  const boxes = report.sources.map((s) => el('label', { class: `source${s.removable ? '' : ' muted'}` },
    el('input', { type: 'checkbox', class: 'source-box', data: { sourceId: s.id }, disabled: !s.removable }),
    ' ', badge(s.kind), ' ', el('code', {}, s.id), ' ', el('span', { class: 'preview' }, s.preview || ''),
    typeof s.score === 'number' ? el('span', { class: 'muted' }, ` · score ${s.score.toFixed(2)}`) : null,
    s.removable ? null : el('span', { class: 'muted' }, ' (past the cap: cannot be removed)')));
  const samples = el('input', { id: 'rerun-samples', type: 'number', min: '2', max: '10', value: '3' });
  // A verdict needs a baseline (the turn re-run unchanged), so ask for one unless unticked.
  const baseline = el('input', { id: 'rerun-baseline', type: 'checkbox', checked: true });
  const turn = report.turn && typeof report.turn === 'object' ? report.turn : {};
  return actionForm('rerun',
    `Replay ${turn.index !== undefined ? `turn ${turn.index}` : 'this turn'} without the sources you tick, and see whether the answer changes.`,
    [el('fieldset', { class: 'sources' }, el('legend', {}, 'Leave out'),
      boxes.length ? boxes : el('p', { class: 'muted' }, 'This turn records no sources.')),
    field('samples', samples, 'answers to draw'),
    el('label', { class: 'field' }, baseline, ' also re-run with every source, as a baseline (a verdict needs one)'),
    report.embedder_fallback ? el('p', { class: 'muted', id: 'rerun-embedder-note' }, report.embedder_fallback) : null],
    'Re-run',
    async () => {
      const ignore = boxes.map((b) => b.querySelector('input')).filter((i) => i.checked).map((i) => i.dataset.sourceId);
      if (ignore.length === 0) throw new ApiError(400, 'tick at least one source to leave out');
      const count = Number(samples.value);
      if (!Number.isInteger(count) || count < 2 || count > 10) throw new ApiError(400, 'samples must be a whole number from 2 to 10');
      const status = el('p', { class: 'muted' }, `Re-running without ${ignore.join(', ')}…`);
      clear(output).appendChild(status);
      const result = await post(`/api/nodes/${enc(node.id)}/rerun`, { ignore, samples: count, baseline: baseline.checked });
      clear(output).appendChild(rerunResult(result, ignore, ctx));
      ctx.landed({ what: 'rerun', rerun: result.rerun, node: null, verdict: result.verdict });
    });
}

function rerunResult(result, ignore, ctx) {
  const samples = Array.isArray(result.samples) ? result.samples : [];
  const name = el('input', { id: 'rerun-fork-name', type: 'text', autocomplete: 'off', placeholder: 'name (optional)' });
  const text = el('textarea', { id: 'rerun-fork-text', rows: '2', 'aria-label': 'next message (optional)' });
  const forkOutput = el('div');
  const fork = actionForm('rerun-fork', 'Continue from the counterfactual answer in a conversation of its own.',
    [field('name', name), field('message', text, 'optional')], 'Fork from the counterfactual',
    () => streamInto(forkOutput, `/api/reruns/${enc(result.rerun)}/fork`, {
      name: name.value.trim() || undefined, text: text.value.trim() ? text.value : undefined,
    }, ctx, 'rerun fork'));
  return el('div', { id: 'rerun-result', class: 'rerun-result', data: { rerun: result.rerun, verdict: result.verdict || '' } },
    el('p', {}, result.verdict ? ['Verdict ', badge(result.verdict, `verdict verdict-${result.verdict}`)]
      : el('span', { class: 'muted' }, 'No verdict (re-run with a baseline for one)'),
      ` without ${ignore.join(', ')} · ${plural(samples.length, 'sample')}`,
      typeof result.changed === 'boolean' ? ` · the answer ${result.changed ? 'changed' : 'held'}` : '',
      result.baseline ? ` · baseline ${result.baseline.stable ? 'stable' : 'unstable'}` : ''),
    result.what_changed && result.what_changed.summary ? el('p', { class: 'summary' }, result.what_changed.summary) : null,
    result.embedder_fallback ? el('p', { class: 'muted', id: 'rerun-result-embedder-note' }, result.embedder_fallback) : null,
    samples.length ? el('ol', { class: 'rerun-samples' }, samples.map((sample) => el('li', {
      data: { nodeId: sample.node, changed: sample.changed },
    }, sample.changed ? badge('changed', 'verdict-confirmed') : badge('same', 'verdict-not-confirmed'), ' ',
    el('span', { class: 'preview' }, sample.answer || '')))) : null,
    fork, forkOutput);
}
