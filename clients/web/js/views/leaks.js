// #/leaks/RUN?site=user|alloc|leaf : what was still live at the end, and
// which sites grew steadily, each ranked, each linked to its flame graph (at
// the end, searched for the site) and to its history (the run's plot with
// that stack as a series). site= chooses what names a row, as in the run's
// view (docs/api.md, Sites), and goes along with the links.

import { get, qs, h, runPath, fmtBytes, fmtInt, fmtShare, basename, frameLabel, siteFrame, stackTitle } from '../api.js';
import { go, setCrumbs, replaceParams } from '../nav.js';
import { sortableTable, sortFromParam, sortToParam } from '../table.js';
import {
  runHeader, dl, exportLinks, bytesCell, shareCell, whereColumn, siteParam, siteModeBar,
} from '../components.js';

export async function mount(root, { args, params, stale }) {
  const site = siteParam(params);
  const res = await get(runPath(args[0]) + '/leaks' + qs({ limit: 50, site: site === 'user' ? undefined : site }));
  if (stale()) return null;
  const run = res.run;
  const id = run.id;
  setCrumbs([
    { text: 'runs', href: '#/runs' },
    { text: `${basename(run.program)} #${id}`, href: `#/run/${id}` },
    { text: 'leaks' },
  ]);
  const section = h('section.view-leaks', { dataset: { view: 'leaks', run: id, site } });
  root.append(section);
  section.append(runHeader(run, res.sampling));
  section.append(h('div.toolbar.site-bar', siteModeBar(site, (s) => go(`/leaks/${id}`, { site: s }))));
  const c = leakColumns(id, site);
  section.append(livePanel(run, res, c, params), growingPanel(res, c, params));
  window.heapstore = { view: 'leaks', leaks: res, site };
  return { destroy() { window.heapstore = null; } };
}

// The columns the two tables share: rank, site (named under site), where,
// and the links to the flame graph and the history (which keep site).
function leakColumns(id, site) {
  const siteName = (r) => r.name || frameLabel(siteFrame(r));
  const fnOf = (r) => (siteFrame(r) && siteFrame(r).function) || r.name || '';
  const mode = site === 'user' ? {} : { site };
  const runLink = (p) => `#/run/${id}?${new URLSearchParams({ at: 'end', ...p, ...mode })}`;
  const links = (r) => h('span.links',
    h('a', { href: runLink({ q: fnOf(r) }), dataset: { link: 'flame' } }, 'flame'),
    ' · ',
    h('a', { href: runLink({ trace: r.trace ?? '', top: 5 }), dataset: { link: 'history' } }, 'history'));
  return {
    siteName,
    rank: { key: 'rank', label: '#', num: true },
    site: { key: 'name', label: 'site', value: siteName, cell: (r) => h('span', { title: stackTitle(r) }, siteName(r)) },
    links: { key: 'links', label: '', value: () => 0, cell: links },
  };
}

function livePanel(run, res, c, params) {
  const id = run.id;
  const base = runPath(id);
  const rows = (res.live_at_end || []).map((r, i) => ({ ...r, rank: i + 1 }));
  const cols = [c.rank, c.site, whereColumn,
    { key: 'bytes', label: 'bytes', num: true, cell: (r) => bytesCell(r.bytes) },
    { key: 'count', label: 'blocks', num: true },
    { key: 'share', label: 'share', num: true, cell: (r) => shareCell(r.share) },
    c.links];
  return h('div.panel.leaks-live',
    h('div.toolbar', h('strong', 'Live at the end'),
      h('span.muted', `${fmtBytes(run.end_bytes)} in ${fmtInt(run.end_count)} blocks never freed`), h('span.spacer'),
      h('a', { href: `#/run/${id}?at=end` }, 'flame graph at the end')),
    h('div.toolbar.downloads',
      h('span.muted', 'download the end:'),
      exportLinks(base, id, 'end', ['collapsed', 'pprof', 'speedscope']),
      dl(`${base}/history?format=csv`, `heapstore-${id}-history.csv`, 'history CSV')),
    sortableTable({
      rows, columns: cols, className: 'leaks',
      sort: sortFromParam(params.get('sort'), cols, { key: 'rank', dir: 1 }),
      onSort: (o) => replaceParams({ sort: sortToParam(o) }),
      rowAttrs: (r) => ({ dataset: { name: c.siteName(r), rank: r.rank } }),
    }));
}

function growingPanel(res, c, params) {
  const rows = (res.growing || []).map((r, i) => ({ ...r, rank: i + 1 }));
  const cols = [c.rank, c.site, whereColumn,
    { key: 'slope_bytes_per_s', label: 'growth', num: true, cell: (r) => `${fmtBytes(Math.round(r.slope_bytes_per_s))}/s` },
    { key: 'steadiness', label: 'steady', num: true, title: 'share of the growth\'s stretch of the run in which what the site keeps rose', cell: (r) => fmtShare(r.steadiness ?? 0) },
    { key: 'r2', label: 'fit (r²)', num: true, cell: (r) => (r.r2 ?? 0).toFixed(3) },
    { key: 'end_bytes', label: 'at end', num: true, cell: (r) => bytesCell(r.end_bytes) },
    { key: 'score', label: 'score', num: true, cell: (r) => Math.round(r.score).toLocaleString('en-US') },
    c.links];
  return h('div.panel.leaks-growing',
    h('div.toolbar', h('strong', 'Grew steadily'),
      h('span.muted', 'sites whose kept bytes rose through much of the run, not in one or a few steps; ranked by end bytes × steadiness')),
    sortableTable({
      rows, columns: cols, className: 'leaks',
      sort: sortFromParam(params.get('gsort'), cols, { key: 'rank', dir: 1 }),
      onSort: (o) => replaceParams({ gsort: sortToParam(o) }),
      rowAttrs: (r) => ({ dataset: { name: c.siteName(r), rank: r.rank } }),
    }));
}
