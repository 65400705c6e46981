// Pieces of page that more than one view shows: the run's header, download
// links, a moment's label, table cells and columns, a run's state. Views
// import them from here, never from each other.

import {
  h, qs, download, fmtBytes, fmtDuration, fmtDate, fmtInt, fmtTime, fmtShare, fmtExactBytes, basename,
  droppedTotal, where, siteFrame,
} from './api.js';

// "the peak (1.2 s)", "the end (3 s)" or "1.5 s": a moment as ?at= names it.
export function atLabel(at, atNs) {
  if (at === 'peak') return `the peak (${fmtTime(atNs)})`;
  if (at === 'end') return `the end (${fmtTime(atNs)})`;
  return fmtTime(atNs !== undefined ? atNs : Number(at) * 1e9);
}

export function runHeader(run, sampling) {
  const s = sampling || run.sampling || {};
  const dropped = droppedTotal(s);
  const labels = Object.entries(run.labels || {}).map(([k, v]) => h('span.chip', `${k}=${v}`));
  const exact = s.sample_bytes === 1;
  return h('div.run-head',
    h('h1', basename(run.program), h('span.argv', ' ' + (run.argv || []).slice(1).join(' ')),
      h('span.runid', ` #${run.id}`)),
    h('div.meta',
      h('span', { title: run.program }, `host ${run.host || '?'} · pid ${run.pid ?? '?'}`),
      h('span', `started ${fmtDate(run.start_unix_ms)}`),
      h('span', `lasted ${fmtDuration(run.duration_ns)}`),
      h('span', { class: 'state' }, stateText(run)),
      h('span', `peak ${fmtBytes(run.peak_bytes)}`),
      h('span', `end ${fmtBytes(run.end_bytes)}`),
      run.parent_id ? h('a', { href: `#/run/${run.parent_id}` }, `parent #${run.parent_id}`) : null,
      labels),
    h('div.meta.sampling',
      h('span', exact ? 'every allocation recorded (exact)'
        : `sampled every ${fmtBytes(s.sample_bytes)} on average: bytes are unbiased estimates`),
      h('span', { class: dropped ? 'warn' : 'muted', title: droppedTitle(s) },
        dropped ? `${fmtInt(dropped)} events dropped: numbers are low by that much` : 'nothing dropped')));
}

export function dl(href, filename, text) {
  return h('a.dl', {
    href, download: filename,
    on: {
      click: (e) => {
        // With a token the plain link would be refused; fetch with the header.
        if (!localStorage.getItem('heapstore-token')) return;
        e.preventDefault();
        download(href, filename).catch((err) => alert(err.message));
      },
    },
  }, text);
}

const EXPORT_FILES = {
  collapsed: 'collapsed.txt',
  pprof: 'pb.gz',
  speedscope: 'speedscope.json',
  dot: 'dot',
};

// Download links to a run's state at a moment in each of formats, from the
// run's API path base.
export function exportLinks(base, id, at, formats) {
  return formats.map((format) =>
    dl(`${base}/export${qs({ at, format })}`, `heapstore-${id}-${at}.${EXPORT_FILES[format]}`, format));
}

export function bytesCell(n) {
  return h('span', { title: fmtExactBytes(n) }, fmtBytes(n));
}

export function shareCell(x) {
  const pct = Math.max(0, Math.min(1, x || 0)) * 100;
  return h('span.share', h('span.bar', { style: { width: pct + '%' } }), h('span.pct', fmtShare(x)));
}

// The table column giving a row's source location (its leaf's, for a stack).
export const whereColumn = Object.freeze({
  key: 'where', label: 'where', value: (r) => where(r) || where(siteFrame(r)), className: 'where',
});

export function stateText(r) {
  if (r.state === 'open') return 'running';
  if (r.state === 'lost') return 'lost';
  return r.clean_exit ? 'clean' : 'not clean';
}

export function stateClass(r) {
  if (r.state === 'open') return 'open';
  if (r.state === 'lost' || !r.clean_exit) return 'bad';
  return 'good';
}

// What the collector dropped, one kind a line, for a title attribute.
export function droppedTitle(s) {
  const d = (s && s.dropped) || {};
  return Object.entries(d).map(([k, v]) => `${k.replace(/_/g, ' ')}: ${fmtInt(v)}`).join('\n') || 'nothing dropped';
}

// What names a row (the API's site=): the user's frame, the allocator's
// caller, or the leaf (docs/api.md, Sites). 'user' is the default and is
// left out of URLs.
export const SITE_MODES = [
  { mode: 'user', text: 'user code', title: 'the innermost Python line, else the first frame outside allocators, wrappers and the C++ standard library' },
  { mode: 'alloc', text: 'allocator\'s caller', title: 'the first frame outside allocators and wrappers (standard containers are sites)' },
  { mode: 'leaf', text: 'leaf', title: 'the frame that called the allocator' },
];

// A URL's site= checked: one of SITE_MODES, else 'user'.
export function siteParam(params) {
  const s = params.get('site');
  return SITE_MODES.some((m) => m.mode === s) ? s : 'user';
}

// The switch of what names a row: "a site is [user code|allocator's
// caller|leaf]", current marked; onPick(site) gets '' for the default.
export function siteModeBar(current, onPick) {
  return h('span.site-switch', h('span.muted', 'a site is '), h('div.tabs.small.site-modes', SITE_MODES.map((m) => h('button', {
    class: m.mode === current ? 'on' : '', dataset: { site: m.mode }, title: m.title,
    on: { click: () => onPick(m.mode === 'user' ? '' : m.mode) },
  }, m.text))));
}
