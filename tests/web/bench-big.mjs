// How the dashboard holds up on a big run. Not a test (ctest does not run
// it): a measurement to run by hand.
//
//   node tests/web/bench-big.mjs [BUILD_DIR]        (default: build)
//
// Records one synthetic run with bench/server's load generator (hs-loadgen:
// EVENTS events over STACKS distinct 3-frame stacks, PER_FRAME blocks live at
// a time), then REPEAT rounds for each web root, alternating between them
// (BASELINE_WEB_ROOT if set, e.g. an older checkout's clients/web, and the
// build's): a fresh heapstore-server on that database, a fresh browser, and
// times:
//   run view   from navigation to the view being ready (plot and flame drawn)
//   page       the same, as the page sees it: from its navigation start to
//              body[data-state] first saying ready (without the harness's
//              own latency: opening the tab, polling for the state)
//   flame      laying out and drawing the flame graph again, zooming into the
//              first frame and out, a search over every node, one hover
//   diff       the view of two moments, ready
//   leaks      the leaks view, ready
// and prints the median of each in milliseconds. Environment: EVENTS
// (10000000), STACKS (20000), PER_FRAME (32768), REPEAT (5), GRANULARITY
// (10ms), HS_CHROMIUM (/usr/bin/chromium).

import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BUILD = path.resolve(process.argv[2] || path.join(HERE, '../../build'));
const SERVER = path.join(BUILD, 'bin/heapstore-server');
const LOADGEN = path.join(BUILD, 'bin/hs-loadgen');
const WEB_ROOT = path.join(BUILD, 'share/heapstore/web');
const EVENTS = process.env.EVENTS || '10000000';
const STACKS = process.env.STACKS || '20000';
const PER_FRAME = process.env.PER_FRAME || '32768';
const REPEAT = Number(process.env.REPEAT || 5);
const GRANULARITY = process.env.GRANULARITY || '10ms';
const CHROMIUM = process.env.HS_CHROMIUM || '/usr/bin/chromium';

const { chromium } = await import(path.join(HERE, 'node_modules/playwright-core/index.mjs'));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'hs-web-bench-'));
const db = path.join(tmp, 'big.db');

function startServer(webRoot) {
  return new Promise((resolve, reject) => {
    const child = spawn(SERVER, ['--db', db, '--listen', '127.0.0.1:0', '--granularity', GRANULARITY,
      '--web-root', webRoot, '--ready-fd', '3'], { stdio: ['ignore', 'ignore', 'pipe', 'pipe'] });
    let log = '', ready = '';
    child.stderr.on('data', (d) => { log += d; });
    child.stdio[3].on('data', (d) => {
      ready += d;
      const m = /^(\d+)\n/.exec(ready);
      if (m) resolve({ child, port: Number(m[1]) });
    });
    child.once('exit', (code, sig) => reject(new Error(`server exited ${code ?? sig}: ${log}`)));
  });
}

async function stopServer(s) {
  const done = new Promise((r) => s.child.once('exit', r));
  s.child.kill('SIGTERM');
  await done;
}

const median = (xs) => {
  const a = xs.slice().sort((x, y) => x - y);
  const m = a.length >> 1;
  return a.length % 2 ? a[m] : (a[m - 1] + a[m]) / 2;
};

async function ready(page, view) {
  await page.waitForFunction((v) => document.body.dataset.state === 'ready' && window.heapstore &&
    window.heapstore.view === v, view, { timeout: 600000 });
}

async function timeView(browser, base, hash, view) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  // when body[data-state] first says ready, in the page's own clock (any
  // version of the dashboard sets it)
  await page.addInitScript(() => {
    new MutationObserver((_, obs) => {
      if (document.body && document.body.dataset.state === 'ready') {
        window.__hsReadyAt = performance.now();
        obs.disconnect();
      }
    }).observe(document, { attributes: true, subtree: true, attributeFilter: ['data-state'] });
  });
  const t0 = Date.now();
  await page.goto(`${base}/#${hash}`);
  await ready(page, view);
  const ms = Date.now() - t0;
  return { page, ms };
}

// One round on one web root: a fresh server on the database, a fresh
// browser, each view once. Rounds alternate between the web roots so that
// the machine's changing load falls on both alike.
async function round(webRoot, r) {
  const srv = await startServer(webRoot);
  const base = `http://127.0.0.1:${srv.port}`;
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
  try {
    const runs = await (await fetch(`${base}/api/runs`)).json();
    const id = runs.runs[0].id;
    const mid = (runs.runs[0].duration_ns / 2e9).toFixed(3);
    const { page, ms } = await timeView(browser, base, `/run/${id}?at=peak`, 'run');
    r.run.push(ms);
    r.page.push(await page.evaluate(() => window.__hsReadyAt));
    const f = await page.evaluate(() => {
      const g = window.heapstore.flame;
      const out = {};
      let t = performance.now();
      g.render();
      out.render = performance.now() - t;
      t = performance.now();
      g.zoom(g.root.children[0], { silent: true });
      g.zoom(null, { silent: true });
      out.zoom = performance.now() - t;
      t = performance.now();
      g.setSearch('fn1');
      g.setSearch('');
      out.search = performance.now() - t;
      return out;
    });
    r.render.push(f.render);
    r.zoom.push(f.zoom);
    r.search.push(f.search);
    // One hover: from the pointer's move to the tooltip (the handler's hit
    // test and redraw, and the browser's own latency).
    const box = await page.locator('canvas.flame').boundingBox();
    const t = Date.now();
    await page.mouse.move(box.x + box.width / 3, box.y + 27);
    await page.waitForFunction(() => !document.getElementById('tip').hidden, null, { polling: 'raf' });
    r.hover.push(Date.now() - t);
    await page.close();
    const d = await timeView(browser, base, `/diff?a=${id}@${mid}&b=${id}@peak`, 'diff');
    r.diff.push(d.ms);
    await d.page.close();
    const l = await timeView(browser, base, `/leaks/${id}`, 'leaks');
    r.leaks.push(l.ms);
    await l.page.close();
  } finally {
    await browser.close();
    await stopServer(srv);
  }
}

try {
  console.log(`recording ${EVENTS} events over ${STACKS} stacks (${PER_FRAME} live at a time)…`);
  const srv = await startServer(WEB_ROOT);
  execFileSync(LOADGEN, ['--port', String(srv.port), '--conns', '1', '--events', EVENTS,
    '--per-frame', PER_FRAME, '--stacks', STACKS], { stdio: 'inherit' });
  await stopServer(srv);
  const roots = [];
  if (process.env.BASELINE_WEB_ROOT) roots.push({ label: 'baseline', dir: process.env.BASELINE_WEB_ROOT });
  roots.push({ label: 'this build', dir: WEB_ROOT });
  for (const root of roots) root.r = { run: [], page: [], render: [], zoom: [], search: [], hover: [], diff: [], leaks: [] };
  for (let i = 0; i < REPEAT; i++) for (const root of roots) await round(root.dir, root.r);
  const rows = roots.map(({ label, r }) => {
    const row = { label };
    for (const [k, v] of Object.entries(r)) row[k] = median(v);
    return row;
  });
  const cols = ['run', 'page', 'render', 'zoom', 'search', 'hover', 'diff', 'leaks'];
  console.log(`\nmedians of ${REPEAT}, milliseconds`);
  console.log(['web root'.padEnd(12), ...cols.map((c) => c.padStart(9))].join(' '));
  for (const row of rows) console.log([row.label.padEnd(12), ...cols.map((c) => row[c].toFixed(1).padStart(9))].join(' '));
  if (rows.length === 2) {
    console.log(['ratio'.padEnd(12), ...cols.map((c) => (rows[1][c] / rows[0][c]).toFixed(2).padStart(9))].join(' '));
  }
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
