// The diff of two groups of runs (#/diff?a=SEL&b=SEL where a side names
// several runs, e.g. version=1.3 or id=120..140): per row each side's mean
// over its runs, its spread across them, the change with its error, and the
// server's verdict (grew or shrank only past 3 standard errors; else noise).
// diff.js mounts it when /api/diff answers the group shape (docs/api.md).

import { h, fmtBytes, fmtSignedBytes, fmtInt, fmtShare, frameLabel, siteFrame, stackTitle } from '../api.js';
import { go, replaceParams } from '../nav.js';
import { sortableTable, sortFromParam, sortToParam } from '../table.js';
import { whereColumn } from '../components.js';

const VERDICT_CLASS = { grew: 'grow', shrank: 'shrink', noise: 'muted', same: 'muted' };

// "12.0 MiB ± 1.1 MiB": a side's mean and its spread across runs.
function meanSd(g) {
  return h('span', { title: `mean ${fmtInt(Math.round(g.mean_bytes))} B, sd ${fmtInt(Math.round(g.sd_bytes))} B, ` +
    `error of the mean ${fmtInt(Math.round(g.se_bytes))} B (sampling ${fmtInt(Math.round(g.sampling_se_bytes))} B)` },
  `${fmtBytes(Math.round(g.mean_bytes))} ± ${fmtBytes(Math.round(g.sd_bytes))}`);
}

function runsLink(s) {
  const ids = s.runs || [];
  const first = ids.slice(0, 8).map((id) => h('a', { href: `#/run/${id}` }, `#${id}`));
  return h('div.runs-of-side', `${ids.length} run${ids.length === 1 ? '' : 's'}${s.runs_more ? ' (the newest; more matched)' : ''}: `,
    ...first.flatMap((a, i) => (i ? [', ', a] : [a])), ids.length > 8 ? ', …' : '');
}

function side(letter, s) {
  return h('div.side', { dataset: { side: letter } },
    h('div.muted', letter),
    h('div', h('code', s.selector)),
    runsLink(s),
    h('div', `at ${s.at}`),
    h('div', meanSd(s.total), ' live'),
    h('div.muted', `error of the mean ${fmtBytes(Math.round(s.total.se_bytes))}`));
}

function verdictCell(v) {
  return h('span', { class: `verdict ${VERDICT_CLASS[v] || ''}`, dataset: { verdict: v } }, v);
}

function rowsTable(rows, by, sortParam) {
  const name = (r) => (by === 'function' ? r.name : frameLabel(siteFrame(r)) || r.name);
  const columns = [
    { key: 'name', label: by, value: name, cell: (r) => h('span', { title: stackTitle(r) || name(r) }, name(r)) },
    whereColumn,
    { key: 'a', label: 'A mean ± sd', num: true, value: (r) => r.a.mean_bytes, cell: (r) => meanSd(r.a) },
    { key: 'b', label: 'B mean ± sd', num: true, value: (r) => r.b.mean_bytes, cell: (r) => meanSd(r.b) },
    {
      key: 'delta_bytes', label: 'change', num: true, value: (r) => Math.abs(r.delta_bytes),
      cell: (r) => h('span', { class: VERDICT_CLASS[r.verdict] || '' }, fmtSignedBytes(Math.round(r.delta_bytes))),
    },
    { key: 'se_bytes', label: '± 3 se', num: true, cell: (r) => fmtBytes(Math.round(3 * r.se_bytes)) },
    ...(by === 'function' ? [{
      key: 'self', label: 'self change', num: true, value: (r) => Math.abs(r.self.delta_bytes),
      title: 'the change of what the function allocated itself (its callers hold the same bytes inclusive)',
      cell: (r) => fmtSignedBytes(Math.round(r.self.delta_bytes)),
    }] : []),
    { key: 'share', label: 'share of change', num: true, cell: (r) => fmtShare(r.share) },
    { key: 'verdict', label: 'verdict', value: (r) => r.verdict, cell: (r) => verdictCell(r.verdict) },
  ];
  return h('div.changes', sortableTable({
    columns, rows, className: 'gchanges',
    sort: sortFromParam(sortParam, columns, null),
    onSort: (o) => replaceParams({ sort: sortToParam(o) }),
    rowAttrs: (r) => ({ dataset: { name: r.name, verdict: r.verdict } }),
  }));
}

// Mounts the group answer d into section; by: the rows' grouping.
export function mountGroup(section, d, { a, b, by, sortParam }) {
  const t = d.total;
  section.append(h('div.panel',
    h('div.sides',
      side('A', d.a), h('span.arrow', '→'), side('B', d.b),
      h('div.side.delta', h('div.muted', 'change of the mean'),
        h('div', { class: VERDICT_CLASS[t.verdict] || '' }, fmtSignedBytes(Math.round(t.delta_bytes))),
        h('div.muted', `± ${fmtBytes(Math.round(3 * t.se_bytes))} (3 se)`), verdictCell(t.verdict)))));
  const panel = h('div.panel',
    h('div.toolbar', h('div.tabs.small', ['site', 'function', 'stack'].map((x) => h('button', {
      class: x === by ? 'on' : '', dataset: { by: x }, on: { click: () => go('/diff', { a, b, by: x, tab: 'table' }) },
    }, 'by ' + x)))),
    h('p.muted', 'Groups of runs: a row grew or shrank only when its change is past 3 standard errors ' +
      '(its spread across runs and the sampling error of the estimates); else it is noise.'));
  const changed = (d.rows || []).filter((r) => r.verdict === 'grew' || r.verdict === 'shrank').length;
  panel.append(h('h3', `Changes by ${by}: ${changed} past the noise, of ${d.rows_total}`));
  panel.append(rowsTable(d.rows || [], by, sortParam));
  section.append(panel);
}
