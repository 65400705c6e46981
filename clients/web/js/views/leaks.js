// #/leaks/RUN : what was still live at the end, and what grew steadily, each
// ranked, each linked to its flame graph (at the end, searched for the site)
// and to its history (the run's plot with that stack as a series).

import { get, qs, h, runPath, fmtBytes, fmtInt, basename, frameLabel, siteFrame, stackTitle } from '../api.js';
import { setCrumbs, replaceParams } from '../nav.js';
import { sortableTable, sortFromParam, sortToParam } from '../table.js';
import { runHeader, dl, exportLinks, bytesCell, shareCell, whereColumn } from '../components.js';

export async function mount(root, { args, params, stale }) {
  const res = await get(runPath(args[0]) + '/leaks' + qs({ limit: 50 }));
  if (stale()) return null;
  const run = res.run;
  const id = run.id;
  setCrumbs([
    { text: 'runs', href: '#/runs' },
    { text: `${basename(run.program)} #${id}`, href: `#/run/${id}` },
    { text: 'leaks' },
  ]);
  const section = h('section.view-leaks', { dataset: { view: 'leaks', run: id } });
  root.append(section);
  section.append(runHeader(run, res.sampling));

  const siteName = (r) => r.name || frameLabel(siteFrame(r));
  const fnOf = (r) => (siteFrame(r) && siteFrame(r).function) || r.name || '';
  const links = (r) => h('span.links',
    h('a', { href: `#/run/${id}?${new URLSearchParams({ at: 'end', q: fnOf(r) })}`, dataset: { link: 'flame' } }, 'flame'),
    ' · ',
    h('a', { href: `#/run/${id}?${new URLSearchParams({ at: 'end', trace: r.trace ?? '', top: 5 })}`, dataset: { link: 'history' } }, 'history'));
  const rank = { key: 'rank', label: '#', num: true };
  const site = {
    key: 'name', label: 'site', value: siteName,
    cell: (r) => h('span', { title: stackTitle(r) }, siteName(r)),
  };

  const live = (res.live_at_end || []).map((r, i) => ({ ...r, rank: i + 1 }));
  const growing = (res.growing || []).map((r, i) => ({ ...r, rank: i + 1 }));

  const liveCols = [rank, site, whereColumn,
    { key: 'bytes', label: 'bytes', num: true, cell: (r) => bytesCell(r.bytes) },
    { key: 'count', label: 'blocks', num: true },
    { key: 'share', label: 'share', num: true, cell: (r) => shareCell(r.share) },
    { key: 'links', label: '', value: () => 0, cell: links }];
  const growCols = [rank, site, whereColumn,
    { key: 'slope_bytes_per_s', label: 'growth', num: true, cell: (r) => `${fmtBytes(Math.round(r.slope_bytes_per_s))}/s` },
    { key: 'r2', label: 'fit (r²)', num: true, cell: (r) => (r.r2 ?? 0).toFixed(3) },
    { key: 'end_bytes', label: 'at end', num: true, cell: (r) => bytesCell(r.end_bytes) },
    { key: 'score', label: 'score', num: true, cell: (r) => Math.round(r.score).toLocaleString('en-US') },
    { key: 'links', label: '', value: () => 0, cell: links }];
  const byRank = { key: 'rank', dir: 1 };
  const base = runPath(id);

  section.append(h('div.panel.leaks-live',
    h('div.toolbar', h('strong', 'Live at the end'),
      h('span.muted', `${fmtBytes(run.end_bytes)} in ${fmtInt(run.end_count)} blocks never freed`), h('span.spacer'),
      h('a', { href: `#/run/${id}?at=end` }, 'flame graph at the end')),
    h('div.toolbar.downloads',
      h('span.muted', 'download the end:'),
      exportLinks(base, id, 'end', ['collapsed', 'pprof', 'speedscope']),
      dl(`${base}/history?format=csv`, `heapstore-${id}-history.csv`, 'history CSV')),
    sortableTable({
      rows: live, columns: liveCols, className: 'leaks',
      sort: sortFromParam(params.get('sort'), liveCols, byRank),
      onSort: (o) => replaceParams({ sort: sortToParam(o) }),
      rowAttrs: (r) => ({ dataset: { name: siteName(r), rank: r.rank } }),
    })));

  section.append(h('div.panel.leaks-growing',
    h('div.toolbar', h('strong', 'Grew steadily'),
      h('span.muted', 'least-squares slope of live bytes over the run, ranked by end bytes weighted by fit')),
    sortableTable({
      rows: growing, columns: growCols, className: 'leaks',
      sort: sortFromParam(params.get('gsort'), growCols, byRank),
      onSort: (o) => replaceParams({ gsort: sortToParam(o) }),
      rowAttrs: (r) => ({ dataset: { name: siteName(r), rank: r.rank } }),
    })));

  window.heapstore = { view: 'leaks', leaks: res };
  return { destroy() { window.heapstore = null; } };
}
