/**
 * The fork form's rules, apart from its DOM (``forkform.ts``): a config flattened into typed
 * fields (nested objects as ``a.b`` keys; lists, empty objects and keys holding a dot as JSON),
 * a field's text parsed back by its type, and the changes to send: only the top-level keys
 * that changed, each with its whole new value (``lk.runs.fork`` takes top-level keys). No
 * imports: Node's test runner loads this module as it is compiled.
 */

export type FieldKind = 'number' | 'boolean' | 'string' | 'json';

/** One leaf of a config: where it is, its kind (how it is edited) and its value. */
export interface IField {
  path: string[];
  key: string;
  kind: FieldKind;
  value: unknown;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function kindOf(v: unknown): FieldKind {
  if (typeof v === 'number') {
    return 'number';
  }
  if (typeof v === 'boolean') {
    return 'boolean';
  }
  return typeof v === 'string' ? 'string' : 'json';
}

/** Every leaf of ``config``, in its order: a non-empty object whose keys hold no dot is
 * opened (``opt.lr``); anything else is one field. */
export function flatten(config: Record<string, unknown>, path: string[] = []): IField[] {
  const out: IField[] = [];
  for (const [k, v] of Object.entries(isPlainObject(config) ? config : {})) {
    const here = [...path, k];
    if (isPlainObject(v) && Object.keys(v).length &&
        Object.keys(v).every(x => x && !x.includes('.')) && !k.includes('.')) {
      out.push(...flatten(v, here));
    } else {
      out.push({ path: here, key: here.join('.'), kind: kindOf(v), value: v });
    }
  }
  return out;
}

/** A field's text as its value: ``{ok: true, value}`` or ``{ok: false, error}`` saying what
 * was expected. */
export function parseValue(kind: FieldKind, text: string):
  { ok: true; value: unknown } | { ok: false; error: string } {
  if (kind === 'string') {
    return { ok: true, value: text };
  }
  if (kind === 'boolean') {
    return text === 'true' || text === 'false' ? { ok: true, value: text === 'true' }
      : { ok: false, error: `true or false, got ${JSON.stringify(text.slice(0, 20))}` };
  }
  if (kind === 'number') {
    const t = text.trim();
    // JSON's number syntax (no hex, no "1_000", no Infinity), finite
    if (/^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$/.test(t) && isFinite(Number(t))) {
      return { ok: true, value: Number(t) };
    }
    return { ok: false, error: `a number, e.g. 0.001 or 1e-3, got ${JSON.stringify(t.slice(0, 20))}` };
  }
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (e) {
    return { ok: false, error: `JSON, e.g. [1, 2] or {"a": 1} (${(e as Error).message.slice(0, 60)})` };
  }
}

/** How a field's value is written in its input. */
export function valueText(kind: FieldKind, v: unknown): string {
  if (kind === 'string') {
    return String(v);
  }
  return kind === 'json' ? JSON.stringify(v) : String(v);
}

/** Whether two JSON values are the same (objects compared by keys, not key order). */
export function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) {
    return true;
  }
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length &&
      a.every((x, i) => sameValue(x, b[i]));
  }
  if (isPlainObject(a) && isPlainObject(b)) {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length &&
      ka.every(k => Object.prototype.hasOwnProperty.call(b, k) && sameValue(a[k], b[k]));
  }
  return false;
}

/** ``config`` with the value at ``path`` set to ``value`` (a copy; ``config`` unchanged). */
export function setAt(config: Record<string, unknown>, path: string[], value: unknown):
  Record<string, unknown> {
  const [head, ...rest] = path;
  const out = { ...config };
  out[head] = rest.length
    ? setAt(isPlainObject(config[head]) ? (config[head] as Record<string, unknown>) : {}, rest,
            value)
    : value;
  return out;
}

/** The changes a fork sends: the top-level keys whose value differs after ``edited``
 * (leaf key → new value), each with its whole new value; unchanged keys are left out. */
export function forkChanges(config: Record<string, unknown>, edited: Record<string, unknown>):
  Record<string, unknown> {
  const fields = new Map(flatten(config).map(f => [f.key, f]));
  let next = config;
  for (const [key, value] of Object.entries(edited)) {
    const f = fields.get(key);
    if (f) {
      next = setAt(next, f.path, value);
    }
  }
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(config)) {
    if (!sameValue(config[k], next[k])) {
      out[k] = next[k];
    }
  }
  return out;
}

/** The checkpoint a fork starts from by default: the newest valid one (by iteration, then
 * id), or null when none is valid. */
export function newestValid<T extends { id: number; iteration: number; valid: boolean }>(
  checkpoints: T[]): T | null {
  let best: T | null = null;
  for (const c of checkpoints) {
    if (c.valid && (!best || c.iteration > best.iteration ||
                    (c.iteration === best.iteration && c.id > best.id))) {
      best = c;
    }
  }
  return best;
}
