#!/usr/bin/env node
// The layer rules of docs/architecture.md, checked on every import of src/, renderer/, main/ and preload/:
//
//   src/protocol  the wire shapes: imports nothing of ours but itself, and of packages only zod
//   renderer      the panel (DOM): its own files and src/protocol; packages zod and @xterm/*
//   preload       the Electron preload: its own files and src/protocol; of packages only electron
//   main          the Electron main process: anything of src/, never renderer/ or preload/
//   src/platform  the native seam: its own files only; src/platform/addon.ts (the addon's loader) is imported by
//                 no file outside src/platform (everything else uses a capability of src/platform)
//   src           the server (Node): src/ only (never main/, preload/, renderer/), and never electron
//
// and no import cycles between files. Test files may import anything. Each violation is printed as
// `FILE:LINE: imports 'SPECIFIER' (WHAT): RULE`; the exit status is 1 when there is one.
//
//   node scripts/check-layers.mjs [--root DIR]
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const LAYERS = [
  {
    name: 'protocol',
    dir: 'src/protocol/',
    may: ['protocol'],
    packages: ['zod'],
    rule: 'src/protocol imports nothing of ours but itself, and of packages only zod (it is shared by every layer)',
  },
  {
    name: 'renderer',
    dir: 'renderer/',
    may: ['renderer', 'protocol'],
    packages: ['zod', '@xterm/'],
    rule: 'the renderer may import only its own files and src/protocol (of packages: zod, @xterm/*)',
  },
  {
    name: 'preload',
    dir: 'preload/',
    may: ['preload', 'protocol'],
    packages: ['electron'],
    rule: 'the preload may import only its own files and src/protocol (of packages: electron)',
  },
  {
    name: 'main',
    dir: 'main/',
    may: ['main', 'src', 'protocol', 'platform'],
    packages: null,
    rule: 'main/ may import src/ and its own files, never renderer/ or preload/ (they run in other processes)',
  },
  {
    name: 'platform',
    dir: 'src/platform/',
    may: ['platform'],
    packages: null,
    forbiddenPackages: ['electron'],
    rule: 'src/platform (the native seam) imports only its own files: everything above it builds on it',
  },
  {
    name: 'src',
    dir: 'src/',
    may: ['src', 'protocol', 'platform'],
    packages: null,
    forbiddenPackages: ['electron'],
    rule: 'src/ runs under plain Node: it imports src/ only (never main/, preload/ or renderer/) and never electron',
  },
];

/**
 * Inside src/: what a folder may not import (the most specific folder's rule applies). The exec server (src/server)
 * is below everything that assembles or watches it; inside it, folders by concern stack as core ← fs ← process,
 * core ← approvals, then the server (execServer.ts) over them, then the monitor (the panel's methods) and the
 * connections (listeners) on top. Only the CLI and main/ assemble (src/app, the composition root).
 */
const ABOVE_SERVER = ['src/app/', 'src/audit/', 'src/fleet/', 'src/remote/', 'src/doctor/', 'src/cli'];
const SERVER_PARTS = ['core', 'fs', 'process', 'approvals', 'monitor', 'connection'].map(
  (p) => `src/server/${p}/`,
);
const serverBut = (...may) => [
  ...ABOVE_SERVER,
  ...SERVER_PARTS.filter((p) => !may.includes(p.split('/')[2])),
];
const FOLDER_RULES = [
  {
    dir: 'src/',
    forbid: ['src/app/'],
    rule: 'src/app is the composition root: only the CLI (src/cli*.ts) and main/ import it',
  },
  { dir: 'src/cli', forbid: [], rule: '' },
  { dir: 'src/app/', forbid: [], rule: '' },
  {
    dir: 'src/server/',
    forbid: serverBut('core', 'fs', 'process', 'approvals'),
    rule:
      'src/server/*.ts (the exec server) stands on server/{core,fs,process,approvals}; the monitor and the connections ' +
      'stand on it, and what assembles or watches it (app, audit, fleet, remote, doctor, the CLI) is above it',
  },
  {
    dir: 'src/server/core/',
    forbid: serverBut('core'),
    rule: 'src/server/core (principals, dispatch, sessions, events, the log) imports no other part of the server',
  },
  {
    dir: 'src/server/fs/',
    forbid: serverBut('core', 'fs'),
    rule: 'src/server/fs (the fs/* methods) stands on server/core only',
  },
  {
    dir: 'src/server/process/',
    forbid: serverBut('core', 'fs', 'process'),
    rule: 'src/server/process (process/* and the launch pipeline) stands on server/core and server/fs only',
  },
  {
    dir: 'src/server/approvals/',
    forbid: serverBut('core', 'approvals'),
    rule: 'src/server/approvals (the approval broker) stands on server/core only',
  },
  {
    dir: 'src/server/monitor/',
    forbid: [...serverBut('core', 'process', 'approvals', 'monitor'), 'src/server/execServer'],
    rule: "src/server/monitor (the panel's methods) stands on server/{core,process,approvals}, not on the server itself",
  },
  {
    dir: 'src/server/connection/',
    forbid: serverBut('core', 'connection'),
    rule: 'src/server/connection (listeners: WebSocket, stdio, health) stands on the server and server/core only',
  },
];

function folderProblem(rel, targetRel) {
  const p = rel.split(sep).join('/');
  const t = targetRel.split(sep).join('/');
  const r = FOLDER_RULES.filter((f) => p.startsWith(f.dir)).sort((a, b) => b.dir.length - a.dir.length)[0];
  if (!r) return null;
  return r.forbid.some((f) => t.startsWith(f)) ? r.rule : null;
}

/** The loader of the native addon, private to src/platform. */
const ADDON_LOADER = 'src/platform/addon.ts';

const SOURCE = /\.(ts|mts|cts|js|mjs)$/;
const BUILTINS = new Set(builtinModules);

function layerOf(rel) {
  const p = rel.split(sep).join('/');
  // The most specific directory wins (src/protocol/ before src/).
  return LAYERS.filter((l) => p.startsWith(l.dir)).sort((a, b) => b.dir.length - a.dir.length)[0] ?? null;
}

function walk(dir, out = []) {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name.startsWith('.')) continue;
    const p = join(dir, name);
    const st = statSync(p);
    if (st.isDirectory()) walk(p, out);
    else if (SOURCE.test(name) && !name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/** The file a relative specifier names: `./x.js` is `./x.ts` in this tree. */
function resolveRelative(from, spec) {
  const base = resolve(dirname(from), spec);
  const candidates = [base, base.replace(/\.js$/, '.ts'), base.replace(/\.mjs$/, '.mts'), `${base}.ts`];
  candidates.push(join(base, 'index.ts'));
  return candidates.find((c) => existsSync(c) && statSync(c).isFile()) ?? null;
}

function packageName(spec) {
  if (spec.startsWith('node:')) return spec;
  const parts = spec.split('/');
  return spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

function packageAllowed(layer, spec) {
  const name = packageName(spec);
  const builtin = spec.startsWith('node:') || BUILTINS.has(name);
  if (layer.forbiddenPackages?.includes(name)) return false;
  if (layer.packages === null) return true;
  if (builtin) return false;
  return layer.packages.some((p) => (p.endsWith('/') ? name.startsWith(p) : name === p));
}

export function checkLayers(root) {
  const files = ['src', 'renderer', 'main', 'preload'].flatMap((d) => walk(join(root, d)));
  const problems = [];
  /** file → [{ to, line, spec }] among our files */
  const graph = new Map();
  for (const file of files) {
    const rel = relative(root, file);
    const layer = layerOf(rel);
    const text = readFileSync(file, 'utf8');
    const info = ts.preProcessFile(text, true, true);
    const edges = [];
    graph.set(rel, edges);
    for (const ref of info.importedFiles) {
      const spec = ref.fileName;
      const line = text.slice(0, ref.pos).split('\n').length;
      const at = `${rel}:${line}`;
      if (spec.startsWith('.')) {
        const target = resolveRelative(file, spec);
        if (!target) {
          problems.push(`${at}: imports '${spec}', which names no file of this tree`);
          continue;
        }
        const targetRel = relative(root, target);
        const targetLayer = layerOf(targetRel);
        if (targetRel.startsWith('..') || !targetLayer) {
          problems.push(`${at}: imports '${spec}' (${targetRel}), outside every layer: ${layer.rule}`);
          continue;
        }
        if (!layer.may.includes(targetLayer.name)) {
          problems.push(`${at}: imports '${spec}' (${targetRel}): ${layer.rule}`);
          continue;
        }
        if (targetRel.split(sep).join('/') === ADDON_LOADER && layer.name !== 'platform') {
          problems.push(
            `${at}: imports '${spec}' (${targetRel}): only src/platform touches the native addon; use one of its capabilities`,
          );
          continue;
        }
        const folderRule = folderProblem(rel, targetRel);
        if (folderRule) {
          problems.push(`${at}: imports '${spec}' (${targetRel}): ${folderRule}`);
          continue;
        }
        if (SOURCE.test(targetRel)) edges.push({ to: targetRel, line, spec });
      } else if (!packageAllowed(layer, spec)) {
        problems.push(`${at}: imports '${spec}' (a package): ${layer.rule}`);
      }
    }
  }
  for (const { members, cycle } of cycles(graph)) {
    const path = cycle.map((e) => `${e.from}:${e.line} imports '${e.spec}'`).join(', ');
    const among = members.length > cycle.length ? ` (one of the loops among ${members.join(', ')})` : '';
    problems.push(
      `import cycle ${[...cycle.map((e) => e.from), cycle[0].from].join(' → ')}${among}: ${path}: ` +
        'no file may import itself through others (move what both sides need into a file of its own)',
    );
  }
  return problems;
}

/** Each strongly connected component of more than one file (Tarjan), with one of its loops as edges in order. */
function cycles(graph) {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const components = [];
  const visit = (v) => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const { to } of graph.get(v) ?? []) {
      if (!idx.has(to)) {
        visit(to);
        low.set(v, Math.min(low.get(v), low.get(to)));
      } else if (onStack.has(to)) low.set(v, Math.min(low.get(v), idx.get(to)));
    }
    if (low.get(v) === idx.get(v)) {
      const c = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        c.push(w);
      } while (w !== v);
      if (c.length > 1) components.push(new Set(c));
    }
  };
  for (const v of [...graph.keys()].sort()) if (!idx.has(v)) visit(v);
  return components.map((members) => ({ members: [...members].sort(), cycle: loop(graph, members) }));
}

/** The shortest way from the component's first file back to itself, inside the component (breadth first). */
function loop(graph, members) {
  {
    const start = [...members].sort()[0];
    const prev = new Map();
    const queue = [start];
    while (queue.length > 0) {
      const v = queue.shift();
      for (const e of graph.get(v) ?? []) {
        if (!members.has(e.to)) continue;
        if (e.to === start) {
          const path = [{ from: v, ...e }];
          for (let u = v; u !== start; ) {
            const p = prev.get(u);
            path.unshift(p);
            u = p.from;
          }
          return path;
        }
        if (!prev.has(e.to)) {
          prev.set(e.to, { from: v, ...e });
          queue.push(e.to);
        }
      }
    }
    return [];
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf('--root');
  const root = i > 0 ? resolve(process.argv[i + 1]) : join(dirname(fileURLToPath(import.meta.url)), '..');
  const problems = checkLayers(root);
  for (const p of problems) console.error(p);
  if (problems.length > 0) {
    console.error(`check-layers: ${problems.length} forbidden import(s); the rules: docs/architecture.md`);
    process.exit(1);
  }
}
