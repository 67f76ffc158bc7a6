/**
 * Domain patterns (network-proxy.md §3.2): `x`, `*.x` (strict subdomains, `*` crosses dots), `**.x` (apex and
 * subdomains), mid-label globs (`region*.v2.x`), the rest of the glob syntax (`?`, `[abc]`, `[!a]`, `{a,b}`), and the
 * global `*` (allowlist only). Patterns match case-insensitively. Unicode patterns are converted to punycode and
 * IP-literal patterns are canonicalised (§5), so they compare against the canonical wire form of the host.
 */
import { domainToASCII } from 'node:url';
import { canonicalIp } from './host.js';

export class GlobError extends Error {}

const GLOB_CHARS = /[*?[\]{}]/;

function normalizeRest(rest: string): string {
  let r = rest.trim();
  if (r.startsWith('[') && r.endsWith(']') && !r.slice(1, -1).includes('[')) r = r.slice(1, -1);
  r = r.toLowerCase();
  while (r.endsWith('.')) r = r.slice(0, -1);
  const ip = canonicalIp(r);
  if (ip !== null) return ip;
  if (/[^\x00-\x7f]/.test(r)) {
    r = r
      .split('.')
      .map((label) => {
        if (GLOB_CHARS.test(label) || !/[^\x00-\x7f]/.test(label)) return label;
        const ascii = domainToASCII(label);
        return ascii === '' ? label : ascii;
      })
      .join('.');
  }
  return r;
}

/** Splits `**.x` / `*.x` prefixes off and normalises the rest as a host. */
export function normalizePattern(pattern: string): string {
  const p = pattern.trim();
  if (p.startsWith('**.')) return `**.${normalizeRest(p.slice(3))}`;
  if (p.startsWith('*.')) return `*.${normalizeRest(p.slice(2))}`;
  return normalizeRest(p);
}

/** `*`, `[*]` and `**.[*]` count as the global wildcard. */
export function isGlobalWildcard(pattern: string): boolean {
  const n = normalizePattern(pattern);
  return n === '*' || n === '**.*';
}

/** Converts one globset-style glob into a regular expression source (anchored by the caller). */
export function globToRegexSource(glob: string, original = glob): string {
  let out = '';
  let i = 0;
  let braceDepth = 0;
  while (i < glob.length) {
    const c = glob[i]!;
    if (c === '*') {
      while (glob[i + 1] === '*') i++;
      out += '.*';
    } else if (c === '?') {
      out += '.';
    } else if (c === '[') {
      const end = glob.indexOf(']', i + 2);
      if (end < 0) throw new GlobError(`invalid glob pattern: ${original}`);
      let body = glob.slice(i + 1, end);
      let negate = false;
      if (body.startsWith('!') || body.startsWith('^')) {
        negate = true;
        body = body.slice(1);
      }
      if (body === '') throw new GlobError(`invalid glob pattern: ${original}`);
      const cls = body.replace(/[\\\]^]/g, (m) => `\\${m}`);
      out += `[${negate ? '^' : ''}${cls}]`;
      i = end;
    } else if (c === '{') {
      braceDepth++;
      out += '(?:';
    } else if (c === '}') {
      if (braceDepth === 0) throw new GlobError(`invalid glob pattern: ${original}`);
      braceDepth--;
      out += ')';
    } else if (c === ',' && braceDepth > 0) {
      out += '|';
    } else if (c === '\\') {
      const next = glob[i + 1];
      if (next === undefined) throw new GlobError(`invalid glob pattern: ${original}`);
      out += next.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
      i++;
    } else if (c === ']') {
      throw new GlobError(`invalid glob pattern: ${original}`);
    } else {
      out += c.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
    }
    i++;
  }
  if (braceDepth !== 0) throw new GlobError(`invalid glob pattern: ${original}`);
  return out;
}

/** The globs a normalised pattern expands to (§3.2 table). */
export function expandPattern(normalized: string): string[] {
  if (normalized === '*' || normalized === '**.*') return ['*'];
  if (normalized.startsWith('**.')) {
    const rest = normalized.slice(3);
    return [rest, `?*.${rest}`];
  }
  if (normalized.startsWith('*.')) return [`?*.${normalized.slice(2)}`];
  return [normalized];
}

export interface CompiledPatterns {
  /** Normalised, de-duplicated patterns. */
  patterns: string[];
  /** Normalised patterns without `*` or `?`: the "explicit" entries of the local guard. */
  exact: Set<string>;
  /** Canonical IP-literal entries (used to check resolver answers too). */
  ipLiterals: Set<string>;
  regex: RegExp | null;
  test(host: string): boolean;
  /** The first (normalised) pattern that matches the host, or null: what a decision's receipt names. */
  match(host: string): string | null;
}

/** How many hosts' matched patterns a compiled list remembers (cleared when full). */
const MATCH_MEMO = 1024;

/** Compiles a pattern list into one anchored regular expression. Throws GlobError for a bad glob. */
export function compilePatterns(list: readonly string[]): CompiledPatterns {
  const patterns: string[] = [];
  const seen = new Set<string>();
  for (const raw of list) {
    const n = normalizePattern(raw);
    if (n === '' || seen.has(n)) continue;
    seen.add(n);
    patterns.push(n);
  }
  // Each pattern's alternatives (the glob sources have no capturing group of their own).
  const sources = patterns.map((p) =>
    expandPattern(p)
      .map((g) => globToRegexSource(g, p))
      .join('|'),
  );
  const regex = sources.length === 0 ? null : new RegExp(`^(?:${sources.join('|')})$`, 'i');
  const exact = new Set(patterns.filter((p) => !p.includes('*') && !p.includes('?')));
  const ipLiterals = new Set(patterns.filter((p) => canonicalIp(p) === p));
  // The same with one capturing group per pattern, compiled on the first match asked: one pass names the first
  // pattern that matches.
  let grouped: RegExp | null = null;
  const groupedRegex = () => (grouped ??= new RegExp(`^(?:${sources.map((x) => `(${x})`).join('|')})$`, 'i'));
  const memo = new Map<string, string | null>();
  const firstMatch = (host: string): string | null => {
    const m = groupedRegex().exec(host);
    if (m === null) return null;
    for (let i = 1; i < m.length; i++) if (m[i] !== undefined) return patterns[i - 1]!;
    return null;
  };
  const test = (host: string): boolean => {
    if (regex === null || host === '') return false;
    if (regex.test(host)) return true;
    const pct = host.indexOf('%');
    return pct > 0 && regex.test(host.slice(0, pct));
  };
  return {
    patterns,
    exact,
    ipLiterals,
    regex,
    test,
    match(host: string): string | null {
      if (!test(host)) return null;
      // Hosts repeat: a bounded memo keeps the grouped pass (slower than test's) off most requests.
      const known = memo.get(host);
      if (known !== undefined) return known;
      const pct = host.indexOf('%');
      const found = firstMatch(host) ?? (pct > 0 ? firstMatch(host.slice(0, pct)) : null);
      if (memo.size >= MATCH_MEMO) memo.clear();
      memo.set(host, found);
      return found;
    },
  };
}
