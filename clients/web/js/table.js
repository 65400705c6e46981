// A sortable table: click a column's header to sort by it, again to reverse.
//
// columns: [{key, label, num?, value?(row), cell?(row) → Node|string, title?}]
// `value` gives what is sorted (default row[key]); `cell` what is shown.
// Only the first `limit` rows are put in the DOM (a 20,000-stack run would
// otherwise cost seconds); a button below shows the rest.
// A view keeps the order in its URL with sortFromParam()/sortToParam():
// "-bytes" is by bytes, largest first; "name" by name, ascending.
// after(row) → [tr…] gives rows that follow a row whatever the order (a
// process tree's members under its root, a row's stack); the returned
// element's refresh() draws the body again when they change.

import { h } from './api.js';

// {key, dir} from a URL parameter's value, or fallback when it is absent or
// names no column.
export function sortFromParam(value, columns, fallback) {
  if (!value) return fallback;
  const dir = value.startsWith('-') ? -1 : 1;
  const key = value.replace(/^[-+]/, '');
  return columns.some((c) => c.key === key) ? { key, dir } : fallback;
}

export function sortToParam({ key, dir }) {
  return (dir < 0 ? '-' : '') + key;
}

export function sortableTable({ columns, rows, sort, onSort, limit = 300, className = '', rowAttrs, after }) {
  let key = sort ? sort.key : null;
  let dir = sort ? sort.dir : -1;
  let shown = limit;
  const thead = h('thead');
  const tbody = h('tbody');
  const more = h('div.more');
  const table = h('table.grid' + (className ? '.' + className : ''), thead, tbody);

  const valueOf = (col, row) => (col.value ? col.value(row) : row[col.key]);

  function sorted() {
    const col = columns.find((c) => c.key === key);
    if (!col) return rows;
    const out = rows.slice();
    out.sort((a, b) => {
      const x = valueOf(col, a);
      const y = valueOf(col, b);
      if (x === y) return 0;
      if (x === undefined || x === null) return 1;
      if (y === undefined || y === null) return -1;
      if (typeof x === 'number' && typeof y === 'number') return (x - y) * dir;
      return String(x).localeCompare(String(y)) * dir;
    });
    return out;
  }

  function renderHead() {
    thead.replaceChildren(h('tr', columns.map((c) => h('th', {
      class: (c.num ? 'num ' : '') + (c.key === key ? (dir > 0 ? 'asc' : 'desc') : ''),
      title: c.title || 'sort by ' + c.label,
      dataset: { key: c.key },
      tabIndex: 0,
      'aria-sort': c.key === key ? (dir > 0 ? 'ascending' : 'descending') : 'none',
      on: {
        click: () => setSort(c),
        keydown: (e) => { if (e.key === 'Enter') setSort(c); },
      },
    }, c.label))));
  }

  function setSort(c) {
    if (key === c.key) dir = -dir;
    else { key = c.key; dir = c.num ? -1 : 1; }
    if (onSort) onSort({ key, dir });
    renderHead();
    renderBody();
  }

  function renderBody() {
    const all = sorted();
    const list = all.slice(0, shown);
    tbody.replaceChildren(...list.flatMap((row) => [
      tableRow(columns, row, rowAttrs ? rowAttrs(row) : null),
      ...((after && after(row)) || []),
    ]));
    if (all.length > shown) {
      more.replaceChildren(h('button', {
        on: { click: () => { shown = all.length; renderBody(); } },
      }, `Show all ${all.length} rows`));
    } else {
      more.replaceChildren();
    }
    if (!all.length) tbody.append(h('tr', h('td.empty', { colSpan: columns.length }, 'nothing here')));
  }

  renderHead();
  renderBody();
  const wrap = h('div.table-wrap', table, more);
  wrap.refresh = renderBody;
  return wrap;
}

// One row of columns' cells, with the tr's attributes.
export function tableRow(columns, row, attrs) {
  return h('tr', attrs, columns.map((c) => h('td', { class: c.num ? 'num' : c.className || null },
    c.cell ? c.cell(row) : formatPlain(c.value ? c.value(row) : row[c.key]))));
}

function formatPlain(v) {
  if (v === undefined || v === null) return '';
  if (typeof v === 'number') return v.toLocaleString('en-US');
  return String(v);
}
