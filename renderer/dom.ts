// A tiny DOM builder. Text always goes in as text nodes (process output, argv and hosts are untrusted).

export type Child = Node | string | number | null | undefined | false | Child[];
type Attrs = Record<string, unknown>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Attrs | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') {
        el.addEventListener(k.slice(2).toLowerCase(), v as EventListener);
      } else if (k === 'class') el.className = String(v);
      else if (k === 'value' || k === 'checked' || k === 'disabled' || k === 'selected') {
        (el as unknown as Record<string, unknown>)[k] = v;
      } else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

export function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else
      el.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

export function clear(el: Element): void {
  el.replaceChildren();
}

export function replace(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

/** A function that runs `f` once in the next animation frame, however often it is called before then. */
export function perFrame(f: () => void): () => void {
  let scheduled = false;
  return () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => {
      scheduled = false;
      f();
    });
  };
}

/**
 * How far apart renders of streaming data are while it streams (ms). Each frame the page draws costs it a few ms of
 * style, layout, paint and commit whatever changed, so a flood drawn at 20 or 40 frames a second took a quarter to
 * half of a core (issue 38); four frames a second is what a person can read, and keeps every change on screen
 * within a few hundred ms.
 */
export const PACE_MS = 250;

/** A render request that `paced` coalesces; `ran()` says the render just ran outside it (an input rendered at once). */
export interface Paced {
  (): void;
  ran(): void;
}

/** The renders due at the next paced frame (every view's, so that they share one frame instead of one each). */
const due = new Set<() => void>();
let lastFrame = Number.NEGATIVE_INFINITY;
let timer: ReturnType<typeof setTimeout> | null = null;
let framed = false;

function flush(): void {
  framed = false;
  lastFrame = performance.now();
  const list = [...due];
  due.clear();
  for (const f of list) f();
}

function frame(): void {
  timer = null;
  framed = true;
  requestAnimationFrame(flush);
}

/**
 * The one pacing rule of the panel's data-driven renders: a requested render runs in the next animation frame when
 * no paced frame ran for PACE_MS (a change after a quiet spell shows at once), otherwise PACE_MS after the last one
 * (a stream of changes is drawn a few times a second). All views' requests share that frame. Inputs (filters,
 * scrolling, selection) do not wait: they render at once and call `ran()`.
 */
export function paced(f: () => void): Paced {
  const request = (() => {
    due.add(f);
    if (timer !== null || framed) return;
    const wait = lastFrame + PACE_MS - performance.now();
    if (wait <= 0) frame();
    else timer = setTimeout(frame, wait);
  }) as Paced;
  request.ran = () => {
    lastFrame = Math.max(lastFrame, performance.now());
  };
  return request;
}

/**
 * Makes `parent`'s children exactly `want`, in order, moving only what is out of place: rows already shown stay put
 * when new ones are put in front of them or old ones fall off the end (no node made, none re-laid out for nothing).
 */
export function reconcile(parent: Element, want: readonly Element[]): void {
  let cur = parent.firstElementChild;
  for (const el of want) {
    if (cur === el) {
      cur = cur.nextElementSibling;
      continue;
    }
    parent.insertBefore(el, cur);
  }
  while (cur) {
    const next = cur.nextElementSibling;
    cur.remove();
    cur = next;
  }
}

/** Rows made by keptRows, by key, with what each shows. */
export type KeptRows<E extends Element> = Map<string, { shows: string; el: E }>;

/**
 * The rows for `items`, by key: the row kept in `rows` when what it shows (`shows`, any text that changes whenever
 * the row would) is unchanged, else a new one (`make`); rows of items gone are dropped from `rows`. A render that
 * changed nothing in a row leaves the row itself in place, so a click on it is never lost to a row made anew under
 * the pointer between press and release (put them in with `reconcile`).
 */
export function keptRows<T, E extends Element>(
  rows: KeptRows<E>,
  items: readonly T[],
  describe: (item: T) => [key: string, shows: string, make: () => E],
): E[] {
  const keep = new Set<string>();
  const out = items.map((item) => {
    const [key, shows, make] = describe(item);
    keep.add(key);
    const had = rows.get(key);
    if (had && had.shows === shows) return had.el;
    const el = make();
    rows.set(key, { shows, el });
    return el;
  });
  for (const key of rows.keys()) if (!keep.has(key)) rows.delete(key);
  return out;
}

/** Sets an element's text only when it differs (a write of the same text still costs a style and layout pass). */
export function setText(el: Node, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

export function fmtBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 * 1024 * 1024) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 / 1024 / 1024).toFixed(2)} GiB`;
}

export function fmtTime(ms: number): string {
  const d = new Date(ms);
  return d.toLocaleTimeString(undefined, { hour12: false });
}

export function fmtAgo(ms: number, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function fmtDuration(ms: number): string {
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return `${m}m ${Math.round(s % 60)}s`;
}

/** Shell-style display of an argv (quotes where needed). */
export function shellJoin(argv: readonly string[]): string {
  return argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/** Splits a command line the way a POSIX shell would for plain words and quotes (no expansions). */
export function shellSplit(line: string): string[] {
  const out: string[] = [];
  let cur = '';
  let has = false;
  let q: '"' | "'" | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (q === "'") {
      if (c === "'") q = null;
      else cur += c;
    } else if (q === '"') {
      if (c === '"') q = null;
      else if (c === '\\' && i + 1 < line.length && '"\\$`'.includes(line[i + 1]!)) cur += line[++i];
      else cur += c;
    } else if (c === "'" || c === '"') {
      q = c;
      has = true;
    } else if (c === '\\' && i + 1 < line.length) {
      cur += line[++i];
      has = true;
    } else if (/\s/.test(c)) {
      if (has || cur !== '') out.push(cur);
      cur = '';
      has = false;
    } else cur += c;
  }
  if (q) throw new Error('unterminated quote');
  if (has || cur !== '') out.push(cur);
  return out;
}

export function b64ToBytes(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function textToB64(text: string): string {
  const bytes = new TextEncoder().encode(text);
  let bin = '';
  for (let i = 0; i < bytes.length; i++) bin += String.fromCharCode(bytes[i]!);
  return btoa(bin);
}
