/**
 * Text that reaches a terminal (the CLI's output, the log, `corral audit export`) carries no character a terminal
 * or a text viewer acts on: C0 controls (ESC included) and DEL, C1 controls (U+0080–U+009F), the bidirectional
 * controls (U+061C, U+200E/F, U+202A–E, U+2066–9) and the line/paragraph separators (U+2028/9). Each one becomes
 * `\uXXXX`, so in JSON the value parses back unchanged, and in plain text it is visible instead of obeyed.
 *
 * The one definition of that set and of its escape: every text output goes through `escapeTerminalText` (plain
 * text), `terminalJson` (JSON) or `escapeLogArgument` (a log line's arguments). Pure: no Node imports.
 */

/** Every character a terminal may act on (see above). */
const UNSAFE_IN_TEXT =
  /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
/** The same set less C0, which JSON.stringify already escapes (and whose escapes `\n`, `\t`… are kept). */
const UNSAFE_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

const escapeOne = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/** `text` with every terminal-active character written as `\uXXXX` (newlines and tabs too: one value, one line). */
export function escapeTerminalText(text: string): string {
  UNSAFE_IN_TEXT.lastIndex = 0;
  return UNSAFE_IN_TEXT.test(text) ? text.replace(UNSAFE_IN_TEXT, escapeOne) : text;
}

/** `escapeTerminalText` on each line of `text`, keeping its line breaks (a formatted multi-line report). */
export function escapeTerminalLines(text: string): string {
  return text.split('\n').map(escapeTerminalText).join('\n');
}

/**
 * `JSON.stringify(value, null, indent)` with no terminal-active character left raw: they can only stand inside
 * strings there, where `\uXXXX` is the same value to any JSON parser.
 */
export function terminalJson(value: unknown, indent?: number): string {
  const json = JSON.stringify(value, null, indent);
  if (json === undefined) return 'null';
  UNSAFE_IN_JSON.lastIndex = 0;
  return UNSAFE_IN_JSON.test(json) ? json.replace(UNSAFE_IN_JSON, escapeOne) : json;
}

/**
 * A log argument as the line will hold it: a string with no terminal control or line break raw (one event, one
 * line), an error's stack one escaped line per frame, anything else as escaped JSON.
 */
export function escapeLogArgument(d: unknown): string {
  if (typeof d === 'string') return escapeTerminalText(d);
  if (d instanceof Error) return escapeTerminalLines(d.stack ?? `${d.name}: ${d.message}`);
  try {
    return terminalJson(d);
  } catch {
    return escapeTerminalText(String(d));
  }
}
