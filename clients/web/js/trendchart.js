// The runs page's chart: a metric of /api/trend per run (over the runs'
// start times) or per value of a label (in the label's natural order, each a
// point at the mean with a bar from the least to the greatest of its runs),
// drawn in SVG: one <circle> per point, so a point is an element a reader
// (and a test) can find, hover and click.
//
// By run: clicking a point opens that run (onOpen(id)); dragging across the
// plot picks the runs in between as a group; two groups picked call
// onCompare(a, b) with each group's run ids. By label: clicking a group picks
// it; two picked call onCompare with their values. The caller turns those
// into selectors (views/runs.js).

import { h, fmtBytes, fmtDuration, fmtInt, fmtDate } from './api.js';
import { showTip, hideTip } from './tip.js';

const NS = 'http://www.w3.org/2000/svg';
const PAD = { left: 70, right: 16, top: 12, bottom: 34 };
const HEIGHT = 220;

export const METRICS = [
  ['peak_bytes', 'peak'], ['end_bytes', 'end heap'], ['total_alloc_bytes', 'allocated'],
  ['leak_bytes_per_s', 'leak rate'], ['rss_peak_bytes', 'RSS peak'], ['duration_ns', 'duration'],
  ['dropped_events', 'dropped'], ['code_bytes', 'code'],
];

export function fmtMetric(metric, v) {
  if (v === null || v === undefined) return '–';
  if (metric === 'duration_ns') return fmtDuration(v);
  if (metric === 'dropped_events') return fmtInt(v);
  if (metric === 'leak_bytes_per_s') return fmtBytes(Math.round(v)) + '/s';
  return fmtBytes(v);
}

function svg(tag, attrs, ...kids) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const c of kids) if (c) el.append(c);
  return el;
}

// The points of rows: x in [0, 1] (start time by run, rank by group), y the
// metric (null rows dropped), lo/hi a group's range.
function layout(rows, metric, byLabel) {
  const pts = [];
  const t0 = Math.min(...rows.map((r) => r.start_unix_ms));
  const t1 = Math.max(...rows.map((r) => r.start_unix_ms));
  rows.forEach((r, i) => {
    const v = r[metric];
    if (v === null || v === undefined) return;
    const x = byLabel ? (rows.length > 1 ? i / (rows.length - 1) : 0.5)
      : (t1 > t0 ? (r.start_unix_ms - t0) / (t1 - t0) : 0.5);
    pts.push({
      row: r, x, y: v,
      lo: byLabel && r.min ? r.min[metric] : v, hi: byLabel && r.max ? r.max[metric] : v,
    });
  });
  return pts;
}

function yScale(pts) {
  let lo = Math.min(0, ...pts.map((p) => p.lo));
  let hi = Math.max(...pts.map((p) => p.hi), lo + 1);
  const pad = (hi - lo) * 0.06;
  return { lo, hi: hi + pad };
}

// The axes: four y ticks, and the x extremes (dates, or the first and last
// values of the label).
function axes(g, w, sc, metric, rows, byLabel) {
  const ih = HEIGHT - PAD.top - PAD.bottom;
  for (let i = 0; i <= 4; i++) {
    const v = sc.lo + (sc.hi - sc.lo) * (i / 4);
    const y = PAD.top + ih - ih * (i / 4);
    g.append(svg('line', { x1: PAD.left, x2: w - PAD.right, y1: y, y2: y, class: 'grid' }));
    const t = svg('text', { x: PAD.left - 6, y: y + 4, 'text-anchor': 'end', class: 'tick' });
    t.textContent = fmtMetric(metric, v);
    g.append(t);
  }
  if (byLabel || !rows.length) return;
  const first = svg('text', { x: PAD.left, y: HEIGHT - 8, class: 'tick' });
  first.textContent = fmtDate(rows[0].start_unix_ms);
  const last = svg('text', { x: w - PAD.right, y: HEIGHT - 8, 'text-anchor': 'end', class: 'tick' });
  last.textContent = fmtDate(rows[rows.length - 1].start_unix_ms);
  g.append(first, last);
}

export class TrendChart {
  // rows: /api/trend's rows; by: the label or null; metric: a JSON name.
  constructor(container, { rows, by, metric, onOpen, onCompare }) {
    Object.assign(this, { rows, by, metric, onOpen, onCompare });
    this.groups = []; // picked: [{ids|value, label}]
    this.svg = svg('svg', { class: 'trend-chart', height: HEIGHT, role: 'img', 'aria-label': `${metric} per ${by || 'run'}` });
    this.note = h('span.muted.trend-note', by ? 'click two groups to compare them'
      : 'click a point to open its run; drag across points to pick a group, twice to compare two');
    this.el = h('div.trend-wrap', this.svg, h('div.toolbar', this.note));
    container.append(this.el);
    this.ro = new ResizeObserver(() => this.draw());
    this.ro.observe(this.el);
    this.draw();
  }

  destroy() {
    this.ro.disconnect();
    hideTip();
  }

  px(p, w, sc) {
    const iw = w - PAD.left - PAD.right;
    const ih = HEIGHT - PAD.top - PAD.bottom;
    return { cx: PAD.left + p.x * iw, cy: PAD.top + ih - ih * ((p.y - sc.lo) / (sc.hi - sc.lo || 1)),
      y: (v) => PAD.top + ih - ih * ((v - sc.lo) / (sc.hi - sc.lo || 1)) };
  }

  draw() {
    const w = Math.max(300, this.el.clientWidth || 600);
    this.w = w;
    this.svg.setAttribute('width', w);
    this.svg.replaceChildren();
    this.pts = layout(this.rows, this.metric, !!this.by);
    if (!this.pts.length) return;
    const sc = yScale(this.pts);
    axes(this.svg, w, sc, this.metric, this.rows, !!this.by);
    this.band = svg('rect', { class: 'trend-band', y: PAD.top, height: HEIGHT - PAD.top - PAD.bottom, width: 0, x: 0 });
    this.svg.append(this.band);
    for (const p of this.pts) this.svg.append(this.point(p, w, sc));
    this.svg.onmousedown = (e) => this.dragStart(e);
  }

  point(p, w, sc) {
    const { cx, cy, y } = this.px(p, w, sc);
    p.cx = cx;
    const r = p.row;
    const picked = this.groups.some((g) => (this.by ? g.value === r.value : g.ids.includes(r.run)));
    const dot = svg('circle', {
      cx, cy, r: this.by ? 6 : 4, class: 'trend-point' + (picked ? ' picked' : ''),
      'data-run': this.by ? null : r.run, 'data-value': this.by ? r.value : null,
    });
    dot.addEventListener('mousemove', (e) => showTip(e.clientX, e.clientY, this.tipLines(r)));
    dot.addEventListener('mouseleave', hideTip);
    dot.addEventListener('click', (e) => { e.stopPropagation(); this.clicked(r); });
    if (!this.by || p.lo === p.hi) return dot;
    const bar = svg('line', { x1: cx, x2: cx, y1: y(p.lo), y2: y(p.hi), class: 'trend-range' });
    return svg('g', {}, bar, dot);
  }

  tipLines(r) {
    const v = fmtMetric(this.metric, r[this.metric]);
    if (!this.by) return [`run #${r.run} · ${fmtDate(r.start_unix_ms)}`, `${this.metric}: ${v}`];
    return [`${this.by}=${r.value}: ${r.runs} run${r.runs === 1 ? '' : 's'}`, `${this.metric}: ${v} (mean)`,
      `from ${fmtMetric(this.metric, r.min[this.metric])} to ${fmtMetric(this.metric, r.max[this.metric])}`];
  }

  clicked(r) {
    if (this.dragged) return;
    if (!this.by) { this.onOpen(r.run); return; }
    this.pick({ value: r.value, label: `${this.by}=${r.value}` });
  }

  pick(g) {
    this.groups.push(g);
    if (this.groups.length === 2) {
      const [a, b] = this.groups;
      this.groups = [];
      this.onCompare(a, b);
      return;
    }
    this.note.textContent = `picked ${g.label}: pick another to compare`;
    this.draw();
  }

  dragStart(e) {
    if (this.by || e.button !== 0) return;
    const box = this.svg.getBoundingClientRect();
    const x0 = e.clientX - box.left;
    this.dragged = false;
    const move = (ev) => {
      const x1 = ev.clientX - box.left;
      if (Math.abs(x1 - x0) > 4) this.dragged = true;
      this.band.setAttribute('x', Math.min(x0, x1));
      this.band.setAttribute('width', Math.abs(x1 - x0));
    };
    const up = (ev) => {
      window.removeEventListener('mousemove', move);
      window.removeEventListener('mouseup', up);
      const x1 = ev.clientX - box.left;
      this.band.setAttribute('width', 0);
      if (!this.dragged) return;
      const [l, r] = [Math.min(x0, x1), Math.max(x0, x1)];
      const ids = this.pts.filter((p) => p.cx >= l && p.cx <= r).map((p) => p.row.run);
      setTimeout(() => { this.dragged = false; }, 0);
      if (ids.length) this.pick({ ids, label: `runs #${Math.min(...ids)}..#${Math.max(...ids)}` });
    };
    window.addEventListener('mousemove', move);
    window.addEventListener('mouseup', up);
  }
}
