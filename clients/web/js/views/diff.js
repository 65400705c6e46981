// #/diff?a=RUN@T&b=RUN@T&tab=flame|table&by=stack|site|function&q=&z=
//
// What changed from moment A to moment B (of one run or of two): a
// differential flame graph (red grew, blue shrank) and the largest changes.
// When a side is a selector naming several runs (version=1.3, id=120..140:
// the runs page links such pairs here) the server answers for the groups,
// and gdiff.js shows means, spreads and what changed past the noise.

import {
  get, qs, h, runPath, fmtBytes, fmtInt, fmtSignedBytes, fmtExactBytes, basename, frameLabel,
  siteFrame, stackTitle,
} from '../api.js';
import { go, setCrumbs, replaceParams, parseHash } from '../nav.js';
import { FlameGraph } from '../flame.js';
import { sortableTable, sortFromParam, sortToParam } from '../table.js';
import { atLabel, dl, exportLinks, bytesCell, whereColumn } from '../components.js';
import { mountGroup } from './gdiff.js';

export async function mount(root, { params, stale }) {
  const a = params.get('a') || '';
  const b = params.get('b') || '';
  const tab = params.get('tab') === 'table' ? 'table' : 'flame';
  const by = ['stack', 'site', 'function'].includes(params.get('by')) ? params.get('by') : 'site';
  const search = params.get('q') || '';
  const zoom = params.get('z') ? params.get('z').split(';') : [];
  const here = (changes) => go('/diff', { a, b, tab, by, q: parseHash().params.get('q') || '', ...changes });

  setCrumbs([{ text: 'runs', href: '#/runs' }, { text: 'compare' }]);
  const section = h('section.view-diff', { dataset: { view: 'diff' } });
  root.append(section);
  section.append(pickers(a, b, (na, nb) => go('/diff', { a: na, b: nb, tab, by })));
  if (!a || !b) {
    section.append(h('p', 'Pick two moments: RUN@TIME, where RUN is a run id and TIME is seconds, peak or end; ' +
      'or two groups of runs, such as version=1.3 and version=1.4, or id=120..140.'));
    return null;
  }

  // The flame tree is the same whichever grouping the table uses: stack.
  // Groups have no flame: a side that may be a group is asked by `by` first.
  const runBy = tab === 'flame' ? 'stack' : by;
  let d = await get('/api/diff' + qs({ a, b, by: maybeGroup(a) || maybeGroup(b) ? by : runBy }));
  if (!stale() && d.by !== (d.group ? by : runBy)) d = await get('/api/diff' + qs({ a, b, by: d.group ? by : runBy }));
  if (stale()) return null;
  if (d.group) { // two groups: the table by the chosen grouping
    mountGroup(section, d, { a, b, by, sortParam: params.get('sort') });
    window.heapstore = { view: 'diff', diff: d, group: true };
    return { destroy() { window.heapstore = null; } };
  }

  const total = d.b.total_bytes - d.a.total_bytes;
  section.append(h('div.panel',
    h('div.sides',
      side('A', d.a, a), h('span.arrow', '→'), side('B', d.b, b),
      h('div.side.delta', h('div.muted', 'change'),
        h('div', { class: total > 0 ? 'grow' : total < 0 ? 'shrink' : '', title: `${fmtInt(total)} B` }, fmtSignedBytes(total)))),
  ));

  const tabs = h('div.tabs', ['flame', 'table'].map((t) => h('button', {
    class: t === tab ? 'on' : '', dataset: { tab: t }, on: { click: () => here({ tab: t }) },
  }, t === 'flame' ? 'Differential flame graph' : 'Largest changes')));
  const dlHref = '/api/diff' + qs({ a, b, format: 'collapsed' });
  const panel = h('div.panel',
    h('div.toolbar', tabs, h('span.spacer'),
      h('span.legend-inline', h('span.swatch.grow-sw'), 'grew', h('span.swatch.shrink-sw'), 'shrank')),
    h('div.toolbar.downloads',
      h('span.muted', 'download:'),
      dl(dlHref, 'heapstore-diff.folded.txt', 'both (difffolded)'),
      ...[['A', d.a, a], ['B', d.b, b]].flatMap(([letter, s, spec]) => {
        const run = s.run || {};
        const at = spec.includes('@') ? spec.slice(spec.lastIndexOf('@') + 1) : 'end';
        return [h('span.muted', `${letter}:`),
          ...exportLinks(runPath(run.id), run.id, at, ['collapsed', 'pprof', 'speedscope'])];
      })));
  section.append(panel);

  let graph = null;
  if (tab === 'flame') {
    graph = diffFlame(panel, d.flame, zoom, search);
  } else {
    panel.append(h('div.toolbar', h('div.tabs.small', ['site', 'function', 'stack'].map((x) => h('button', {
      class: x === by ? 'on' : '', dataset: { by: x }, on: { click: () => here({ by: x }) },
    }, 'by ' + x)))));
  }
  // The table of changes is shown under the flame graph too: the issue asks
  // for both, and the biggest rows name what the colours point at.
  const rows = d.rows || [];
  panel.append(h('h3', tab === 'flame' ? 'Largest changes (by stack)' : `Largest changes (by ${by})`));
  panel.append(changesTable(rows, tab === 'flame' ? 'stack' : by, params.get('sort')));

  window.heapstore = { view: 'diff', diff: d, flame: graph };
  return { destroy() { if (graph) graph.destroy(); window.heapstore = null; } };
}

// key=value… without ",latest" may name several runs (id=120..140, version=1.3).
function maybeGroup(sel) {
  const run = sel.includes('@') ? sel.slice(0, sel.lastIndexOf('@')) : sel;
  return run.includes('=') && !/(^|,)latest$/.test(run);
}

// The differential flame graph, with its search box; returns the FlameGraph.
function diffFlame(panel, root, zoom, search) {
  let graph = null;
  const info = h('span.muted.match');
  const input = h('input', { type: 'search', placeholder: 'search functions', value: search, 'aria-label': 'search functions' });
  panel.append(h('div.toolbar', input, info, h('span.spacer'),
    h('button', { on: { click: () => graph.zoom(null) } }, 'Reset zoom'),
    h('span.muted', 'width: the larger side · click a frame to zoom · Esc zooms out')));
  const box = h('div.flame-box');
  panel.append(box);
  graph = new FlameGraph(box, {
    root, diff: true, zoomPath: zoom, search,
    onZoom: (p) => replaceParams({ z: p.join(';') }),
    onSearch: (m) => { info.textContent = m ? `matched ${fmtBytes(m.bytes)} in B` : ''; },
  });
  input.addEventListener('input', () => { graph.setSearch(input.value); replaceParams({ q: input.value.trim() }); });
  return graph;
}

function side(letter, s, spec) {
  const run = s.run || {};
  const at = spec.includes('@') ? spec.slice(spec.lastIndexOf('@') + 1) : 'end';
  return h('div.side', { dataset: { side: letter } },
    h('div.muted', letter),
    h('div', h('a', { href: `#/run/${run.id}?at=${encodeURIComponent(at)}` },
      `${basename(run.program)} #${run.id}`),
      ' ', Object.entries(run.labels || {}).map(([k, v]) => h('span.chip', `${k}=${v}`))),
    h('div', `at ${atLabel(at, s.at_ns)}`),
    h('div', { title: fmtExactBytes(s.total_bytes) }, `${fmtBytes(s.total_bytes)} live`));
}

function pickers(a, b, submit) {
  const ia = h('input', { name: 'a', value: a, placeholder: 'A: RUN@TIME', 'aria-label': 'moment A' });
  const ib = h('input', { name: 'b', value: b, placeholder: 'B: RUN@TIME', 'aria-label': 'moment B' });
  return h('form.filters', { on: { submit: (e) => { e.preventDefault(); submit(ia.value.trim(), ib.value.trim()); } } },
    h('label', 'A ', ia), h('label', 'B ', ib), h('button', { type: 'submit' }, 'Compare'),
    h('button', { type: 'button', on: { click: () => submit(ib.value.trim(), ia.value.trim()) } }, 'Swap'),
    h('span.muted', 'TIME: seconds, peak or end'));
}

function changesTable(rows, by, sortParam) {
  const name = (r) => r.name || frameLabel(siteFrame(r));
  const columns = [
    { key: 'name', label: by, value: name, cell: (r) => h('span', { title: stackTitle(r) || name(r) }, name(r)) },
    whereColumn,
    { key: 'a_bytes', label: 'A bytes', num: true, cell: (r) => bytesCell(r.a_bytes) },
    { key: 'b_bytes', label: 'B bytes', num: true, cell: (r) => bytesCell(r.b_bytes) },
    {
      key: 'delta_bytes', label: 'change', num: true, value: (r) => Math.abs(r.delta_bytes),
      cell: (r) => h('span', { class: r.delta_bytes > 0 ? 'grow' : r.delta_bytes < 0 ? 'shrink' : '', title: `${fmtInt(r.delta_bytes)} B` }, fmtSignedBytes(r.delta_bytes)),
    },
    { key: 'delta_count', label: 'Δ blocks', num: true, cell: (r) => (r.delta_count > 0 ? '+' : '') + fmtInt(r.delta_count) },
  ];
  return h('div.changes', sortableTable({
    columns, rows, className: 'changes',
    sort: sortFromParam(sortParam, columns, { key: 'delta_bytes', dir: -1 }),
    onSort: (o) => replaceParams({ sort: sortToParam(o) }),
    rowAttrs: (r) => ({ dataset: { name: name(r) } }),
  }));
}
