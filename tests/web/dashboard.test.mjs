// The dashboard in a real browser against a real server holding real runs.
//
// 1. Starts build/bin/heapstore-server on 127.0.0.1 with a free port and a
//    fresh database, serving the build's share/heapstore/web.
// 2. Records a process tree, tests/queries/tree/wl_tree.c (a root that forks
//    and execs two children of known peaks), then two runs of
//    tests/web/workload.c under the real collector, every allocation sampled
//    (HEAPSTORE_SAMPLE_BYTES=1): web_fixed (version=fixed), then web_leaky
//    (version=leaky), so the numbers are known exactly.
// 3. Drives headless Chromium (playwright-core, /usr/bin/chromium) through the
//    views and checks what a reader would: the runs list, the plot, the flame
//    graph at the peak, the diff, the leaks, a deep link. Screenshots go to
//    <build>/tests/web-screens/.
//
// Run by ctest (tests/web/CMakeLists.txt) or by hand: HS_BUILD_DIR=build node
// tests/web/dashboard.test.mjs. Prints "N passed, N failed" last.

import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SRC = process.env.HS_SOURCE_DIR || path.resolve(HERE, '../..');
const BUILD = path.resolve(process.env.HS_BUILD_DIR || path.join(SRC, 'build'));
// HS_SERVER: another server binary (e.g. a sanitizer build's) to test against.
const SERVER = process.env.HS_SERVER || path.join(BUILD, 'bin/heapstore-server');
const COLLECTOR = path.join(BUILD, 'lib/libheapstore.so');
const WEB_ROOT = path.join(BUILD, 'share/heapstore/web');
const LEAKY = path.join(BUILD, 'tests/web_leaky');
const FIXED = path.join(BUILD, 'tests/web_fixed');
const TREE = path.join(BUILD, 'tests/wl_tree'); // tests/queries/tree/wl_tree.c
const SCREENS = path.join(BUILD, 'tests/web-screens');
const CHROMIUM = process.env.HS_CHROMIUM || '/usr/bin/chromium';

// What workload.c allocates (see its header).
const BIGGEST_AT_PEAK = 'load_table';
const LEAKING = 'remember_request';
const LEAK_BYTES = 40 * 64 * 1024;
const TABLE_BYTES = 8 * 1024 * 1024;

let passed = 0;
let failed = 0;
const cleanups = [];

function log(...a) { console.log('[web]', ...a); }

async function check(name, fn) {
  try {
    await fn();
    passed++;
    log(`ok   ${name}`);
  } catch (err) {
    failed++;
    log(`FAIL ${name}: ${err && err.stack ? err.stack : err}`);
  }
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// playwright-core as package-lock.json pins it: `npm ci` (the npm registry
// only; the browser is Debian's) when node_modules is missing or holds
// another version, e.g. on a fresh clone.
async function loadPlaywright() {
  const lock = JSON.parse(fs.readFileSync(path.join(HERE, 'package-lock.json'), 'utf8'));
  const want = lock.packages['node_modules/playwright-core'].version;
  const pkg = path.join(HERE, 'node_modules/playwright-core/package.json');
  let have = null;
  try { have = JSON.parse(fs.readFileSync(pkg, 'utf8')).version; } catch { /* not installed */ }
  if (have !== want) {
    log(`npm ci (playwright-core ${have || 'missing'}, package-lock.json wants ${want})`);
    execFileSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: HERE, stdio: 'inherit' });
  }
  return import(path.join(HERE, 'node_modules/playwright-core/index.mjs'));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Generous limits: the suite runs under ctest -j2 next to stress tests on a
// slow shared machine. Nothing here is a measure of speed; each is only how
// long to keep trying before calling something broken.
const SERVER_START_MS = 60000; // until the server is ready and /api/health answers
const FETCH_RETRY_MS = 60000; // a request that fails to connect is retried this long
const RECORD_MS = 180000; // one workload run under the collector
const RUNS_END_MS = 120000; // until the server has seen both runs end
const BROWSER_MS = 90000; // any single wait in the browser

let server = null; // {child, logFile}, for the error messages

function serverLog() {
  if (!server) return '';
  try {
    const text = fs.readFileSync(server.logFile, 'utf8');
    return `\n--- heapstore-server log (last lines) ---\n${text.split('\n').slice(-40).join('\n')}`;
  } catch { return ''; }
}

function describeFetchError(err) {
  const c = err && err.cause;
  return `${err && err.message}${c ? ` (${c.code || ''} ${c.message || c})` : ''}`;
}

// fetch(), retried while the connection itself fails (refused, reset, a
// socket the server closed under us) until FETCH_RETRY_MS have passed. An
// HTTP answer, whatever its status, is returned: only GETs go through here,
// so a retry cannot do anything twice.
async function fetchRetry(url, init = {}) {
  const until = Date.now() + FETCH_RETRY_MS;
  let delay = 50;
  for (let attempt = 1; ; attempt++) {
    if (server && (server.child.exitCode !== null || server.child.signalCode !== null)) {
      throw new Error(`heapstore-server exited (${server.child.exitCode ?? server.child.signalCode}) before ${url}${serverLog()}`);
    }
    try {
      return await fetch(url, { ...init, signal: AbortSignal.timeout(FETCH_RETRY_MS) });
    } catch (err) {
      if (Date.now() >= until) {
        throw new Error(`${url}: ${describeFetchError(err)}, still failing after ${attempt} tries${serverLog()}`);
      }
    }
    await sleep(delay);
    delay = Math.min(delay * 2, 1000);
  }
}

async function getJson(base, p) {
  const res = await fetchRetry(base + p);
  const text = await res.text();
  if (!res.ok) throw new Error(`${p}: HTTP ${res.status} ${text.slice(0, 200)}`);
  return JSON.parse(text);
}

// The server picks its own port (--listen 127.0.0.1:0) and writes it to the
// descriptor given by --ready-fd (here 3, a pipe) once it accepts
// connections: no window in which another test could take a port picked for
// it, and no reading of its log. Its stderr is copied to server.log.
async function startServer(tmp) {
  const db = path.join(tmp, 'web.db');
  const logFile = path.join(tmp, 'server.log');
  const out = fs.createWriteStream(logFile);
  const child = spawn(SERVER, ['--db', db, '--listen', '127.0.0.1:0', '--granularity', '100ms',
    '--web-root', WEB_ROOT, '--ready-fd', '3'], { stdio: ['ignore', 'pipe', 'pipe', 'pipe'] });
  server = { child, logFile };
  cleanups.push(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM'); });
  child.stdout.on('data', (chunk) => out.write(chunk));
  child.stderr.on('data', (chunk) => out.write(chunk));
  const port = await new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(
      `heapstore-server was not ready within ${SERVER_START_MS / 1000} s${serverLog()}`)), SERVER_START_MS);
    child.stdio[3].on('data', (chunk) => {
      seen += chunk.toString();
      const m = /^(\d+)\n/.exec(seen);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    child.once('error', (err) => { clearTimeout(timer); reject(err); });
    child.once('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`heapstore-server exited (${code ?? sig}) before it was ready${serverLog()}`));
    });
  });
  const base = `http://127.0.0.1:${port}`;
  const until = Date.now() + SERVER_START_MS;
  for (;;) {
    try {
      const h = await getJson(base, '/api/health');
      if (h.ok) return { base, port, child, logFile };
    } catch (err) {
      if (Date.now() >= until) throw err;
    }
    if (Date.now() >= until) throw new Error(`/api/health never said ok${serverLog()}`);
    await sleep(200);
  }
}

function record(prog, port, labels, { args = [], code: want = 0, env = {} } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(prog, args, {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: {
        ...process.env,
        LD_PRELOAD: COLLECTOR,
        HEAPSTORE_URL: `tcp://127.0.0.1:${port}`,
        HEAPSTORE_SAMPLE_BYTES: '1',
        HEAPSTORE_LABELS: labels,
        ...env,
      },
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${prog} did not finish within ${RECORD_MS / 1000} s${serverLog()}`));
    }, RECORD_MS);
    child.on('error', (err) => { clearTimeout(timer); reject(err); });
    child.on('exit', (code, sig) => {
      clearTimeout(timer);
      if (code === want) resolve();
      else reject(new Error(`${prog} exited ${code ?? sig}${serverLog()}`));
    });
  });
}

// Wait until the server has at least n runs and has seen every one of them
// end: a run is final once its state is no longer "open".
async function waitForRuns(base, n) {
  const until = Date.now() + RUNS_END_MS;
  let last = null;
  for (;;) {
    last = await getJson(base, '/api/runs');
    const final = last.runs.filter((r) => r.state !== 'open');
    if (final.length >= n && final.length === last.runs.length) return last.runs;
    if (Date.now() >= until) break;
    await sleep(200);
  }
  throw new Error(`runs did not end within ${RUNS_END_MS / 1000} s: ${JSON.stringify(last).slice(0, 500)}${serverLog()}`);
}

// Wait until the view of the page's current URL is built: the dashboard sets
// body[data-hash] to the URL a finished view shows (js/app.js), so a view
// left over from before a click never passes for the new one.
async function waitReady(page) {
  await page.waitForFunction(
    () => document.body.dataset.state !== 'loading' && document.body.dataset.hash === location.hash,
    null, { timeout: BROWSER_MS });
  const state = await page.evaluate(() => document.body.dataset.state);
  if (state !== 'ready') {
    const msg = await page.locator('#error').innerText().catch(() => '');
    throw new Error(`the view did not load: ${msg}`);
  }
}

// The tooltip's text once it shows something matching re (the pointer has
// just been moved; the browser may not have handled the move yet).
async function tipText(page, re) {
  try {
    await page.waitForFunction((src) => {
      const t = document.getElementById('tip');
      return !t.hidden && new RegExp(src).test(t.innerText);
    }, re.source, { timeout: BROWSER_MS });
  } catch { /* reported by the caller's assertion, with the text */ }
  return page.locator('#tip').innerText();
}

// keepTip: leave the pointer where it is, so the picture shows the tooltip.
async function shot(page, name, { keepTip = false } = {}) {
  if (!keepTip) await page.mouse.move(0, 0); // no tooltip left over in the picture
  await page.screenshot({ path: path.join(SCREENS, name + '.png'), fullPage: !keepTip });
}

async function main() {
  for (const f of [SERVER, COLLECTOR, LEAKY, FIXED, TREE, path.join(WEB_ROOT, 'index.html'), CHROMIUM]) {
    if (!fs.existsSync(f)) throw new Error(`missing ${f} (build the tree; chromium: apt-get install chromium)`);
  }
  const { chromium } = await loadPlaywright();
  fs.mkdirSync(SCREENS, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'hs-web-'));
  cleanups.push(() => fs.rmSync(tmp, { recursive: true, force: true }));

  const srv = await startServer(tmp);
  log(`server on ${srv.base}`);
  // wl_tree big allocates 86 frames deep: recorded whole, longer than an
  // answer's default 64 frames
  await record(TREE, srv.port, 'suite=tree', { args: ['root'], code: 3, env: { HEAPSTORE_DEPTH: '128' } });
  await record(FIXED, srv.port, 'version=fixed,suite=web');
  await record(LEAKY, srv.port, 'version=leaky,suite=web');
  // the tree: its root, the root's two fork children (before their exec), small, big
  const runs = await waitForRuns(srv.base, 2 + 5);
  const leaky = runs.find((r) => r.labels && r.labels.version === 'leaky');
  const fixed = runs.find((r) => r.labels && r.labels.version === 'fixed');
  assert(leaky && fixed, `both runs are listed with their labels: ${JSON.stringify(runs).slice(0, 400)}`);
  const treeRuns = runs.filter((r) => r.labels && r.labels.suite === 'tree');
  const treeRun = (mode) => treeRuns.find((r) => r.argv[1] === mode && r.peak_bytes > 0);
  const tree = { runs: treeRuns, root: treeRun('root'), small: treeRun('small'), big: treeRun('big') };
  assert(tree.root && tree.small && tree.big && tree.root.parent_id === null,
    `the process tree's runs: ${JSON.stringify(treeRuns).slice(0, 400)}`);
  log(`runs: leaky #${leaky.id}, fixed #${fixed.id}, tree #${tree.root.id} (${treeRuns.length} runs)`);

  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  cleanups.unshift(() => browser.close());
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  context.setDefaultTimeout(BROWSER_MS);
  context.setDefaultNavigationTimeout(BROWSER_MS);
  const page = await context.newPage();
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
  // Nothing may be fetched from anywhere but the server.
  const foreign = [];
  await context.route('**/*', (route) => {
    const u = route.request().url();
    if (u.startsWith(srv.base + '/') || u.startsWith('data:') || u.startsWith('blob:')) return route.continue();
    foreign.push(u);
    return route.abort();
  });

  const ctx = { srv, runs, leaky, fixed, tree, context, page, pageErrors, foreign };
  const groups = [checkServedAndListed, checkRunFilters, checkRunsCharts, checkPickAndPlot, checkFlame,
    checkUrlAndTable, checkTableStacks, checkDiffs, checkLeaks, checkDownloads];
  for (const checks of groups) {
    await checks(ctx);
  }
}

// The server serves the dashboard; the runs list.
async function checkServedAndListed(ctx) {
  const { srv, page, leaky, fixed, runs } = ctx;
  await check('the server serves the dashboard with content types and caching headers', async () => {
    const want = [['/', /^text\/html/], ['/js/app.js', /^text\/javascript/], ['/style.css', /^text\/css/]];
    for (const [p, type] of want) {
      const res = await fetchRetry(srv.base + p);
      const ct = res.headers.get('content-type') || '';
      const cc = res.headers.get('cache-control') || '';
      const etag = res.headers.get('etag');
      assert(res.ok, `GET ${p} → ${res.status}`);
      assert(type.test(ct), `${p}: content-type ${ct}`);
      assert(cc && etag, `${p}: a file is cached by validation: cache-control "${cc}", etag ${etag}`);
      if (p === '/') assert(/no-cache/.test(cc), `the page is revalidated on each load: ${cc}`);
      // The ETag lets the browser revalidate: the same file again is a 304.
      const again = await fetchRetry(srv.base + p, { headers: { 'If-None-Match': etag } });
      assert(again.status === 304, `${p} with If-None-Match: ${again.status}`);
    }
    // A client-side route gets the page; the API is never cached.
    const deep = await fetchRetry(srv.base + '/runs/1');
    assert(deep.ok && /^text\/html/.test(deep.headers.get('content-type') || ''), `GET /runs/1: ${deep.status}`);
    const api = await fetchRetry(srv.base + '/api/runs');
    assert(/^application\/json/.test(api.headers.get('content-type') || ''), `api content-type ${api.headers.get('content-type')}`);
    assert(/no-store/.test(api.headers.get('cache-control') || ''), `api cache-control ${api.headers.get('cache-control')}`);
  });

  await check('the runs list shows both runs, newest first, with their numbers', async () => {
    await page.goto(srv.base + '/#/runs');
    await waitReady(page);
    const ids = await page.$$eval('table.runs tbody tr', (trs) => trs.map((tr) => Number(tr.dataset.run)));
    assert(ids[0] === leaky.id && ids.includes(fixed.id), `rows ${ids}`);
    const row = await page.locator(`table.runs tr[data-run="${leaky.id}"]`).innerText();
    assert(row.includes('web_leaky'), `row names the program: ${row}`);
    assert(row.includes('version=leaky'), `row shows the label: ${row}`);
    const state = await page.locator(`table.runs tr[data-run="${leaky.id}"] .state`).innerText();
    assert(state === 'clean', `row says the run ended cleanly: ${state}`);
    await shot(page, '1-runs');
  });
}

// The runs list filters; a process tree folds under its root.
async function checkRunFilters(ctx) {
  const { srv, page, leaky, fixed, tree, runs } = ctx;
  await check('the runs list filters by label, program and host', async () => {
    const rows = () => page.$$eval('table.runs tbody tr[data-run]', (trs) => trs.map((tr) => Number(tr.dataset.run)));
    await page.goto(srv.base + '/#/runs?label=version%3Dfixed');
    await waitReady(page);
    let ids = await rows();
    assert(ids.length === 1 && ids[0] === fixed.id, `label=version=fixed: rows ${ids}`);
    // The form makes the same kind of link.
    await page.goto(srv.base + '/#/runs');
    await waitReady(page);
    await page.fill('input[name="program"]', 'web_leaky');
    await page.click('form.filters button[type="submit"]');
    await waitReady(page);
    assert(/program=web_leaky/.test(page.url()), `the filter is in the URL: ${page.url()}`);
    ids = await rows();
    assert(ids.length === 1 && ids[0] === leaky.id, `program=web_leaky: rows ${ids}`);
    await page.goto(`${srv.base}/#/runs?host=${encodeURIComponent(leaky.host)}`);
    await waitReady(page);
    ids = await rows();
    // the two runs and the tree's root (its processes folded under it)
    assert(ids.length === 3 && ids.includes(tree.root.id), `host=${leaky.host}: rows ${ids}`);
    await page.goto(`${srv.base}/#/runs?host=no-such-host`);
    await waitReady(page);
    ids = await rows();
    assert(ids.length === 0, `host=no-such-host: rows ${ids}`);
  });

  await check('the runs page folds a process tree under its root, largest peak first', async () => {
    const n = tree.runs.length;
    const listed = () => page.$$eval('table.runs tbody tr', (trs) => trs.map((tr) => tr.dataset.run || tr.className));
    await page.goto(srv.base + '/#/runs');
    await waitReady(page);
    const rootRow = page.locator(`table.runs tr[data-run="${tree.root.id}"]`);
    const toggle = rootRow.locator('button[data-act="tree"]');
    const text = await rootRow.innerText();
    assert(text.includes(`${n} processes`) && text.includes('largest 3.00 MiB (wl_tree)'),
      `the root row shows the tree's size and largest peak: ${text}`);
    let rows = await listed();
    assert(!rows.includes(String(tree.big.id)) && !rows.includes(String(tree.small.id)), `members folded: ${rows}`);
    await toggle.click();
    await page.waitForSelector('tr.tree-member');
    rows = await listed();
    const at = rows.indexOf(String(tree.root.id));
    // under the root: the processes with samples, largest peak first, then
    // the fork children that sampled nothing before their exec, in one row
    assert(rows[at + 1] === String(tree.big.id) && rows[at + 2] === String(tree.small.id) && rows[at + 3] === 'tree-fold',
      `rows under the root: ${rows.slice(at, at + 4)}`);
    const fold = await page.locator('tr.tree-fold').innerText();
    assert(fold.includes(`${n - 3} more processes without samples: wl_tree×${n - 3}`), `fold row: ${fold}`);
    assert(new RegExp(`open=${tree.root.id}`).test(page.url()), `the open tree is in the URL: ${page.url()}`);
    await shot(page, '1b-runs-tree');
    await page.click('tr.tree-fold button[data-act="tree-all"]');
    assert(await page.locator('tr.tree-member').count() === n - 1, 'every process listed');
    await toggle.click();
    assert(await page.locator('tr.tree-member').count() === 0, 'closed again');
    // a link with the tree open reopens it
    await page.goto(`${srv.base}/#/runs?open=${tree.root.id}`);
    await waitReady(page);
    assert(await page.locator('tr.tree-member').count() === 2, 'reopened from the URL');
  });
}

// A metric per run, the trend by a label, paging.
async function checkRunsCharts(ctx) {
  const { srv, page, leaky, fixed, runs } = ctx;
  await check('the runs page charts a metric per run: a point per run, a click opens it', async () => {
    await page.goto(srv.base + '/#/runs');
    await waitReady(page);
    const ids = await page.$$eval('svg.trend-chart circle.trend-point', (cs) => cs.map((c) => Number(c.dataset.run)));
    assert(ids.length === runs.length && runs.every((r) => ids.includes(r.id)),
      `one point per run: ${ids.length} points for ${runs.length} runs (${ids})`);
    await shot(page, '1c-runs-trend');
    await page.click(`svg.trend-chart circle[data-run="${leaky.id}"]`);
    await waitReady(page);
    assert(new RegExp(`#/run/${leaky.id}$`).test(page.url()), `the point opens its run: ${page.url()}`);
  });

  await check('the trend by a label: two groups picked open their diff', async () => {
    await page.goto(srv.base + '/#/runs?by=version&metric=end_bytes');
    await waitReady(page);
    const values = await page.$$eval('svg.trend-chart circle.trend-point', (cs) => cs.map((c) => c.dataset.value));
    assert(values.join() === 'fixed,leaky', `one point per version, in order: ${values}`);
    await page.click('svg.trend-chart circle[data-value="fixed"]');
    assert(await page.locator('svg.trend-chart circle.picked').count() === 1, 'the first group is marked');
    await page.click('svg.trend-chart circle[data-value="leaky"]');
    await page.waitForFunction(() => location.hash.startsWith('#/diff'), null, { timeout: BROWSER_MS });
    const hp = new URLSearchParams(new URL(page.url()).hash.split('?')[1]);
    assert(hp.get('a') === 'version=fixed' && hp.get('b') === 'version=leaky', `diff of the groups: ${page.url()}`);
  });

  await check('the runs table pages: before= lists the older runs, with a way back', async () => {
    await page.goto(`${srv.base}/#/runs?before=${fixed.id}`);
    await waitReady(page);
    const ids = await page.$$eval('table.runs tbody tr[data-run]', (trs) => trs.map((tr) => Number(tr.dataset.run)));
    assert(ids.length && ids.every((id) => id < fixed.id), `only runs older than #${fixed.id}: ${ids}`);
    await page.click('.pager a[data-act="newest"]');
    await waitReady(page);
    const first = await page.$$eval('table.runs tbody tr[data-run]', (trs) => Number(trs[0].dataset.run));
    assert(first === leaky.id && !/before=/.test(page.url()), `back to the newest: ${first} ${page.url()}`);
  });
}

// Ranges of runs picked by dragging; the run view's plot.
async function checkPickAndPlot(ctx) {
  const { srv, page, leaky, runs, pageErrors } = ctx;
  await check('dragging across the points picks two ranges of runs for a diff', async () => {
    await page.goto(srv.base + '/#/runs');
    await waitReady(page);
    const box = await page.locator('svg.trend-chart').boundingBox();
    const xs = await page.$$eval('svg.trend-chart circle.trend-point', (cs) =>
      cs.map((c) => ({ id: Number(c.dataset.run), x: c.getBoundingClientRect().x + c.getBoundingClientRect().width / 2 })));
    xs.sort((p, q) => p.x - q.x);
    const y = box.y + box.height / 2;
    const drag = async (x0, x1) => {
      await page.mouse.move(x0, y);
      await page.mouse.down();
      await page.mouse.move((x0 + x1) / 2, y, { steps: 4 });
      await page.mouse.move(x1, y, { steps: 4 });
      await page.mouse.up();
    };
    // around the first point, then around the last: the runs within 3 px
    const a0 = xs[0].x - 3, a1 = xs[0].x + 3;
    const b0 = xs[xs.length - 1].x - 3, b1 = xs[xs.length - 1].x + 3;
    const errorsBefore = pageErrors.length;
    await drag(a0, a1);
    await drag(b0, b1);
    await page.waitForFunction(() => location.hash.startsWith('#/diff'), null, { timeout: BROWSER_MS });
    await waitReady(page).catch(() => {});
    // The diff view answers id=A..B once the group diff reads such
    // selectors; until then its 400 is not this check's business.
    pageErrors.splice(errorsBefore, pageErrors.length - errorsBefore,
      ...pageErrors.slice(errorsBefore).filter((m) => !/status of 400|run selector 'id=/.test(m)));
    const hp = new URLSearchParams(new URL(page.url()).hash.split('?')[1]);
    const first = xs.filter((p) => p.x >= a0 && p.x <= a1).map((p) => p.id);
    const last = xs.filter((p) => p.x >= b0 && p.x <= b1).map((p) => p.id);
    assert(hp.get('a') === `id=${Math.min(...first)}..${Math.max(...first)}` &&
      hp.get('b') === `id=${Math.min(...last)}..${Math.max(...last)}`, `diff of two id ranges: ${page.url()}`);
  });

  await check('the run view draws the plot', async () => {
    await page.goto(srv.base + '/#/runs');
    await waitReady(page);
    await page.click(`table.runs tr[data-run="${leaky.id}"] a.prog`);
    await waitReady(page);
    const ink = await page.evaluate(() => window.heapstore.plot.inkedPixels());
    assert(ink > 5000, `the plot canvas has ${ink} drawn pixels`);
    // The top stacks' series are fetched after the heap: wait for them.
    await page.waitForSelector('.plot-box[data-stacks="ready"]');
    const names = await page.$$eval('.legend-item', (els) => els.map((e) => e.textContent));
    assert(names.some((n) => /live heap \(exact\)/.test(n)), `every allocation sampled: the heap is exact: ${names}`);
    assert(names.some((n) => /RSS/.test(n)), `the plot has RSS on the same axis: ${names}`);
    assert(names.some((n) => n.startsWith(BIGGEST_AT_PEAK)) && names.some((n) => n.startsWith(LEAKING)),
      `the top stacks are series of their own: ${names}`);
    // Hovering reads exact values.
    const box = await page.locator('canvas.plot').boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    const tip = await tipText(page, /live heap/);
    assert(/live heap/.test(tip) && / B\)/.test(tip), `hover tooltip: ${tip}`);
    await shot(page, '2-run-plot');
  });
}

// The flame graph at the peak, pruned and zoomed.
async function checkFlame(ctx) {
  const { srv, page, leaky, runs } = ctx;
  await check('clicking the peak shows a flame graph whose widest leaf is the biggest site', async () => {
    const peak = await page.evaluate(() => {
      const p = window.heapstore.plot;
      return { x: p.xOf(window.heapstore.run.peak_t_ns), y: p.yOf(window.heapstore.run.peak_bytes) + 5 };
    });
    const box = await page.locator('canvas.plot').boundingBox();
    await page.mouse.click(box.x + peak.x, box.y + peak.y);
    await page.waitForFunction(() => /[?&]at=/.test(location.hash));
    await waitReady(page);
    const leaves = await page.evaluate(() => window.heapstore.flame.leaves());
    assert(leaves.length, 'the flame graph has leaves');
    assert(leaves[0].function === BIGGEST_AT_PEAK, `widest leaf: ${leaves[0].name} (${leaves.map((l) => l.function).join(', ')})`);
    // Hover the widest leaf: the tooltip names it with its bytes and share.
    const fbox = await page.locator('canvas.flame').boundingBox();
    await page.mouse.move(fbox.x + leaves[0].x + leaves[0].w / 2, fbox.y + leaves[0].y + leaves[0].h / 2);
    const tip = await tipText(page, new RegExp(BIGGEST_AT_PEAK));
    assert(tip.includes(BIGGEST_AT_PEAK) && /8\.00 MiB/.test(tip) && /% of all/.test(tip), `tooltip: ${tip}`);
    await shot(page, '3a-flame-hover', { keepTip: true });
    await shot(page, '3-flame-at-peak');
  });

  await check('the flame graph is asked pruned to the pixel, and a zoom asks for the detail below', async () => {
    await page.goto(`${srv.base}/#/run/${leaky.id}?at=peak`);
    await waitReady(page);
    const first = await page.evaluate(() => performance.getEntriesByType('resource')
      .map((e) => e.name).filter((n) => /\/flame\?/.test(n)));
    assert(first.length && first.every((n) => /min_share=0\.000/.test(n)), `flame asked with min_share: ${first}`);
    const cut = await page.evaluate(() => window.heapstore.flameAnswer.truncated);
    // the narrowest frame drawn that has children, zoomed into: when the
    // answer left its detail out, the view asks again at its pixel
    const target = await page.evaluate(() => {
      const g = window.heapstore.flame;
      let best = null;
      for (const row of g.rows) for (const r of row || []) {
        if (r.n.parent && r.n.children.length && (!best || r.w < best.w)) best = r;
      }
      return best && { x: best.x + best.w / 2, y: best.depth * 18 + 9, name: best.n.name, v: best.n.v };
    });
    assert(target, 'a frame with children is drawn');
    const needs = cut && target.v / (2 * 1280) < cut.min_bytes;
    const more = needs ? page.waitForRequest((r) => /\/flame\?/.test(r.url()) && !first.includes(r.url()), { timeout: 10000 }) : null;
    log(`     zoom into ${target.name}: ${needs ? 'detail asked' : 'all its detail was sent'}`);
    const fbox = await page.locator('canvas.flame').boundingBox();
    await page.mouse.click(fbox.x + target.x, fbox.y + target.y);
    if (more) {
      const req = await more;
      await req.response();
      await page.waitForFunction((name) => window.heapstore.flame.focus.name === name, target.name);
    }
    const focus = await page.evaluate(() => window.heapstore.flame.focus.name);
    assert(focus === target.name, `zoomed into ${focus}, wanted ${target.name}`);
    // a more detailed answer keeps the zoom and the search (setRoot)
    const kept = await page.evaluate(async () => {
      const g = window.heapstore.flame;
      const before = g.focus.name;
      const full = await (await fetch(`/api/runs/${window.heapstore.run.id}/flame?at=peak&max_nodes=100000`)).json();
      g.setRoot(full.root);
      return { before, after: g.focus.name, root: g.root.name };
    });
    assert(kept.before === kept.after && kept.root === 'all', `setRoot kept the zoom: ${JSON.stringify(kept)}`);
  });
}

// The view in the URL; the table sorted.
async function checkUrlAndTable(ctx) {
  const { srv, page, leaky, context } = ctx;
  let peakUrl = null;
  await check('the Peak button, search and zoom go into the URL, and the link reopens the view', async () => {
    await page.click('button[data-act="peak"]');
    await page.waitForFunction(() => /[?&]at=peak/.test(location.hash));
    await waitReady(page);
    await page.fill('input[type="search"]', LEAKING);
    const matched = await page.locator('.match').innerText();
    assert(/matched/.test(matched), `search reports a match: ${matched}`);
    // Zoom into the frame of the leaking function's caller chain (main).
    const leaf = await page.evaluate((fn) => window.heapstore.flame.leaves().find((l) => l.function === fn), LEAKING);
    assert(leaf, 'the leaking site is drawn at the peak');
    const fbox = await page.locator('canvas.flame').boundingBox();
    await page.mouse.click(fbox.x + leaf.x + leaf.w / 2, fbox.y + leaf.y + leaf.h / 2);
    // replaceState is not a navigation: read the address from the page.
    peakUrl = await page.evaluate(() => location.href);
    assert(/q=remember_request/.test(peakUrl) && /z=/.test(peakUrl), `URL keeps search and zoom: ${peakUrl}`);
    const before = await page.evaluate(() => window.heapstore.flame.leaves().map((l) => l.name));
    const other = await context.newPage();
    await other.goto(peakUrl);
    await waitReady(other);
    const after = await other.evaluate(() => window.heapstore.flame.leaves().map((l) => l.name));
    const search = await other.inputValue('input[type="search"]');
    assert(search === LEAKING, `search box reopened with ${search}`);
    assert(JSON.stringify(before) === JSON.stringify(after), `same frames: ${before} vs ${after}`);
    const zoomed = await other.evaluate(() => window.heapstore.flame.focus.fn);
    assert(zoomed === LEAKING, `reopened zoomed into ${zoomed}`);
    await shot(other, '4-deep-link-zoomed');
    await other.close();
  });

  await check('the table view sorts by site and by function', async () => {
    await page.goto(`${srv.base}/#/run/${leaky.id}?at=peak&tab=table&by=site`);
    await waitReady(page);
    const first = await page.$eval('.top-table tbody tr', (tr) => tr.dataset.name);
    assert(first === BIGGEST_AT_PEAK, `first site ${first}`);
    await page.click('.top-table th[data-key="total_bytes"]'); // now ascending
    const order = await page.$$eval('.top-table tbody tr', (trs) => trs.map((tr) => tr.dataset.name));
    assert(order[order.length - 1] === BIGGEST_AT_PEAK, `after sorting ascending the biggest is last: ${order}`);
    // The order is in the URL: the link reopens the table sorted the same way.
    const sortedUrl = await page.evaluate(() => location.href);
    assert(/sort=total_bytes/.test(sortedUrl), `URL keeps the order: ${sortedUrl}`);
    const other = await context.newPage();
    await other.goto(sortedUrl);
    await waitReady(other);
    const again = await other.$$eval('.top-table tbody tr', (trs) => trs.map((tr) => tr.dataset.name));
    await other.close();
    assert(JSON.stringify(again) === JSON.stringify(order), `reopened order ${again} vs ${order}`);
    await page.click('button[data-by="function"]');
    await waitReady(page);
    const fns = await page.$$eval('.top-table tbody tr', (trs) => trs.map((tr) => tr.dataset.name));
    assert(fns.includes('main') && fns.includes(BIGGEST_AT_PEAK), `functions ${fns.slice(0, 8)}`);
    await shot(page, '5-table-by-function');
  });
}

// The table's site names and whole stacks.
async function checkTableStacks(ctx) {
  const { srv, page, leaky, tree } = ctx;
  await check('the table switches what names a site, and a row opens its whole stack', async () => {
    const names = () => page.$$eval('.top-table tbody tr[data-name]', (trs) => trs.map((tr) => tr.dataset.name));
    const legend = () => page.$$eval('.legend-item', (els) => els.map((e) => e.textContent));
    // the user's site (default): xmalloc is a wrapper, its block is load_table's
    await page.goto(`${srv.base}/#/run/${leaky.id}?at=peak&tab=table&by=site`);
    await waitReady(page);
    await page.waitForSelector('.plot-box[data-stacks="ready"]');
    let list = await names();
    assert(list[0] === BIGGEST_AT_PEAK && !list.includes('xmalloc'), `user sites: ${list}`);
    assert(!(await legend()).some((x) => x.startsWith('xmalloc')), 'series named by the user site');
    // the leaf: the wrapper is a site of its own, in the table and the series
    await page.click('button[data-site="leaf"]');
    await waitReady(page);
    assert(/site=leaf/.test(page.url()), `the mode is in the URL: ${page.url()}`);
    list = await names();
    assert(list.includes('xmalloc') && list.includes(BIGGEST_AT_PEAK), `leaf sites: ${list}`);
    await page.waitForSelector('.plot-box[data-stacks="ready"]');
    assert((await legend()).some((x) => x.startsWith('xmalloc')), `series by leaf: ${await legend()}`);
    // the wrapper's row, opened: its whole native stack, leaf first
    await page.click('.top-table tr[data-name="xmalloc"] button[data-act="stack"]');
    await page.waitForSelector('tr.stack-row li');
    let frames = await page.$$eval('tr.stack-row li', (lis) => lis.map((li) => li.dataset.fn));
    let site = await page.$eval('tr.stack-row li.site', (li) => li.dataset.fn);
    // (one of the two stacks through it: load_table's or load_config's)
    assert(frames[0] === 'xmalloc' && [BIGGEST_AT_PEAK, 'load_config'].includes(frames[1]) && frames.includes('main') &&
      site === 'xmalloc', `stack by leaf: ${frames} (site ${site})`);
    await shot(page, '5b-table-stack-leaf');
    // by stack, user sites: the same stack is named load_table, its leaf xmalloc
    await page.click('button[data-site="user"]');
    await waitReady(page);
    await page.click('button[data-by="stack"]');
    await waitReady(page);
    assert(!/site=/.test(page.url()), `the default mode leaves the URL: ${page.url()}`);
    // each click draws the table again: find the buttons afresh
    const buttons = page.locator(`.top-table tr[data-name="${BIGGEST_AT_PEAK}"] button[data-act="stack"]`);
    const nb = await buttons.count();
    for (let i = 0; i < nb; i++) await buttons.nth(i).click();
    const stacks = await page.$$eval('tr.stack-row', (trs) => trs.map((tr) => ({
      frames: [...tr.querySelectorAll('li')].map((li) => li.dataset.fn),
      site: tr.querySelector('li.site') && tr.querySelector('li.site').dataset.fn,
    })));
    const wrapped = stacks.find((x) => x.frames[0] === 'xmalloc');
    assert(wrapped && wrapped.site === BIGGEST_AT_PEAK, `by stack, user site: ${JSON.stringify(stacks)}`);
    // a second click closes a row's stack
    const opened = stacks.length;
    await page.click(`.top-table tr[data-name="${BIGGEST_AT_PEAK}"] button[data-act="stack"]`);
    assert(await page.locator('tr.stack-row').count() === opened - 1, 'a click closes the stack');
  });

  await check('a stack longer than the answer\'s frames opens whole on request', async () => {
    await page.goto(`${srv.base}/#/run/${tree.big.id}?at=peak&tab=table&by=stack`);
    await waitReady(page);
    await page.click('.top-table tbody tr[data-name] button[data-act="stack"]');
    const frames = () => page.$$eval('tr.stack-row li', (lis) => lis.map((li) => li.dataset.fn));
    let fns = await frames();
    const more = page.locator('tr.stack-row button[data-act="whole-stack"]');
    const label = await more.innerText();
    const depth = Number((/all (\d+) frames/.exec(label) || [])[1]);
    assert(fns.length === 64 && depth > 80, `the answer's 64 frames, and a button for all: ${fns.length}, "${label}"`);
    await more.click();
    await page.waitForFunction((n) => document.querySelectorAll('tr.stack-row li').length === n, depth);
    fns = await frames();
    assert(fns[0] === 'heap' && fns.filter((f) => f === 'descend').length === 81 && fns.includes('main'),
      `the whole stack: ${fns.length} frames, ${fns.slice(0, 3)} … ${fns.slice(-4)}`);
    assert(await more.count() === 0, 'the button is gone');
  });
}

// Diffs of two runs and of two moments.
async function checkDiffs(ctx) {
  const { srv, page, leaky, fixed, runs } = ctx;
  await check('the diff of the fixed and the leaking version names the leaking site', async () => {
    await page.goto(srv.base + '/#/runs');
    await waitReady(page);
    await page.check(`input[data-run="${fixed.id}"]`);
    await page.check(`input[data-run="${leaky.id}"]`);
    await page.click('text=Compare two runs');
    await page.waitForFunction(() => location.hash.startsWith('#/diff'));
    await waitReady(page);
    const top = await page.$eval('.changes tbody tr', (tr) => tr.dataset.name);
    assert(top.includes(LEAKING), `largest change: ${top}`);
    const row = await page.locator('.changes tbody tr').first().innerText();
    assert(row.includes('+') && /2\.50 MiB|2\.44 MiB/.test(row), `the change is the leak's growth: ${row}`);
    const d = await page.evaluate(() => window.heapstore.diff);
    assert(d.rows[0].delta_bytes >= LEAK_BYTES - 64 * 1024, `delta ${d.rows[0].delta_bytes}`);
    // The differential flame graph draws the leaking frame, red.
    const leaf = await page.evaluate((fn) => window.heapstore.flame.leaves().find((l) => l.function === fn), LEAKING);
    assert(leaf && leaf.delta > 0, `leaking frame in the diff flame: ${JSON.stringify(leaf)}`);
    const px = await page.evaluate(({ x, y }) => {
      const c = window.heapstore.flame.canvas;
      const dpr = c.width / c.clientWidth;
      return Array.from(c.getContext('2d').getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data);
    }, { x: leaf.x + 2, y: leaf.y + leaf.h - 4 });
    assert(px[0] > 150 && px[0] > px[2] + 40, `grown frame is red: rgba ${px}`);
    await shot(page, '6-diff');
  });

  await check('two moments of one run can be compared by dragging on the plot', async () => {
    await page.goto(`${srv.base}/#/run/${leaky.id}`);
    await waitReady(page);
    // From just after the table is loaded to the peak: the table is live at
    // both ends, the leaked records pile up in between.
    const xs = await page.evaluate((tableBytes) => {
      const { plot, run, history } = window.heapstore;
      const loaded = history.points.find((q) => q.heap_bytes >= tableBytes);
      return { x0: plot.xOf(loaded.t_ns) + 3, x1: plot.xOf(run.peak_t_ns), y: plot.yOf(0) - 20 };
    }, TABLE_BYTES);
    const box = await page.locator('canvas.plot').boundingBox();
    await page.mouse.move(box.x + xs.x0, box.y + xs.y);
    await page.mouse.down();
    await page.mouse.move(box.x + xs.x1, box.y + xs.y, { steps: 8 });
    await page.mouse.up();
    await page.click('button[data-act="compare-range"]');
    await page.waitForFunction(() => location.hash.startsWith('#/diff'));
    await waitReady(page);
    const top = await page.$eval('.changes tbody tr', (tr) => tr.dataset.name);
    assert(top.includes(LEAKING), `between two moments the leak grew most: ${top}`);
    await shot(page, '6b-diff-two-moments');
  });
}

// The leaks view.
async function checkLeaks(ctx) {
  const { srv, page, leaky } = ctx;
  await check('the leaks view ranks the leaking site first, linked to its flame and history', async () => {
    await page.goto(`${srv.base}/#/run/${leaky.id}`);
    await waitReady(page);
    await page.click('text=leaks of this run');
    await waitReady(page);
    const live = await page.$eval('.leaks-live tbody tr', (tr) => tr.dataset.name);
    assert(live.includes(LEAKING), `first live at end: ${live}`);
    const grow = await page.$eval('.leaks-growing tbody tr', (tr) => tr.dataset.name);
    assert(grow.includes(LEAKING), `first growing: ${grow}`);
    await shot(page, '7-leaks');
    await page.click('.leaks-live tbody tr:first-child a[data-link="flame"]');
    await waitReady(page);
    const q = await page.inputValue('input[type="search"]');
    assert(q === LEAKING, `flame link searches the site: ${q}`);
    await page.goBack();
    await waitReady(page);
    const trace = await page.evaluate(() => window.heapstore.leaks.live_at_end[0].trace);
    await page.click('.leaks-live tbody tr:first-child a[data-link="history"]');
    await waitReady(page);
    assert(/at=end/.test(page.url()) && new RegExp(`trace=${trace}`).test(page.url()),
      `history link opens the run at the end with the site's stack: ${page.url()}`);
    await page.waitForSelector('.plot-box[data-stacks="ready"]');
    const series = await page.$$eval('.legend-item', (els) => els.map((e) => e.dataset.series));
    assert(series.includes(`trace-${trace}`), `the leaking stack is plotted: ${series}`);
    await shot(page, '8-leak-history');
  });

  await check('the leaks view switches what names a row, and its links and the run keep the choice', async () => {
    const names = (panel) => page.$$eval(`${panel} tbody tr`, (trs) => trs.map((tr) => tr.dataset.name));
    const has = (list, fn) => list.some((n) => n.startsWith(fn));
    // the user's site (default): the configuration kept through xmalloc is load_config's
    await page.goto(`${srv.base}/#/leaks/${leaky.id}`);
    await waitReady(page);
    let live = await names('.leaks-live');
    assert(has(live, 'load_config') && !has(live, 'xmalloc'), `user sites at the end: ${live}`);
    assert(await page.$eval('button[data-site].on', (b) => b.dataset.site) === 'user', 'user code is marked');
    // the leaf: the wrapper names it; the leak is remember_request's either way
    await page.click('button[data-site="leaf"]');
    await waitReady(page);
    assert(/#\/leaks\/\d+\?site=leaf$/.test(page.url()), `the mode is in the URL: ${page.url()}`);
    live = await names('.leaks-live');
    assert(has(live, 'xmalloc') && !has(live, 'load_config'), `leaf sites at the end: ${live}`);
    const grow = await names('.leaks-growing');
    assert(grow.length && grow[0].startsWith(LEAKING), `growing by leaf: ${grow}`);
    await shot(page, '7b-leaks-leaf');
    // its history link opens the run named the same way, under the flame tab
    const href = await page.$eval('.leaks-live tr[data-name^="xmalloc"] a[data-link="history"]', (a) => a.getAttribute('href'));
    assert(/site=leaf/.test(href), `the history link keeps the mode: ${href}`);
    await page.click('.leaks-live tr[data-name^="xmalloc"] a[data-link="history"]');
    await waitReady(page);
    assert(/site=leaf/.test(page.url()) && !/tab=table/.test(page.url()), `the run, by leaf: ${page.url()}`);
    assert(await page.$eval('button[data-site].on', (b) => b.dataset.site) === 'leaf', 'leaf is marked in the run');
    await page.waitForSelector('.plot-box[data-stacks="ready"]');
    const legend = await page.$$eval('.legend-item', (els) => els.map((e) => e.textContent));
    assert(legend.some((x) => x.startsWith('xmalloc')), `series by leaf: ${legend}`);
    // and back to the default from the flame tab: the parameter leaves the URL
    await page.click('button[data-site="user"]');
    await waitReady(page);
    assert(!/site=/.test(page.url()), `the default mode leaves the URL: ${page.url()}`);
    await page.click('text=leaks of this run');
    await waitReady(page);
    assert(!/site=/.test(page.url()) && has(await names('.leaks-live'), 'load_config'), `leaks by user: ${page.url()}`);
  });
}

// Downloads; no script errors, nothing fetched from elsewhere.
async function checkDownloads(ctx) {
  const { srv, page, leaky, fixed, pageErrors, foreign } = ctx;
  await check('downloads of the current view are the files they say', async () => {
    const fetchAll = async (hrefs) => {
      const out = {};
      for (const href of hrefs) {
        const res = await fetchRetry(srv.base + href);
        assert(res.ok, `${href}: HTTP ${res.status}`);
        out[href] = Buffer.from(await res.arrayBuffer());
      }
      return out;
    };
    const kinds = {
      collapsed: (b) => b.toString().split('\n').some((l) => l.includes(LEAKING) && / \d+$/.test(l)),
      pprof: (b) => b[0] === 0x1f && b[1] === 0x8b, // gzipped profile.proto
      speedscope: (b) => /speedscope/.test(JSON.parse(b.toString()).$schema || ''),
      csv: (b) => /^t_ns,heap_bytes/.test(b.toString()) && b.toString().trim().split('\n').length > 5,
    };
    const kindOf = (href) => (/format=csv/.test(href) ? 'csv' : (/format=(\w+)/.exec(href) || [])[1]);
    await page.goto(`${srv.base}/#/run/${leaky.id}?at=end`);
    await waitReady(page);
    let hrefs = await page.$$eval('a.dl', (as) => as.map((a) => a.getAttribute('href')));
    for (const k of Object.keys(kinds)) assert(hrefs.some((x) => kindOf(x) === k), `a ${k} link: ${hrefs}`);
    let files = await fetchAll(hrefs);
    for (const [href, body] of Object.entries(files)) {
      const k = kindOf(href);
      if (kinds[k]) assert(kinds[k](body), `${href} is not ${k}: ${body.subarray(0, 80).toString('hex')}`);
    }
    // The diff's download is the difffolded form, naming the leak.
    await page.goto(`${srv.base}/#/diff?a=${fixed.id}%40end&b=${leaky.id}%40end`);
    await waitReady(page);
    hrefs = await page.$$eval('a.dl', (as) => as.map((a) => a.getAttribute('href')));
    files = await fetchAll(hrefs);
    const text = Object.values(files)[0].toString();
    assert(text.split('\n').some((l) => l.includes(LEAKING) && / \d+ \d+$/.test(l)), `difffolded: ${text.slice(0, 300)}`);
  });

  await check('no script errors and nothing fetched from elsewhere', async () => {
    assert(!pageErrors.length, `errors: ${pageErrors.join('\n')}`);
    assert(!foreign.length, `foreign requests: ${foreign.join(', ')}`);
  });
}


try {
  await main();
} catch (err) {
  failed++;
  log(`FAIL setup: ${err && err.stack ? err.stack : err}`);
} finally {
  for (const c of cleanups) {
    try { await c(); } catch { /* best effort */ }
  }
}
log(`screenshots in ${SCREENS}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
