/**
 * The server's credentials, in every form a child's environment could carry them (issue 30 item 1). A client
 * forwards `CODEX_EXEC_SERVER_URL` to its commands; a base64 token (`+ / =`) is in it percent-encoded
 * (`?token=q%2BAb%2F…`), so a scrub that looks for the raw token only lets it through, and a sandboxed command that
 * reads it connects back and runs whatever it likes outside its sandbox.
 *
 * Two halves, so that a start costs microseconds:
 * - at registration, each secret gives its needles: itself, itself with `+` read as a space (a form decoder's view of
 *   an unescaped token), its base64 (standard and URL alphabets, at each of the three byte alignments it can have
 *   inside a longer encoded value: the characters that depend on its bytes only) and its hex (both cases);
 * - per variable, the value (and the name) is searched for every needle, and so are its decodings: percent
 *   (`%2b`, `%2B`, every byte encoded, `%u002B`), form (`+` for a space), backslash escapes (JSON `\/` and
 *   `\u002b`, `\x2b`, octal, any escaped character) and HTML character references, applied to each other's results
 *   up to four rounds deep (`%252B`, JSON inside a URL, a URL inside JSON). Decoding never lengthens a value, so a
 *   value shorter than the shortest needle is not looked at, and one without `%`, `\`, `&` or `+` is searched as is.
 *
 * A variable whose value or name holds any form of any secret is dropped. Not promised: a secret split across
 * variables, or put through a transformation other than those above (encrypted, compressed, reversed).
 */

/** Secrets shorter than this are matched raw only: their derived forms are too short not to match by chance. */
const MIN_DERIVED_LENGTH = 8;
/** Derived needles shorter than this are not used (a short base64 run of a short secret). */
const MIN_NEEDLE_LENGTH = 6;
/** Decoding rounds applied to a value (each round decodes every result of the previous one). */
const MAX_ROUNDS = 4;
/** Decodings of one value looked at, at most. */
const MAX_CANDIDATES = 64;

const NAMED_ENTITIES: Record<string, string> = {
  amp: '&',
  lt: '<',
  gt: '>',
  quot: '"',
  apos: "'",
  plus: '+',
  sol: '/',
  equals: '=',
  percnt: '%',
  num: '#',
  quest: '?',
  colon: ':',
  semi: ';',
  comma: ',',
  period: '.',
  lowbar: '_',
  hyphen: '-',
  dash: '-',
  bsol: '\\',
  nbsp: '\u00a0',
};

function fromCodePoint(n: number): string | null {
  return Number.isInteger(n) && n >= 0 && n <= 0x10ffff ? String.fromCodePoint(n) : null;
}

/** `%XX` runs decoded as UTF-8 (byte by byte where they are not valid UTF-8), and `%uXXXX`. */
function percentDecode(v: string): string {
  return v
    .replace(/(?:%[0-9a-f]{2})+/gi, (run) => {
      try {
        return decodeURIComponent(run);
      } catch {
        return run.replace(/%([0-9a-f]{2})/gi, (_, h: string) => String.fromCharCode(Number.parseInt(h, 16)));
      }
    })
    .replace(/%u([0-9a-f]{4})/gi, (_, h: string) => String.fromCharCode(Number.parseInt(h, 16)));
}

/** Backslash escapes: JSON's (`\uXXXX`, `\/`, `\n` …), JavaScript's and C's (`\xHH`, `\u{…}`, octal), `\c` → c. */
function unescapeBackslashes(v: string): string {
  return v.replace(
    /\\(?:u\{([0-9a-f]{1,6})\}|u([0-9a-f]{4})|x([0-9a-f]{2})|([0-7]{1,3})|([\s\S]))/gi,
    (m, cp?: string, u?: string, x?: string, oct?: string, ch?: string) => {
      if (cp !== undefined) return fromCodePoint(Number.parseInt(cp, 16)) ?? m;
      if (u !== undefined) return String.fromCharCode(Number.parseInt(u, 16));
      if (x !== undefined) return String.fromCharCode(Number.parseInt(x, 16));
      if (oct !== undefined) return String.fromCharCode(Number.parseInt(oct, 8) & 0xff);
      const simple: Record<string, string> = {
        n: '\n',
        r: '\r',
        t: '\t',
        b: '\b',
        f: '\f',
        v: '\v',
        '0': '\0',
      };
      return simple[ch!] ?? ch!;
    },
  );
}

/** HTML character references: `&#43;`, `&#x2B;`, and a few named ones (`&plus;`, `&sol;`, `&equals;` …). */
function decodeEntities(v: string): string {
  return v.replace(
    /&(?:#x([0-9a-f]{1,6})|#([0-9]{1,7})|([a-z]{2,8}));?/gi,
    (m, hex?: string, dec?: string, name?: string) => {
      if (hex !== undefined) return fromCodePoint(Number.parseInt(hex, 16)) ?? m;
      if (dec !== undefined) return fromCodePoint(Number.parseInt(dec, 10)) ?? m;
      return NAMED_ENTITIES[name!.toLowerCase()] ?? m;
    },
  );
}

/** The characters of base64(pad + secret) that depend on the secret's bytes only, for each alignment (0-2 bytes). */
function base64Runs(bytes: Buffer): string[] {
  const out: string[] = [];
  for (let pad = 0; pad < 3; pad++) {
    const enc = Buffer.concat([Buffer.alloc(pad), bytes]).toString('base64');
    // Character j covers bits [6j, 6j + 6): it is the secret's alone when 6j ≥ 8·pad and 6j + 6 ≤ 8·(pad + n).
    const first = Math.ceil((8 * pad) / 6);
    const last = Math.floor((8 * (pad + bytes.length)) / 6); // exclusive
    const run = enc.slice(first, last);
    if (run.length >= MIN_NEEDLE_LENGTH) out.push(run, run.replace(/\+/g, '-').replace(/\//g, '_'));
  }
  return out;
}

/** Every form of `secret` that is looked for, as is, in a value and its decodings. */
export function needlesOf(secret: string): string[] {
  const out = new Set<string>([secret]);
  if (secret.length >= MIN_DERIVED_LENGTH) {
    if (secret.includes('+')) out.add(secret.replace(/\+/g, ' '));
    const bytes = Buffer.from(secret, 'utf8');
    for (const r of base64Runs(bytes)) out.add(r);
    const hex = bytes.toString('hex');
    out.add(hex);
    out.add(hex.toUpperCase());
  }
  return [...out];
}

/**
 * The credentials no child may see, in any form (see the top of this file). Secrets can expire (a presented JWT is
 * useless after its `exp`): they are forgotten then, so a server that sees many refreshed tokens keeps few.
 */
export class SecretScrub {
  /** Each secret and when it may be forgotten (ms since the epoch; Infinity: never). */
  private readonly secrets = new Map<string, number>();
  private needles: string[] = [];
  private shortest = Number.POSITIVE_INFINITY;
  /** Whether a secret holds a space (then `+` in a value may be a form-encoded space of it). */
  private spaced = false;
  private nextExpiry = Number.POSITIVE_INFINITY;

  constructor(
    secrets: Iterable<string> = [],
    private readonly now: () => number = Date.now,
  ) {
    for (const s of secrets) this.add(s);
  }

  get size(): number {
    return this.secrets.size;
  }

  /** Adds a secret (empty strings are ignored); `until`: when it stops mattering (ms since the epoch). */
  add(secret: string, until = Number.POSITIVE_INFINITY): void {
    if (secret === '') return;
    const known = this.secrets.get(secret);
    if (known !== undefined && known >= until) return;
    this.secrets.set(secret, until);
    this.forgetExpired();
    this.rebuild();
  }

  /** The environment without every variable whose value or name holds a form of a secret; the names dropped. */
  scrub(env: Record<string, string>): { env: Record<string, string>; removed: string[] } {
    if (this.nextExpiry <= this.now() && this.forgetExpired()) this.rebuild();
    if (this.needles.length === 0) return { env, removed: [] };
    const removed: string[] = [];
    for (const k in env) if (this.holdsSecret(env[k]!) || this.holdsSecret(k)) removed.push(k);
    if (removed.length === 0) return { env, removed };
    const out: Record<string, string> = {};
    for (const k in env) if (!removed.includes(k)) out[k] = env[k]!;
    return { env: out, removed };
  }

  /** Whether `value`, or a decoding of it, holds a form of a secret. */
  holdsSecret(value: string): boolean {
    if (value.length < this.shortest) return false;
    if (this.found(value)) return true;
    if (!this.decodable(value)) return false;
    const seen = new Set<string>([value]);
    let frontier = [value];
    for (let round = 0; round < MAX_ROUNDS && frontier.length > 0; round++) {
      const next: string[] = [];
      for (const c of frontier) {
        for (const d of this.decodings(c)) {
          if (d === c || d.length < this.shortest || seen.has(d)) continue;
          if (this.found(d)) return true;
          if (seen.size >= MAX_CANDIDATES) return false;
          seen.add(d);
          next.push(d);
        }
      }
      frontier = next;
    }
    return false;
  }

  private found(v: string): boolean {
    for (const n of this.needles) if (v.includes(n)) return true;
    return false;
  }

  private decodable(v: string): boolean {
    return v.includes('%') || v.includes('\\') || v.includes('&') || (this.spaced && v.includes('+'));
  }

  private decodings(v: string): string[] {
    const out: string[] = [];
    if (v.includes('%')) out.push(percentDecode(v));
    if (this.spaced && v.includes('+')) out.push(percentDecode(v.replace(/\+/g, ' ')));
    if (v.includes('\\')) out.push(unescapeBackslashes(v));
    if (v.includes('&')) out.push(decodeEntities(v));
    return out;
  }

  /** Drops the secrets whose time has passed; true when one was dropped. */
  private forgetExpired(): boolean {
    const now = this.now();
    let dropped = false;
    this.nextExpiry = Number.POSITIVE_INFINITY;
    for (const [s, until] of this.secrets) {
      if (until <= now) {
        this.secrets.delete(s);
        dropped = true;
      } else if (until < this.nextExpiry) this.nextExpiry = until;
    }
    return dropped;
  }

  private rebuild(): void {
    const all = new Set<string>();
    for (const s of this.secrets.keys()) for (const n of needlesOf(s)) all.add(n);
    // Longest first: a long needle is rarer, and a value holding a short one often holds its long forms too.
    this.needles = [...all].sort((a, b) => b.length - a.length);
    this.shortest = this.needles.reduce((m, n) => Math.min(m, n.length), Number.POSITIVE_INFINITY);
    this.spaced = [...this.secrets.keys()].some((s) => s.includes(' '));
  }
}
