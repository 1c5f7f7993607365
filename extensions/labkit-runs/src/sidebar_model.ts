/**
 * The Runs sidebar's pure rules: which rows a scroll position shows, which window of runs to
 * ask the server for, relative times, short ids, values, a sparkline on a scale shared by the
 * rows shown, and range selection. No imports: tested under Node (test/sidebar.test.mjs).
 */

/** A row's height in pixels (two lines); the virtual list places rows by it. */
export const ROW_HEIGHT = 42;

/** Rows [first, end) to put in the DOM for a scroll position, with ``overscan`` rows either
 * side so that a fast scroll does not show blanks. */
export function visibleRange(
  scrollTop: number,
  viewport: number,
  total: number,
  rowHeight = ROW_HEIGHT,
  overscan = 6
): { first: number; end: number } {
  if (!(total > 0) || !(rowHeight > 0)) {
    return { first: 0, end: 0 };
  }
  const top = Math.max(0, Math.floor((Number.isFinite(scrollTop) ? scrollTop : 0) / rowHeight));
  const shown = Math.ceil(Math.max(0, Number.isFinite(viewport) ? viewport : 0) / rowHeight) + 1;
  const first = Math.max(0, Math.min(top, total - 1) - overscan);
  const end = Math.min(total, top + shown + overscan);
  return { first, end: Math.max(first, end) };
}

/** The window of runs (``offset``, ``limit``) to fetch so that rows [first, end) are covered:
 * aligned to ``page`` rows, with a page of margin around them, so that scrolling a little
 * needs no new request. */
export function windowFor(
  range: { first: number; end: number },
  page = 50
): { offset: number; limit: number } {
  const offset = Math.max(0, Math.floor(range.first / page) * page - page);
  const end = Math.ceil(Math.max(range.end, range.first + 1) / page) * page + page;
  return { offset, limit: Math.min(1000, end - offset) };
}

/** Whether a loaded window holds every row of [first, end) that exists (``total`` of them). */
export function covers(
  loaded: { offset: number; count: number; total: number } | null,
  range: { first: number; end: number }
): boolean {
  if (!loaded) {
    return false;
  }
  const end = Math.min(range.end, loaded.total);
  return range.first >= loaded.offset && end <= loaded.offset + loaded.count;
}

/** "just now", "5 min ago", "3 h ago", "4 d ago", or the date for anything older than two
 * weeks (times in seconds since the epoch). */
export function relativeTime(t: unknown, now: number): string {
  if (typeof t !== 'number' || !Number.isFinite(t) || t <= 0) {
    return '–';
  }
  const s = now - t;
  if (s < 45) {
    return 'just now';
  }
  if (s < 45 * 60) {
    return `${Math.max(1, Math.round(s / 60))} min ago`;
  }
  if (s < 36 * 3600) {
    return `${Math.round(s / 3600)} h ago`;
  }
  if (s < 14 * 86400) {
    return `${Math.round(s / 86400)} d ago`;
  }
  return new Date(t * 1000).toISOString().slice(0, 10);
}

/** A run id's short form: four digits of its random part (as the run page's tab says). */
export function shortId(id: unknown): string {
  const s = String(id);
  return (s.split('-')[2] || s).slice(0, 4);
}

/** A metric value in at most ~7 characters: "0.1235", "1.235e-5", "12350", "–" for none. */
export function formatValue(v: unknown): string {
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    return v === null || v === undefined ? '–' : String(v).slice(0, 12);
  }
  if (Number.isInteger(v) && Math.abs(v) < 1e6) {
    return String(v);
  }
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) {
    return v.toExponential(2);
  }
  return String(Number(v.toPrecision(4)));
}

/** The lowest and highest finite value over every series (the rows shown share one scale),
 * or null when there is none. */
export function sharedScale(series: unknown[][]): { lo: number; hi: number } | null {
  let lo = Infinity;
  let hi = -Infinity;
  for (const s of series) {
    for (const v of s || []) {
      if (typeof v === 'number' && Number.isFinite(v)) {
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
    }
  }
  return lo <= hi ? { lo, hi } : null;
}

/** Polyline segments (``"x,y x,y"`` each) of ``values`` on the scale [lo, hi] in a box of
 * width x height; a gap (not a finite number) breaks the line. A single point is a segment of
 * one point (drawn as a dot). */
export function sparkSegments(
  values: unknown[],
  scale: { lo: number; hi: number },
  width: number,
  height: number
): string[] {
  const n = values.length;
  const out: string[] = [];
  let cur: string[] = [];
  const span = scale.hi - scale.lo;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      if (cur.length) {
        out.push(cur.join(' '));
      }
      cur = [];
      continue;
    }
    const x = n === 1 ? width / 2 : 1 + (i / (n - 1)) * (width - 2);
    const y = span > 0 ? height - 1 - ((v - scale.lo) / span) * (height - 2) : height / 2;
    cur.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  }
  if (cur.length) {
    out.push(cur.join(' '));
  }
  return out;
}

/** The ids between the anchor and the clicked one, both included, in list order (a
 * shift-click); ids not loaded (undefined) are skipped. */
export function rangeIds(ids: (string | undefined)[], anchor: number, index: number): string[] {
  const a = Math.max(0, Math.min(anchor, index));
  const b = Math.min(ids.length - 1, Math.max(anchor, index));
  const out: string[] = [];
  for (let i = a; i <= b; i++) {
    const id = ids[i];
    if (typeof id === 'string') {
      out.push(id);
    }
  }
  return out;
}

/** The query string of the list request (values encoded). */
export function listQuery(q: {
  status: string;
  name: string;
  sort: string;
  offset: number;
  limit: number;
  metric: string;
  points?: number;
  ids?: boolean;
}): string {
  const parts: [string, string][] = [
    ['offset', String(q.offset)],
    ['limit', String(q.limit)],
    ['sort', q.sort]
  ];
  if (q.status && q.status !== 'all') {
    parts.push(['status', q.status]);
  }
  if (q.name) {
    parts.push(['q', q.name]); // part of the name or of the id
  }
  if (q.metric) {
    parts.push(['metric', q.metric], ['points', String(q.points ?? 40)]);
  }
  if (q.ids) {
    parts.push(['ids', '1']);
  }
  return parts.map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('&');
}
