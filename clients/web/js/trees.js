// Process trees in a listing of runs. A program that starts others (a
// compiler driver, make, pyenv's shims) leaves one run per process, each
// naming its parent (parent_id); the runs page folds a tree under its root.
// Pure functions over /api/runs rows: the API has no filter by root, so a
// tree is what the listing holds of it (a run whose parent is not listed is
// a root here).

import { basename } from './api.js';

// Whether a run sampled anything (most of a shell script's helpers do not).
export function hasSamples(r) {
  return (r.alloc_events || 0) > 0 || (r.peak_bytes || 0) > 0;
}

// Largest peak first, then the older run.
function byPeak(a, b) {
  return (b.peak_bytes || 0) - (a.peak_bytes || 0) || a.id - b.id;
}

// {roots, trees}: the listing's roots in its order, and for each root's id
// its tree: {root, members (its descendants, largest peak first), depth
// (run id → depth below the root), count (the root included), largest (the
// run of the largest peak, the root included)}.
export function foldTrees(runs) {
  const listed = new Map(runs.map((r) => [r.id, r]));
  const kids = new Map();
  const roots = [];
  for (const r of runs) {
    const p = r.parent_id;
    if (p !== null && p !== undefined && p !== r.id && listed.has(p)) {
      if (!kids.has(p)) kids.set(p, []);
      kids.get(p).push(r);
    } else {
      roots.push(r);
    }
  }
  const trees = new Map();
  for (const root of roots) {
    const members = [];
    const depth = new Map([[root.id, 0]]);
    const todo = [root];
    while (todo.length) {
      const r = todo.pop();
      for (const k of kids.get(r.id) || []) {
        if (depth.has(k.id)) continue; // a cycle in bad data: once each
        depth.set(k.id, depth.get(r.id) + 1);
        members.push(k);
        todo.push(k);
      }
    }
    members.sort(byPeak);
    const largest = [root, ...members].sort(byPeak)[0];
    trees.set(root.id, { root, members, depth, count: members.length + 1, largest });
  }
  return { roots, trees };
}

// "bash×40, env×14, readlink×5, …": the programs of runs, most frequent
// first, at most max names.
export function programCounts(runs, max = 6) {
  const n = new Map();
  for (const r of runs) {
    const b = basename(r.program);
    n.set(b, (n.get(b) || 0) + 1);
  }
  const list = [...n.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  const text = list.slice(0, max).map(([b, k]) => `${b}×${k}`).join(', ');
  return list.length > max ? text + ', …' : text;
}
