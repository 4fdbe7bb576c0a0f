// Browser tests of the web console: the real `chime dev` binary with auth on, headless
// Chromium driven by playwright-core, callbacks received by a loopback sink in this process.
// Run by scripts/console-test.sh (part of `make test`); screenshots go to
// target/console-screenshots/.
import { test as nodeTest, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdirSync, mkdtempSync, rmSync, openSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = process.env.CHIME_BIN || join(ROOT, 'target/debug/chime');
const SHOTS = process.env.CONSOLE_SCREENSHOTS || join(ROOT, 'target/console-screenshots');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ADMIN = 'console-test-admin-token-0123456789';
const APP = 'console';

/** Waits for `check` to return something truthy, or fails after `ms`. */
async function until(what, check, ms = 20000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const got = await check();
    if (got) return got;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// ---- the loopback sink ----------------------------------------------------------------
const sink = { requests: [], failing: true, doomed: true, server: null, url: '' };

function startSink() {
  sink.server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      const failed = (req.url.startsWith('/flaky') && sink.failing) || (req.url.startsWith('/doomed') && sink.doomed)
        || req.url.startsWith('/broken');
      sink.requests.push({ path: req.url, headers: req.headers, status: failed ? 500 : 200 });
      res.writeHead(failed ? 500 : 200, { 'content-type': 'text/plain' });
      res.end(failed ? 'sink says no' : 'ok');
    });
  });
  return new Promise((r) => sink.server.listen(0, '127.0.0.1', () => {
    sink.url = `http://127.0.0.1:${sink.server.address().port}`;
    r();
  }));
}

// ---- chime dev ------------------------------------------------------------------------
async function freePort() {
  const s = createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

const devs = [];

async function startDev(name, env) {
  const dir = mkdtempSync(join(tmpdir(), 'chime-console-'));
  const http = await freePort();
  const grpc = await freePort();
  const log = openSync(join(ROOT, 'target', `console-${name}.log`), 'w');
  const child = spawn(BIN, ['dev', '--memory'], {
    cwd: dir,
    env: {
      PATH: process.env.PATH, CHIME_HTTP_ADDR: `127.0.0.1:${http}`, CHIME_GRPC_ADDR: `127.0.0.1:${grpc}`,
      CHIME_LOG: 'info', ...env,
    },
    stdio: ['ignore', log, log],
  });
  const base = `http://127.0.0.1:${http}`;
  devs.push({ child, dir });
  await until(`${name} ready`, async () => {
    try {
      return (await fetch(`${base}/readyz`)).ok;
    } catch {
      return false;
    }
  });
  return base;
}

/** Calls the REST API as the admin, for setting up and checking, not for what is tested. */
async function rest(base, method, path, body) {
  const resp = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await resp.text();
  assert.ok(resp.ok, `${method} ${path}: ${resp.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

// ---- the browser ----------------------------------------------------------------------
let browser;
let base;
/** Every console error or warning, page error and foreign request, by page. */
const problems = [];

async function newPage(options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, ...options });
  const page = await context.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push({ page: page.url(), text: m.text() });
  });
  page.on('pageerror', (e) => problems.push({ page: page.url(), text: `page error: ${e.message}` }));
  page.on('request', (r) => {
    const origin = new URL(r.url()).origin;
    if (!devs.length || !r.url().startsWith('http://127.0.0.1:')) {
      problems.push({ page: page.url(), text: `request to another origin: ${origin}` });
    }
  });
  return page;
}

/** A page of a new browser context whose tab holds the admin token already. */
async function signedInPage(options) {
  const p = await newPage(options);
  await p.context().addInitScript((t) => sessionStorage.setItem('chime.token', t), ADMIN);
  return p;
}

/** The problems seen since `mark`, but for HTTP statuses a step provoked on purpose. */
function unexpected(mark, allowed = []) {
  return problems.slice(mark).filter((p) => !allowed.some((status) => p.text.includes(`status of ${status}`)));
}

async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

async function signInAs(page, token) {
  await page.goto(`${base}/console`);
  await page.waitForSelector('#token');
  await page.fill('#token', token);
  await page.click('form button[type=submit]');
}

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  await startSink();
  base = await startDev('auth', { CHIME_AUTH: 'required', CHIME_BOOTSTRAP_TOKEN: ADMIN });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close();
  for (const { child, dir } of devs) {
    child.kill('SIGINT');
    await new Promise((r) => (child.exitCode !== null ? r() : child.once('exit', r)));
    rmSync(dir, { recursive: true, force: true });
  }
  sink.server?.close();
});

let page;

// Each test gets its own two minutes; the runner's --test-timeout bounds the whole file, which
// on a slow machine takes longer than any one test (CI once cancelled the last test at 120 s).
const test = (name, fn) => nodeTest(name, { timeout: 120_000 }, fn);

test('the console is served with security headers and no third-party assets', async () => {
  const resp = await fetch(`${base}/console`);
  assert.equal(resp.status, 200);
  const csp = resp.headers.get('content-security-policy');
  assert.match(csp, /script-src 'self'/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.doesNotMatch(csp, /unsafe-inline/);
  assert.equal(resp.headers.get('x-frame-options'), 'DENY');
  assert.equal(resp.headers.get('x-content-type-options'), 'nosniff');
  const html = await resp.text();
  assert.doesNotMatch(html, /<script>|<style>|\sstyle="|\son[a-z]+="/, 'no inline script or style');
  assert.equal((await fetch(`${base}/console/app.js`)).headers.get('content-type'), 'text/javascript; charset=utf-8');
  assert.equal((await fetch(`${base}/console/nothing.js`)).status, 404);
});

test('a wrong token shows a clear message', async () => {
  page = await newPage();
  const mark = problems.length;
  await page.goto(`${base}/console`);
  await page.waitForSelector('#token');
  assert.match(page.url(), /#\/signin$/);
  await shot(page, 'signin');
  await page.fill('#token', 'not-a-real-token');
  await page.click('form button[type=submit]');
  const message = await page.waitForSelector('#signin-message [role=alert]');
  assert.match(await message.textContent(), /token was not accepted/);
  assert.equal(await page.getAttribute('#token', 'aria-invalid'), 'true');
  assert.deepEqual(unexpected(mark, [401]), []);
});

test('signing in with a token opens the overview; the token stays out of URLs and cookies', async () => {
  await page.fill('#token', ADMIN);
  await page.click('form button[type=submit]');
  await page.waitForSelector('#tiles .tile');
  assert.match(page.url(), /#\/overview$/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('chime.token')), ADMIN);
  assert.deepEqual(await page.context().cookies(), []);
  assert.ok(!page.url().includes(ADMIN));
});

let heartbeat;

test('a timer is created through the form, with a live preview and the API\'s messages', async () => {
  const mark = problems.length;
  await page.click('nav a[data-section=new]');
  await page.waitForSelector('#timer-form');
  await page.fill('#f-app', APP);
  await page.fill('#f-name', 'heartbeat');
  await page.check('input[name=kind][value=every]');
  await page.fill('#f-schedule-every', '2s');
  // The preview follows the typing: five runs two seconds apart.
  await until('a preview of 2 s steps', async () => {
    const times = await page.$$eval('#preview time', (ts) => ts.map((t) => Date.parse(t.dateTime)));
    return times.length === 5 && times.every((t, i) => i === 0 || t - times[i - 1] === 2000);
  });
  await page.fill('#f-schedule-every', '2 fortnights');
  await page.waitForSelector('#preview .field-error');
  await page.fill('#f-schedule-every', '2s');
  await page.waitForSelector('#preview li');
  // The API's validation message, next to the field it names.
  await page.fill('#f-callback-url', 'ftp://nowhere');
  await page.click('#save');
  await page.waitForSelector('#form-problem [role=alert]');
  assert.equal(await page.getAttribute('#f-callback-url', 'aria-invalid'), 'true');
  assert.notEqual((await page.textContent('#f-callback-url-error')).trim(), '');
  await shot(page, 'timer-form');
  await page.fill('#f-callback-url', `${sink.url}/ok`);
  await page.fill('#f-labels', 'team=console\ntier=test');
  await page.click('#save');
  await page.waitForURL(/#\/timers\/\d+$/);
  heartbeat = page.url().split('/').pop();
  await page.waitForSelector('h1:has-text("heartbeat")');
  const timer = await rest(base, 'GET', `/v1/timers/${heartbeat}`);
  assert.equal(timer.schedule.every, '2s');
  assert.deepEqual(timer.labels, { team: 'console', tier: 'test' });
  assert.deepEqual(unexpected(mark, [400]), []);
});

test('the new timer is listed with its schedule in words and its next run', async () => {
  const mark = problems.length;
  await page.click('nav a[data-section=timers]');
  await page.fill('#search', 'heart');
  await page.press('#search', 'Enter');
  await page.waitForURL(/name=heart/);
  const row = `#timers tr[data-id="${heartbeat}"]`;
  await page.waitForSelector(row);
  assert.match(await page.textContent(row), /every 2s/);
  assert.match(await page.textContent(row), /enabled/);
  assert.ok(await page.$(`${row} td time`), 'next run shown');
  // The last run's status and lateness, once one has run.
  await until('the last run in the list', async () => {
    await page.reload();
    await page.waitForSelector(`${row} .last-run:not(:has-text("…"))`);
    return /succeeded\s+\d+ m?s/.test(await page.textContent(`${row} .last-run`));
  });
  await shot(page, 'timers');
  // Filters: by label, by state, and another app's name finds nothing.
  await page.goto(`${base}/console#/timers?label=team%3Dconsole`);
  await page.waitForSelector(`#timers tr[data-id="${heartbeat}"]`);
  await page.goto(`${base}/console#/timers?label=team%3Dnobody`);
  await page.waitForSelector('main p.muted:has-text("No timers match")');
  await page.goto(`${base}/console#/timers?state=paused&app=${APP}`);
  await page.waitForSelector('main p.muted:has-text("No timers match")');
  await page.goto(`${base}/console#/timers?app=someone-else`);
  await page.waitForSelector('main p.muted:has-text("No timers match")');
  // Paging: 30 timers of one app are 25 and then 5.
  await rest(base, 'POST', '/v1/timers:batchCreate', {
    requests: Array.from({ length: 30 }, (_, i) => ({
      timer: { app: 'paging', name: `t-${i}`, schedule: { cron: '0 0 3 1 1 *' }, callback: { url: `${sink.url}/never` } },
    })),
  });
  await page.goto(`${base}/console#/timers?app=paging`);
  await page.waitForSelector('#timers tbody tr');
  assert.equal((await page.$$('#timers tbody tr')).length, 25);
  await page.click('.pager a:has-text("Next page")');
  await page.waitForURL(/page=/);
  await until('the second page', async () => (await page.$$('#timers tbody tr')).length === 5);
  await page.click('.pager a:has-text("First page")');
  await until('the first page again', async () => (await page.$$('#timers tbody tr')).length === 25);
  assert.deepEqual(unexpected(mark), []);
});

test('its runs appear in the detail page as they fire against the sink', async () => {
  const mark = problems.length;
  await page.goto(`${base}/console#/timers/${heartbeat}`);
  await page.waitForSelector('#next-runs li');
  await page.waitForSelector('#run-history tr[data-status=succeeded]');
  const received = sink.requests.filter((r) => r.headers['x-chime-timer-id'] === heartbeat);
  assert.ok(received.length >= 1, 'the sink got the callback');
  const cells = await page.$$eval('#run-history tr[data-status=succeeded] td', (tds) => tds.map((td) => td.textContent));
  assert.equal(cells[2], '1', 'attempt');
  assert.equal(cells[3], '200', 'HTTP status');
  assert.match(cells[4], /\d+ m?s/, 'lateness');
  // The run's output (the sink's answer): its first line, the whole of it when opened.
  assert.equal(cells[6].startsWith('ok'), true, `output cell: ${cells[6]}`);
  await page.click('#run-history tr[data-status=succeeded] td.output summary');
  await page.waitForSelector('#run-history tr[data-status=succeeded] td.output details[open] pre');
  assert.match(await page.textContent('#spec'), /Run output\s*kept/);
  await shot(page, 'timer-detail');
  assert.deepEqual(unexpected(mark), []);
});

test('pause with a reason, then resume', async () => {
  const mark = problems.length;
  await page.click('#pause');
  await page.fill('#confirm-reason', 'database maintenance');
  await page.click('#confirm-ok');
  const note = await page.waitForSelector('#paused-note');
  assert.match(await note.textContent(), /database maintenance/);
  assert.equal((await rest(base, 'GET', `/v1/timers/${heartbeat}`)).paused.reason, 'database maintenance');
  assert.match(await page.textContent('h1'), /paused/);
  await page.click('#resume');
  await page.waitForSelector('#pause');
  const timer = await rest(base, 'GET', `/v1/timers/${heartbeat}`);
  assert.equal(timer.state, 'enabled');
  assert.equal(timer.paused, undefined);
  assert.deepEqual(unexpected(mark), []);
});

test('trigger now fires at once', async () => {
  const mark = problems.length;
  // A yearly timer: a callback within seconds can only come from the trigger.
  const yearly = await rest(base, 'POST', '/v1/timers', {
    app: APP, name: 'yearly', schedule: { cron: '0 0 3 1 1 *', time_zone: 'Europe/Berlin' },
    callback: { url: `${sink.url}/triggered` },
  });
  await page.goto(`${base}/console#/timers/${yearly.id}`);
  await page.waitForSelector('#trigger');
  assert.match(await page.textContent('#spec'), /on day 1 of every month|cron 0 0 3 1 1 \*/);
  await page.click('#trigger');
  await page.waitForSelector('#notice [role=status]:has-text("Triggered")');
  await until('the triggered callback', () => sink.requests.some((r) => r.path === '/triggered'));
  await page.waitForSelector('#run-history tr[data-status=succeeded]');
  assert.deepEqual(unexpected(mark), []);
});

test('a timer\'s chain is shown, and the run it starts links back to its parent', async () => {
  const mark = problems.length;
  const schedule = { cron: '0 0 3 1 1 *', time_zone: 'Europe/Berlin' };
  const next = await rest(base, 'POST', '/v1/timers', {
    app: APP, name: 'chain-next', schedule, callback: { url: `${sink.url}/chained` },
  });
  const head = await rest(base, 'POST', '/v1/timers', {
    app: APP, name: 'chain-head', schedule, callback: { url: `${sink.url}/chain-head` },
    then: { on_success: ['chain-next'] },
  });
  await page.goto(`${base}/console#/timers/${head.id}`);
  await page.waitForSelector('#chain');
  assert.equal(await page.textContent('#chain'), 'on success: chain-next');
  await page.click('#trigger');
  await until('the chained callback', () => sink.requests.some((r) => r.path === '/chained'));
  await page.goto(`${base}/console#/timers/${next.id}`);
  await page.waitForSelector('#run-history a.chained');
  assert.equal(await page.getAttribute('#run-history a.chained', 'href'), `#/timers/${head.id}`);
  assert.deepEqual(unexpected(mark), []);
});

test('a worker timer shows its route or its broadcast', async () => {
  const mark = problems.length;
  const schedule = { cron: '0 0 3 1 1 *', time_zone: 'Europe/Berlin' };
  for (const [name, worker, shown] of [
    ['routed-batch', { group: 'batch', route: 'consistent_hash' }, 'worker group batch, route consistent_hash'],
    ['fanout-batch', { group: 'batch', broadcast: true }, 'worker group batch, broadcast to every worker'],
  ]) {
    const t = await rest(base, 'POST', '/v1/timers', { app: APP, name, schedule, callback: { worker } });
    await page.goto(`${base}/console#/timers/${t.id}`);
    await page.waitForSelector('#spec');
    assert.match(await page.textContent('#spec'), new RegExp(`Callback\\s*${shown}`));
  }
  assert.deepEqual(unexpected(mark), []);
});

test('a dead letter is inspected and redriven from the console, then succeeds', async () => {
  const mark = problems.length;
  const flaky = await rest(base, 'POST', '/v1/timers', {
    app: APP, name: 'flaky', schedule: { after: '1s' },
    callback: { url: `${sink.url}/flaky` },
    retry: { max_attempts: 2, initial_backoff: '100ms', max_backoff: '100ms' },
  });
  await until('the dead letter', async () => (await rest(base, 'GET', `/v1/dead-letters?app=${APP}`)).runs.length === 1);
  await page.click('nav a[data-section=dead-letters]');
  const row = await page.waitForSelector(`#dead-letters tr[data-timer="${flaky.id}"]`);
  assert.match(await row.textContent(), /500/);
  await (await row.$('button:has-text("Inspect")')).click();
  await page.waitForSelector('#dead-letters tr.detail:not([hidden]) pre');
  await shot(page, 'dead-letters');
  sink.failing = false;
  await (await row.$('button[data-key]')).click();
  await page.click('#confirm-ok');
  await page.waitForSelector('#dead-notice [role=status]:has-text("queued again")');
  await until('the redriven callback to succeed', () => sink.requests.some((r) => r.path === '/flaky' && r.status === 200));
  await page.goto(`${base}/console#/timers/${flaky.id}`);
  await page.waitForSelector('#run-history tr[data-status=succeeded]');
  await page.goto(`${base}/console#/dead-letters?app=${APP}`);
  await page.waitForSelector('#no-dead');

  // Redrive all: two timers' dead runs at once.
  for (const name of ['doomed-1', 'doomed-2']) {
    await rest(base, 'POST', '/v1/timers', {
      app: APP, name, schedule: { after: '1s' }, callback: { url: `${sink.url}/doomed/${name}` },
      retry: { max_attempts: 1 },
    });
  }
  await until('two dead letters', async () => (await rest(base, 'GET', `/v1/dead-letters?app=${APP}`)).runs.length === 2);
  await page.reload();
  await page.waitForSelector('#dead-letters');
  sink.doomed = false;
  await page.click('#redrive-all');
  await page.click('#confirm-ok');
  await page.waitForSelector('#dead-notice [role=status]:has-text("2 run(s) queued again")');
  await until('both redriven callbacks to succeed', () => ['doomed-1', 'doomed-2']
    .every((n) => sink.requests.some((r) => r.path === `/doomed/${n}` && r.status === 200)));
  await page.waitForSelector('#no-dead');
  assert.deepEqual(unexpected(mark), []);
});

test('failure notifications are set from the console and the sent ones listed', async () => {
  const mark = problems.length;
  await page.click('nav a[data-section=notifications]');
  await page.fill('input[name=app]', APP);
  await page.click('form.filters button[type=submit]');
  await page.waitForSelector('#notifications-form:has-text("No notifications are set")');
  await page.fill('#notify-url', `${sink.url}/hooks`);
  await page.uncheck('input[name=on][value=recovered]');
  await page.fill('#notify-after', '1');
  await page.click('#notifications-form button[type=submit]');
  await page.waitForSelector('#notifications-notice [role=status]:has-text("Saved: dead, failing")');
  const saved = await rest(base, 'GET', `/v1/apps/${APP}/notifications`);
  assert.deepEqual([saved.on, saved.failing_after], [['dead', 'failing'], 1]);

  // Every second, as executors read an app's settings again within 5 s of a change.
  const broken = await rest(base, 'POST', '/v1/timers', {
    app: APP, name: 'broken', schedule: { every: '1s' }, callback: { url: `${sink.url}/broken` },
    retry: { max_attempts: 1 },
  });
  await until('run.dead and timer.failing at the URL', () => sink.requests.filter((r) => r.path === '/hooks').length >= 2);
  await rest(base, 'DELETE', `/v1/timers/${broken.id}`);
  const hook = sink.requests.find((r) => r.path === '/hooks');
  assert.ok(hook.headers['webhook-signature'].startsWith('v1,'), 'signed');
  await page.reload();
  await until('both listed', async () => (await page.$$('#notifications-sent tbody tr')).length >= 2);
  const listed = await page.textContent('#notifications-sent');
  assert.match(listed, /run\.dead/);
  assert.match(listed, /timer\.failing/);
  assert.match(listed, /delivered \(1 try\)/);
  await shot(page, 'notifications');
  assert.deepEqual(unexpected(mark, [404]), []);
});

test('the overview charts the last hour from the executors\' tallies', async () => {
  const mark = problems.length;
  await page.click('nav a[data-section=overview]');
  // Tallies are written every 5 s; the page polls every 5 s.
  await until('firings on the overview', async () => {
    const fired = await page.textContent('#tile-fired .value').catch(() => '0');
    return Number(fired.replace(/\D/g, '')) > 0;
  }, 30000);
  await page.waitForSelector('#chart-rate svg path.line-1', { state: 'attached' });
  await page.waitForSelector('#chart-lateness svg .line-2', { state: 'attached' });
  await until('a failure bar', () => page.$('#chart-failures svg rect.bar-3'), 15000);
  assert.notEqual((await page.textContent('#tile-p99 .value')).trim(), '—');
  await shot(page, 'overview');
  assert.deepEqual(unexpected(mark), []);
});

test('keyboard: the skip link and the sections are reachable with Tab and Enter', async () => {
  const mark = problems.length;
  await page.goto(`${base}/console#/overview`);
  await page.reload();
  await page.waitForSelector('#tiles .tile');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Skip to content');
  for (let i = 0; i < 10; i++) {
    if (await page.evaluate(() => document.activeElement.dataset?.section === 'timers')) break;
    await page.keyboard.press('Tab');
  }
  await page.keyboard.press('Enter');
  await page.waitForURL(/#\/timers$/);
  await page.waitForSelector('#timers');
  assert.deepEqual(unexpected(mark), []);
});

test('a phone screen and the system\'s dark mode', async () => {
  const mark = problems.length;
  const phone = await signedInPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  await phone.goto(`${base}/console#/timers`);
  await phone.waitForSelector('#timers');
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page is ${overflow} px wider than the phone`);
  await shot(phone, 'timers-phone');
  await phone.context().close();

  const dark = await signedInPage({ colorScheme: 'dark' });
  await dark.goto(`${base}/console#/overview`);
  await dark.waitForSelector('#tiles .tile');
  const bg = await dark.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const [r, g, b] = bg.match(/\d+/g).map(Number);
  assert.ok(r + g + b < 150, `dark background expected, got ${bg}`);
  await shot(dark, 'overview-dark');
  await dark.context().close();
  assert.deepEqual(unexpected(mark), []);
});

test('edit and delete, with a confirmation', async () => {
  const mark = problems.length;
  await page.goto(`${base}/console#/timers/${heartbeat}/edit`);
  await page.waitForSelector('#timer-form');
  assert.equal(await page.inputValue('#f-schedule-every'), '2s');
  await page.fill('#f-schedule-every', '3s');
  await page.click('#save');
  await page.waitForURL(/#\/timers\/\d+$/);
  assert.equal((await rest(base, 'GET', `/v1/timers/${heartbeat}`)).schedule.every, '3s');
  await page.waitForSelector('#delete');
  await page.click('#delete');
  await page.click('dialog button[value=cancel]');
  assert.ok(await rest(base, 'GET', `/v1/timers/${heartbeat}`), 'cancel keeps it');
  await page.click('#delete');
  await page.click('#confirm-ok');
  await page.waitForURL(/#\/timers$/);
  const gone = await fetch(`${base}/v1/timers/${heartbeat}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  assert.equal(gone.status, 404);
  assert.deepEqual(unexpected(mark), []);
});

test('with auth off (chime dev) the console opens without signing in', async () => {
  const open = await startDev('open', {});
  const mark = problems.length;
  const p = await newPage();
  await p.goto(`${open}/console`);
  await p.waitForSelector('#tiles .tile');
  assert.equal(await p.$('#token'), null);
  assert.equal(await p.isHidden('#sign-out'), true);
  await p.context().close();
  assert.deepEqual(unexpected(mark), []);
});

test('no page showed an error it was not meant to', () => {
  // Each test checked its own stretch; this catches anything logged between them.
  // An app without notification settings is a 404 its page explains.
  const stray = problems.filter((p) => !/status of (400|401)/.test(p.text)
    && !(p.page.includes('#/notifications') && /status of 404/.test(p.text)));
  assert.deepEqual(stray, []);
});
