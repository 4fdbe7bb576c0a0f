// Chime console: a small single-page app over the REST API. No framework and no build step:
// the gateway serves these files from its binary. The token lives in sessionStorage only.
import { views } from './views.js';

const TOKEN_KEY = 'chime.token';

export const session = {
  /** Whether the gateway checks tokens (`chime dev` usually does not). */
  auth: true,
  token: sessionStorage.getItem(TOKEN_KEY),
  /** Why the operator was sent to sign in, shown there once. */
  reason: null,
};

export function signIn(token) {
  session.token = token;
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function signOut(reason) {
  session.token = null;
  session.reason = reason || null;
  sessionStorage.removeItem(TOKEN_KEY);
  go('#/signin');
}

/** A failed API call, with the problem+json body the API answered. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

/** Calls the REST API; resolves to the JSON body, rejects with an ApiError. */
export async function api(method, path, body, token = session.token) {
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, { title: 'Chime is not reachable', detail: `Chime did not answer: ${e.message}` });
  }
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { detail: text };
  }
  if (!resp.ok) {
    const err = new ApiError(resp.status, data || {});
    if (resp.status === 401 && token && token === session.token) {
      signOut('Your token is no longer accepted. Sign in again.');
    }
    throw err;
  }
  return data;
}

/** Builds an element: h('a', {href: '#/x', class: 'y'}, 'text', child…). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** A form choosing one app for the page at `section` (`#/section?app=…`). */
export function appFilter(section, app, { placeholder = 'every app', button = 'Show', required = false } = {}) {
  const input = h('input', { name: 'app', value: app, placeholder, size: 16, required });
  return h('form', {
    class: 'filters',
    onsubmit: (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      if (input.value.trim()) q.set('app', input.value.trim());
      go(`#/${section}${q.size ? `?${q}` : ''}`);
    },
  }, h('label', {}, 'App', input), h('button', { type: 'submit', class: 'quiet' }, button));
}

/** A status word as a coloured badge. */
export function badge(status) {
  return h('span', { class: `status s-${status}` }, status);
}

/** A message box for an error, saying what the API said. */
export function alertBox(err) {
  const p = err.problem || {};
  const what = p.field ? `${p.field}: ` : '';
  return h('div', { class: 'alert', role: 'alert' }, p.title && p.status ? `${p.title}. ` : '', what,
    p.detail || err.message);
}

/** An instant as the browser's local date and time, with UTC in its tooltip. */
export function when(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return h('time', { datetime: iso, title: iso }, d.toLocaleString());
}

export function ms(n) {
  if (n === undefined || n === null) return '—';
  return n >= 1000 ? `${(n / 1000).toFixed(n >= 10000 ? 0 : 1)} s` : `${n} ms`;
}

/** Asks for confirmation in the page's dialog; resolves to the reason text, or null when cancelled. */
export function confirmDialog({ title, text, ok = 'OK', danger = false, reason = false }) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const okButton = document.getElementById('confirm-ok');
  okButton.textContent = ok;
  okButton.className = danger ? 'danger' : '';
  const reasonLabel = document.getElementById('confirm-reason-label');
  const reasonInput = document.getElementById('confirm-reason');
  reasonLabel.hidden = !reason;
  reasonInput.value = '';
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      resolve(dialog.returnValue === 'ok' ? reasonInput.value.trim() : null);
    }, { once: true });
    dialog.returnValue = 'cancel';
    dialog.showModal();
    (reason ? reasonInput : okButton).focus();
  });
}

export function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

/** `#/timers/12?app=x` → { path: ['timers', '12'], query: URLSearchParams }. */
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query = ''] = raw.split('?');
  return { path: path.split('/').filter(Boolean), query: new URLSearchParams(query) };
}

let cleanup = null;

async function route() {
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  const { path, query } = parseHash();
  const main = document.getElementById('main');
  const signedIn = !session.auth || session.token;
  const section = path[0] || 'overview';
  if (!signedIn && section !== 'signin') {
    go('#/signin');
    return;
  }
  document.getElementById('nav').hidden = !signedIn;
  document.getElementById('sign-out').hidden = !(session.auth && session.token);
  const view = views[section] || views.missing;
  const current = section === 'timers' && path[1] === 'new' ? 'new' : section;
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.section === current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  main.replaceChildren();
  try {
    cleanup = (await view(main, path.slice(1), query)) || null;
  } catch (err) {
    main.replaceChildren(h('h1', {}, 'Something went wrong'), alertBox(err));
  }
  document.title = `${main.querySelector('h1')?.textContent || 'Console'} · Chime`;
}

async function start() {
  try {
    const config = await (await fetch('/console/config.json')).json();
    session.auth = config.auth;
  } catch {
    session.auth = true;
  }
  document.getElementById('sign-out').addEventListener('click', () => signOut());
  window.addEventListener('hashchange', route);
  route();
}

start();
