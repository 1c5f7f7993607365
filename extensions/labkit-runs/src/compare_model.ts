/**
 * The compare page's rules, with no import at all (unit-tested in Node): configs flattened to
 * dotted keys and split into the keys that differ and those the same in all runs, a metric's
 * best value, and the table's rows sorted and filtered by any column.
 */

/** A config value as one line of text: strings and numbers as they are, the rest as JSON. */
export function valueText(v: unknown): string {
  if (v === undefined) {
    return '—';
  }
  if (typeof v === 'string') {
    return v;
  }
  if (typeof v === 'number') {
    return String(v);
  }
  try {
    const s = JSON.stringify(v);
    return s === undefined ? String(v) : s;
  } catch {
    return String(v);
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** ``{model: {depth: 2}, lr: 0.1}`` → ``{'model.depth': 2, lr: 0.1}``. Lists stay values; an
 * empty object is a value (``{}``), so that a key is never lost. */
export function flatten(config: unknown, prefix = '', out: Record<string, unknown> = {}):
Record<string, unknown> {
  if (!isPlainObject(config)) {
    return out;
  }
  for (const [k, v] of Object.entries(config)) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (isPlainObject(v) && Object.keys(v).length) {
      flatten(v, key, out);
    } else {
      out[key] = v;
    }
  }
  return out;
}

/** Two config values are the same when their JSON is (``1`` and ``1.0`` are; ``1`` and
 * ``"1"`` are not). */
export function sameValue(a: unknown, b: unknown): boolean {
  if (a === undefined || b === undefined) {
    return a === b;
  }
  try {
    return JSON.stringify(a) === JSON.stringify(b);
  } catch {
    return a === b;
  }
}

export interface IConfigDiff {
  /** each run's flattened config, in the runs' order */
  flat: Record<string, unknown>[];
  /** the keys whose values differ (or that some runs lack), sorted */
  differ: string[];
  /** the keys with one value in every run, sorted, with that value */
  same: [string, unknown][];
}

/** Which config keys differ across ``configs``, and which are the same in all. */
export function configDiff(configs: unknown[]): IConfigDiff {
  const flat = configs.map(c => flatten(c));
  const keys = [...new Set(flat.flatMap(f => Object.keys(f)))].sort();
  const differ: string[] = [];
  const same: [string, unknown][] = [];
  for (const k of keys) {
    const first = flat[0]?.[k];
    if (flat.every(f => k in f && sameValue(f[k], first))) {
      same.push([k, first]);
    } else {
      differ.push(k);
    }
  }
  return { flat, differ, same };
}

/** "lr=0.1, epochs=3": the keys the same in all runs, in one line. */
export function sameText(same: [string, unknown][]): string {
  return same.map(([k, v]) => `${k}=${valueText(v)}`).join(', ');
}

export interface IBest {
  value: number;
  iteration: number;
}

/** The lowest (``min``) or highest (``max``) finite value of a series and its iteration (the
 * first one when it repeats); null when there is none. */
export function bestOf(series: { iteration: number[]; value: (number | null)[] } | undefined,
                       mode: 'min' | 'max'): IBest | null {
  if (!series) {
    return null;
  }
  let best: IBest | null = null;
  series.value.forEach((v, i) => {
    if (typeof v !== 'number' || !isFinite(v)) {
      return;
    }
    if (!best || (mode === 'min' ? v < best.value : v > best.value)) {
      best = { value: v, iteration: series.iteration[i] };
    }
  });
  return best;
}

/** The better direction of a metric by its name: accuracies and the like up, the rest down. */
export function defaultMode(key: string): 'min' | 'max' {
  return /acc|auc|f1|precision|recall|score|iou|bleu|reward/i.test(key) ? 'max' : 'min';
}

/** How long a run took (or has taken, when it is live), in seconds; null when unknown. */
export function duration(run: { started?: unknown; created?: unknown; ended?: unknown;
                                heartbeat?: unknown }, now: number): number | null {
  const num = (v: unknown) => (typeof v === 'number' && isFinite(v) ? v : null);
  const start = num(run.started) ?? num(run.created);
  const end = num(run.ended) ?? num(run.heartbeat) ?? now;
  return start === null ? null : Math.max(0, end - start);
}

/** Why a run's row in the store cannot be read (``damaged``, as ``GET runs`` and ``GET
 * compare`` give it), or null for a sound run. */
export function damageOf(run: { status?: unknown; damaged?: unknown }): string | null {
  if (typeof run.damaged === 'string' && run.damaged) {
    return run.damaged;
  }
  return run.status === 'damaged' ? 'its row in the run store cannot be read' : null;
}

/** The configs of the runs that are not damaged: a damaged run's config is unknown (sent
 * empty), not one whose every key differs. */
export function knownConfigs(runs: { status?: unknown; damaged?: unknown; config?: unknown }[]):
unknown[] {
  return runs.filter(r => damageOf(r) === null).map(r => r.config);
}

/** A table row: the run's id and a value per column (numbers, strings, or absent). */
export interface IRow {
  id: string;
  cells: Record<string, unknown>;
}

/** Numbers before text, numbers by value, text in natural order; absent values last. */
export function compareValues(a: unknown, b: unknown): number {
  const missing = (v: unknown) => v === undefined || v === null ||
    (typeof v === 'number' && !isFinite(v));
  if (missing(a) || missing(b)) {
    return missing(a) === missing(b) ? 0 : missing(a) ? 1 : -1;
  }
  if (typeof a === 'number' && typeof b === 'number') {
    return a - b;
  }
  if (typeof a === 'number') {
    return -1;
  }
  if (typeof b === 'number') {
    return 1;
  }
  return valueText(a).localeCompare(valueText(b), undefined, { numeric: true });
}

/** ``rows`` sorted by ``column`` (stable; absent values last in either direction). */
export function sortRows(rows: IRow[], column: string, descending = false): IRow[] {
  return rows
    .map((r, i) => ({ r, i }))
    .sort((p, q) => {
      const a = p.r.cells[column];
      const b = q.r.cells[column];
      const absent = compareValues(a, b);
      const bothPresent = compareValues(a, undefined) < 0 && compareValues(b, undefined) < 0;
      const c = bothPresent && descending ? -absent : absent;
      return c || p.i - q.i;
    })
    .map(p => p.r);
}

export type Filter = (v: unknown) => boolean;

const OPERATOR = /^\s*(>=|<=|!=|>|<|=)\s*(.*?)\s*$/;

/** A column's filter from its text: ``> 0.1``, ``<= 3``, ``= adam``, ``!= 2`` compare (as
 * numbers when both sides are), anything else matches values containing the text (case
 * ignored). Empty text matches everything. */
export function parseFilter(text: string): Filter {
  const t = text.trim();
  if (!t) {
    return () => true;
  }
  const m = OPERATOR.exec(t);
  if (!m) {
    const needle = t.toLowerCase();
    return v => valueText(v).toLowerCase().includes(needle);
  }
  const [, op, rhs] = m;
  const n = rhs !== '' && isFinite(Number(rhs)) ? Number(rhs) : null;
  return v => {
    if (v === undefined || v === null) {
      return op === '!=';
    }
    let c: number;
    if (n !== null && typeof v === 'number') {
      c = v - n;
    } else if (op === '=' || op === '!=') {
      c = valueText(v).toLowerCase() === rhs.toLowerCase() ? 0 : 1;
    } else {
      c = valueText(v).localeCompare(rhs, undefined, { numeric: true });
    }
    switch (op) {
      case '>': return c > 0;
      case '<': return c < 0;
      case '>=': return c >= 0;
      case '<=': return c <= 0;
      case '=': return c === 0;
      default: return c !== 0;
    }
  };
}

/** The rows every column's filter keeps (``filters``: column → filter text). */
export function filterRows(rows: IRow[], filters: Record<string, string>): IRow[] {
  const active = Object.entries(filters).filter(([, t]) => t.trim())
    .map(([col, t]) => [col, parseFilter(t)] as [string, Filter]);
  return rows.filter(r => active.every(([col, f]) => f(r.cells[col])));
}

/** "name · 9bd3": a run's name and the first 4 hex digits of its id's random part. */
export function runLabel(run: { id: string; name?: string | null }): string {
  const suffix = run.id.split('-')[2] || run.id;
  return `${run.name || 'unnamed'} · ${suffix.slice(0, 4)}`;
}

/** Labels that tell runs apart: the short id grows until no two labels are equal. */
export function runLabels(runs: { id: string; name?: string | null }[]): string[] {
  for (let n = 4; n <= 16; n += 2) {
    const labels = runs.map(r => {
      const suffix = r.id.split('-')[2] || r.id;
      return `${r.name || 'unnamed'} · ${suffix.slice(0, n)}`;
    });
    if (new Set(labels).size === labels.length) {
      return labels;
    }
  }
  return runs.map(r => `${r.name || 'unnamed'} · ${r.id}`);
}
