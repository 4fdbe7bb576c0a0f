// The console's pages but the timer pages (timers.js, form.js) and notifications
// (notifications.js): sign-in, overview, dead letters.
import { api, h, session, signIn, go, alertBox, ms, when, confirmDialog, appFilter } from './app.js';
import { timerList, timerDetail } from './timers.js';
import { timerForm } from './form.js';
import { lineChart, barChart } from './charts.js';
import { notifications } from './notifications.js';

async function signin(main) {
  if (!session.auth || session.token) {
    go('#/overview');
    return;
  }
  const input = h('input', {
    id: 'token', name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false',
    required: true, 'aria-describedby': 'token-help',
  });
  const message = h('div', { id: 'signin-message' });
  if (session.reason) {
    message.append(h('div', { class: 'alert', role: 'alert' }, session.reason));
    session.reason = null;
  }
  const submit = h('button', { type: 'submit' }, 'Sign in');
  const form = h('form', {
    onsubmit: async (e) => {
      e.preventDefault();
      const token = input.value.trim();
      message.replaceChildren();
      if (!token) {
        message.append(h('div', { class: 'alert', role: 'alert' }, 'Enter a token.'));
        return;
      }
      submit.disabled = true;
      try {
        await api('GET', '/v1/timers?page_size=1', undefined, token);
        signIn(token);
        go('#/overview');
      } catch (err) {
        const text = err.status === 401
          ? 'That token was not accepted. Check that it is complete and has not been revoked.'
          : null;
        message.append(text ? h('div', { class: 'alert', role: 'alert' }, text) : alertBox(err));
        input.setAttribute('aria-invalid', 'true');
        input.focus();
      } finally {
        submit.disabled = false;
      }
    },
  },
  h('label', { for: 'token' }, 'API token', input),
  h('p', { id: 'token-help', class: 'muted' },
    'An app token, or the admin token. It is kept in this browser tab only and sent with each request.'),
  submit);
  main.append(h('section', { class: 'signin panel' }, h('h1', {}, 'Sign in to Chime'), message, form));
  input.focus();
}

const POLL_MS = 5000;

/** Firings per second, lateness and failures over the last hour, redrawn every few seconds. */
async function overview(main, _path, query) {
  const app = query.get('app') || '';
  const filters = appFilter('overview', app);
  const tiles = h('div', { class: 'tiles', id: 'tiles' });
  const firing = h('div', { class: 'panel' }, h('h2', {}, 'Firings per second'), h('div', { id: 'chart-rate' }));
  const lateness = h('div', { class: 'panel' }, h('h2', {}, 'Lateness'),
    h('div', { class: 'legend' }, h('span', { class: 'k-1' }, 'p50'), h('span', { class: 'k-2' }, 'p99')),
    h('div', { id: 'chart-lateness' }));
  const failures = h('div', { class: 'panel' }, h('h2', {}, 'Failures and dead letters'),
    h('div', { class: 'legend' }, h('span', { class: 'k-3' }, 'failed attempts'), h('span', { class: 'k-4' }, 'dead letters')),
    h('div', { id: 'chart-failures' }));
  const problem = h('div');
  const stamp = h('p', { class: 'muted' });
  main.append(h('h1', {}, 'Overview'), filters, problem, tiles,
    h('div', { class: 'grid' }, firing, lateness, failures), stamp);

  async function refresh() {
    let report;
    try {
      const q = new URLSearchParams({ minutes: '60' });
      if (app) q.set('app', app);
      report = await api('GET', `/v1/activity?${q}`);
      problem.replaceChildren();
    } catch (err) {
      problem.replaceChildren(alertBox(err));
      return;
    }
    const minutes = report.minutes;
    const now = new Date(report.now);
    // The last minute is partial: rate over the seconds it has had.
    const rates = minutes.map((m, i) => {
      const span = i === minutes.length - 1 ? Math.max(1, (now - new Date(m.at)) / 1000) : 60;
      return m.fired / span;
    });
    const labels = minutes.map((m) => new Date(m.at));
    const t = report.total;
    const lastFull = minutes.length > 1 ? minutes[minutes.length - 2].fired / 60 : 0;
    tiles.replaceChildren(
      tile('Firings/s (last minute)', lastFull.toFixed(lastFull < 10 ? 2 : 0), 'tile-rate'),
      tile('Firings (hour)', t.fired.toLocaleString(), 'tile-fired'),
      tile('Lateness p50', ms(t.lateness_p50_ms), 'tile-p50'),
      tile('Lateness p99', ms(t.lateness_p99_ms), 'tile-p99'),
      tile('Failed attempts (hour)', t.failed.toLocaleString(), 'tile-failed'),
      tile('Dead letters (hour)', t.dead.toLocaleString(), 'tile-dead'),
    );
    firing.querySelector('#chart-rate').replaceChildren(lineChart(labels, [rates], {
      label: 'Firings per second, per minute, last hour', unit: '/s',
    }));
    lateness.querySelector('#chart-lateness').replaceChildren(lineChart(labels, [
      minutes.map((m) => m.lateness_p50_ms ?? null),
      minutes.map((m) => m.lateness_p99_ms ?? null),
    ], { label: 'Lateness p50 and p99 per minute, last hour', unit: ' ms', log: true }));
    failures.querySelector('#chart-failures').replaceChildren(barChart(labels, [
      minutes.map((m) => m.failed), minutes.map((m) => m.dead),
    ], { label: 'Failed attempts and dead letters per minute, last hour', classes: ['bar-3', 'bar-4'] }));
    stamp.textContent = `Updated ${now.toLocaleTimeString()}; lateness quantiles are histogram bucket bounds.`;
  }
  await refresh();
  const timer = setInterval(refresh, POLL_MS);
  return () => clearInterval(timer);
}

function tile(label, value, id) {
  return h('div', { class: 'tile', id }, h('div', { class: 'value' }, value), h('div', { class: 'label' }, label));
}

/** Runs whose attempts are exhausted, across timers: inspect, redrive one or all. */
async function deadLetters(main, _path, query) {
  const app = query.get('app') || '';
  const token = query.get('page') || '';
  const notice = h('div', { id: 'dead-notice' });
  main.append(h('h1', {}, 'Dead letters'), appFilter('dead-letters', app, { button: 'Filter' }), notice);
  const q = new URLSearchParams({ page_size: '50' });
  if (app) q.set('app', app);
  if (token) q.set('page_token', token);
  const page = await api('GET', `/v1/dead-letters?${q}`);
  if (!page.runs.length) {
    main.append(h('p', { class: 'muted', id: 'no-dead' }, 'No dead letters. Runs land here when their retries are exhausted.'));
    return;
  }
  const redriveAll = h('button', {
    type: 'button',
    id: 'redrive-all',
    onclick: async () => {
      const ok = await confirmDialog({
        title: 'Redrive every dead letter?',
        text: `Every dead run${app ? ` of app ${app}` : ''} is queued again with a fresh attempt budget.`,
        ok: 'Redrive all',
      });
      if (ok === null) return;
      try {
        const ids = await deadTimerIds(app);
        let total = 0;
        for (const id of ids) total += (await api('POST', `/v1/timers/${id}/redrive`)).redriven;
        notice.replaceChildren(h('div', { class: 'notice', role: 'status' }, `${total} run(s) queued again.`));
        setTimeout(() => go(location.hash), 800);
      } catch (err) {
        notice.replaceChildren(alertBox(err));
      }
    },
  }, 'Redrive all');
  const rows = page.runs.flatMap((run) => {
    const timerId = run.task_key.split(':')[0];
    const detail = h('tr', { hidden: true, class: 'detail' }, h('td', { colspan: 7 },
      h('dl', { class: 'spec' },
        h('dt', {}, 'Task key'), h('dd', {}, h('code', {}, run.task_key)),
        h('dt', {}, 'Timer version'), h('dd', {}, run.timer_version),
        h('dt', {}, 'Last attempt'), h('dd', {}, when(run.fired_at)),
        h('dt', {}, 'Error'), h('dd', {}, h('pre', {}, run.error || '—')),
        h('dt', {}, 'Response'), h('dd', {}, h('pre', {}, run.output || '—')))));
    const inspect = h('button', {
      type: 'button', class: 'quiet', 'aria-expanded': 'false',
      onclick: () => {
        detail.hidden = !detail.hidden;
        inspect.setAttribute('aria-expanded', String(!detail.hidden));
      },
    }, 'Inspect');
    const redrive = h('button', {
      type: 'button',
      'data-key': run.task_key,
      onclick: async () => {
        const ok = await confirmDialog({
          title: 'Redrive this run?',
          text: `Run ${run.task_key} is queued again with a fresh attempt budget.`,
          ok: 'Redrive',
        });
        if (ok === null) return;
        try {
          await api('POST', `/v1/dead-letters/${encodeURIComponent(run.task_key)}/redrive`);
          notice.replaceChildren(h('div', { class: 'notice', role: 'status' }, `Run ${run.task_key} queued again.`));
          redrive.disabled = true;
        } catch (err) {
          notice.replaceChildren(alertBox(err));
        }
      },
    }, 'Redrive');
    return [h('tr', { 'data-timer': timerId },
      h('td', {}, h('a', { href: `#/timers/${timerId}` }, `timer ${timerId}`)),
      h('td', {}, when(run.run_at)),
      h('td', { class: 'num' }, run.attempt),
      h('td', { class: 'num optional' }, run.http_status ?? '—'),
      h('td', { class: 'optional' }, (run.error || '').slice(0, 120)),
      h('td', {}, inspect),
      h('td', {}, redrive)), detail];
  });
  main.append(h('div', { class: 'actions' }, redriveAll),
    h('div', { class: 'table-wrap' }, h('table', { id: 'dead-letters' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Timer'), h('th', {}, 'Run time'), h('th', {}, 'Attempts'),
        h('th', { class: 'optional' }, 'HTTP'), h('th', { class: 'optional' }, 'Error'),
        h('th', {}, h('span', { class: 'muted' }, 'Details')), h('th', {}, h('span', { class: 'muted' }, 'Action')))),
      h('tbody', {}, rows))));
  if (page.next_page_token) {
    const next = new URLSearchParams(query);
    next.set('page', page.next_page_token);
    main.append(h('div', { class: 'pager' }, h('a', { class: 'button quiet', href: `#/dead-letters?${next}` }, 'Next page')));
  }
}

/** The timers with dead runs, over every page. */
async function deadTimerIds(app) {
  const ids = new Set();
  let token = '';
  do {
    const q = new URLSearchParams({ page_size: '1000' });
    if (app) q.set('app', app);
    if (token) q.set('page_token', token);
    const page = await api('GET', `/v1/dead-letters?${q}`);
    for (const run of page.runs) ids.add(run.task_key.split(':')[0]);
    token = page.next_page_token || '';
  } while (token);
  return [...ids];
}

async function timers(main, path, query) {
  if (path[0] === 'new') return timerForm(main, null);
  if (path[0] && path[1] === 'edit') return timerForm(main, path[0]);
  if (path[0]) return timerDetail(main, path[0]);
  return timerList(main, query);
}

async function missing(main) {
  main.append(h('h1', {}, 'Not found'), h('p', {}, 'No such page. ', h('a', { href: '#/overview' }, 'Go to the overview.')));
}

export const views = {
  signin, overview, timers, 'dead-letters': deadLetters, notifications, missing,
};
