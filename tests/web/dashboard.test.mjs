// The dashboard in a real browser against a real server holding real runs.
//
// 1. Starts build/bin/heapstore-server on 127.0.0.1 with a free port and a
//    fresh database, serving the build's share/heapstore/web.
// 2. Records two runs of tests/web/workload.c under the real collector, every
//    allocation sampled (HEAPSTORE_SAMPLE_BYTES=1): web_fixed (version=fixed),
//    then web_leaky (version=leaky), so the numbers are known exactly.
// 3. Drives headless Chromium (playwright-core, /usr/bin/chromium) through the
//    views and checks what a reader would: the runs list, the plot, the flame
//    graph at the peak, the diff, the leaks, a deep link. Screenshots go to
//    <build>/tests/web-screens/.
//
// Run by ctest (tests/web/CMakeLists.txt) or by hand: HS_BUILD_DIR=build node
// tests/web/dashboard.test.mjs. Prints "N passed, N failed" last.

import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SRC = process.env.HS_SOURCE_DIR || path.resolve(HERE, '../..');
const BUILD = path.resolve(process.env.HS_BUILD_DIR || path.join(SRC, 'build'));
const SERVER = path.join(BUILD, 'bin/heapstore-server');
const COLLECTOR = path.join(BUILD, 'lib/libheapstore.so');
const WEB_ROOT = path.join(BUILD, 'share/heapstore/web');
const LEAKY = path.join(BUILD, 'tests/web_leaky');
const FIXED = path.join(BUILD, 'tests/web_fixed');
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

async function loadPlaywright() {
  if (!fs.existsSync(path.join(HERE, 'node_modules/playwright-core'))) {
    log('npm ci (node_modules is missing)');
    execFileSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: HERE, stdio: 'inherit' });
  }
  return import(path.join(HERE, 'node_modules/playwright-core/index.mjs'));
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function getJson(base, p) {
  const res = await fetch(base + p);
  const text = await res.text();
  if (!res.ok) throw new Error(`${p}: HTTP ${res.status} ${text.slice(0, 200)}`);
  return JSON.parse(text);
}

async function startServer(tmp) {
  const port = await freePort();
  const db = path.join(tmp, 'web.db');
  const logFile = path.join(tmp, 'server.log');
  const out = fs.openSync(logFile, 'w');
  const child = spawn(SERVER, ['--db', db, '--listen', `127.0.0.1:${port}`, '--granularity', '100ms',
    '--web-root', WEB_ROOT], { stdio: ['ignore', out, out] });
  cleanups.push(() => { if (child.exitCode === null) child.kill('SIGTERM'); });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) break;
    try {
      const h = await getJson(base, '/api/health');
      if (h.ok) return { base, port, child, logFile };
    } catch { /* not yet */ }
    await sleep(100);
  }
  throw new Error(`heapstore-server did not answer /api/health; its log:\n${fs.readFileSync(logFile, 'utf8')}`);
}

function record(prog, port, labels) {
  return new Promise((resolve, reject) => {
    const child = spawn(prog, [], {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: {
        ...process.env,
        LD_PRELOAD: COLLECTOR,
        HEAPSTORE_URL: `tcp://127.0.0.1:${port}`,
        HEAPSTORE_SAMPLE_BYTES: '1',
        HEAPSTORE_LABELS: labels,
      },
    });
    child.on('error', reject);
    child.on('exit', (code, sig) => (code === 0 ? resolve() : reject(new Error(`${prog} exited ${code ?? sig}`))));
  });
}

// Wait until the server has both runs and has seen them end.
async function waitForRuns(base, n) {
  let last = null;
  for (let i = 0; i < 150; i++) {
    last = await getJson(base, '/api/runs');
    const ended = last.runs.filter((r) => r.state === 'ended');
    if (ended.length >= n) return last.runs;
    await sleep(100);
  }
  throw new Error(`runs did not end: ${JSON.stringify(last).slice(0, 500)}`);
}

async function waitReady(page) {
  await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 30000 });
  const state = await page.evaluate(() => document.body.dataset.state);
  if (state !== 'ready') {
    const msg = await page.locator('#error').innerText().catch(() => '');
    throw new Error(`the view did not load: ${msg}`);
  }
}

async function shot(page, name) {
  await page.mouse.move(0, 0); // no tooltip left over in the picture
  await page.screenshot({ path: path.join(SCREENS, name + '.png'), fullPage: true });
}

async function main() {
  for (const f of [SERVER, COLLECTOR, LEAKY, FIXED, path.join(WEB_ROOT, 'index.html'), CHROMIUM]) {
    if (!fs.existsSync(f)) throw new Error(`missing ${f} (build the tree; chromium: apt-get install chromium)`);
  }
  const { chromium } = await loadPlaywright();
  fs.mkdirSync(SCREENS, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'hs-web-'));
  cleanups.push(() => fs.rmSync(tmp, { recursive: true, force: true }));

  const srv = await startServer(tmp);
  log(`server on ${srv.base}`);
  await record(FIXED, srv.port, 'version=fixed,suite=web');
  await record(LEAKY, srv.port, 'version=leaky,suite=web');
  const runs = await waitForRuns(srv.base, 2);
  const leaky = runs.find((r) => r.labels && r.labels.version === 'leaky');
  const fixed = runs.find((r) => r.labels && r.labels.version === 'fixed');
  assert(leaky && fixed, `both runs are listed with their labels: ${JSON.stringify(runs).slice(0, 400)}`);
  log(`runs: leaky #${leaky.id}, fixed #${fixed.id}`);

  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  cleanups.unshift(() => browser.close());
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
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

  await check('the server serves the dashboard with a content type', async () => {
    const res = await fetch(srv.base + '/');
    assert(res.ok, `GET / → ${res.status}`);
    assert(/text\/html/.test(res.headers.get('content-type') || ''), `content-type ${res.headers.get('content-type')}`);
    const js = await fetch(srv.base + '/js/app.js');
    assert(js.ok && /javascript/.test(js.headers.get('content-type') || ''), `app.js: ${js.status} ${js.headers.get('content-type')}`);
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

  await check('the runs list filters by label', async () => {
    await page.goto(srv.base + '/#/runs?label=version%3Dfixed');
    await waitReady(page);
    const ids = await page.$$eval('table.runs tbody tr', (trs) => trs.map((tr) => Number(tr.dataset.run)));
    assert(ids.length === 1 && ids[0] === fixed.id, `rows ${ids}`);
  });

  let peakUrl = null;
  await check('the run view draws the plot', async () => {
    await page.goto(srv.base + '/#/runs');
    await waitReady(page);
    await page.click(`table.runs tr[data-run="${leaky.id}"] a.prog`);
    await waitReady(page);
    const ink = await page.evaluate(() => window.heapstore.plot.inkedPixels());
    assert(ink > 5000, `the plot canvas has ${ink} drawn pixels`);
    const names = await page.$$eval('.legend-item', (els) => els.map((e) => e.textContent));
    assert(names.some((n) => /live heap/.test(n)), `legend: ${names}`);
    assert(names.some((n) => /RSS/.test(n)), `the plot has RSS on the same axis: ${names}`);
    // Hovering reads exact values.
    const box = await page.locator('canvas.plot').boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    const tip = await page.locator('#tip').innerText();
    assert(/live heap/.test(tip) && / B\)/.test(tip), `hover tooltip: ${tip}`);
    await shot(page, '2-run-plot');
  });

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
    const tip = await page.locator('#tip').innerText();
    assert(tip.includes(BIGGEST_AT_PEAK) && /8\.00 MiB/.test(tip) && /% of all/.test(tip), `tooltip: ${tip}`);
    await shot(page, '3-flame-at-peak');
  });

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
    const last = await page.$$eval('.top-table tbody tr', (trs) => trs[trs.length - 1].dataset.name);
    assert(last === BIGGEST_AT_PEAK, `after sorting ascending the biggest is last: ${last}`);
    await page.click('button[data-by="function"]');
    await waitReady(page);
    const fns = await page.$$eval('.top-table tbody tr', (trs) => trs.map((tr) => tr.dataset.name));
    assert(fns.includes('main') && fns.includes(BIGGEST_AT_PEAK), `functions ${fns.slice(0, 8)}`);
    await shot(page, '5-table-by-function');
  });

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
  });

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
    await page.click('.leaks-live tbody tr:first-child a[data-link="history"]');
    await waitReady(page);
    assert(/at=end/.test(page.url()), `history link opens the run at the end: ${page.url()}`);
    await shot(page, '8-leak-history');
  });

  await check('downloads answer for the current moment', async () => {
    await page.goto(`${srv.base}/#/run/${leaky.id}?at=end`);
    await waitReady(page);
    const hrefs = await page.$$eval('a.dl', (as) => as.map((a) => a.getAttribute('href')));
    assert(hrefs.length >= 5, `download links: ${hrefs}`);
    for (const href of hrefs) {
      const res = await fetch(srv.base + href);
      assert(res.ok, `${href}: HTTP ${res.status}`);
      const body = Buffer.from(await res.arrayBuffer());
      assert(body.length > 0, `${href}: empty`);
      if (/format=collapsed/.test(href)) assert(body.toString().includes(LEAKING), `collapsed names the leak`);
    }
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
