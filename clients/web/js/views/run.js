// #/run/RUN?at=peak|end|SECONDS&tab=flame|table&by=site|function|stack&site=user|alloc|leaf&q=&z=&top=N&rows=more
//
// One run: the live heap over time with RSS (and the top N stacks as lines),
// then what was live at the picked moment as a flame graph or a table.
// Click the plot to pick a moment, drag to compare two. The table's rows and
// the plot's series name a stack by its site, chosen under both tabs
// (site=: the user's frame, the allocator's caller, or the leaf;
// docs/api.md), and a row's whole stack is a click away.

import {
  get, qs, h, runPath, nsToAt, forget, fmtBytes, fmtDate, fmtInt, fmtTime, fmtShare, fmtExactBytes, basename,
  frameLabel, where, siteFrame, stackTitle,
} from '../api.js';
import { go, setCrumbs, replaceParams, rerender, parseHash } from '../nav.js';
import { TimePlot } from '../plot.js';
import { FlameGraph } from '../flame.js';
import { sortableTable, sortFromParam, sortToParam } from '../table.js';
import {
  atLabel, runHeader, dl, exportLinks, bytesCell, shareCell, whereColumn, siteParam, siteModeBar,
} from '../components.js';

const SERIES_COLORS = ['#7b2cbf', '#2b9348', '#d00000', '#f48c06', '#0077b6', '#6a4c93', '#8d6e63', '#c9184a', '#386641', '#5e548e'];

export async function mount(root, { args, params, stale }) {
  const opts = viewParams(params);
  const { at } = opts;
  const base = runPath(args[0]);
  // The plot's heap and RSS come first; the top stacks' series (a slower
  // question on a big run) are added to the drawn plot when they arrive.
  // The flame graph asks only for frames at least half a pixel wide at the
  // page's width (a run of 20,000 stacks has tens of thousands of frames, a
  // few hundred of them visible); zooming asks for the detail below.
  // (index.html asks for the same URL while the modules load: same width)
  const flameWidth = Math.max(200, Math.min(1600, document.documentElement.clientWidth || 1200) - 32);
  const flameQuery = (share) => base + '/flame' + qs({ at, min_share: pixelShare(share, flameWidth) });
  const [hist, flame] = await Promise.all([
    get(base + '/history'),
    get(flameQuery(1)),
  ]);
  if (stale()) return null;
  // What the parts of the view share; gone: destroy() ran, a late answer has
  // nowhere to go.
  const run = hist.run;
  const id = run.id;
  const v = { ...opts, params, base, flameWidth, flameQuery, hist, flame, run, id, gone: false };
  v.here = (changes) => goHere(v, changes);

  setCrumbs([
    { text: 'runs', href: '#/runs' },
    { text: `${basename(run.program)} #${id}`, href: `#/run/${id}` },
    { text: atLabel(at, flame.at_ns) },
  ]);

  const section = h('section.view-run', { dataset: { view: 'run', run: id, at } });
  root.append(section);
  section.append(runHeader(run, hist.sampling || run.sampling));

  const plot = plotPanel(section, v);
  const moment = momentPanel(section, v);
  let graph = null;
  if (v.tab === 'flame') {
    graph = flamePart(moment, v);
  } else if (!(await tablePart(moment, v, stale))) {
    v.gone = true;
    plot.destroy();
    return null;
  }

  section.append(sizesPanel(base));

  window.heapstore = { view: 'run', run, history: hist, plot, flame: graph, flameAnswer: flame };
  return {
    destroy() {
      v.gone = true;
      plot.destroy();
      if (graph) graph.destroy();
      window.heapstore = null;
    },
  };
}

// The view's URL parameters, checked.
function viewParams(params) {
  return {
    at: params.get('at') || 'peak',
    tab: params.get('tab') === 'table' ? 'table' : 'flame',
    by: ['site', 'function', 'stack'].includes(params.get('by')) ? params.get('by') : 'site',
    site: siteParam(params),
    topN: params.has('top') ? Math.max(0, Math.min(20, parseInt(params.get('top'), 10) || 0)) : 5,
    trace: params.get('trace') || '',
    search: params.get('q') || '',
    zoom: params.get('z') ? params.get('z').split(';') : [],
  };
}

// To this run's view with changes to its parameters.
function goHere({ id, at, tab, by, site, topN, trace }, changes) {
  // The search and the table's order stay while the moment changes (read
  // from the URL: they may have changed since this view was built); the
  // order does not carry over to another grouping.
  const cur = parseHash().params;
  const p = {
    at, tab, by, site: site === 'user' ? '' : site, top: topN === 5 ? '' : topN, trace, q: cur.get('q') || '', sort: cur.get('sort') || '',
    rows: cur.get('rows') || '', ...changes,
  };
  if (p.by !== by) p.sort = '';
  go(`/run/${id}`, p);
}

// ---- the time plot ----

// The plot's own series: the heap (and its maximum in each bucket), RSS.
function baseSeries(hist, run) {
  const series = [];
  const g = hist.granularity_ns || run.granularity_ns || 0;
  const heap = (hist.points || []).map((p) => [p.t_ns, p.heap_bytes]);
  const heapMax = maxBand(hist.points || [], g, run.duration_ns);
  if (heapMax.length) series.push({ id: 'heap_max', name: 'live heap, max in bucket', color: '#9bb5ea', kind: 'area', alpha: 0.35, points: heapMax });
  // Exact at every-allocation sampling, or where the collector's counted
  // totals are the run's figures (its heap series among them).
  const exact = (hist.sampling || run.sampling || {}).sample_bytes === 1 || !!(run.exact && run.exact.in_figures);
  series.push({ id: 'heap', name: exact ? 'live heap (exact)' : 'live heap (estimated)', color: '#3b6fd6', kind: 'area', alpha: 0.3, step: true, points: heap });
  const rss = (hist.rss || []).map((p) => [p.t_ns, p.rss_bytes]);
  if (rss.length) series.push({ id: 'rss', name: 'RSS', color: '#333', kind: 'line', dash: [5, 3], points: rss });
  return series;
}

// The top stacks' series, the ones named in trace drawn thicker.
function stackSeries(list, trace) {
  return list.map((s, i) => ({
    id: 'trace-' + s.trace,
    name: s.name || `stack ${s.trace}`,
    title: stackTitle(s),
    color: SERIES_COLORS[i % SERIES_COLORS.length],
    kind: 'line',
    step: true,
    width: trace.split(',').includes(String(s.trace)) ? 3 : 1.5,
    points: (s.points || []).map((p) => [p.t_ns, p.bytes]),
  }));
}

// The panel of the live heap over time; returns its TimePlot.
function plotPanel(section, v) {
  const { run, id, base, here } = v;
  const series = baseSeries(v.hist, run);
  const wantStacks = v.topN > 0 || !!v.trace;
  const seriesNote = h('span.muted.series-note', wantStacks ? 'loading the top stacks…' : '');

  const topSel = h('select', { 'aria-label': 'top stacks', on: { change: () => here({ top: topSel.value }) } },
    [0, 5, 10, 20].map((n) => h('option', { value: n, selected: n === v.topN }, n ? `top ${n} stacks` : 'no stack series')));
  const rangeBar = h('div.rangebar', { hidden: true });
  const plotBox = h('div.plot-box');
  section.append(h('div.panel',
    h('div.toolbar',
      h('strong', 'Live heap over time'),
      h('span.muted', 'click to pick a moment · drag to compare two'),
      h('span.spacer'),
      run.state === 'open' ? h('button', {
        title: 'the run is still being recorded: fetch the newest numbers',
        on: { click: () => { forget(); rerender(); } },
      }, 'Refresh') : null,
      h('button', { dataset: { act: 'peak' }, on: { click: () => here({ at: 'peak', z: '' }) } }, `Peak (${fmtTime(run.peak_t_ns || 0)})`),
      h('button', { dataset: { act: 'end' }, on: { click: () => here({ at: 'end', z: '' }) } }, 'End'),
      seriesNote,
      topSel,
      dl(`${base}/history?format=csv`, `heapstore-${id}-history.csv`, 'CSV')),
    plotBox, rangeBar));

  const markers = [{ t_ns: v.flame.at_ns, color: '#111', label: atLabel(v.at, v.flame.at_ns) }];
  if (run.peak_t_ns !== undefined) markers.push({ t_ns: run.peak_t_ns, color: '#b02a2a', dash: [3, 3], label: 'peak' });
  const plot = new TimePlot(plotBox, {
    series,
    durationNs: run.duration_ns,
    markers,
    onPick: (t) => here({ at: nsToAt(t), z: '' }),
    onRange: (t0, t1) => {
      rangeBar.hidden = false;
      rangeBar.replaceChildren(
        h('span', `From ${fmtTime(t0)} to ${fmtTime(t1)}: `),
        h('button.primary', {
          dataset: { act: 'compare-range' },
          on: { click: () => go('/diff', { a: `${id}@${nsToAt(t0)}`, b: `${id}@${nsToAt(t1)}` }) },
        }, 'Compare these two moments'),
        h('button', { on: { click: () => { rangeBar.hidden = true; plot.range = null; plot.draw(); } } }, 'Cancel'));
    },
  });

  if (wantStacks) {
    plotBox.dataset.stacks = 'loading';
    // asked once the view is drawn: on a big run the server's work for the
    // series would compete with the page's for the same cores
    setTimeout(() => { if (!v.gone) loadStacks(v, plot, series, plotBox, seriesNote); }, 0);
  }
  return plot;
}

// Adds the top stacks' series to the drawn plot.
function loadStacks(v, plot, series, plotBox, seriesNote) {
  const site = v.site === 'user' ? undefined : v.site;
  get(v.base + '/history' + qs({ top: v.topN || undefined, trace: v.trace || undefined, site })).then((full) => {
    if (v.gone) return;
    const extra = stackSeries(full.series || [], v.trace);
    plot.setSeries([...series, ...extra]);
    seriesNote.textContent = extra.length ? '' : 'no stacks to plot';
    plotBox.dataset.stacks = 'ready';
  }, (err) => {
    if (v.gone) return;
    seriesNote.textContent = `top stacks: ${err.message}`;
    plotBox.dataset.stacks = 'error';
  });
}

// ---- the moment ----

// The flame answer's total bytes and blocks.
function flameTotals(flame) {
  return {
    total: flame.total_bytes !== undefined ? flame.total_bytes : flame.root.bytes,
    count: flame.total_count !== undefined ? flame.total_count : flame.root.count,
  };
}

// The panel of what was live at the moment: its totals, tabs and downloads;
// returns the panel, for the flame graph or the table to go in.
function momentPanel(section, v) {
  const { at, id, base, flame, here } = v;
  const { total, count } = flameTotals(flame);
  const tabs = h('div.tabs', ['flame', 'table'].map((t) => h('button', {
    class: t === v.tab ? 'on' : '', dataset: { tab: t },
    on: { click: () => here({ tab: t }) },
  }, t === 'flame' ? 'Flame graph' : 'Table')));
  const atArg = at;
  const others = h('select', { 'aria-label': 'compare with run', on: { change: () => {
    if (!others.value) return;
    const side = /^(peak|end)$/.test(atArg) ? atArg : 'end';
    go('/diff', { a: `${id}@${side}`, b: `${others.value}@${side}` });
  } } }, h('option', { value: '' }, 'compare with run…'));
  const moment = h('div.panel.moment',
    h('div.toolbar',
      h('strong', `Live at ${atLabel(at, flame.at_ns)}`),
      h('span', { class: 'total', title: `${fmtExactBytes(total)} in ${fmtInt(count)} blocks` },
        `${fmtBytes(total)} in ${fmtInt(count)} blocks`),
      h('span.spacer'), tabs),
    h('div.toolbar.downloads',
      h('span.muted', 'download:'),
      exportLinks(base, id, at, ['collapsed', 'pprof', 'speedscope', 'dot']),
      h('span.spacer'),
      h('a', { href: `#/leaks/${id}${v.site === 'user' ? '' : '?site=' + v.site}` }, 'leaks of this run'),
      others),
    // names the table's rows and the plot's stack series alike
    h('div.toolbar.site-bar', siteModeBar(v.site, (site) => here({ site }))));
  section.append(moment);
  fillOthers(v.run, others);
  return moment;
}

// The flame graph of the moment, with its search box; returns the FlameGraph.
function flamePart(moment, v) {
  const { flame, flameWidth, flameQuery, search } = v;
  const { total } = flameTotals(flame);
  let graph = null;
  const info = h('span.muted.match');
  const input = h('input', { type: 'search', placeholder: 'search functions', value: search, 'aria-label': 'search functions' });
  const reset = h('button', { on: { click: () => graph.zoom(null) } }, 'Reset zoom');
  moment.append(h('div.toolbar', input, info, h('span.spacer'), reset,
    h('span.muted', 'click a frame to zoom · Esc zooms out')));
  const box = h('div.flame-box');
  moment.append(box);
  // Detail on demand: a zoom into a frame whose children were too narrow
  // to be sent asks for the flame again, pruned at that frame's pixel.
  let sentBytes = flame.truncated ? flame.truncated.min_bytes : 0;
  const detail = (node) => {
    if (!sentBytes || !total) return;
    const share = node.v / total;
    if (node.v / (2 * flameWidth) >= sentBytes) return; // what it needs was sent
    get(flameQuery(share)).then((more) => {
      if (v.gone || !graph) return;
      sentBytes = more.truncated ? more.truncated.min_bytes : 0;
      graph.setRoot(more.root);
    }, () => { /* the coarser graph stays */ });
  };
  graph = new FlameGraph(box, {
    root: flame.root,
    totalBytes: total,
    zoomPath: v.zoom,
    search,
    onZoom: (path) => { replaceParams({ z: path.join(';') }); detail(graph.focus); },
    onSearch: (m) => {
      info.textContent = m ? `matched ${fmtBytes(m.bytes)} (${fmtShare(m.share)})` : '';
    },
  });
  if (graph.focus !== graph.root) detail(graph.focus);
  input.addEventListener('input', () => {
    graph.setSearch(input.value);
    replaceParams({ q: input.value.trim() });
  });
  return graph;
}

// The table of the moment, grouped by v.by; false if the view went stale
// while it was asked for.
async function tablePart(moment, v, stale) {
  const { at, by, site, id, base, params, here } = v;
  const byBar = h('div.tabs.small', ['site', 'function', 'stack'].map((b) => h('button', {
    class: b === by ? 'on' : '', dataset: { by: b },
    on: { click: () => here({ by: b }) },
  }, 'by ' + b)));
  moment.append(h('div.toolbar', byBar));
  // The rows a reader looks at first; more on demand (each row's stack
  // costs the server and the page alike).
  const limit = params.get('rows') === 'more' ? 1000 : 200;
  const query = { at, by, limit, site: site === 'user' ? undefined : site };
  const top = await get(base + '/top' + qs(query));
  if (stale()) return false;
  moment.append(topTable(top, by, id, params.get('sort'),
    (o) => replaceParams({ sort: sortToParam(o) }),
    limit < 1000 ? () => here({ rows: 'more' }) : null,
    (extra) => get(base + '/top' + qs({ ...query, ...extra }))));
  return true;
}

// A row's whole stack, leaf first, its site marked; the row's stack may have
// been cut at the answer's frame limit: then a button asks for all of it
// (ask(params) → a top answer; the same row is the one of the same trace).
function stackDetail(r, ask, colSpan) {
  const list = h('ol.stack-frames');
  const fill = (row) => list.replaceChildren(...(row.stack || []).map((f, i) => h('li', {
    class: i === (row.site_index || 0) ? 'site' : null, dataset: { fn: f.function || '' },
  }, h('span.fn', f.function || '??'), ' ', h('span.muted', where(f) || basename(f.module || '')),
  f.file && f.module ? h('span.muted.module', ` [${basename(f.module)}]`) : null)));
  fill(r);
  const cut = r.stack_depth && r.stack_depth > (r.stack || []).length;
  const more = cut ? h('button', {
    dataset: { act: 'whole-stack' },
    on: {
      click: async () => {
        more.disabled = true;
        try {
          const all = await ask({ max_frames: 1024 });
          const same = (all.rows || []).find((x) => x.trace === r.trace);
          if (same) fill(same);
          more.remove();
        } catch (err) {
          more.replaceWith(h('span.warn', err.message));
        }
      },
    },
  }, `all ${fmtInt(r.stack_depth)} frames`) : null;
  return h('tr.stack-row', h('td', { colSpan },
    h('div.muted', `stack of ${fmtInt((r.stack || []).length)} frames, leaf first; ▶ names the row`), list, more));
}

// min_share for frames half a pixel wide when a frame of this share of the
// total fills width pixels, rounded so that answers cache by URL.
function pixelShare(share, width) {
  const x = share / (2 * width);
  return x >= 1 ? '1' : Number(x.toPrecision(1)).toString();
}

// The history lists a point per bucket that changed: t_ns is the bucket's
// end, heap_max_bytes the highest the heap went inside it. As a polyline:
// each bucket's maximum over (t - g, t], the settled heap over the gaps.
function maxBand(points, g, durationNs) {
  const out = [];
  let prevT = 0;
  let prevHeap = 0;
  for (const p of points) {
    if (p.heap_max_bytes === undefined) return [];
    const start = Math.max(prevT, p.t_ns - g);
    if (start > prevT) out.push([prevT, prevHeap], [start, prevHeap]);
    out.push([start, p.heap_max_bytes], [p.t_ns, p.heap_max_bytes]);
    prevT = p.t_ns;
    prevHeap = p.heap_bytes;
  }
  if (out.length) out.push([prevT, prevHeap], [Math.max(prevT, durationNs || 0), prevHeap]);
  return out;
}

async function fillOthers(run, select) {
  try {
    const res = await get('/api/runs' + qs({ program: basename(run.program), limit: 50 }), { fresh: true });
    for (const r of res.runs || []) {
      if (r.id === run.id) continue;
      const lab = Object.entries(r.labels || {}).map(([k, v]) => `${k}=${v}`).join(' ');
      select.append(h('option', { value: r.id }, `#${r.id} ${basename(r.program)} ${lab} (${fmtDate(r.start_unix_ms)})`));
    }
  } catch { /* the picker stays empty */ }
}

function topTable(top, by, id, sortParam, onSort, onMore, ask) {
  const rows = top.rows || [];
  const opened = new Set();
  let table = null;
  const stackCell = (r) => (r.stack && r.stack.length ? h('button.stack-toggle', {
    title: 'show the whole stack', 'aria-expanded': String(opened.has(r)), dataset: { act: 'stack' },
    on: { click: () => { if (!opened.delete(r)) opened.add(r); table.refresh(); } },
  }, opened.has(r) ? '▾' : '▸') : '');
  const nameCell = (r) => {
    const stack = stackTitle(r);
    const q = r.name || (siteFrame(r) && siteFrame(r).function) || '';
    return h('a', { href: `#/run/${id}?${new URLSearchParams({ at: top.at || 'peak', q })}`, title: stack || where(r) },
      r.name || frameLabel(siteFrame(r)));
  };
  const columns = [
    { key: 'open', label: '', value: () => 0, cell: stackCell, title: 'a row\'s whole stack' },
    { key: 'name', label: by === 'function' ? 'function' : by === 'stack' ? 'stack (site)' : 'site', cell: nameCell },
    whereColumn,
  ];
  if (by === 'function') {
    columns.push(
      { key: 'self_bytes', label: 'self bytes', num: true, cell: (r) => bytesCell(r.self_bytes) },
      { key: 'self_count', label: 'self blocks', num: true },
      { key: 'total_bytes', label: 'total bytes', num: true, cell: (r) => bytesCell(r.total_bytes) },
      { key: 'total_count', label: 'total blocks', num: true });
  } else {
    columns.push(
      { key: 'total_bytes', label: 'bytes', num: true, cell: (r) => bytesCell(r.total_bytes) },
      { key: 'total_count', label: 'blocks', num: true });
  }
  columns.push({ key: 'share', label: 'share', num: true, cell: (r) => shareCell(r.share) });
  const sort = sortFromParam(sortParam, columns,
    by === 'function' ? { key: 'self_bytes', dir: -1 } : { key: 'total_bytes', dir: -1 });
  const more = top.rows_total > rows.length
    ? h('p.muted', `the ${fmtInt(rows.length)} largest of ${fmtInt(top.rows_total)} rows `,
      onMore ? h('button', { dataset: { act: 'more-rows' }, on: { click: onMore } }, 'show up to 1,000') : null)
    : null;
  table = sortableTable({
    columns, rows, sort, onSort, className: 'top', rowAttrs: (r) => ({ dataset: { name: r.name || '' } }),
    after: (r) => (opened.has(r) ? [stackDetail(r, ask, columns.length)] : []),
  });
  return h('div.top-table', { dataset: { by } }, more, table);
}

// Allocation sizes, fetched when first opened: a histogram of every
// allocation by power-of-two size class, and the sampling interval the server
// suggests for this program.
function sizesPanel(base) {
  const body = h('div', h('p.muted', 'loading…'));
  const panel = h('details.panel.sizes', h('summary', h('strong', 'Allocation sizes')), body);
  panel.addEventListener('toggle', async () => {
    if (!panel.open || panel.dataset.loaded) return;
    panel.dataset.loaded = '1';
    try {
      const sz = await get(base + '/sizes');
      const buckets = sz.buckets || [];
      const maxN = Math.max(1, ...buckets.map((b) => b.allocs));
      const maxB = Math.max(1, ...buckets.map((b) => b.bytes));
      const bar = (cls, share) => h('span.bar' + cls, { style: { width: (100 * share).toFixed(1) + '%' } });
      const rows = buckets.map((b) => h('tr',
        h('td', `${fmtBytes(b.lo)} – ${fmtBytes(b.hi)}`),
        h('td.num', fmtInt(b.allocs)),
        h('td', bar('.count', b.allocs / maxN)),
        h('td.num', { title: fmtExactBytes(b.bytes) }, fmtBytes(b.bytes)),
        h('td', bar('', b.bytes / maxB))));
      const head = h('tr', h('th', 'size'), h('th.num', 'allocations'), h('th', ''), h('th.num', 'bytes'), h('th', ''));
      body.replaceChildren(
        h('p', `${fmtInt(sz.total_allocs)} allocations, ${fmtBytes(sz.total_bytes)} in all. ` +
          `Suggested HEAPSTORE_SAMPLE_BYTES=${sz.suggested_sample_bytes}: ${sz.reason || ''}`),
        h('table.grid.sizes', h('thead', head), h('tbody', rows)));
    } catch (err) {
      body.replaceChildren(h('p.warn', err.message));
    }
  });
  return panel;
}
