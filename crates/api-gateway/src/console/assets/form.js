// The create and edit form: every schedule form, the callback and retry policy, labels; a live
// preview of the next runs as the schedule is typed; the API's validation messages by field.
import { api, h, go, alertBox } from './app.js';

const KINDS = [
  ['cron', 'Cron expression'],
  ['every', 'Fixed interval'],
  ['at', 'Once, at a time'],
  ['after', 'Once, after a delay'],
];
const METHODS = ['POST', 'GET', 'PUT', 'PATCH', 'DELETE'];

function input(field, label, attrs = {}) {
  const id = `f-${field.replace(/\./g, '-')}`;
  const el = h(attrs.multiline ? 'textarea' : 'input', {
    id, name: field, 'data-field': field, autocomplete: 'off', ...attrs, multiline: undefined,
    'aria-describedby': `${id}-error`,
  });
  const wrap = h('label', { for: id }, label, el, h('span', { class: 'field-error', id: `${id}-error` }));
  return { el, wrap };
}

/** `Name: value` lines to an object. */
function pairs(text, sep) {
  const out = {};
  for (const line of text.split('\n')) {
    const at = line.indexOf(sep);
    if (line.trim() && at > 0) out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

/** A local date-time input's value for an instant. */
function localInput(iso) {
  const d = new Date(iso);
  const off = d.getTimezoneOffset() * 60000;
  return new Date(d - off).toISOString().slice(0, 19);
}

export async function timerForm(main, id) {
  const existing = id ? await api('GET', `/v1/timers/${id}`) : null;
  const f = {
    app: input('app', 'App', { required: true, value: existing?.app || '', disabled: !!existing }),
    name: input('name', 'Name', { required: true, value: existing?.name || '' }),
    cron: input('schedule.cron', 'Cron expression (5 fields, or 6 with seconds)', { value: existing?.schedule.cron || '0 0 2 * * *', placeholder: '0 0 2 * * *' }),
    zone: input('schedule.time_zone', 'Time zone', {
      value: existing?.schedule.time_zone || Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC',
    }),
    every: input('schedule.every', 'Interval', { value: existing?.schedule.every || '1m', placeholder: '30s, 5m, 1h' }),
    at: input('schedule.at', 'Time (your browser\'s zone)', {
      type: 'datetime-local', step: 1,
      value: existing?.schedule.at && !existing.schedule.every && !existing.schedule.after ? localInput(existing.schedule.at) : '',
    }),
    after: input('schedule.after', 'Delay', { value: existing?.schedule.after || '90s', placeholder: '90s' }),
    url: input('callback.url', 'URL', { type: 'url', required: true, value: existing?.callback.url || '', placeholder: 'https://service.internal/hook' }),
    headers: input('callback.headers', 'Headers (Name: value per line)', {
      multiline: true,
    }),
    body: input('callback.body', 'Body', { multiline: true }),
    timeout: input('callback.timeout', 'Timeout', { value: existing?.callback.timeout || '10s' }),
    attempts: input('retry.max_attempts', 'Attempts', { type: 'number', min: 1, max: 100, value: existing?.retry.max_attempts ?? 3 }),
    initial: input('retry.initial_backoff', 'First backoff', { value: existing?.retry.initial_backoff || '1s' }),
    max: input('retry.max_backoff', 'Longest backoff', { value: existing?.retry.max_backoff || '1m' }),
    labels: input('labels', 'Labels (key=value per line)', { multiline: true }),
  };
  f.headers.el.value = Object.entries(existing?.callback.headers || {}).map(([k, v]) => `${k}: ${v}`).join('\n');
  f.body.el.value = existing?.callback.body || '';
  f.labels.el.value = Object.entries(existing?.labels || {}).map(([k, v]) => `${k}=${v}`).join('\n');
  const method = h('select', { id: 'f-callback-method', name: 'callback.method', 'data-field': 'callback.method' },
    METHODS.map((m) => h('option', { selected: (existing?.callback.method || 'POST') === m }, m)));
  const enabled = h('input', { type: 'checkbox', id: 'f-enabled', checked: existing ? existing.enabled : true });

  const initialKind = existing
    ? (existing.schedule.cron ? 'cron' : existing.schedule.every ? 'every' : existing.schedule.after ? 'after' : 'at')
    : 'cron';
  const kindInputs = KINDS.map(([k, label]) => h('label', {},
    h('input', { type: 'radio', name: 'kind', value: k, checked: k === initialKind }), label));
  const kindFields = {
    cron: h('div', { class: 'kind-fields' }, f.cron.wrap, f.zone.wrap),
    every: h('div', { class: 'kind-fields' }, f.every.wrap),
    at: h('div', { class: 'kind-fields' }, f.at.wrap),
    after: h('div', { class: 'kind-fields' }, f.after.wrap),
  };
  const kind = () => kindInputs.map((l) => l.querySelector('input')).find((i) => i.checked).value;
  const showKind = () => {
    for (const [k, el] of Object.entries(kindFields)) el.hidden = k !== kind();
  };

  function schedule() {
    switch (kind()) {
      case 'cron': return { cron: f.cron.el.value.trim(), time_zone: f.zone.el.value.trim() || 'UTC' };
      case 'every': return { every: f.every.el.value.trim() };
      case 'at': return { at: f.at.el.value ? new Date(f.at.el.value).toISOString() : '' };
      default: return { after: f.after.el.value.trim() };
    }
  }

  const preview = h('div', { id: 'preview', 'aria-live': 'polite' });
  let previewSeq = 0;
  async function updatePreview() {
    const seq = ++previewSeq;
    try {
      const got = await api('POST', '/v1/schedules/preview', { schedule: schedule(), count: 5 });
      if (seq !== previewSeq) return;
      preview.replaceChildren(got.runs.length
        ? h('ol', {}, got.runs.map((r) => h('li', {}, h('time', { datetime: r.utc, title: r.utc }, new Date(r.utc).toLocaleString()),
          kind() === 'cron' ? h('span', { class: 'muted' }, ` · ${r.local}`) : null,
          r.dst ? h('span', { class: 'dst' }, `DST: ${r.dst}`) : null)))
        : h('p', { class: 'muted' }, 'This schedule has no future runs.'));
    } catch (err) {
      if (seq === previewSeq) preview.replaceChildren(h('p', { class: 'field-error', role: 'status' }, err.message));
    }
  }
  let debounce;
  const schedulePreview = () => {
    clearTimeout(debounce);
    debounce = setTimeout(updatePreview, 300);
  };

  const problem = h('div', { id: 'form-problem' });
  const submit = h('button', { type: 'submit', id: 'save' }, existing ? 'Save changes' : 'Create timer');

  function clearErrors() {
    problem.replaceChildren();
    for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
    for (const el of form.querySelectorAll('.field-error')) el.textContent = '';
  }

  /** Marks the input the API named, and says why above the form. */
  function showProblem(err) {
    problem.replaceChildren(alertBox(err));
    const field = err.problem?.field;
    if (!field) return;
    const all = [...form.querySelectorAll('[data-field]')];
    const target = all.find((el) => el.dataset.field === field)
      || all.find((el) => el.dataset.field.endsWith(`.${field}`) || field.startsWith(`${el.dataset.field}.`));
    if (target) {
      target.setAttribute('aria-invalid', 'true');
      const msg = document.getElementById(`${target.id}-error`);
      if (msg) msg.textContent = err.problem.detail || err.message;
      target.focus();
    }
  }

  const form = h('form', {
    id: 'timer-form', novalidate: true,
    oninput: (e) => {
      if (e.target.name === 'kind') showKind();
      if (e.target.name === 'kind' || e.target.name?.startsWith('schedule.')) schedulePreview();
    },
    onsubmit: async (e) => {
      e.preventDefault();
      clearErrors();
      const callback = {
        url: f.url.el.value.trim(),
        method: method.value,
        headers: pairs(f.headers.el.value, ':'),
        timeout: f.timeout.el.value.trim(),
      };
      if (f.body.el.value) callback.body = f.body.el.value;
      const retry = {
        max_attempts: Number(f.attempts.el.value),
        initial_backoff: f.initial.el.value.trim(),
        max_backoff: f.max.el.value.trim(),
      };
      const common = { name: f.name.el.value.trim(), schedule: schedule(), callback, retry, labels: pairs(f.labels.el.value, '=') };
      submit.disabled = true;
      try {
        const saved = existing
          ? await api('PATCH', `/v1/timers/${id}`, { ...common, expected_version: existing.version })
          : await api('POST', '/v1/timers', { app: f.app.el.value.trim(), ...common, enabled: enabled.checked });
        go(`#/timers/${saved.id}`);
      } catch (err) {
        showProblem(err);
      } finally {
        submit.disabled = false;
      }
    },
  },
  problem,
  h('div', { class: 'form-layout' },
    h('div', {},
      h('fieldset', {}, h('legend', {}, 'Timer'), f.app.wrap, f.name.wrap,
        existing ? null : h('label', { class: 'check' }, enabled, 'Enabled')),
      h('fieldset', {}, h('legend', {}, 'Schedule'),
        h('div', { class: 'kinds', role: 'radiogroup', 'aria-label': 'Schedule kind' }, kindInputs),
        Object.values(kindFields)),
      h('fieldset', {}, h('legend', {}, 'Callback'), f.url.wrap,
        h('label', { for: 'f-callback-method' }, 'Method', method), f.timeout.wrap, f.headers.wrap, f.body.wrap),
      h('fieldset', {}, h('legend', {}, 'Retries'), f.attempts.wrap, f.initial.wrap, f.max.wrap),
      h('fieldset', {}, h('legend', {}, 'Labels'), f.labels.wrap)),
    h('aside', { class: 'panel' }, h('h2', {}, 'Next runs'), preview)),
  h('div', { class: 'actions' }, submit,
    h('a', { class: 'button quiet', href: existing ? `#/timers/${id}` : '#/timers' }, 'Cancel')));

  main.append(h('h1', {}, existing ? `Edit ${existing.name}` : 'New timer'), form);
  showKind();
  updatePreview();
  (existing ? f.name.el : f.app.el).focus();
}
