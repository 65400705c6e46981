// The dashboard's diff of two groups of runs in a real browser: RUNS runs
// each of tests/queries/gdiff/wl_versions.c as version=1 and as version=2
// (grow_b keeps 24 MiB instead of 8 MiB: a regression planted in one
// function) under the real collector at its default rate, and the view
// opened as the runs page links it: #/diff?a=version=1&b=version=2.
// grow_b must be flagged grown, the functions that did not change must not
// be, and the groups' runs must be listed on each side.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import {
  BUILD, SCREENS, assert, launch, loadPlaywright, record, startServer, suite, waitForRuns, waitReady,
} from './harness.mjs';

const RUNS = 4;
const WL = path.join(BUILD, 'tests/wl_versions');
const s = suite('web-gdiff');

async function rowsOf(page) {
  return page.$$eval('table.gchanges tbody tr', (trs) => trs.map((tr) => ({
    name: tr.dataset.name, verdict: tr.dataset.verdict,
  })));
}

async function main() {
  const { chromium } = await loadPlaywright();
  fs.mkdirSync(SCREENS, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'hs-web-gdiff-'));
  s.cleanups.push(() => fs.rmSync(tmp, { recursive: true, force: true }));
  const srv = await startServer(s, tmp);
  for (let i = 0; i < RUNS; i++) {
    await record(WL, srv.port, 'version=1', { args: ['8192', '8192', '4096', '10', '5'] });
    await record(WL, srv.port, 'version=2', { args: ['8192', '24576', '4096', '10', '5'] });
  }
  await waitForRuns(srv.base, 2 * RUNS);
  const { page, errors } = await launch(s, chromium);

  await s.check('the diff of two versions names the planted function, and only it', async () => {
    await page.goto(`${srv.base}/#/diff?a=version=1&b=version=2&by=function`);
    await waitReady(page);
    const d = await page.evaluate(() => window.heapstore && window.heapstore.diff);
    assert(d && d.group && d.a.runs.length === RUNS && d.b.runs.length === RUNS, `group answer: ${JSON.stringify(d).slice(0, 300)}`);
    const rows = await rowsOf(page);
    const grow = rows.find((r) => r.name === 'grow_b');
    assert(grow && grow.verdict === 'grew', `grow_b: ${JSON.stringify(rows)}`);
    // ranked by what a function allocated itself: grow_b before its callers
    assert(rows[0].name === 'grow_b', `first row: ${JSON.stringify(rows)}`);
    for (const name of ['steady_a', 'steady_c']) {
      const r = rows.find((x) => x.name === name);
      assert(r && (r.verdict === 'noise' || r.verdict === 'same'), `${name}: ${JSON.stringify(r)}`);
    }
    const sides = await page.locator('.side[data-side="A"]').innerText();
    assert(sides.includes('version=1') && sides.includes(`${RUNS} runs`), `side A: ${sides}`);
    await page.screenshot({ path: path.join(SCREENS, 'gdiff-function.png'), fullPage: true });
  });

  await s.check('the grouping buttons ask again by site; an id range is a group too', async () => {
    await page.click('button[data-by="site"]');
    await page.waitForFunction(() => location.hash.includes('by=site'));
    await waitReady(page);
    const rows = await rowsOf(page);
    assert(rows.length && rows[0].name === 'grow_b' && rows[0].verdict === 'grew', `by site: ${JSON.stringify(rows)}`);
    const ids = (await page.evaluate(() => window.heapstore.diff.a.runs)).slice().sort((x, y) => x - y);
    await page.goto(`${srv.base}/#/diff?a=id=${ids[0]}..${ids[ids.length - 1]}&b=version=2&by=site`);
    await waitReady(page);
    const d = await page.evaluate(() => window.heapstore.diff);
    assert(d.group && d.a.runs.length === 2 * RUNS - 1, `id range: ${JSON.stringify(d.a)}`);
  });

  await s.check('two single runs still get the two-run diff with its flame graph', async () => {
    await page.goto(`${srv.base}/#/diff?a=version=1,latest&b=version=2,latest`);
    await waitReady(page);
    const d = await page.evaluate(() => window.heapstore.diff);
    assert(!d.group && d.a.run && d.flame, `single: ${JSON.stringify(d).slice(0, 200)}`);
  });

  await s.check('no script errors', async () => {
    assert(errors.length === 0, errors.join('\n'));
  });
}

main().catch((err) => { s.failed++; s.log(`FAIL ${err && err.stack ? err.stack : err}`); }).finally(() => s.finish());
