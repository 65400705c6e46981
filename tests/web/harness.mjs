// What a browser test of the dashboard needs: the build's paths, a real
// heapstore-server on a port of its own choosing (--ready-fd), programs run
// under the real collector, the runs waited for, headless Chromium through
// playwright-core, and a view waited for until it is built. Each test file
// is its own ctest (tests/web/CMakeLists.txt) and prints "N passed, N
// failed" last. (dashboard.test.mjs predates this file and has its own
// copies of these helpers.)

import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const SRC = process.env.HS_SOURCE_DIR || path.resolve(HERE, '../..');
export const BUILD = path.resolve(process.env.HS_BUILD_DIR || path.join(SRC, 'build'));
export const SERVER = process.env.HS_SERVER || path.join(BUILD, 'bin/heapstore-server');
export const COLLECTOR = path.join(BUILD, 'lib/libheapstore.so');
export const WEB_ROOT = path.join(BUILD, 'share/heapstore/web');
export const SCREENS = path.join(BUILD, 'tests/web-screens');
export const CHROMIUM = process.env.HS_CHROMIUM || '/usr/bin/chromium';
// How long to keep trying before calling something broken (not speed).
export const WAIT_MS = 90000;

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function suite(tag) {
  const s = { passed: 0, failed: 0, cleanups: [] };
  s.log = (...a) => console.log(`[${tag}]`, ...a);
  s.check = async (name, fn) => {
    try {
      await fn();
      s.passed++;
      s.log(`ok   ${name}`);
    } catch (err) {
      s.failed++;
      s.log(`FAIL ${name}: ${err && err.stack ? err.stack : err}`);
    }
  };
  s.finish = async () => {
    for (const f of s.cleanups) { try { await f(); } catch { /* best effort */ } }
    console.log(`${s.passed} passed, ${s.failed} failed`);
    process.exitCode = s.failed || !s.passed ? 1 : 0;
  };
  return s;
}

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// playwright-core as package-lock.json pins it (npm ci when missing).
export async function loadPlaywright() {
  const lock = JSON.parse(fs.readFileSync(path.join(HERE, 'package-lock.json'), 'utf8'));
  const want = lock.packages['node_modules/playwright-core'].version;
  let have = null;
  try {
    have = JSON.parse(fs.readFileSync(path.join(HERE, 'node_modules/playwright-core/package.json'), 'utf8')).version;
  } catch { /* not installed */ }
  if (have !== want) execFileSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: HERE, stdio: 'inherit' });
  return import(path.join(HERE, 'node_modules/playwright-core/index.mjs'));
}

export async function getJson(base, p) {
  const res = await fetch(base + p, { signal: AbortSignal.timeout(WAIT_MS) });
  const text = await res.text();
  if (!res.ok) throw new Error(`${p}: HTTP ${res.status} ${text.slice(0, 200)}`);
  return JSON.parse(text);
}

// The server on 127.0.0.1, its port read from --ready-fd 3; killed at the end.
export async function startServer(s, tmp, granularity = '10ms') {
  const out = fs.createWriteStream(path.join(tmp, 'server.log'));
  const child = spawn(SERVER, ['--db', path.join(tmp, 'web.db'), '--listen', '127.0.0.1:0',
    '--granularity', granularity, '--web-root', WEB_ROOT, '--ready-fd', '3'],
  { stdio: ['ignore', 'pipe', 'pipe', 'pipe'] });
  s.cleanups.push(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM'); });
  child.stdout.pipe(out);
  child.stderr.pipe(out);
  const port = await new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error('heapstore-server was not ready')), WAIT_MS);
    child.stdio[3].on('data', (chunk) => {
      seen += chunk.toString();
      const m = /^(\d+)\n/.exec(seen);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    child.once('exit', (code, sig) => { clearTimeout(timer); reject(new Error(`server exited ${code ?? sig}`)); });
  });
  return { base: `http://127.0.0.1:${port}`, port };
}

// prog args… under the collector (the default sampling unless env says).
export function record(prog, port, labels, { args = [], env = {} } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(prog, args, {
      stdio: ['ignore', 'ignore', 'inherit'],
      env: { ...process.env, LD_PRELOAD: COLLECTOR, HEAPSTORE_URL: `tcp://127.0.0.1:${port}`, HEAPSTORE_LABELS: labels, ...env },
    });
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`${prog} did not finish`)); }, WAIT_MS);
    child.on('exit', (code, sig) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(`${prog} exited ${code ?? sig}`));
    });
  });
}

// Until the server has n runs, none of them open.
export async function waitForRuns(base, n) {
  const until = Date.now() + WAIT_MS;
  for (;;) {
    const r = await getJson(base, '/api/runs');
    if (r.runs.length >= n && r.runs.every((x) => x.state !== 'open')) return r.runs;
    if (Date.now() >= until) throw new Error(`runs: ${JSON.stringify(r).slice(0, 300)}`);
    await sleep(100);
  }
}

export async function launch(s, chromium) {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  });
  s.cleanups.unshift(() => browser.close());
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  context.setDefaultTimeout(WAIT_MS);
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  return { page, errors };
}

// Until the view of the page's URL is built (js/app.js sets body's
// data-hash to the URL a finished view shows).
export async function waitReady(page) {
  await page.waitForFunction(
    () => document.body.dataset.state !== 'loading' && document.body.dataset.hash === location.hash,
    null, { timeout: WAIT_MS });
  const state = await page.evaluate(() => document.body.dataset.state);
  if (state !== 'ready') throw new Error(`the view did not load: ${await page.locator('#error').innerText().catch(() => '')}`);
}
