// The JSON API of docs/api.md, and the formatting every view shares.
//
// Requests go to the same origin that served the page. Answers are cached by
// URL for CACHE_MS, so that re-rendering a view after a URL change (a moment
// picked, a tab switched) does not ask the server again for the same answer,
// while a run still being recorded is seen to grow when the reader comes back
// to it. The runs list is always fetched fresh.

const CACHE_MS = 15000;
const cache = new Map(); // path → {p: Promise, t: ms}
const TOKEN_KEY = 'heapstore-token';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function token() {
  try { return localStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

export function setToken(t) {
  try { t ? localStorage.setItem(TOKEN_KEY, t) : localStorage.removeItem(TOKEN_KEY); } catch { /* private mode */ }
  cache.clear();
}

// Drop every cached answer (a reader asked for the newest numbers).
export function forget() {
  cache.clear();
}

function headers() {
  const t = token();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

// GET path (e.g. "/api/runs?limit=5") and parse the JSON answer; a 4xx/5xx
// becomes an ApiError carrying the server's {"error": {code, message}}.
export function get(path, { fresh = false } = {}) {
  const hit = cache.get(path);
  if (!fresh && hit && Date.now() - hit.t < CACHE_MS) return hit.p;
  // index.html may have asked already, while the modules loaded
  const pre = window.heapstorePrefetch && window.heapstorePrefetch[path];
  if (pre) delete window.heapstorePrefetch[path];
  const p = (pre && !fresh ? pre : fetch(path, { headers: headers() })).then(async (res) => {
    const text = await res.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch { /* reported below */ }
    if (!res.ok) {
      const e = body && body.error;
      throw new ApiError(res.status, e ? e.code : 'http_' + res.status,
                         e ? e.message : `${path}: HTTP ${res.status}`);
    }
    if (body === null) throw new ApiError(res.status, 'bad_json', `${path}: the answer is not JSON`);
    return body;
  });
  cache.set(path, { p, t: Date.now() });
  p.catch(() => cache.delete(path));
  return p;
}

// Query string from an object, leaving out empty values.
export function qs(params) {
  const parts = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '') continue;
    parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(v)}`);
  }
  return parts.length ? '?' + parts.join('&') : '';
}

export function runPath(run) {
  return `/api/runs/${encodeURIComponent(run)}`;
}

// A moment for at=: "peak", "end", or seconds from a time in nanoseconds.
export function atParam(at) {
  if (at === undefined || at === null || at === '') return 'peak';
  return String(at);
}

export function nsToAt(ns) {
  // Microseconds are finer than any bucket. Round down: a T past the run's
  // end is refused, and a click at the right edge is at most the duration.
  const us = Math.floor(ns / 1000);
  return (us / 1e6).toFixed(6).replace(/\.?0+$/, '') || '0';
}

// Downloads: when the server wants a token, a plain link cannot carry it, so
// the click fetches the file with the header and saves it from a blob.
export async function download(path, filename) {
  const res = await fetch(path, { headers: headers() });
  if (!res.ok) throw new ApiError(res.status, 'http_' + res.status, `${path}: HTTP ${res.status}`);
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// ---- formatting -------------------------------------------------------------

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function fmtBytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  const neg = n < 0;
  let v = Math.abs(n);
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) { v /= 1024; u++; }
  const s = u === 0 ? String(v) : v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0);
  return (neg ? '−' : '') + s + ' ' + UNITS[u];
}

export function fmtSignedBytes(n) {
  return (n > 0 ? '+' : '') + fmtBytes(n);
}

// 1234567 → "1,234,567" (toLocaleString costs tens of ms on its first call).
export function fmtInt(n) {
  if (n === null || n === undefined) return '–';
  const x = Number(n);
  if (!Number.isSafeInteger(x)) return x.toLocaleString('en-US');
  const s = String(Math.abs(x)).replace(/\B(?=(\d{3})+$)/g, ',');
  return x < 0 ? '-' + s : s;
}

export function fmtExactBytes(n) {
  return `${fmtInt(n)} B`;
}

export function fmtShare(x) {
  if (x === null || x === undefined || !Number.isFinite(x)) return '–';
  const p = x * 100;
  return (p >= 10 ? p.toFixed(1) : p >= 1 ? p.toFixed(2) : p.toFixed(3)) + '%';
}

export function fmtDuration(ns) {
  if (ns === null || ns === undefined) return '–';
  const s = ns / 1e9;
  if (s < 1) return (ns / 1e6).toFixed(s < 0.01 ? 2 : 0) + ' ms';
  if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s - m * 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function fmtTime(ns) {
  return (ns / 1e9).toFixed(3) + ' s';
}

export function fmtDate(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  const pad = (x) => String(x).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
         `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function basename(path) {
  if (!path) return '';
  const i = path.lastIndexOf('/');
  return i >= 0 ? path.slice(i + 1) : path;
}

export function droppedTotal(sampling) {
  const d = sampling && sampling.dropped;
  if (!d) return 0;
  return (d.alloc_events || 0) + (d.free_events || 0);
}

// One line for a frame or row: "fn (file.c:12)" or "fn [module]".
export function frameLabel(f) {
  if (!f) return '';
  const fn = f.function || f.name || '??';
  if (f.file) return `${fn} (${basename(f.file)}${f.line ? ':' + f.line : ''})`;
  if (f.module) return `${fn} [${basename(f.module)}]`;
  return fn;
}

// The frame that names a row's stack (the server's site: the innermost
// Python line, or the first frame outside the allocator), and the full
// stack as a tooltip with that frame marked.
export function siteFrame(r) {
  return r && r.stack ? r.stack[r.site_index || 0] : undefined;
}

export function stackTitle(r) {
  const site = (r && r.site_index) || 0;
  return ((r && r.stack) || []).map((f, i) => (i === site ? '▶ ' : '   ') + frameLabel(f)).join('\n');
}

export function where(f) {
  if (!f) return '';
  if (f.file) return `${f.file}${f.line ? ':' + f.line : ''}`;
  return f.module || '';
}

// ---- tiny DOM helper ----------------------------------------------------------

// h('div.cls#id', {attrs, on: {click}}, children…)
export function h(tag, attrs, ...children) {
  const m = /^([a-z0-9]+)((?:[.#][\w-]+)*)$/i.exec(tag);
  const el = document.createElement(m ? m[1] : tag);
  if (m && m[2]) {
    for (const part of m[2].match(/[.#][\w-]+/g)) {
      if (part[0] === '.') el.classList.add(part.slice(1));
      else el.id = part.slice(1);
    }
  }
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'style' && typeof v === 'object') Object.assign(el.style, v);
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}
