// The dashboard's shape, checked: no import cycle among clients/web/js's
// modules, and no function longer than LIMIT lines. Run by ctest
// (web_lint_modules); by hand:
//
//   node tests/web/lint-modules.mjs [--all] [JS_DIR]   (default: clients/web/js)
//
// Prints every cycle (as a chain of imports) and every function over the
// limit (file:line, name, lines from its head to its closing brace, nested
// functions included); --all prints every function's length. Exits 1 when
// there is either.
//
// No parser is at hand (no npm package for this), so a small tokenizer does:
// it knows comments, strings, template literals (with ${…} inside), regular
// expression literals, and finds function bodies as the `{` after
// `function …(…)`, after `=>`, or after a method head `name(…)`.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const LIMIT = 80;
const HERE = path.dirname(fileURLToPath(import.meta.url));
const argv = process.argv.slice(2);
const all = argv.includes('--all');
const DIR = path.resolve(argv.find((a) => !a.startsWith('--')) || path.join(HERE, '../../clients/web/js'));

// Keywords after which a `/` starts a regular expression, not a division.
const BEFORE_REGEX = new Set(['return', 'typeof', 'case', 'in', 'of', 'new', 'delete', 'void', 'throw',
  'instanceof', 'else', 'do', 'yield', 'await']);
// `name (…) {` is a method head unless name is one of these.
const NOT_METHOD = new Set(['if', 'for', 'while', 'switch', 'catch', 'with', 'function', 'return']);

// Tokens {t, line, str}: punctuators and words as text; strings with str set
// to their value; template literals and regular expressions as one opaque
// token (a template's ${…} are tokenized in line, between them).
function tokenize(src) {
  const out = [];
  let i = 0;
  let line = 1;
  const tmpl = []; // brace depth at each open ${ of a template literal
  let depth = 0;
  const push = (t, extra) => out.push({ t, line, ...extra });
  const regexOk = () => {
    const last = out[out.length - 1];
    if (!last) return true;
    if (last.str !== undefined || last.t === ')' || last.t === ']' || last.t === '}') return false;
    if (/^[\w$]/.test(last.t)) return BEFORE_REGEX.has(last.t);
    return true;
  };
  // Scans template text from i (after ` or }) to the closing ` or to ${.
  const templ = () => {
    while (i < src.length) {
      const c = src[i];
      if (c === '\\') { i += 2; continue; }
      if (c === '\n') line++;
      if (c === '`') { i++; push('`tmpl`', { str: '' }); return; }
      if (c === '$' && src[i + 1] === '{') { i += 2; tmpl.push(depth); return; }
      i++;
    }
  };
  while (i < src.length) {
    const c = src[i];
    if (c === '\n') { line++; i++; continue; }
    if (/\s/.test(c)) { i++; continue; }
    if (c === '/' && src[i + 1] === '/') { while (i < src.length && src[i] !== '\n') i++; continue; }
    if (c === '/' && src[i + 1] === '*') {
      const end = src.indexOf('*/', i + 2);
      const stop = end < 0 ? src.length : end + 2;
      for (; i < stop; i++) if (src[i] === '\n') line++;
      continue;
    }
    if (c === '"' || c === "'") {
      let j = i + 1;
      let v = '';
      while (j < src.length && src[j] !== c) {
        if (src[j] === '\\') { v += src[j + 1]; j += 2; continue; }
        v += src[j++];
      }
      push(src.slice(i, j + 1), { str: v });
      i = j + 1;
      continue;
    }
    if (c === '`') { i++; templ(); continue; }
    if (c === '/' && regexOk()) {
      let j = i + 1;
      let cls = false;
      while (j < src.length && (cls || src[j] !== '/')) {
        if (src[j] === '\\') j++;
        else if (src[j] === '[') cls = true;
        else if (src[j] === ']') cls = false;
        j++;
      }
      j++;
      while (j < src.length && /[a-z]/i.test(src[j])) j++;
      push('/re/', { str: src.slice(i, j) });
      i = j;
      continue;
    }
    const word = /^[\w$]+/.exec(src.slice(i, i + 64));
    if (word) { push(word[0]); i += word[0].length; continue; }
    if (c === '=' && src[i + 1] === '>') { push('=>'); i += 2; continue; }
    if (c === '.' && src[i + 1] === '.' && src[i + 2] === '.') { push('...'); i += 3; continue; }
    if (c === '{') depth++;
    if (c === '}') {
      if (tmpl.length && tmpl[tmpl.length - 1] === depth) { tmpl.pop(); i++; templ(); continue; }
      depth--;
    }
    push(c);
    i++;
  }
  return out;
}

// Index of the token closing the bracket opened at toks[k].
function closing(toks, k) {
  const open = toks[k].t;
  const close = { '(': ')', '[': ']', '{': '}' }[open];
  let d = 0;
  for (let j = k; j < toks.length; j++) {
    if (toks[j].t === open) d++;
    else if (toks[j].t === close && --d === 0) return j;
  }
  return toks.length - 1;
}

// A name for the arrow function whose `=>` is at toks[k]: the variable or
// key it is assigned to, else "arrow".
function arrowName(toks, k) {
  let j = k - 1;
  if (toks[j] && toks[j].t === ')') {
    let d = 0;
    for (; j >= 0; j--) {
      if (toks[j].t === ')') d++;
      else if (toks[j].t === '(' && --d === 0) break;
    }
  }
  j--;
  if (toks[j] && toks[j].t === 'async') j--;
  if (toks[j] && (toks[j].t === '=' || toks[j].t === ':') && toks[j - 1] && /^[\w$]+$/.test(toks[j - 1].t)) {
    return toks[j - 1].t;
  }
  return 'arrow';
}

// Every function of a file: {name, line, lines}.
function functions(toks) {
  const bodies = new Map(); // index of a body's `{` -> {name, line}
  for (let k = 0; k < toks.length; k++) {
    const t = toks[k];
    if (t.str !== undefined) continue;
    const prop = (toks[k - 1] && toks[k - 1].t === '.') || (toks[k + 1] && toks[k + 1].t === ':');
    if (t.t === 'function' && !prop) {
      let j = k + 1;
      if (toks[j] && toks[j].t === '*') j++;
      const name = toks[j] && toks[j].t !== '(' ? toks[j].t : 'function';
      while (j < toks.length && toks[j].t !== '(') j++;
      const b = closing(toks, j) + 1;
      if (toks[b] && toks[b].t === '{') bodies.set(b, { name, line: t.line });
    } else if (t.t === '=>') {
      if (toks[k + 1] && toks[k + 1].t === '{') bodies.set(k + 1, { name: arrowName(toks, k), line: t.line });
    } else if (/^[A-Za-z_$][\w$]*$/.test(t.t) && !NOT_METHOD.has(t.t) && toks[k + 1] && toks[k + 1].t === '(' &&
               !(toks[k - 1] && (toks[k - 1].t === 'function' || toks[k - 1].t === '.'))) {
      const b = closing(toks, k + 1) + 1;
      if (toks[b] && toks[b].t === '{' && toks[b].str === undefined) bodies.set(b, { name: t.t, line: t.line });
    }
  }
  const found = [];
  for (const [b, f] of bodies) found.push({ ...f, lines: toks[closing(toks, b)].line - f.line + 1 });
  return found.sort((x, y) => x.line - y.line);
}

// The relative module specifiers a file imports (static, re-exported, dynamic).
function imports(toks) {
  const out = [];
  for (let k = 0; k < toks.length; k++) {
    const t = toks[k].t;
    if (toks[k].str !== undefined || (t !== 'import' && t !== 'export')) continue;
    if (toks[k - 1] && toks[k - 1].t === '.') continue; // import.meta
    let j = k + 1;
    if (t === 'import' && toks[j] && toks[j].t === '(') {
      if (toks[j + 1] && toks[j + 1].str !== undefined) out.push(toks[j + 1].str);
      continue;
    }
    if (t === 'import') {
      while (j < toks.length && toks[j].str === undefined && toks[j].t !== ';') j++;
      if (toks[j] && toks[j].str !== undefined) out.push(toks[j].str);
      continue;
    }
    if (toks[j] && toks[j].t === '{') j = closing(toks, j) + 1;
    else if (toks[j] && toks[j].t === '*') { j++; if (toks[j] && toks[j].t === 'as') j += 2; }
    else continue;
    if (toks[j] && toks[j].t === 'from' && toks[j + 1] && toks[j + 1].str !== undefined) out.push(toks[j + 1].str);
  }
  return out.filter((s) => s.startsWith('./') || s.startsWith('../'));
}

function walk(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : walk(p);
    return e.name.endsWith('.js') || e.name.endsWith('.mjs') ? [p] : [];
  });
}

// Every elementary cycle of the import graph, each once, starting at its
// smallest module (the graph has a dozen nodes: a plain search will do).
function cycles(graph) {
  const names = [...graph.keys()].sort();
  const found = [];
  for (const start of names) {
    const trail = [start];
    const step = (node) => {
      for (const next of graph.get(node) || []) {
        if (next === start) found.push([...trail, start]);
        else if (next > start && !trail.includes(next)) { trail.push(next); step(next); trail.pop(); }
      }
    };
    step(start);
  }
  return found;
}

const files = walk(DIR).sort();
const rel = (f) => path.relative(DIR, f);
const graph = new Map();
const long = [];
let nfun = 0;
let nimp = 0;
for (const f of files) {
  const toks = tokenize(fs.readFileSync(f, 'utf8'));
  const deps = imports(toks).map((s) => rel(path.resolve(path.dirname(f), s)));
  nimp += deps.length;
  graph.set(rel(f), deps);
  for (const fn of functions(toks)) {
    nfun++;
    if (all) console.log(`  ${rel(f)}:${fn.line} ${fn.name} ${fn.lines}`);
    if (fn.lines > LIMIT) long.push(`${rel(f)}:${fn.line} ${fn.name}: ${fn.lines} lines`);
  }
}
const loops = cycles(graph);
console.log(`${files.length} modules, ${nimp} imports, ${nfun} functions under ${DIR}`);
console.log(`import cycles: ${loops.length}`);
for (const c of loops) console.log('  ' + c.join(' -> '));
console.log(`functions over ${LIMIT} lines: ${long.length}`);
for (const l of long) console.log('  ' + l);
process.exit(loops.length || long.length ? 1 : 0);
