// #/runs?program=&host=&label=k=v&open=ID,ID&before=ID&metric=&by= : every
// run, newest first, a page of PAGE at a time (before= the last run of the
// page before: /api/runs' keyset paging), with the numbers that tell whether
// it is worth opening; tick two to compare them. Above the table, the trend
// of a metric over the matching runs, per run or per value of a label (by=):
// a point opens its run, two groups picked open the diff of the two groups
// (#/diff?a=SEL&b=SEL, SEL id=A..B or LABEL=VALUE after the filters).
// A process tree is one row, its root's, with the tree's size and largest
// peak; opening it lists its processes under it, largest peak first, the
// ones without samples folded into one line (open= keeps the open trees).

import { get, qs, h, fmtBytes, fmtDuration, fmtDate, fmtInt, basename, droppedTotal } from '../api.js';
import { go, setCrumbs, replaceParams, parseHash } from '../nav.js';
import { sortableTable, sortFromParam, sortToParam, tableRow } from '../table.js';
import { stateText, stateClass, droppedTitle } from '../components.js';
import { foldTrees, hasSamples, programCounts } from '../trees.js';
import { TrendChart, METRICS } from '../trendchart.js';

const PAGE = 100; // runs a page of the table lists
const TREND_RUNS = 2000; // runs the chart draws at most (the newest)

export async function mount(root, { params }) {
  const filter = {
    program: params.get('program') || '',
    host: params.get('host') || '',
    label: params.get('label') || '',
  };
  setCrumbs([{ text: 'runs' }]);

  const picked = [];
  const compareBtn = h('button', { disabled: true, on: { click: compare } }, 'Compare two runs');
  const hint = h('span.muted', 'tick two runs to compare them at their ends');
  const bar = h('div.toolbar', filterForm(filter), h('span.spacer'), hint, compareBtn);
  root.append(h('section.view-runs', { dataset: { view: 'runs' } }, bar));

  const before = params.get('before') || '';
  const res = await get('/api/runs' + qs({ ...filter, limit: PAGE, before }), { fresh: true });
  const runs = res.runs || [];
  const chart = await trendPanel(root.firstChild, filter, params, runs);

  function compare() {
    if (picked.length !== 2) return;
    const [x, y] = picked.slice().sort((p, q) => (p.start_unix_ms - q.start_unix_ms) || (p.id - q.id));
    go('/diff', { a: `${x.id}@end`, b: `${y.id}@end` });
  }

  function toggle(run, box) {
    const i = picked.indexOf(run);
    if (box.checked && i < 0) picked.push(run);
    if (!box.checked && i >= 0) picked.splice(i, 1);
    while (picked.length > 2) {
      const old = picked.shift();
      const el = root.querySelector(`input[data-run="${old.id}"]`);
      if (el) el.checked = false;
    }
    compareBtn.disabled = picked.length !== 2;
    hint.textContent = picked.length === 2 ? `runs ${picked.map((p) => p.id).join(' and ')}` : 'tick two runs to compare them at their ends';
  }

  const { roots, trees } = foldTrees(runs);
  const open = new Set((params.get('open') || '').split(',').filter(Boolean).map(Number));
  let table = null;
  const fold = { trees, open, everyone: new Set(), redraw: () => table.refresh() };
  const columns = runColumns(picked, toggle, fold);
  root.firstChild.append(h('p.count.muted', `${runs.length} run${runs.length === 1 ? '' : 's'}` +
    (before ? ` older than run #${before}` : res.next ? ' (the newest)' : '') +
    (roots.length < runs.length ? ` in ${roots.length} rows: a process tree's runs are folded under its root` : '')),
  pager(before, res.next));
  table = sortableTable({
    columns, rows: roots, className: 'runs',
    sort: sortFromParam(params.get('sort'), columns, { key: 'start_unix_ms', dir: -1 }),
    onSort: (o) => replaceParams({ sort: sortToParam(o) }),
    rowAttrs: (r) => ({ dataset: { run: r.id, program: basename(r.program) } }),
    after: (r) => treeRows(columns, fold, r),
  });
  root.firstChild.append(table);
  return chart;
}

// The links to the newest page and to the next older one.
function pager(before, next) {
  const nav = h('div.pager.toolbar');
  if (before) nav.append(h('a', { href: '#', dataset: { act: 'newest' }, on: { click: (e) => { e.preventDefault(); replaceAndGo({ before: '' }); } } }, '« newest runs'));
  if (next) nav.append(h('a', { href: '#', dataset: { act: 'older' }, on: { click: (e) => { e.preventDefault(); replaceAndGo({ before: String(next) }); } } }, 'older runs »'));
  return nav;
}

function replaceAndGo(changes) {
  const { params } = parseHash();
  const o = Object.fromEntries(params.entries());
  go('/runs', { ...o, ...changes });
}

// The filters as a run selector's key=value list ("" when none).
function filterSel(filter) {
  return [filter.program && `program=${filter.program}`, filter.host && `host=${filter.host}`, filter.label]
    .filter(Boolean).join(',');
}

// The chart over the runs the filters match, with its metric and by choice.
async function trendPanel(section, filter, params, runs) {
  const metric = params.get('metric') || 'peak_bytes';
  const by = params.get('by') || '';
  const base = filterSel(filter);
  // the table does not wait on the chart: a trend the server refuses (a
  // label filter it cannot read as a selector, an older server) is a note
  let t;
  try {
    t = await get('/api/trend' + qs({ runs: base || 'all', metric, by, limit: TREND_RUNS }));
  } catch (err) {
    section.append(h('p.muted.trend-error', `no trend: ${err.message}`));
    return null;
  }
  const keys = new Set(runs.flatMap((r) => Object.keys(r.labels || {})));
  if (by) keys.add(by);
  const pickMetric = h('select', { name: 'metric', on: { change: (e) => replaceAndGo({ metric: e.target.value }) } },
    METRICS.filter(([k]) => k !== 'code_bytes').map(([k, label]) => h('option', { value: k, selected: k === metric }, label)));
  const pickBy = h('select', { name: 'by', on: { change: (e) => replaceAndGo({ by: e.target.value }) } },
    h('option', { value: '' }, 'per run'), [...keys].sort().map((k) => h('option', { value: k, selected: k === by }, `by ${k}`)));
  const panel = h('div.panel.trend', h('div.toolbar', h('strong', 'trend'), pickMetric, pickBy,
    h('span.muted', `${t.runs_read} run${t.runs_read === 1 ? '' : 's'}${t.truncated ? ` (the newest ${TREND_RUNS})` : ''}`)));
  section.append(panel);
  const sel = (g) => [base, by ? `${by}=${g.value}` : `id=${Math.min(...g.ids)}..${Math.max(...g.ids)}`]
    .filter(Boolean).join(',');
  return new TrendChart(panel, {
    rows: t.rows || [], by: by || null, metric,
    onOpen: (id) => go(`/run/${id}`),
    onCompare: (a, b) => go('/diff', { a: sel(a), b: sel(b) }),
  });
}

// The rows under an open tree's root: its processes with samples, largest
// peak first, then those without, folded into one row until asked for.
function treeRows(columns, fold, root) {
  const t = fold.trees.get(root.id);
  if (!t || t.count < 2 || !fold.open.has(root.id)) return [];
  const attrs = (r) => ({
    class: 'tree-member', dataset: { run: r.id, program: basename(r.program), tree: root.id, depth: t.depth.get(r.id) },
  });
  const some = t.members.filter(hasSamples);
  const none = t.members.filter((r) => !hasSamples(r));
  const rows = some.map((r) => tableRow(columns, r, attrs(r)));
  if (fold.everyone.has(root.id)) return rows.concat(none.map((r) => tableRow(columns, r, attrs(r))));
  if (none.length) {
    rows.push(h('tr.tree-fold', { dataset: { tree: root.id } }, h('td'), h('td', { colSpan: columns.length - 1 },
      `${none.length} more process${none.length === 1 ? '' : 'es'} without samples: ${programCounts(none)} `,
      h('button', { dataset: { act: 'tree-all' }, on: { click: () => { fold.everyone.add(root.id); fold.redraw(); } } }, 'list them'))));
  }
  return rows;
}

// The tree column's cell: for a root, its tree's size and largest peak and
// the button that opens it; for a member, its depth and parent.
function treeCell(fold, r) {
  const t = fold.trees.get(r.id);
  if (!t) return h('span.muted.tree-parent', { title: `started by run #${r.parent_id}` }, `↳ #${r.parent_id}`);
  if (t.count < 2) return '';
  const isOpen = fold.open.has(r.id);
  const flip = () => {
    if (isOpen) fold.open.delete(r.id);
    else fold.open.add(r.id);
    replaceParams({ open: [...fold.open].join(',') });
    fold.redraw();
  };
  const big = t.largest;
  return h('span.tree',
    h('button.tree-toggle', { 'aria-expanded': String(isOpen), dataset: { act: 'tree', count: t.count }, on: { click: flip } },
      `${isOpen ? '▾' : '▸'} ${t.count} processes`),
    h('span.tree-peak', { title: `the tree's largest peak: run #${big.id}, ${[big.program, ...(big.argv || []).slice(1)].join(' ')}` },
      ` largest ${fmtBytes(big.peak_bytes)} (${basename(big.program)})`));
}

// The form of the filters, as in the URL.
function filterForm(filter) {
  const inputs = {
    program: h('input', { name: 'program', placeholder: 'program', value: filter.program }),
    host: h('input', { name: 'host', placeholder: 'host', value: filter.host }),
    label: h('input', { name: 'label', placeholder: 'label key=value', value: filter.label }),
  };
  const form = h('form.filters', {
    on: {
      submit: (e) => {
        e.preventDefault();
        go('/runs', {
          program: inputs.program.value.trim(),
          host: inputs.host.value.trim(),
          label: inputs.label.value.trim(),
        });
      },
    },
  }, inputs.program, inputs.host, inputs.label, h('button', { type: 'submit' }, 'Filter'),
  (filter.program || filter.host || filter.label) ? h('a.clear', { href: '#/runs' }, 'clear') : null);
  return form;
}

// The runs table's columns; the first ticks runs into picked, through toggle;
// the tree column opens and closes the trees of fold.
function runColumns(picked, toggle, fold) {
  return [
    {
      key: 'pick', label: '', value: () => 0,
      cell: (r) => {
        const box = h('input', { type: 'checkbox', checked: picked.includes(r), dataset: { run: r.id }, 'aria-label': `pick run ${r.id}` });
        box.addEventListener('change', () => toggle(r, box));
        return box;
      },
    },
    { key: 'id', label: 'run', num: true, cell: (r) => h('a', { href: `#/run/${r.id}` }, `#${r.id}`) },
    {
      key: 'program', label: 'program', value: (r) => basename(r.program),
      cell: (r) => h('a.prog', { href: `#/run/${r.id}`, title: [r.program, ...(r.argv || []).slice(1)].join(' ') },
        basename(r.program), h('span.argv', ' ' + (r.argv || []).slice(1).join(' '))),
    },
    {
      key: 'tree', label: 'processes', title: 'sort by the size of the process tree',
      value: (r) => (fold.trees.get(r.id) || { count: 0 }).count, cell: (r) => treeCell(fold, r),
    },
    { key: 'host', label: 'host' },
    {
      key: 'labels', label: 'labels', value: (r) => Object.entries(r.labels || {}).map(([k, v]) => `${k}=${v}`).join(' '),
      cell: (r) => Object.entries(r.labels || {}).map(([k, v]) =>
        h('a.chip', { href: '#/runs?label=' + encodeURIComponent(`${k}=${v}`) }, `${k}=${v}`)),
    },
    { key: 'start_unix_ms', label: 'started', num: true, cell: (r) => fmtDate(r.start_unix_ms) },
    { key: 'duration_ns', label: 'duration', num: true, cell: (r) => fmtDuration(r.duration_ns) },
    { key: 'peak_bytes', label: 'peak', num: true, cell: (r) => h('span', { title: `${fmtInt(r.peak_bytes)} B in ${fmtInt(r.peak_count)} blocks` }, fmtBytes(r.peak_bytes)) },
    { key: 'end_bytes', label: 'end heap', num: true, cell: (r) => h('span', { title: `${fmtInt(r.end_bytes)} B in ${fmtInt(r.end_count)} blocks` }, fmtBytes(r.end_bytes)) },
    {
      key: 'dropped', label: 'dropped', num: true, value: (r) => droppedTotal(r.sampling),
      cell: (r) => {
        const n = droppedTotal(r.sampling);
        return h('span', { class: n ? 'warn' : 'muted', title: droppedTitle(r.sampling) }, fmtInt(n));
      },
    },
    {
      key: 'state', label: 'end', value: (r) => stateText(r),
      cell: (r) => h('span', { class: 'state ' + stateClass(r) }, stateText(r)),
    },
    {
      key: 'links', label: '', value: () => 0,
      cell: (r) => h('a', { href: `#/leaks/${r.id}` }, 'leaks'),
    },
  ];
}
