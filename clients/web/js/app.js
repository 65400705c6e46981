// The dashboard's entry point: the routes, the router and the error banner.
// It imports the views; the views import nav.js (URLs, crumbs), never this.

import { get, ApiError, setToken, token, h } from './api.js';
import { parseHash, setCrumbs, onRerender } from './nav.js';
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

// ---- the error banner ---------------------------------------------------------

function showError(err) {
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
async function route() {
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
onRerender(route);
// Module scripts run once the document is parsed: the view's element exists.
route();
health();
