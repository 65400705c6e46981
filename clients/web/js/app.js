// The dashboard's entry point: hash routing, the crumbs and the error banner.
//
// Every view is a URL: #/runs?program=…, #/run/ID?at=…&tab=…, #/diff?a=…&b=…,
// #/leaks/ID. A view is rebuilt from its URL alone, so a copied link reopens
// it. Changes that must not rebuild the view (typing in a search box, zooming
// the flame graph) rewrite the URL with history.replaceState, which fires no
// hashchange; everything else assigns location.hash.

import { get, ApiError, setToken, token, h } from './api.js';
import { hideTip } from './tip.js';
import * as runsView from './views/runs.js';
import * as runView from './views/run.js';
import * as diffView from './views/diff.js';
import * as leaksView from './views/leaks.js';

const routes = [
  { re: /^\/?$/, view: runsView },
  { re: /^\/runs$/, view: runsView },
  { re: /^\/run\/([^/]+)$/, view: runView },
  { re: /^\/diff$/, view: diffView },
  { re: /^\/leaks\/([^/]+)$/, view: leaksView },
];

// Parse location.hash into {path, params, args}.
export function parseHash(hash = location.hash) {
  const s = hash.replace(/^#/, '');
  const q = s.indexOf('?');
  const path = q >= 0 ? s.slice(0, q) : s;
  const params = new URLSearchParams(q >= 0 ? s.slice(q + 1) : '');
  return { path, params };
}

export function hashFor(path, params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === '') continue;
    p.set(k, v);
  }
  const s = p.toString();
  return '#' + path + (s ? '?' + s : '');
}

export function go(path, params) {
  location.hash = hashFor(path, params);
}

// Rewrite the current URL's parameters without rebuilding the view.
export function replaceParams(changes) {
  const { path, params } = parseHash();
  for (const [k, v] of Object.entries(changes)) {
    if (v === undefined || v === null || v === '') params.delete(k);
    else params.set(k, v);
  }
  const s = params.toString();
  history.replaceState(null, '', '#' + path + (s ? '?' + s : ''));
  document.body.dataset.hash = location.hash; // the view still shows this URL
}

// ---- shared chrome ------------------------------------------------------------

export function setCrumbs(items) {
  const nav = document.getElementById('crumbs');
  nav.replaceChildren(...items.flatMap((it, i) => [
    ...(i ? [h('span.sep', '›')] : []),
    it.href ? h('a', { href: it.href }, it.text) : h('span', it.text),
  ]));
}

export function showError(err) {
  const box = document.getElementById('error');
  if (!err) { box.hidden = true; box.replaceChildren(); return; }
  const msg = err instanceof ApiError ? `${err.message} (${err.code})` : String(err.message || err);
  const parts = [h('span', msg)];
  if (err instanceof ApiError && err.status === 401) {
    const input = h('input', { type: 'password', placeholder: 'API token', value: token() });
    parts.push(h('form.inline', {
      on: { submit: (e) => { e.preventDefault(); setToken(input.value.trim()); route(); } },
    }, input, h('button', 'Use token')));
  }
  box.replaceChildren(...parts);
  box.hidden = false;
}

// ---- routing ------------------------------------------------------------------

let current = null; // {destroy()} of the mounted view
let generation = 0;
let lastPath = null;

// When a view is done, body[data-state] is "ready" (or "error") and
// body[data-hash] the URL it shows: a test, or anything else waiting for a
// view, waits until that hash is the current one.
export async function route() {
  const hash = location.hash;
  const { path, params } = parseHash();
  const gen = ++generation;
  // Picking a moment rebuilds the run view: keep the reader where they were.
  const keepScroll = path === lastPath ? window.scrollY : 0;
  lastPath = path;
  hideTip();
  showError(null);
  if (current && current.destroy) current.destroy();
  current = null;
  const root = document.getElementById('view');
  root.replaceChildren();
  document.body.dataset.state = 'loading';
  let match = null;
  let r = null;
  for (r of routes) if ((match = r.re.exec(path))) break;
  if (!match) {
    setCrumbs([{ text: 'not found' }]);
    root.append(h('p', 'No such view. ', h('a', { href: '#/runs' }, 'See the runs.')));
    document.body.dataset.hash = hash;
    document.body.dataset.state = 'ready';
    return;
  }
  const args = match.slice(1).map(decodeURIComponent);
  try {
    const mounted = await r.view.mount(root, { args, params, stale: () => gen !== generation });
    if (gen !== generation) { if (mounted && mounted.destroy) mounted.destroy(); return; }
    current = mounted;
    window.scrollTo(0, keepScroll);
    document.body.dataset.hash = hash;
    document.body.dataset.state = 'ready';
    performance.mark('heapstore:ready'); // for tests/web/bench-big.mjs
  } catch (err) {
    if (gen !== generation) return;
    console.error(err);
    showError(err);
    document.body.dataset.hash = hash;
    document.body.dataset.state = 'error';
  }
}

async function health() {
  try {
    const hh = await get('/api/health', { fresh: true });
    document.getElementById('health').textContent = `server ${hh.version || ''}`;
  } catch {
    document.getElementById('health').textContent = 'server not answering';
  }
}

window.addEventListener('hashchange', route);
// Module scripts run once the document is parsed: the view's element exists.
route();
health();
