// Timer pages: the list with search and filters, and one timer's detail with its actions.
import { api, h, go, alertBox, badge, ms, when, confirmDialog } from './app.js';

const DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const SHORT_DAYS = { 'MON-FRI': 'weekday', '1-5': 'weekday', 'SAT,SUN': 'weekend day', '0,6': 'weekend day', '6,0': 'weekend day' };

function pad(n) {
  return String(n).padStart(2, '0');
}

/** A cron expression in words where it is a common shape; the expression itself otherwise. */
function cronWords(expr) {
  const f = expr.trim().split(/\s+/);
  const [sec, min, hour, dom, mon, dow] = f.length === 6 ? f : ['0', ...f];
  const num = (s) => /^\d+$/.test(s);
  const every = (s) => s.match(/^\*\/(\d+)$/)?.[1];
  if (dom === '*' && mon === '*' && dow === '*') {
    if (num(sec) && num(min) && num(hour)) {
      return `every day at ${pad(hour)}:${pad(min)}${sec === '0' ? '' : `:${pad(sec)}`}`;
    }
    if (sec === '0' && num(min) && hour === '*') return `every hour at minute ${min}`;
    if (sec === '0' && every(min) && hour === '*') return `every ${every(min)} minutes`;
    if (sec === '0' && min === '*' && hour === '*') return 'every minute';
    if (every(sec) && min === '*' && hour === '*') return `every ${every(sec)} seconds`;
    if (sec === '*' && min === '*' && hour === '*') return 'every second';
  }
  if (dom === '*' && mon === '*' && num(sec) && num(min) && num(hour)) {
    const day = SHORT_DAYS[dow.toUpperCase()] || (num(dow) ? DAYS[Number(dow) % 7] : null);
    if (day) return `every ${day} at ${pad(hour)}:${pad(min)}`;
  }
  if (num(dom) && mon === '*' && dow === '*' && num(sec) && num(min) && num(hour)) {
    return `on day ${dom} of every month at ${pad(hour)}:${pad(min)}`;
  }
  return `cron ${expr}`;
}

/** The schedule as a sentence: "every day at 02:00 (Europe/Berlin)". */
export function describeSchedule(s) {
  if (s.cron) return `${cronWords(s.cron)} (${s.time_zone || 'UTC'})`;
  if (s.every) return `every ${s.every}`;
  if (s.after) return `once, ${s.after} after it was created`;
  if (s.at) return `once at ${new Date(s.at).toLocaleString()}`;
  return '—';
}

/** The last run's status and lateness, filled in once its row is shown. */
async function lastRun(cell, id) {
  try {
    const page = await api('GET', `/v1/timers/${id}/runs?page_size=1`);
    const run = page.runs[0];
    cell.replaceChildren(run ? h('span', {}, badge(run.status), ' ', h('span', { class: 'muted' }, ms(run.lateness_ms))) : '—');
  } catch {
    cell.replaceChildren('?');
  }
}

export async function timerList(main, query) {
  const field = (name, label, attrs = {}) => h('label', {}, label,
    h('input', { name, value: query.get(name) || '', autocomplete: 'off', ...attrs }));
  const state = h('select', { name: 'state' },
    ['', 'enabled', 'paused', 'done'].map((s) => h('option', { value: s, selected: query.get('state') === s }, s || 'any')));
  const filters = h('form', {
    class: 'filters', role: 'search',
    onsubmit: (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      for (const [k, v] of new FormData(filters)) if (String(v).trim()) q.set(k, String(v).trim());
      go(`#/timers${q.size ? `?${q}` : ''}`);
    },
  },
  field('name', 'Name starts with', { type: 'search', id: 'search' }),
  field('app', 'App', { size: 12 }),
  h('label', {}, 'State', state),
  field('label', 'Labels (key=value,…)', { size: 16 }),
  h('button', { type: 'submit' }, 'Search'));
  main.append(h('h1', {}, 'Timers'), filters);

  const q = new URLSearchParams({ page_size: '25' });
  for (const [from, to] of [['name', 'name_prefix'], ['app', 'app'], ['state', 'state'], ['label', 'label'], ['page', 'page_token']]) {
    if (query.get(from)) q.set(to, query.get(from));
  }
  let page;
  try {
    page = await api('GET', `/v1/timers?${q}`);
  } catch (err) {
    main.append(alertBox(err));
    return;
  }
  if (!page.timers.length) {
    main.append(h('p', { class: 'muted' }, 'No timers match. ', h('a', { href: '#/timers/new' }, 'Create one.')));
    return;
  }
  const rows = page.timers.map((t) => {
    const last = h('td', { class: 'last-run' }, '…');
    lastRun(last, t.id);
    const next = t.next_runs?.[0];
    return h('tr', { 'data-id': t.id },
      h('td', {}, h('a', { href: `#/timers/${t.id}` }, t.name)),
      h('td', { class: 'optional' }, t.app),
      h('td', {}, describeSchedule(t.schedule)),
      h('td', {}, badge(t.state), t.paused ? h('div', { class: 'muted' }, t.paused.reason) : null),
      h('td', { class: 'optional' }, next ? when(next.utc) : '—'),
      last);
  });
  main.append(h('div', { class: 'table-wrap' }, h('table', { id: 'timers' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', { class: 'optional' }, 'App'), h('th', {}, 'Schedule'),
      h('th', {}, 'State'), h('th', { class: 'optional' }, 'Next run'), h('th', {}, 'Last run (lateness)'))),
    h('tbody', {}, rows))));
  const pager = h('div', { class: 'pager' });
  if (query.get('page')) {
    const first = new URLSearchParams(query);
    first.delete('page');
    pager.append(h('a', { class: 'button quiet', href: `#/timers${first.size ? `?${first}` : ''}` }, 'First page'));
  }
  if (page.next_page_token) {
    const next = new URLSearchParams(query);
    next.set('page', page.next_page_token);
    pager.append(h('a', { class: 'button quiet', href: `#/timers?${next}` }, 'Next page'));
  }
  main.append(pager);
}

// Where a timer delivers: an HTTP request, a worker group, or a broker's subject/exchange.
function targetText(cb) {
  if (cb.worker) {
    const how = cb.worker.broadcast ? ', broadcast to every worker' : cb.worker.route ? `, route ${cb.worker.route}` : '';
    return `worker group ${cb.worker.group}${how}`;
  }
  if (cb.nats) return `NATS ${cb.nats.url} subject ${cb.nats.subject}`;
  if (cb.amqp) return `AMQP ${cb.amqp.url} exchange "${cb.amqp.exchange}" key ${cb.amqp.routing_key}`;
  return `${cb.method} ${cb.url}`;
}

// A timer's chain: the timers its runs start when they end.
function chainText(then) {
  if (!then) return '—';
  const list = (label, names) => (names?.length ? [`${label}: ${names.join(', ')}`] : []);
  return h('span', { id: 'chain' }, [...list('on success', then.on_success), ...list('on failure', then.on_failure)].join(' · '));
}

function specList(t) {
  const cb = t.callback;
  const rows = [
    ['App', t.app],
    ['Schedule', describeSchedule(t.schedule)],
    ['Schedule as given', h('code', {}, JSON.stringify(t.schedule))],
    ['Callback', h('code', {}, targetText(cb))],
    ['Headers', Object.keys(cb.headers || {}).length ? h('code', {}, Object.entries(cb.headers).map(([k, v]) => `${k}: ${v}`).join('\n')) : '—'],
    ['Body', cb.body ? h('pre', {}, cb.body) : '—'],
    ['Timeout', cb.timeout],
    ['Run output', cb.keep_output === false ? 'not kept' : 'kept (last 4 KiB)'],
    ['Retry', `${t.retry.max_attempts} attempts, backoff ${t.retry.initial_backoff} to ${t.retry.max_backoff}${t.retry.max_age ? `, within ${t.retry.max_age}` : ''}`],
    ['Misfire', t.misfire],
    ['Delivery', t.delivery],
    ['Overlap', t.overlap],
    ['Chain', chainText(t.then)],
    ['Labels', Object.entries(t.labels || {}).map(([k, v]) => `${k}=${v}`).join(', ') || '—'],
    ['Runs left', t.max_runs ? `${t.remaining_runs ?? '?'} of ${t.max_runs}` : 'no limit'],
    ['Version', t.version],
    ['Created', when(t.created_at)],
    ['Updated', when(t.updated_at)],
  ];
  return h('dl', { class: 'spec', id: 'spec' }, rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

export async function timerDetail(main, id) {
  const notice = h('div', { id: 'notice' });
  const header = h('div');
  const spec = h('div', { class: 'panel' });
  const next = h('div', { class: 'panel', id: 'next-runs' });
  const runs = h('div', { id: 'runs' });
  main.append(header, notice, h('div', { class: 'grid' }, spec, next), h('h2', {}, 'Runs'), runs);
  let timer;

  const say = (text) => notice.replaceChildren(h('div', { class: 'notice', role: 'status' }, text));
  const act = async (work, done) => {
    try {
      const result = await work();
      say(done(result));
      await load();
    } catch (err) {
      notice.replaceChildren(alertBox(err));
    }
  };

  function actions(t) {
    const bar = h('div', { class: 'actions' });
    if (t.enabled) {
      bar.append(h('button', {
        type: 'button', id: 'pause', class: 'quiet',
        onclick: async () => {
          const reason = await confirmDialog({
            title: `Pause ${t.name}?`, text: 'Its runs are skipped until it is resumed. The reason is shown to everyone.',
            ok: 'Pause', reason: true,
          });
          if (reason === null) return;
          act(() => api('POST', `/v1/timers/${id}/disable`, reason ? { reason } : undefined), () => 'Paused.');
        },
      }, 'Pause'));
    } else if (t.state !== 'done') {
      bar.append(h('button', {
        type: 'button', id: 'resume',
        onclick: () => act(() => api('POST', `/v1/timers/${id}/enable`), () => 'Resumed.'),
      }, 'Resume'));
    }
    bar.append(
      h('button', {
        type: 'button', id: 'trigger', class: 'quiet', disabled: !t.enabled,
        onclick: () => act(() => api('POST', `/v1/timers/${id}/trigger`), (r) => `Triggered: run ${r.task_key} queued.`),
      }, 'Trigger now'),
      h('a', { class: 'button quiet', href: `#/timers/${id}/edit`, id: 'edit' }, 'Edit'),
      h('button', {
        type: 'button', id: 'redrive', class: 'quiet',
        onclick: () => act(() => api('POST', `/v1/timers/${id}/redrive`), (r) => `${r.redriven} dead run(s) queued again.`),
      }, 'Redrive dead runs'),
      h('button', {
        type: 'button', id: 'delete', class: 'danger',
        onclick: async () => {
          const ok = await confirmDialog({
            title: `Delete ${t.name}?`, text: 'It stops firing at once and its name is freed. This cannot be undone.',
            ok: 'Delete', danger: true,
          });
          if (ok === null) return;
          try {
            await api('DELETE', `/v1/timers/${id}`);
            go('#/timers');
          } catch (err) {
            notice.replaceChildren(alertBox(err));
          }
        },
      }, 'Delete'));
    return bar;
  }

  // Outputs the reader opened stay open across the refreshes below.
  const openOutputs = new Set();
  function outputCell(r) {
    if (!r.output) return '—';
    const first = r.output.split('\n').find((l) => l.trim()) || '';
    return h('details', {
      open: openOutputs.has(r.task_key),
      'data-key': r.task_key,
      ontoggle: (e) => (e.target.open ? openOutputs.add(r.task_key) : openOutputs.delete(r.task_key)),
    }, h('summary', {}, first.length > 48 ? `${first.slice(0, 47)}…` : first), h('pre', {}, r.output));
  }

  async function loadRuns() {
    const page = await api('GET', `/v1/timers/${id}/runs?page_size=20`);
    if (!page.runs.length) {
      runs.replaceChildren(h('p', { class: 'muted' }, 'No runs yet.'));
      return;
    }
    runs.replaceChildren(h('div', { class: 'table-wrap' }, h('table', { id: 'run-history' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Run time'), h('th', {}, 'Status'), h('th', {}, 'Attempt'),
        h('th', {}, 'HTTP'), h('th', {}, 'Lateness'), h('th', { class: 'optional' }, 'Error'),
        h('th', { class: 'optional' }, 'Output'))),
      h('tbody', {}, page.runs.map((r) => h('tr', { 'data-status': r.status },
        h('td', {}, when(r.run_at), r.backfill ? h('span', { class: 'muted' }, ' backfill') : null,
          r.parent_run ? h('a', {
            class: 'muted chained', href: `#/timers/${r.parent_run.split(':')[0]}`, title: `started by run ${r.parent_run}`,
          }, ' chained') : null),
        h('td', {}, badge(r.status), r.shards?.length
          ? h('span', { class: 'muted shards', title: r.shards.map((s) => `shard ${s.index}: ${s.status}${s.worker ? ` (${s.worker})` : ''}`).join('\n') },
            ` ${r.shards.filter((s) => s.status === 'succeeded').length}/${r.shards.length} shards`)
          : null),
        h('td', { class: 'num' }, r.attempt),
        h('td', { class: 'num' }, r.http_status ?? '—'),
        h('td', { class: 'num' }, ms(r.lateness_ms)),
        h('td', { class: 'optional' }, r.error || ''),
        h('td', { class: 'optional output' }, outputCell(r)))))))); 
  }

  async function load() {
    timer = await api('GET', `/v1/timers/${id}`);
    const t = timer;
    header.replaceChildren(...[
      h('p', {}, h('a', { href: '#/timers' }, '← Timers')),
      h('h1', {}, t.name, ' ', badge(t.state)),
      t.paused ? h('p', { class: 'alert', id: 'paused-note' }, `Paused${t.paused.by ? ` by ${t.paused.by}` : ''}: ${t.paused.reason}`) : null,
      actions(t)].filter(Boolean));
    spec.replaceChildren(h('h2', {}, 'Definition'), specList(t));
    const upcoming = await api('GET', `/v1/timers/${id}/next?count=10`);
    next.replaceChildren(h('h2', {}, 'Next runs'), upcoming.runs.length
      ? h('ol', {}, upcoming.runs.map((r) => h('li', {}, when(r.utc),
        t.schedule.time_zone ? h('span', { class: 'muted' }, ` · ${r.local} ${t.schedule.time_zone}`) : null,
        r.dst ? h('span', { class: 'dst', title: 'daylight saving time' }, `DST: ${r.dst}`) : null)))
      : h('p', { class: 'muted' }, 'No more runs.'));
    await loadRuns();
  }

  await load();
  // History refreshes while the page is open.
  const refresh = setInterval(() => loadRuns().catch(() => {}), 2000);
  return () => clearInterval(refresh);
}
