// The notifications page: where an app's failed, dead and recovered runs are told, and the
// notifications sent last. Needs a token with the admin scope on the app.
import { api, h, alertBox, when, appFilter } from './app.js';

const EVENTS = [
  ['dead', 'A run went dead (run.dead)'],
  ['failing', 'Runs of a timer failed in a row (timer.failing)'],
  ['recovered', 'A failing timer succeeded again (timer.recovered)'],
];

export async function notifications(main, _path, query) {
  const app = query.get('app') || '';
  main.append(h('h1', {}, 'Notifications'),
    appFilter('notifications', app, { placeholder: 'app', required: true }));
  if (!app) {
    main.append(h('p', { class: 'muted' }, 'Choose an app to see where its failures are told.'));
    return;
  }
  let current = null;
  try {
    current = await api('GET', `/v1/apps/${encodeURIComponent(app)}/notifications`);
  } catch (err) {
    if (err.status !== 404) {
      main.append(alertBox(err));
      return;
    }
  }
  const notice = h('div', { id: 'notifications-notice' });
  const url = h('input', {
    id: 'notify-url', name: 'url', type: 'url', required: true, size: 48,
    value: current ? current.url : '', placeholder: 'https://ops.example.com/chime',
  });
  const boxes = EVENTS.map(([name, label]) => h('label', { class: 'check' },
    h('input', {
      type: 'checkbox', name: 'on', value: name,
      checked: current ? current.on.includes(name) : true,
    }), ` ${label}`));
  const after = h('input', {
    id: 'notify-after', name: 'failing_after', type: 'number', min: 1, max: 1000,
    value: current ? current.failing_after : 3,
  });
  const form = h('form', {
    class: 'panel',
    id: 'notifications-form',
    onsubmit: async (e) => {
      e.preventDefault();
      const on = [...form.querySelectorAll('input[name=on]:checked')].map((b) => b.value);
      try {
        const saved = await api('PUT', `/v1/apps/${encodeURIComponent(app)}/notifications`,
          { url: url.value.trim(), on, failing_after: Number(after.value) });
        notice.replaceChildren(h('div', { class: 'notice', role: 'status' },
          `Saved: ${saved.on.length ? saved.on.join(', ') : 'nothing'} to ${saved.url}.`));
      } catch (err) {
        notice.replaceChildren(alertBox(err));
      }
    },
  },
  h('p', { class: 'muted' }, current
    ? `Set ${new Date(current.updated_at).toLocaleString()}. `
    : 'No notifications are set for this app yet. ',
  'Events are POSTed as JSON, signed like callbacks with the app\'s signing secret.'),
  h('label', { for: 'notify-url' }, 'URL', url),
  h('fieldset', {}, h('legend', {}, 'Tell of'), boxes),
  h('label', { for: 'notify-after' }, 'Failing after (runs in a row)', after),
  h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Save')));
  main.append(notice, form, h('h2', {}, 'Sent lately'));
  const recent = current ? current.recent : [];
  if (!recent.length) {
    main.append(h('p', { class: 'muted', id: 'no-notifications' }, 'Nothing sent yet.'));
    return;
  }
  main.append(h('div', { class: 'table-wrap' }, h('table', { id: 'notifications-sent' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Sent'), h('th', {}, 'Event'), h('th', {}, 'Timer'),
      h('th', {}, 'Run time'), h('th', {}, 'Result'), h('th', { class: 'optional' }, 'Error'))),
    h('tbody', {}, recent.map((s) => h('tr', {},
      h('td', {}, when(s.sent_at)),
      h('td', {}, h('code', {}, s.type)),
      h('td', {}, h('a', { href: `#/timers/${s.timer_id}` }, s.timer_name)),
      h('td', {}, when(s.run_at)),
      h('td', {}, s.delivered
        ? `delivered (${s.attempts} ${s.attempts === 1 ? 'try' : 'tries'})`
        : `not delivered after ${s.attempts} tries: ${s.failure || ''}`),
      h('td', { class: 'optional' }, (s.error || '').slice(0, 120))))))));
}
