// Navigation: every view is a URL, and this module reads and writes it.
//
// Every view is a URL: #/runs?program=…, #/run/ID?at=…&tab=…, #/diff?a=…&b=…,
// #/leaks/ID. A view is rebuilt from its URL alone, so a copied link reopens
// it. Changes that must not rebuild the view (typing in a search box, zooming
// the flame graph) rewrite the URL with history.replaceState, which fires no
// hashchange; everything else assigns location.hash.
//
// Views import this module, never app.js (the entry point, which imports the
// views): a view that wants itself rebuilt for the same URL calls rerender(),
// which runs the router app.js registered with onRerender().

import { h } from './api.js';

// Parse location.hash into {path, params}.
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

let rerenderHandler = null;

// The entry point's router, called by rerender().
export function onRerender(fn) {
  rerenderHandler = fn;
}

// Rebuild the current view from its URL (after forgetting cached answers,
// say), though the URL did not change.
export function rerender() {
  if (rerenderHandler) rerenderHandler();
}

// The crumbs in the page's header: [{text, href?}], the last one the view.
export function setCrumbs(items) {
  const nav = document.getElementById('crumbs');
  nav.replaceChildren(...items.flatMap((it, i) => [
    ...(i ? [h('span.sep', '›')] : []),
    it.href ? h('a', { href: it.href }, it.text) : h('span', it.text),
  ]));
}
