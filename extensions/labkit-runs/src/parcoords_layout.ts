/**
 * The maths of a parallel-coordinates view, with no import at all (unit-tested in Node): an
 * axis per column (numeric, on a linear or a log scale, or categorical), each value's place on
 * its axis (0 at the bottom, 1 at the top), the polylines, and the line nearest the mouse.
 */

export type Axis =
  | { kind: 'linear' | 'log'; key: string; lo: number; hi: number }
  | { kind: 'category'; key: string; categories: string[] };

function text(v: unknown): string {
  if (typeof v === 'string') {
    return v;
  }
  try {
    const s = JSON.stringify(v);
    return s === undefined ? String(v) : s;
  } catch {
    return String(v);
  }
}

const finite = (v: unknown): v is number => typeof v === 'number' && isFinite(v);

/** The axis for a column's ``values``: numeric when every present value is a finite number
 * (log when all are positive and span more than two decades, like learning rates), otherwise
 * categorical with the values' texts in natural order. Absent values (undefined, null) are
 * left off the axis. */
export function axisFor(key: string, values: unknown[]): Axis {
  const present = values.filter(v => v !== undefined && v !== null);
  if (present.length && present.every(finite)) {
    const nums = present as number[];
    const lo = Math.min(...nums);
    const hi = Math.max(...nums);
    if (lo > 0 && hi / lo > 100) {
      return { kind: 'log', key, lo, hi };
    }
    return { kind: 'linear', key, lo, hi };
  }
  const categories = [...new Set(present.map(text))].sort(
    (a, b) => a.localeCompare(b, undefined, { numeric: true }));
  return { kind: 'category', key, categories };
}

/** Where ``v`` sits on ``axis``, from 0 (bottom) to 1 (top); a lone value sits in the middle;
 * null when it is not on the axis. */
export function position(axis: Axis, v: unknown): number | null {
  if (axis.kind === 'category') {
    if (v === undefined || v === null) {
      return null;
    }
    const i = axis.categories.indexOf(text(v));
    if (i < 0) {
      return null;
    }
    return axis.categories.length === 1 ? 0.5 : i / (axis.categories.length - 1);
  }
  if (!finite(v)) {
    return null;
  }
  if (axis.kind === 'log') {
    if (v <= 0) {
      return null;
    }
    const span = Math.log10(axis.hi) - Math.log10(axis.lo);
    return span > 0 ? (Math.log10(v) - Math.log10(axis.lo)) / span : 0.5;
  }
  return axis.hi > axis.lo ? (v - axis.lo) / (axis.hi - axis.lo) : 0.5;
}

/** The labelled ticks of an axis: (value text, position). Numeric axes show their ends and
 * up to three values between; a categorical one every category. */
export function axisTicks(axis: Axis, format: (v: number) => string = String):
[string, number][] {
  if (axis.kind === 'category') {
    return axis.categories.map(c => [c, position(axis, c) as number]);
  }
  if (axis.hi === axis.lo) {
    return [[format(axis.lo), 0.5]];
  }
  const out: [string, number][] = [];
  for (let i = 0; i <= 4; i++) {
    const f = i / 4;
    const v = axis.kind === 'log'
      ? Math.pow(10, Math.log10(axis.lo) + f * (Math.log10(axis.hi) - Math.log10(axis.lo)))
      : axis.lo + f * (axis.hi - axis.lo);
    out.push([format(v), f]);
  }
  return out;
}

export interface IFrame {
  width: number;
  height: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
}

/** The x of each of ``n`` axes, spread evenly across the frame. */
export function axisX(n: number, f: IFrame): number[] {
  const w = f.width - f.left - f.right;
  return Array.from({ length: n }, (_, i) => (n === 1 ? f.left + w / 2 : f.left + (i * w) / (n - 1)));
}

/** A run's polyline: one point per axis its value is on ([x, y] in pixels; y grows down). */
export function polyline(axes: Axis[], values: unknown[], f: IFrame): [number, number][] {
  const xs = axisX(axes.length, f);
  const h = f.height - f.top - f.bottom;
  const out: [number, number][] = [];
  axes.forEach((a, i) => {
    const p = position(a, values[i]);
    if (p !== null) {
      out.push([xs[i], f.top + (1 - p) * h]);
    }
  });
  return out;
}

/** The distance from (x, y) to the segment a–b. */
export function segmentDistance(x: number, y: number, a: [number, number],
                                b: [number, number]): number {
  const dx = b[0] - a[0];
  const dy = b[1] - a[1];
  const len2 = dx * dx + dy * dy;
  const t = len2 ? Math.max(0, Math.min(1, ((x - a[0]) * dx + (y - a[1]) * dy) / len2)) : 0;
  return Math.hypot(x - (a[0] + t * dx), y - (a[1] + t * dy));
}

/** The index of the polyline nearest (x, y) within ``reach`` pixels, or -1. */
export function nearest(lines: [number, number][][], x: number, y: number, reach = 8): number {
  let best = -1;
  let bestD = reach;
  lines.forEach((pts, i) => {
    const segs = pts.length === 1 ? [[pts[0], pts[0]]] : pts.slice(1).map((p, j) => [pts[j], p]);
    for (const [a, b] of segs) {
      const d = segmentDistance(x, y, a, b);
      if (d <= bestD) {
        best = i;
        bestD = d;
      }
    }
  });
  return best;
}
