// A time plot of bytes on one canvas: areas and lines over seconds from the
// run's start, a hover crosshair reading exact values, click to pick a moment,
// drag to pick two.
//
// series: [{id, name, color, kind: 'area'|'line', points: [[t_ns, bytes]…],
//           step?, hidden?, dash?}] drawn in order (put areas first).
// step: the points are changes of a state (the history's buckets list only
// the buckets where something changed): a value holds from its time until
// the next point, and the last one until the end of the run. Without step,
// points are samples of a continuous quantity (RSS) joined by lines, with
// dots when they are few.
// The plot owns its canvas and legend; destroy() drops the listeners.

import { h, fmtBytes, fmtExactBytes, fmtTime } from './api.js';
import { showTip, hideTip } from './tip.js';

const PAD = { left: 64, right: 14, top: 10, bottom: 26 };
const UNIT = [[1, 'B'], [1024, 'KiB'], [1024 ** 2, 'MiB'], [1024 ** 3, 'GiB'], [1024 ** 4, 'TiB']];

export class TimePlot {
  constructor(container, { series, durationNs, markers = [], onPick, onRange, height = 300 }) {
    this.series = series;
    this.durationNs = Math.max(1, durationNs || 0,
      ...series.flatMap((s) => (s.points.length ? [s.points[s.points.length - 1][0]] : [])));
    this.markers = markers;
    this.onPick = onPick;
    this.onRange = onRange;
    this.height = height;
    this.hoverX = null;
    this.drag = null; // {x0, x1} in CSS px while the button is down
    this.range = null; // [t0, t1] picked by a drag

    this.canvas = h('canvas.plot', { tabIndex: 0, 'aria-label': 'live heap over time' });
    this.legend = h('div.legend');
    this.el = h('div.plot-wrap', this.canvas, this.legend);
    container.append(this.el);
    this.renderLegend();

    this.ro = new ResizeObserver(() => this.resize());
    this.ro.observe(this.el);
    this.onMove = (e) => this.mouseMove(e);
    this.onDown = (e) => this.mouseDown(e);
    this.onUp = (e) => this.mouseUp(e);
    this.onLeave = () => { this.hoverX = null; hideTip(); this.draw(); };
    this.canvas.addEventListener('mousemove', this.onMove);
    this.canvas.addEventListener('mousedown', this.onDown);
    window.addEventListener('mouseup', this.onUp);
    this.canvas.addEventListener('mouseleave', this.onLeave);
    this.resize();
  }

  destroy() {
    this.ro.disconnect();
    window.removeEventListener('mouseup', this.onUp);
    hideTip();
  }

  renderLegend() {
    this.legend.replaceChildren(...this.series.map((s) => {
      const box = h('input', { type: 'checkbox', checked: !s.hidden });
      box.addEventListener('change', () => { s.hidden = !box.checked; this.computeScale(); this.draw(); });
      return h('label.legend-item', { title: s.title || s.name, dataset: { series: s.id } }, box,
        h('span.swatch', { style: { background: s.color } }), s.name);
    }));
  }

  resize() {
    const w = Math.max(200, this.el.clientWidth);
    const dpr = window.devicePixelRatio || 1;
    this.w = w;
    this.canvas.style.width = w + 'px';
    this.canvas.style.height = this.height + 'px';
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(this.height * dpr);
    this.dpr = dpr;
    this.computeScale();
    this.draw();
  }

  computeScale() {
    let max = 0;
    for (const s of this.series) {
      if (s.hidden) continue;
      for (const p of s.points) if (p[1] > max) max = p[1];
    }
    this.yTicks = niceBytesTicks(max || 1024);
    this.yMax = this.yTicks.max;
  }

  xOf(t) { return PAD.left + (t / this.durationNs) * (this.w - PAD.left - PAD.right); }
  tOf(x) {
    const t = ((x - PAD.left) / (this.w - PAD.left - PAD.right)) * this.durationNs;
    return Math.min(this.durationNs, Math.max(0, t));
  }
  yOf(v) { return PAD.top + (1 - v / this.yMax) * (this.height - PAD.top - PAD.bottom); }

  // Replace the series (e.g. when the top stacks arrive after the heap).
  setSeries(series) {
    this.series = series;
    this.renderLegend();
    this.computeScale();
    this.draw();
  }

  setMarkers(markers) { this.markers = markers; this.draw(); }

  draw() {
    if (!this.w) return;
    const c = this.canvas.getContext('2d');
    c.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    c.clearRect(0, 0, this.w, this.height);
    const x0 = PAD.left;
    const x1 = this.w - PAD.right;
    const y0 = PAD.top;
    const y1 = this.height - PAD.bottom;
    c.font = '11px system-ui, sans-serif';

    this.drawAxes(c, x0, x1, y0, y1);

    // the picked range
    const range = this.drag ? [this.tOf(Math.min(this.drag.x0, this.drag.x1)), this.tOf(Math.max(this.drag.x0, this.drag.x1))]
      : this.range;
    if (range) {
      c.fillStyle = 'rgba(80, 120, 220, 0.12)';
      c.fillRect(this.xOf(range[0]), y0, this.xOf(range[1]) - this.xOf(range[0]), y1 - y0);
    }

    c.save();
    c.beginPath(); c.rect(x0, y0 - 2, x1 - x0 + 2, y1 - y0 + 2); c.clip();
    for (const s of this.series) if (!s.hidden) this.drawSeries(c, s, y1);
    c.restore();

    this.drawMarkers(c, x1, y0, y1);
    this.drawHover(c, y0, y1);
  }

  // The grid, the axes and their ticks.
  drawAxes(c, x0, x1, y0, y1) {
    c.strokeStyle = '#e3e6ea';
    c.fillStyle = '#667';
    c.lineWidth = 1;
    c.textAlign = 'right';
    c.textBaseline = 'middle';
    for (const v of this.yTicks.ticks) {
      const y = Math.round(this.yOf(v)) + 0.5;
      c.beginPath(); c.moveTo(x0, y); c.lineTo(x1, y); c.stroke();
      c.fillText(this.yTicks.fmt(v), x0 - 6, y);
    }
    c.textAlign = 'center';
    c.textBaseline = 'top';
    for (const t of niceTimeTicks(this.durationNs, (x1 - x0) / 80)) {
      const x = Math.round(this.xOf(t)) + 0.5;
      c.beginPath(); c.moveTo(x, y1); c.lineTo(x, y1 + 4); c.stroke();
      c.fillText(fmtTick(t, this.durationNs), x, y1 + 6);
    }
    c.strokeStyle = '#99a';
    c.beginPath(); c.moveTo(x0 + 0.5, y0); c.lineTo(x0 + 0.5, y1 + 0.5); c.lineTo(x1, y1 + 0.5); c.stroke();
  }

  // The markers' lines, and their labels where they do not overlap.
  drawMarkers(c, x1, y0, y1) {
    const labelled = [];
    for (const m of this.markers) {
      const x = Math.round(this.xOf(m.t_ns)) + 0.5;
      // Two markers at one moment (the picked moment is the peak): one label.
      const clash = labelled.some((lx) => Math.abs(lx - x) < 40);
      c.strokeStyle = m.color || '#333';
      c.setLineDash(m.dash || []);
      c.lineWidth = 1.5;
      c.beginPath(); c.moveTo(x, y0); c.lineTo(x, y1); c.stroke();
      c.setLineDash([]);
      if (m.label && !clash) {
        labelled.push(x);
        c.fillStyle = m.color || '#333';
        const right = x + 4 + c.measureText(m.label).width > x1; // no room to its right
        c.textAlign = right ? 'right' : 'left';
        c.textBaseline = 'top';
        c.fillText(m.label, x + (right ? -4 : 4), y0 + 2);
      }
    }
  }

  // The hovered moment's line and each series' value at it.
  drawHover(c, y0, y1) {
    if (this.hoverX === null || this.drag) return;
    const t = this.tOf(this.hoverX);
    const x = Math.round(this.xOf(t)) + 0.5;
    c.strokeStyle = 'rgba(0,0,0,0.35)';
    c.lineWidth = 1;
    c.beginPath(); c.moveTo(x, y0); c.lineTo(x, y1); c.stroke();
    for (const s of this.series) {
      if (s.hidden) continue;
      const p = valueAt(s, t);
      if (!p) continue;
      c.fillStyle = s.color;
      c.beginPath(); c.arc(this.xOf(s.step ? t : p[0]), this.yOf(p[1]), 3, 0, Math.PI * 2); c.fill();
    }
  }

  drawSeries(c, s, yBase) {
    const pts = decimate(s.points, this, this.w * 2);
    if (!pts.length) return;
    c.beginPath();
    let lastY = null;
    pts.forEach((p, i) => {
      const x = this.xOf(p[0]);
      const y = this.yOf(p[1]);
      if (i === 0) {
        if (s.step) { c.moveTo(this.xOf(0), this.yOf(0)); c.lineTo(x, this.yOf(0)); c.lineTo(x, y); }
        else c.moveTo(x, y);
      } else {
        if (s.step) c.lineTo(x, lastY);
        c.lineTo(x, y);
      }
      lastY = y;
    });
    if (s.step) c.lineTo(this.xOf(this.durationNs), lastY);
    const xEnd = s.step ? this.xOf(this.durationNs) : this.xOf(pts[pts.length - 1][0]);
    const xStart = s.step ? this.xOf(0) : this.xOf(pts[0][0]);
    if (s.kind === 'area') {
      c.strokeStyle = s.color;
      c.lineWidth = 1.5;
      c.stroke();
      c.lineTo(xEnd, yBase);
      c.lineTo(xStart, yBase);
      c.closePath();
      c.fillStyle = s.fill || s.color;
      c.globalAlpha = s.alpha || 0.25;
      c.fill();
      c.globalAlpha = 1;
    } else {
      c.strokeStyle = s.color;
      c.lineWidth = s.width || 1.5;
      c.setLineDash(s.dash || []);
      c.stroke();
      c.setLineDash([]);
      if (!s.step && pts.length < 40) {
        c.fillStyle = s.color;
        for (const p of pts) { c.beginPath(); c.arc(this.xOf(p[0]), this.yOf(p[1]), 2.5, 0, Math.PI * 2); c.fill(); }
      }
    }
  }

  localX(e) {
    const r = this.canvas.getBoundingClientRect();
    return e.clientX - r.left;
  }

  mouseMove(e) {
    const x = this.localX(e);
    if (this.drag) { this.drag.x1 = x; this.draw(); return; }
    if (x < PAD.left || x > this.w - PAD.right) { this.onLeave(); return; }
    this.hoverX = x;
    this.draw();
    const t = this.tOf(x);
    const lines = [fmtTime(t)];
    for (const s of this.series) {
      if (s.hidden) continue;
      const p = valueAt(s, t);
      if (p) lines.push(`${s.name}: ${fmtBytes(p[1])} (${fmtExactBytes(p[1])})` + (s.step ? '' : ` at ${fmtTime(p[0])}`));
    }
    showTip(e.clientX, e.clientY, lines);
  }

  mouseDown(e) {
    if (e.button !== 0) return;
    const x = this.localX(e);
    if (x < PAD.left - 4 || x > this.w - PAD.right + 4) return;
    e.preventDefault();
    this.drag = { x0: x, x1: x };
    hideTip();
  }

  mouseUp(e) {
    if (!this.drag) return;
    const d = this.drag;
    this.drag = null;
    d.x1 = this.localX(e);
    if (Math.abs(d.x1 - d.x0) < 4) {
      this.range = null;
      this.draw();
      if (this.onPick) this.onPick(this.tOf(d.x0));
    } else {
      this.range = [this.tOf(Math.min(d.x0, d.x1)), this.tOf(Math.max(d.x0, d.x1))];
      this.draw();
      if (this.onRange) this.onRange(this.range[0], this.range[1]);
    }
  }

  // For tests and for "is anything drawn": how many non-transparent pixels.
  inkedPixels() {
    const c = this.canvas.getContext('2d');
    const d = c.getImageData(0, 0, this.canvas.width, this.canvas.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
    return n;
  }
}

// What a series says at time t: for a step series the last change at or
// before t ([t, 0] before the first), else the sample closest in time.
export function valueAt(s, t) {
  if (!s.step) return nearest(s.points, t);
  const pts = s.points;
  let lo = 0;
  let hi = pts.length; // first index with time > t
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (pts[mid][0] <= t) lo = mid + 1; else hi = mid;
  }
  return lo ? pts[lo - 1] : [t, 0];
}

// The point of a time-sorted list closest in time to t.
export function nearest(points, t) {
  if (!points.length) return null;
  let lo = 0;
  let hi = points.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (points[mid][0] < t) lo = mid + 1; else hi = mid;
  }
  if (lo > 0 && Math.abs(points[lo - 1][0] - t) <= Math.abs(points[lo][0] - t)) lo--;
  return points[lo];
}

// More points than pixels: keep each pixel column's first, min, max and last
// so that spikes stay visible.
function decimate(points, plot, budget) {
  if (points.length <= budget) return points;
  const out = [];
  let col = null;
  let bucket = [];
  const flush = () => {
    if (!bucket.length) return;
    let mn = bucket[0];
    let mx = bucket[0];
    for (const p of bucket) { if (p[1] < mn[1]) mn = p; if (p[1] > mx[1]) mx = p; }
    const pick = [bucket[0], mn, mx, bucket[bucket.length - 1]];
    pick.sort((a, b) => a[0] - b[0]);
    for (const p of pick) if (out[out.length - 1] !== p) out.push(p);
    bucket = [];
  };
  for (const p of points) {
    const c = Math.floor(plot.xOf(p[0]));
    if (c !== col) { flush(); col = c; }
    bucket.push(p);
  }
  flush();
  return out;
}

function niceBytesTicks(max) {
  let u = 0;
  while (u < UNIT.length - 1 && max >= UNIT[u + 1][0]) u++;
  const [scale, name] = UNIT[u];
  const v = max / scale;
  const step = niceStep(v / 4);
  const top = Math.ceil(v / step) * step;
  const ticks = [];
  for (let x = 0; x <= top + step / 2; x += step) ticks.push(x * scale);
  let digits = 0;
  while (digits < 3 && Math.abs(step * 10 ** digits - Math.round(step * 10 ** digits)) > 1e-9) digits++;
  return { max: top * scale, ticks, fmt: (b) => `${(b / scale).toFixed(digits)} ${name}` };
}

function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
}

function niceTimeTicks(durationNs, count) {
  const step = niceStep(durationNs / Math.max(2, count));
  const out = [];
  for (let t = 0; t <= durationNs + step / 1000; t += step) out.push(t);
  return out;
}

function fmtTick(t, durationNs) {
  const s = t / 1e9;
  if (durationNs < 2e7) return (t / 1e6).toFixed(1) + ' ms';
  if (durationNs < 2e9) return (t / 1e6).toFixed(0) + ' ms';
  return (Number.isInteger(Math.round(s * 100) / 100) ? s.toFixed(0) : s.toFixed(s < 10 ? 2 : 1)) + ' s';
}
