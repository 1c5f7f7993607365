/**
 * The cockpit's data rules, with no dependency (so they are unit-tested in Node): which figure
 * a metric goes on and in what order, points appended exactly once and in order, min/max
 * thinning, a run's progress with every field checked, durations as clocks.
 */

/** One metric's points, as the REST API and the kernel's snapshot give them. */
export interface ISeriesData {
  iteration: number[];
  epoch?: (number | null)[];
  time?: (number | null)[];
  value: (number | null)[];
}

/** The figure a metric goes on: ``train_loss``, ``valid_loss`` and ``loss`` share one. */
export function groupOf(key: string): string {
  for (const p of ['train_', 'valid_', 'test_']) {
    if (key.startsWith(p)) {
      return key.slice(p.length);
    }
  }
  return key;
}

export function plottable(key: string): boolean {
  return !['iteration', 'epoch'].includes(key) && !key.startsWith('time') &&
    !key.startsWith('best_');
}

/** Figures in a stable order: loss first, then by name; in a figure, the per-batch curve,
 * then train_, valid_, test_. */
export function orderGroups(keys: string[]): [string, string[]][] {
  const groups = new Map<string, string[]>();
  for (const k of keys) {
    const g = groupOf(k);
    groups.set(g, [...(groups.get(g) || []), k]);
  }
  const rank = (k: string) => ['', 'train_', 'valid_', 'test_'].findIndex(
    p => (p ? k.startsWith(p) : groupOf(k) === k));
  return [...groups.entries()]
    .sort(([a], [b]) => (a === 'loss' ? -1 : b === 'loss' ? 1 : a < b ? -1 : a > b ? 1 : 0))
    .map(([g, ks]) => [g, ks.sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : 1))]);
}

/** Min/max thinning of points held in the browser (the same rule as the server's). */
export function thin(s: ISeriesData, maxPoints: number): ISeriesData {
  const n = s.iteration.length;
  if (n <= maxPoints) {
    return s;
  }
  const buckets = Math.floor((maxPoints - 2) / 2);
  const keep = new Set<number>([0, n - 1]);
  for (let b = 0; b < buckets; b++) {
    const lo = 1 + Math.floor((b * (n - 2)) / buckets);
    const hi = 1 + Math.floor(((b + 1) * (n - 2)) / buckets);
    let a = -1, z = -1;
    for (let i = lo; i < hi; i++) {
      const v = s.value[i];
      if (v === null || !isFinite(v)) {
        continue;
      }
      if (a < 0 || v < (s.value[a] as number)) { a = i; }
      if (z < 0 || v > (s.value[z] as number)) { z = i; }
    }
    if (a >= 0) { keep.add(a); keep.add(z); }
  }
  const idx = [...keep].sort((p, q) => p - q);
  const pick = <T>(xs: T[] | undefined) => (xs ? idx.map(i => xs[i]) : undefined);
  return { iteration: pick(s.iteration)!, epoch: pick(s.epoch), time: pick(s.time),
           value: pick(s.value)! };
}

/** Appends the points of ``more`` after the last one ``s`` holds (never one twice, never one
 * out of order: a resumed run may send an iteration again). */
export function append(s: ISeriesData | undefined, more: ISeriesData): ISeriesData {
  const out: ISeriesData = s ? { iteration: [...s.iteration], epoch: [...(s.epoch || [])],
                                 time: [...(s.time || [])], value: [...s.value] }
    : { iteration: [], epoch: [], time: [], value: [] };
  let last = out.iteration.length ? out.iteration[out.iteration.length - 1] : -Infinity;
  more.iteration.forEach((it, i) => {
    if (typeof it === 'number' && it > last) {
      out.iteration.push(it);
      out.epoch!.push(more.epoch ? more.epoch[i] ?? null : null);
      out.time!.push(more.time ? more.time[i] ?? null : null);
      const v = more.value[i];
      out.value.push(typeof v === 'number' ? v : null);
      last = it;
    }
  });
  return out;
}

/** A run's progress with every field checked: numbers that are finite, a boolean, metric
 * values that are numbers (whatever the store or an output holds, nothing else is shown). */
export interface IProgress {
  iteration: number;
  epoch: number;
  epoch_iteration: number;
  epoch_length: number | null;
  elapsed: number | null;
  training: boolean;
  last: Record<string, number>;
  planned: { epochs: number | null; iterations: number | null; seconds: number | null };
}

function num(v: unknown): number | null {
  return typeof v === 'number' && isFinite(v) ? v : null;
}

export function progressOf(run: unknown): IProgress {
  const raw = (run && typeof run === 'object' && (run as { progress?: unknown }).progress) || {};
  const pr = (typeof raw === 'object' ? raw : {}) as Record<string, unknown>;
  const plan = (pr.planned && typeof pr.planned === 'object' ? pr.planned : {}) as
    Record<string, unknown>;
  const last: Record<string, number> = {};
  if (pr.last && typeof pr.last === 'object') {
    for (const [k, v] of Object.entries(pr.last as Record<string, unknown>)) {
      if (num(v) !== null) {
        last[k] = v as number;
      }
    }
  }
  return { iteration: num(pr.iteration) ?? 0, epoch: num(pr.epoch) ?? 0,
           epoch_iteration: num(pr.epoch_iteration) ?? 0, epoch_length: num(pr.epoch_length),
           elapsed: num(pr.elapsed), training: pr.training === true, last,
           planned: { epochs: num(plan.epochs), iterations: num(plan.iterations),
                      seconds: num(plan.seconds) } };
}

export function clock(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const pad = (n: number) => String(n).padStart(2, '0');
  return h ? `${h}:${pad(m)}:${pad(s % 60)}` : `${m}:${pad(s % 60)}`;
}

/** What a chart's x axis can be. */
export type XAxis = 'iteration' | 'epoch' | 'time';

/** The earliest time any of ``series`` recorded (Infinity when none has one). */
export function firstTime(series: ISeriesData[]): number {
  let t0 = Infinity;
  for (const s of series) {
    const t = s.time?.find(v => typeof v === 'number');
    if (typeof t === 'number' && t < t0) {
      t0 = t;
    }
  }
  return t0;
}

/** The x of each point of ``s`` on ``axis``: its iteration; its epoch (fractional when the
 * epoch's length is known); or the seconds since ``t0``, never going back along the curve (a
 * missing time keeps the previous one). Without any time recorded, by iteration. */
export function xValues(s: ISeriesData, axis: XAxis, t0: number,
                        epochLength?: number | null): number[] {
  if (axis === 'iteration') {
    return s.iteration;
  }
  if (axis === 'epoch') {
    const n = epochLength;
    return s.iteration.map((it, i) => (n ? it / n : (s.epoch?.[i] ?? 0)));
  }
  if (!isFinite(t0)) {
    return s.iteration;
  }
  let prev = -Infinity;
  return s.iteration.map((_, i) => {
    const t = s.time?.[i];
    prev = typeof t === 'number' ? Math.max(prev, t - t0) : prev;
    return prev;
  });
}

/** How an x value on ``axis`` is written: a clock for wall time. */
export function xFormat(axis: XAxis): (x: number) => string {
  if (axis === 'time') {
    return x => clock(x);
  }
  if (axis === 'epoch') {
    return x => String(Number(x.toFixed(2)));
  }
  return x => String(Math.round(x));
}
