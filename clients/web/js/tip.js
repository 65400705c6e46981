// The one floating tooltip the plot, the flame graph and the tables share.

import { h } from './api.js';

const tip = () => document.getElementById('tip');

// lines: the first is shown as a title; x, y: the pointer in viewport pixels.
export function showTip(x, y, lines) {
  const t = tip();
  t.replaceChildren(...lines.map((l, i) => h(i === 0 ? 'div.tip-title' : 'div', l)));
  t.hidden = false;
  const pad = 14;
  const w = t.offsetWidth;
  const hh = t.offsetHeight;
  let left = x + pad;
  let top = y + pad;
  if (left + w > window.innerWidth - 4) left = Math.max(4, x - w - pad);
  if (top + hh > window.innerHeight - 4) top = Math.max(4, y - hh - pad);
  t.style.left = left + 'px';
  t.style.top = top + 'px';
}

export function hideTip() {
  tip().hidden = true;
}
