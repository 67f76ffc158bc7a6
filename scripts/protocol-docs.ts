// Generates the protocol reference from the zod schemas of src/protocol and the method table (methods.ts):
// docs/protocol.md and one JSON Schema (2020-12) per named shape in docs/schema/. Field descriptions are the JSDoc of
// the schemas' members (`@since V`: not in the seed, added by Codex V; `@corral`: Corral's own; `@shape NAME`: the
// member is validated on its own against NAME).
//
//   npm run docs                                         writes them
//   node --import tsx scripts/protocol-docs.ts --check   fails, naming what differs, unless they are current
//   --out DIR                                            docs/ is DIR instead (the test of the check)
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { z } from 'zod';
import { ErrorCode } from '../src/protocol/errors.js';
import * as methods from '../src/protocol/methods.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
/** Every module of src/protocol, by path: the names of its exported schemas are the names of the shapes. */
const MODULES: Record<string, Record<string, unknown>> = {};
for (const f of readdirSync(join(root, 'src', 'protocol')).sort()) {
  if (!f.endsWith('.ts') || f.endsWith('.d.ts')) continue;
  MODULES[`src/protocol/${f}`] = await import(join(root, 'src', 'protocol', f));
}

type Json = Record<string, unknown>;
interface MemberDoc {
  text: string;
  since: string | null;
  corral: boolean;
  shape: string | null;
}

// ---- names and member docs, read from the sources ------------------------------------------------------------

/** The public name of an exported schema: its export name without a `Schema` suffix. */
const publicName = (exportName: string) => exportName.replace(/Schema$/, '');

const names = new Map<z.ZodType, { name: string; file: string }>();
for (const [file, mod] of Object.entries(MODULES)) {
  for (const [exportName, value] of Object.entries(mod)) {
    if (value instanceof z.ZodType && !names.has(value))
      names.set(value, { name: publicName(exportName), file });
  }
}

function jsDoc(node: ts.Node, source: ts.SourceFile): MemberDoc | null {
  const docs = (node as { jsDoc?: ts.JSDoc[] }).jsDoc;
  if (!docs || docs.length === 0) return null;
  const doc = docs[docs.length - 1]!;
  const text = ts.getTextOfJSDocComment(doc.comment) ?? '';
  let since: string | null = null;
  let corral = false;
  let shape: string | null = null;
  for (const tag of doc.tags ?? []) {
    const value = (ts.getTextOfJSDocComment(tag.comment) ?? '').trim();
    if (tag.tagName.text === 'since') since = value;
    else if (tag.tagName.text === 'corral') corral = true;
    else if (tag.tagName.text === 'shape') shape = value;
  }
  void source;
  return { text: text.replace(/\s+/g, ' ').trim(), since, corral, shape };
}

/** JSDoc of exported consts, and of the members of the object literals in them (by path), per public name. */
function readDocs(): { ofSchema: Map<string, MemberDoc>; ofMember: Map<string, Map<string, MemberDoc>> } {
  const ofSchema = new Map<string, MemberDoc>();
  const ofMember = new Map<string, Map<string, MemberDoc>>();
  for (const file of Object.keys(MODULES)) {
    const text = readFileSync(join(root, file), 'utf8');
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
    const locals = new Map<string, ts.ObjectLiteralExpression>();
    for (const st of source.statements) {
      if (!ts.isVariableStatement(st)) continue;
      for (const d of st.declarationList.declarations) {
        if (ts.isIdentifier(d.name) && d.initializer && ts.isObjectLiteralExpression(d.initializer))
          locals.set(d.name.text, d.initializer);
      }
    }
    for (const st of source.statements) {
      if (!ts.isVariableStatement(st) || !st.modifiers?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword))
        continue;
      for (const d of st.declarationList.declarations) {
        if (!ts.isIdentifier(d.name) || !d.initializer) continue;
        const name = publicName(d.name.text);
        const own = jsDoc(st, source);
        if (own) ofSchema.set(name, own);
        const members = new Map<string, MemberDoc>();
        const visitObject = (obj: ts.ObjectLiteralExpression, prefix: string) => {
          for (const p of obj.properties) {
            if (ts.isSpreadAssignment(p) && ts.isIdentifier(p.expression)) {
              const local = locals.get(p.expression.text);
              if (local) visitObject(local, prefix);
              continue;
            }
            if (!ts.isPropertyAssignment(p)) continue;
            const key = ts.isIdentifier(p.name) || ts.isStringLiteral(p.name) ? p.name.text : null;
            if (key === null) continue;
            const doc = jsDoc(p, source);
            if (doc) members.set(prefix + key, doc);
            findObjects(p.initializer, `${prefix}${key}.`);
          }
        };
        // Object literals passed to z.object / looseObject / extend, at any depth of the initializer.
        const findObjects = (node: ts.Node, prefix: string): void => {
          if (ts.isCallExpression(node)) {
            const callee = node.expression;
            const fn = ts.isPropertyAccessExpression(callee) ? callee.name.text : '';
            for (const arg of node.arguments) {
              if (
                ts.isObjectLiteralExpression(arg) &&
                ['object', 'looseObject', 'strictObject', 'extend'].includes(fn)
              )
                visitObject(arg, prefix);
              else findObjects(arg, prefix);
            }
            findObjects(callee, prefix);
            return;
          }
          if (ts.isObjectLiteralExpression(node)) return;
          ts.forEachChild(node, (c) => findObjects(c, prefix));
        };
        findObjects(d.initializer, '');
        if (members.size > 0) ofMember.set(name, members);
      }
    }
  }
  return { ofSchema, ofMember };
}

const docs = readDocs();

// ---- JSON Schema ----------------------------------------------------------------------------------------------

const registry = z.registry<{ id: string; description?: string }>();
for (const [schema, { name }] of names) {
  const description = docs.ofSchema.get(name)?.text;
  registry.add(schema, description ? { id: name, description } : { id: name });
}
const generated = z.toJSONSchema(registry, {
  io: 'input',
  unrepresentable: 'any',
  uri: (id) => `${id}.json`,
}).schemas as Record<string, Json>;

/** Finds the object schema at a member path (through anyOf branches and array items). */
function objectsAt(schema: Json, path: string[]): Json[] {
  const here: Json[] = [];
  const visit = (s: Json) => {
    if (s.properties) here.push(s);
    for (const k of ['anyOf', 'oneOf', 'allOf'] as const)
      for (const b of (s[k] as Json[] | undefined) ?? []) visit(b);
    if (s.items && typeof s.items === 'object') visit(s.items as Json);
  };
  visit(schema);
  if (path.length === 0) return here;
  const [head, ...rest] = path;
  return here.flatMap((o) => {
    const child = (o.properties as Record<string, Json>)[head!];
    return child ? objectsAt(child, rest) : [];
  });
}

for (const [name, members] of docs.ofMember) {
  const schema = generated[name];
  if (!schema) continue;
  for (const [path, doc] of members) {
    const parts = path.split('.');
    const key = parts.pop()!;
    for (const obj of objectsAt(schema, parts)) {
      const props = obj.properties as Record<string, Json>;
      const member = props[key];
      if (!member) continue;
      if (doc.shape && Object.keys(member).length === 0) props[key] = { $ref: `${doc.shape}.json` };
      const target = props[key]!;
      if (doc.text) target.description = doc.text;
      if (doc.since) target['x-since'] = doc.since;
      if (doc.corral) target['x-corral'] = true;
    }
  }
}

// Only what the protocol reaches: the table's params, results and notifications, and what they refer to.
const roots = new Set<string>();
const nameOf = (s: z.ZodType) => {
  const n = names.get(s)?.name;
  if (!n) throw new Error('a schema of the method table is not exported under a name from src/protocol');
  return n;
};
for (const m of Object.values(methods.METHODS)) roots.add(nameOf(m.params)).add(nameOf(m.result));
for (const n of Object.values(methods.NOTIFICATIONS)) roots.add(nameOf(n.params));
for (const r of Object.values(methods.SERVER_REQUESTS)) roots.add(nameOf(r.params)).add(nameOf(r.result));
const reached = new Set<string>();
const walk = (name: string) => {
  if (reached.has(name)) return;
  const s = generated[name];
  if (!s) throw new Error(`no schema ${name}`);
  reached.add(name);
  const refs = JSON.stringify(s).matchAll(/"\$ref":"([^"#]+)\.json"/g);
  for (const [, ref] of refs) walk(ref!);
};
for (const r of roots) walk(r);

// ---- the reference ------------------------------------------------------------------------------------------------

function typeText(s: Json | undefined): string {
  if (!s || Object.keys(s).filter((k) => !['description', 'x-since', 'x-corral'].includes(k)).length === 0)
    return 'any';
  if (typeof s.$ref === 'string') {
    const n = s.$ref.replace(/\.json$/, '');
    return `[${n}](#${anchor(n)})`;
  }
  if (Array.isArray(s.enum)) return s.enum.map((v) => `\`${JSON.stringify(v)}\``).join(' \\| ');
  if (s.const !== undefined) return `\`${JSON.stringify(s.const)}\``;
  const branches = (s.anyOf ?? s.oneOf) as Json[] | undefined;
  if (branches) return branches.map(typeText).join(' \\| ');
  if (Array.isArray(s.type)) return s.type.join(' \\| ');
  if (s.type === 'array') return `${typeText(s.items as Json)}[]`;
  if (s.type === 'object' && s.additionalProperties && !s.properties)
    return `map of ${typeText(s.additionalProperties as Json)}`;
  if (s.type === 'object') return 'object';
  return String(s.type ?? 'any');
}

const anchor = (name: string) => `schema-${name.toLowerCase()}`;
const cell = (t: string) => t.replace(/\|/g, '\\|');

function fieldTable(schema: Json): string[] {
  const objects = objectsAt(schema, []);
  const obj = objects[0];
  if (!obj) return [`${typeText(schema)}`, ''];
  const required = new Set((obj.required as string[] | undefined) ?? []);
  const rows = ['| member | type | | |', '|---|---|---|---|'];
  for (const [key, member] of Object.entries(obj.properties as Record<string, Json>)) {
    const notes = [
      required.has(key) ? 'required' : 'optional',
      member['x-since'] ? `since ${member['x-since']}` : '',
      member['x-corral'] ? '**Corral**' : '',
      member.default !== undefined ? `default \`${JSON.stringify(member.default)}\`` : '',
    ].filter((x) => x !== '');
    rows.push(
      `| \`${key}\` | ${typeText(member)} | ${notes.join(', ')} | ${cell(String(member.description ?? ''))} |`,
    );
  }
  const nullable = schema.anyOf && (schema.anyOf as Json[]).some((b) => b.type === 'null');
  return [...(nullable ? ['May be null or absent.', ''] : []), ...rows, ''];
}

const CALLERS: Record<methods.Caller, string> = {
  handshake: 'any connection, first',
  agent: 'agent or panel',
  panel: 'panel only',
};

function reference(): string {
  const out: string[] = [];
  const add = (...lines: string[]) => out.push(...lines);
  add(
    '<!-- Generated by `npm run docs` from src/protocol (scripts/protocol-docs.ts): edit the schemas, not this file. -->',
    '',
    '# The Corral exec-server protocol',
    '',
    "Corral speaks the Codex exec-server protocol: JSON-RPC messages without the `jsonrpc` member, over a WebSocket (one text frame per message), newline-delimited on stdin/stdout (`--listen stdio`), or Electron IPC (the desktop app's own window). Requests are `{id, method, params}`; answers are `{id, result}` or `{error: {code, message}, id}`, in that member order, never with `data`; notifications are `{method, params}`. A message that is not JSON, or not a message, is answered with `id: -1` and the connection stays open; a response from the client, or a notification other than `initialized`, closes it (WebSocket close 1002).",
    '',
    `A message is at most ${methods.MAX_MESSAGE_BYTES} bytes (larger: close 1009). Requests of one connection are answered in arrival order, each finishing before the next starts, except a \`process/read\` that waits and the \`fs/*\` requests (in order among themselves), which do not hold the others.`,
    '',
    "Unknown members of params are ignored. A missing or mistyped member is -32602 with a message that names it, in serde's words (``missing field `processId` ``, `invalid type: null, expected struct ExecParams`).",
    '',
    '**Handshake.** `initialize` first (once per connection), then the notification `initialized`; any other request before them is -32600. An unknown method is -32601, before any of that.',
    '',
    "**Who may call.** An *agent* (a client holding the agent token, or the stdio client) may call the exec-server methods, on the sessions it created. A *panel* (the desktop app's window, or a client holding the panel token) may call everything, on every session; the other methods are refused to an agent with -32600. The watching panel credential of `corral exec-server --panel-token-file` (what a fleet host holds) may call the panel methods only: the exec-server methods are refused to it with -32600.",
    '',
    "Members that the seed protocol (`openai/codex@1e0207cc`) does not have are marked with the Codex release that added them (*since*), or as **Corral**'s own. JSON Schemas of every shape: [docs/schema/](schema/).",
    '',
    '## Methods',
    '',
    '| method | who may call | params | result | |',
    '|---|---|---|---|---|',
  );
  for (const [name, m] of Object.entries(methods.METHODS)) {
    add(
      `| [\`${name}\`](#${name.replace(/\//g, '').toLowerCase()}) | ${CALLERS[m.caller]} | ${typeText({ $ref: `${nameOf(m.params)}.json` })} | ${typeText({ $ref: `${nameOf(m.result)}.json` })} | ${cell(m.summary)} |`,
    );
  }
  add('');
  for (const [name, m] of Object.entries(methods.METHODS)) {
    add(`### \`${name}\``, '', `${m.summary} Who may call: ${CALLERS[m.caller]}.`, '');
    add(
      `Params: [${nameOf(m.params)}](schema/${nameOf(m.params)}.json)`,
      '',
      ...fieldTable(generated[nameOf(m.params)]!),
    );
    add(
      `Result: [${nameOf(m.result)}](schema/${nameOf(m.result)}.json)`,
      '',
      ...fieldTable(generated[nameOf(m.result)]!),
    );
  }
  add(
    '## Notifications',
    '',
    'Server → client. The client sends one notification: `initialized` (params `{}`, null or absent).',
    '',
  );
  add('| notification | to | params | |', '|---|---|---|---|');
  for (const [name, n] of Object.entries(methods.NOTIFICATIONS)) {
    const to = n.to === 'agent' ? "the connection attached to the process's session" : 'panel subscribers';
    add(`| \`${name}\` | ${to} | ${typeText({ $ref: `${nameOf(n.params)}.json` })} | ${cell(n.summary)} |`);
  }
  add(
    '',
    '## Server → client requests',
    '',
    'Sent only to a client that declared the capability in `initialize {capabilities}`; the client answers with a JSON-RPC response carrying the same id.',
    '',
    '| request | capability | params | result | |',
    '|---|---|---|---|---|',
  );
  for (const [name, r] of Object.entries(methods.SERVER_REQUESTS)) {
    add(
      `| \`${name}\` | \`${r.capability}\` | ${typeText({ $ref: `${nameOf(r.params)}.json` })} | ${typeText({ $ref: `${nameOf(r.result)}.json` })} | ${cell(r.summary)} |`,
    );
  }
  add('', '## Error codes', '', '| code | name | when |', '|---|---|---|');
  const errorDocs = readErrorDocs();
  for (const [key, code] of Object.entries(ErrorCode))
    add(`| ${code} | ${key} | ${cell(errorDocs.get(key) ?? '')} |`);
  add(
    '',
    'Spawn and setup failures of `process/start` (program not found, sandbox or proxy setup) are -32603 with the OS text (`No such file or directory (os error 2)`); an fs target that does not exist is -32004. ' +
      "A sandbox whose setup fails after the spawn (bwrap waiting on its block fd while the server pins links or sets up the managed network) is killed, and the error ends with what its setup wrote, on one line and at most its last 500 characters: `sandbox setup failed: sandbox setup: the sandbox exited during setup (it wrote: bwrap: Can't find source path /w/extra: No such file or directory)`.",
    '',
  );
  add('## Beyond the seed', '', '| where | member | since | |', '|---|---|---|---|');
  for (const name of [...reached].sort()) {
    for (const obj of objectsAt(generated[name]!, [])) {
      for (const [key, member] of Object.entries(obj.properties as Record<string, Json>)) {
        if (!member['x-since'] && !member['x-corral']) continue;
        const since = member['x-corral'] ? '**Corral**' : String(member['x-since']);
        add(
          `| ${typeText({ $ref: `${name}.json` })} | \`${key}\` | ${since} | ${cell(String(member.description ?? ''))} |`,
        );
      }
    }
  }
  add(
    '',
    "Every `monitor/*`, `policy/*`, `approvals/*` and `host/info` method and notification is Corral's own (panel only).",
    '',
  );
  add('## Shapes', '');
  for (const name of [...reached].sort()) {
    const s = generated[name]!;
    add(
      `### ${name}`,
      '',
      `<a id="${anchor(name)}"></a>[schema](schema/${name}.json)${s.description ? ` — ${cell(String(s.description))}` : ''}`,
      '',
    );
    add(...fieldTable(s));
  }
  return `${out
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trimEnd()}\n`;
}

function readErrorDocs(): Map<string, string> {
  const file = 'src/protocol/errors.ts';
  const source = ts.createSourceFile(
    file,
    readFileSync(join(root, file), 'utf8'),
    ts.ScriptTarget.Latest,
    true,
  );
  const out = new Map<string, string>();
  const visit = (node: ts.Node) => {
    if (ts.isPropertyAssignment(node) && ts.isIdentifier(node.name)) {
      const d = jsDoc(node, source);
      if (d) out.set(node.name.text, d.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

// ---- write or check ---------------------------------------------------------------------------------------------

const outArg = process.argv.indexOf('--out');
const docsDir = outArg > 0 ? process.argv[outArg + 1]! : join(root, 'docs');
const files = new Map<string, string>();
files.set('protocol.md', reference());
for (const name of [...reached].sort())
  files.set(`schema/${name}.json`, `${JSON.stringify(generated[name], null, 2)}\n`);

const schemaDir = join(docsDir, 'schema');
const onDisk = existsSync(schemaDir) ? readdirSync(schemaDir).map((f) => `schema/${f}`) : [];
const shown = (path: string) => relative(root, join(docsDir, path));

if (process.argv.includes('--check')) {
  const stale: string[] = [];
  for (const [path, text] of files) {
    const full = join(docsDir, path);
    if (!existsSync(full)) stale.push(`${shown(path)} is missing`);
    else if (readFileSync(full, 'utf8') !== text) stale.push(`${shown(path)} differs`);
  }
  for (const path of onDisk) if (!files.has(path)) stale.push(`${shown(path)} names no shape`);
  if (stale.length > 0) {
    const listed = stale.length > 8 ? [...stale.slice(0, 8), `${stale.length - 8} more`] : stale;
    console.error(`the protocol reference is not current (${listed.join('; ')}): run npm run docs`);
    process.exit(1);
  }
} else {
  mkdirSync(schemaDir, { recursive: true });
  for (const path of onDisk) if (!files.has(path)) rmSync(join(docsDir, path));
  for (const [path, text] of files) writeFileSync(join(docsDir, path), text);
  console.log(`wrote ${shown('protocol.md')} and ${files.size - 1} schemas in ${shown('schema')}/`);
}
