// A flame graph on canvas (root at the top, callees below), for one moment
// (width = live bytes) or for a difference of two (width = the larger of the
// two sides, colour = growth red, shrinkage blue).
//
// Only frames at least MIN_PX wide are laid out: a subtree narrower than that
// is skipped whole, so the cost of a frame is bounded by the pixels on screen,
// not by the 20,000 stacks of a big run. Hover reads a frame's exact numbers;
// click zooms into it (click the root or a dimmed ancestor to zoom out);
// setSearch() highlights the frames whose function matches.

import { h, fmtBytes, fmtExactBytes, fmtInt, fmtShare, fmtSignedBytes } from './api.js';
import { showTip, hideTip } from './tip.js';

const ROW = 18;
const MIN_PX = 0.5;
const FONT = '12px system-ui, sans-serif';

// Turn the API's tree into nodes with parent links and a layout value `v`.
function normalize(src, diff, parent = null, depth = 0) {
  const n = {
    name: src.name,
    fn: src.function || src.name,
    file: src.file || null,
    line: src.line || null,
    module: src.module || null,
    parent,
    depth,
    children: [],
  };
  if (diff) {
    n.a = src.a_bytes || 0;
    n.b = src.b_bytes || 0;
    n.delta = src.delta_bytes !== undefined ? src.delta_bytes : n.b - n.a;
    n.aCount = src.a_count;
    n.bCount = src.b_count;
  } else {
    n.bytes = src.bytes || 0;
    n.count = src.count || 0;
    n.self = src.self_bytes || 0;
    n.selfCount = src.self_count;
  }
  let sum = 0;
  for (const c of src.children || []) {
    const k = normalize(c, diff, n, depth + 1);
    n.children.push(k);
    sum += k.v;
  }
  // In a diff a parent's side can be smaller than its children's widths
  // together (one child grew, another shrank): widen it so children fit.
  n.v = diff ? Math.max(n.a, n.b, sum) : Math.max(n.bytes, sum);
  n.children.sort((x, y) => y.v - x.v || (x.name < y.name ? -1 : 1));
  return n;
}

function hash(s) {
  let x = 2166136261;
  for (let i = 0; i < s.length; i++) { x ^= s.charCodeAt(i); x = Math.imul(x, 16777619); }
  return x >>> 0;
}

export class FlameGraph {
  // root: the API's "root" (flame) or "flame" (diff) object.
  constructor(container, { root, diff = false, totalBytes, onZoom, onSearch, zoomPath, search }) {
    this.diff = diff;
    this.root = normalize(root, diff);
    this.total = totalBytes || (diff ? this.root.v : this.root.bytes) || 1;
    this.onZoom = onZoom;
    this.onSearch = onSearch;
    this.focus = this.root;
    this.search = '';
    this.maxAbsDelta = 1;
    if (diff) this.maxAbsDelta = Math.max(1, maxAbs(this.root));

    this.canvas = h('canvas.flame', { tabIndex: 0, 'aria-label': diff ? 'differential flame graph' : 'flame graph' });
    this.el = h('div.flame-wrap', this.canvas);
    container.append(this.el);

    this.onMove = (e) => this.mouseMove(e);
    this.onClick = (e) => this.click(e);
    this.onLeave = () => { this.hover = null; hideTip(); this.draw(); };
    this.canvas.addEventListener('mousemove', this.onMove);
    this.canvas.addEventListener('click', this.onClick);
    this.canvas.addEventListener('mouseleave', this.onLeave);
    // Escape zooms out one level, Home all the way (the canvas has focus
    // after a click).
    this.canvas.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && this.focus.parent) this.zoom(this.focus.parent);
      else if (e.key === 'Home') this.zoom(null);
    });
    this.ro = new ResizeObserver(() => this.render());
    this.ro.observe(this.el);

    if (zoomPath && zoomPath.length) this.focus = this.find(zoomPath) || this.root;
    if (search) this.setSearch(search, { silent: true });
    this.render();
  }

  destroy() {
    this.ro.disconnect();
    hideTip();
  }

  // A more detailed answer for the same moment: the zoom and the search stay.
  setRoot(root) {
    const path = this.pathOf(this.focus);
    this.root = normalize(root, this.diff);
    if (this.diff) this.maxAbsDelta = Math.max(1, maxAbs(this.root));
    this.focus = this.find(path) || this.root;
    this.hover = null;
    if (this.search) this.setSearch(this.search, { silent: true });
    this.render();
  }

  // The node reached by following names from the root's children down.
  find(path) {
    let n = this.root;
    for (const name of path) {
      n = n.children.find((c) => c.name === name);
      if (!n) return null;
    }
    return n;
  }

  pathOf(n) {
    const out = [];
    for (; n && n.parent; n = n.parent) out.push(n.name);
    return out.reverse();
  }

  zoom(n, { silent = false } = {}) {
    this.focus = n || this.root;
    this.render();
    if (!silent && this.onZoom) this.onZoom(this.pathOf(this.focus));
  }

  setSearch(q, { silent = false } = {}) {
    this.search = (q || '').trim().toLowerCase();
    let matched = 0;
    // inMatch: below a matching frame; such a subtree is counted once.
    const walk = (n, inside) => {
      n.match = !!this.search && n.parent !== null && n.fn.toLowerCase().includes(this.search);
      n.inMatch = inside;
      if (n.match && !inside) matched += this.diff ? n.b : n.bytes;
      for (const c of n.children) walk(c, inside || n.match);
    };
    walk(this.root, false);
    this.matchedBytes = matched;
    if (!silent) this.draw();
    if (this.onSearch) this.onSearch(this.search ? { bytes: matched, share: matched / this.total } : null);
  }

  // Lay out the visible frames: rows[depth] = [{n, x, w}…] sorted by x.
  layout() {
    const width = this.w;
    const rows = [];
    const put = (n, depth, x, w) => {
      (rows[depth] || (rows[depth] = [])).push({ n, x, w, depth });
    };
    // Ancestors of the focus: full width, drawn dimmed.
    const chain = [];
    for (let a = this.focus; a; a = a.parent) chain.push(a);
    chain.reverse();
    chain.forEach((a, i) => put(a, i, 0, width));
    const base = chain.length - 1;
    const scale = this.focus.v ? width / this.focus.v : 0;
    const walk = (n, depth, x) => {
      let cx = x;
      for (const c of n.children) {
        const cw = c.v * scale;
        if (cw < MIN_PX) break; // sorted by width: the rest are narrower still
        put(c, depth + 1, cx, cw);
        walk(c, depth + 1, cx);
        cx += cw;
      }
    };
    walk(this.focus, base, 0);
    // Depth-first, left to right: each row is filled in x order, which the
    // binary search in hit() relies on.
    this.rows = rows;
    this.chainDepth = base;
  }

  render() {
    const width = Math.max(200, this.el.clientWidth);
    this.w = width;
    this.layout();
    const height = Math.max(ROW * 3, this.rows.length * ROW + 2);
    const dpr = window.devicePixelRatio || 1;
    this.dpr = dpr;
    this.height = height;
    this.canvas.style.width = width + 'px';
    this.canvas.style.height = height + 'px';
    this.canvas.width = Math.round(width * dpr);
    this.canvas.height = Math.round(height * dpr);
    this.draw();
  }

  color(n, dim) {
    if (n.parent === null) return dim ? '#e4e4e4' : '#d8d8d8';
    if (this.search && !n.match && !n.inMatch) return '#e6e2de';
    if (this.search && n.match) return '#c04fd0';
    if (this.diff) {
      const r = Math.min(1, Math.abs(n.delta) / this.maxAbsDelta);
      if (!n.delta) return '#dcdcdc';
      const l = 92 - Math.round(r * 42); // lightness 92% → 50%
      return n.delta > 0 ? `hsl(0, 80%, ${l}%)` : `hsl(210, 75%, ${l}%)`;
    }
    const x = hash(n.fn);
    const hue = 8 + (x % 40); // reds to oranges
    const sat = 70 + ((x >> 8) % 25);
    const lig = 55 + ((x >> 16) % 15);
    return `hsl(${hue}, ${sat}%, ${lig}%)`;
  }

  draw() {
    if (!this.rows) return;
    const c = this.canvas.getContext('2d');
    c.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    c.clearRect(0, 0, this.w, this.height);
    c.font = FONT;
    c.textBaseline = 'middle';
    const charW = c.measureText('abcdefghijklmnopqrstuvwxyz').width / 26;
    for (const row of this.rows) {
      if (!row) continue;
      for (const r of row) {
        const dim = r.depth < this.chainDepth;
        const y = r.depth * ROW;
        c.fillStyle = this.color(r.n, dim);
        c.globalAlpha = dim ? 0.55 : 1;
        c.fillRect(r.x, y, Math.max(r.w - 0.5, 0.5), ROW - 1);
        if (this.hover === r.n) {
          c.strokeStyle = '#222';
          c.lineWidth = 1;
          c.strokeRect(r.x + 0.5, y + 0.5, Math.max(r.w - 1.5, 0.5), ROW - 2);
        }
        if (r.w > 28) {
          const maxChars = Math.floor((r.w - 6) / charW);
          let label = r.n.parent === null ? this.rootLabel() : r.n.name;
          if (label.length > maxChars) label = maxChars > 2 ? label.slice(0, maxChars - 1) + '…' : '';
          if (label) {
            c.fillStyle = (this.search && r.n.match) ? '#fff' : '#1d1d1f';
            c.fillText(label, r.x + 3, y + ROW / 2);
          }
        }
        c.globalAlpha = 1;
      }
    }
  }

  rootLabel() {
    if (this.diff) return `all: ${fmtBytes(this.root.a)} → ${fmtBytes(this.root.b)} (${fmtSignedBytes(this.root.b - this.root.a)})`;
    return `all: ${fmtBytes(this.root.bytes)} in ${fmtInt(this.root.count)} blocks`;
  }

  hit(e) {
    const r = this.canvas.getBoundingClientRect();
    const x = e.clientX - r.left;
    const depth = Math.floor((e.clientY - r.top) / ROW);
    const row = this.rows[depth];
    if (!row) return null;
    let lo = 0;
    let hi = row.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const it = row[mid];
      if (x < it.x) hi = mid - 1;
      else if (x >= it.x + it.w) lo = mid + 1;
      else return it;
    }
    return null;
  }

  mouseMove(e) {
    const it = this.hit(e);
    const n = it ? it.n : null;
    if (n !== this.hover) { this.hover = n; this.draw(); }
    if (!n) { hideTip(); return; }
    showTip(e.clientX, e.clientY, this.describe(n));
  }

  describe(n) {
    const lines = [n.parent === null ? 'all' : n.name];
    const loc = n.file ? `${n.file}${n.line ? ':' + n.line : ''}` : n.module;
    if (loc && n.parent !== null) lines.push(loc);
    if (this.diff) {
      lines.push(`A: ${fmtBytes(n.a)} (${fmtExactBytes(n.a)})`);
      lines.push(`B: ${fmtBytes(n.b)} (${fmtExactBytes(n.b)})`);
      const pct = n.a ? ` (${n.delta > 0 ? '+' : ''}${((n.delta / n.a) * 100).toFixed(1)}%)` : n.b ? ' (new)' : '';
      lines.push(`change: ${fmtSignedBytes(n.delta)} (${fmtInt(n.delta)} B)${pct}`);
    } else {
      lines.push(`${fmtBytes(n.bytes)} (${fmtExactBytes(n.bytes)}) in ${fmtInt(n.count)} blocks`);
      lines.push(`${fmtShare(n.bytes / this.total)} of all` +
        (this.focus !== this.root && this.focus.bytes ? `, ${fmtShare(n.bytes / this.focus.bytes)} of the zoomed frame` : ''));
      if (n.self) lines.push(`self: ${fmtBytes(n.self)} (${fmtExactBytes(n.self)})`);
    }
    return lines;
  }

  click(e) {
    const it = this.hit(e);
    if (!it) return;
    this.zoom(it.n === this.focus ? (it.n.parent || this.root) : it.n);
  }

  // Laid-out frames with no laid-out children, widest first: what a reader
  // sees as the ends of the flames. Coordinates in CSS pixels of the canvas.
  leaves() {
    const out = [];
    for (const row of this.rows) {
      if (!row) continue;
      for (const r of row) {
        if (r.depth < this.chainDepth) continue;
        const kids = r.n.children.length && r.n.children[0].v * (this.w / (this.focus.v || 1)) >= MIN_PX;
        if (!kids && r.n.parent !== null) {
          out.push({ name: r.n.name, function: r.n.fn, x: r.x, y: r.depth * ROW, w: r.w, h: ROW,
                     bytes: this.diff ? r.n.b : r.n.bytes, delta: this.diff ? r.n.delta : undefined });
        }
      }
    }
    return out.sort((a, b) => b.w - a.w);
  }
}

function maxAbs(n) {
  let m = n.parent === null ? 0 : Math.abs(n.delta);
  for (const c of n.children) m = Math.max(m, maxAbs(c));
  return m;
}
