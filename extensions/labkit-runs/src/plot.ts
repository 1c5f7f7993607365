/**
 * A small line plot on a canvas, for live training curves: every series drawn downsampled to
 * the pixel columns (the lowest and highest point of each column, so a spike of one batch
 * shows at any length), axes with labels, log-y, TensorBoard's debiased smoothing with the raw
 * curve faint behind, a hover that lists every series at the step under the mouse, zoom (drag
 * across the plot to show that x-range, y fitted to what it holds; double-click to show all
 * again), and colours from JupyterLab's theme (read at each draw, so a theme switch shows at
 * once). No imports: Node's test runner loads its helpers as compiled.
 */

/** One curve: its x (strictly increasing) and y values. */
export interface ILine {
  key: string;
  color: string;
  /** a per-batch curve: thin, no dots; an epoch-level one: thicker, with dots */
  dense: boolean;
  x: number[];
  y: (number | null)[];
  hidden?: boolean;
}

export interface IPlotOptions {
  logY: boolean;
  /** 0 (none) to 0.99: the weight of the moving average */
  smoothing: number;
  xLabel: string;
  /** how an x value is written on the axis and in the hover */
  formatX: (x: number) => string;
  /** x takes whole values only (iterations): no ticks between them */
  integerX?: boolean;
}

export const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b',
                        '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

/** TensorBoard's smoothing: an exponential moving average, debiased at the start (so the
 * first points are not pulled towards 0). Gaps (null) stay gaps. */
export function smooth(y: (number | null)[], weight: number): (number | null)[] {
  if (weight <= 0) {
    return y;
  }
  let last = 0;
  let n = 0;
  return y.map(v => {
    if (v === null || !isFinite(v)) {
      return null;
    }
    last = last * weight + (1 - weight) * v;
    n += 1;
    return last / (1 - Math.pow(weight, n));
  });
}

/** Round, readable ticks covering [lo, hi]. */
export function ticks(lo: number, hi: number, count = 5): number[] {
  if (!(hi > lo)) {
    return [lo];
  }
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(s => s >= raw) || raw;
  const out: number[] = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    out.push(Math.abs(t) < step * 1e-9 ? 0 : t);
  }
  return out;
}

export function formatNumber(v: number): string {
  if (v === 0) {
    return '0';
  }
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-3) {
    return v.toExponential(2).replace('e+', 'e');
  }
  return String(Number(v.toPrecision(4)));
}

function cssVar(node: HTMLElement, name: string, fallback: string): string {
  const v = getComputedStyle(node).getPropertyValue(name).trim();
  return v || fallback;
}

/** The index of the last x at or before ``at`` (binary search), or -1. */
export function lastAtOrBefore(x: number[], at: number): number {
  let lo = 0;
  let hi = x.length - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (x[mid] <= at) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

/** The x-range between two pixel columns of a plot whose frame starts at ``left``, is
 * ``width`` wide and shows ``lo``..``hi``: ordered, clamped to the frame; null for a drag
 * narrower than ``minPx`` (a click, not a zoom). */
export function zoomRange(px0: number, px1: number, left: number, width: number, lo: number,
                          hi: number, minPx = 4): [number, number] | null {
  if (!(width > 0) || !(hi > lo) || Math.abs(px1 - px0) < minPx) {
    return null;
  }
  const at = (p: number) => lo + ((Math.min(left + width, Math.max(left, p)) - left) / width) *
    (hi - lo);
  const a = at(Math.min(px0, px1));
  const b = at(Math.max(px0, px1));
  return b > a ? [a, b] : null;
}

/** The lowest and highest finite ``f(y)`` of the points whose x lies in [lo, hi] (x sorted),
 * or null when there are none. */
export function yExtent(x: number[], y: (number | null)[], lo: number, hi: number,
                        f: (v: number) => number = v => v): [number, number] | null {
  let min = Infinity;
  let max = -Infinity;
  for (let i = Math.max(0, lastAtOrBefore(x, lo)); i < x.length && x[i] <= hi; i++) {
    const v = y[i];
    if (x[i] >= lo && v !== null && isFinite(v)) {
      min = Math.min(min, f(v));
      max = Math.max(max, f(v));
    }
  }
  return min <= max ? [min, max] : null;
}

/** The x of the point nearest ``at`` among ``x`` that lies in [lo, hi], or NaN. */
export function nearestIn(x: number[], at: number, lo: number, hi: number): number {
  const i = lastAtOrBefore(x, at);
  let best = NaN;
  for (const j of [i, i + 1]) {
    if (j >= 0 && j < x.length && x[j] >= lo && x[j] <= hi &&
        (isNaN(best) || Math.abs(x[j] - at) < Math.abs(best - at))) {
      best = x[j];
    }
  }
  return best;
}

const PAD = { left: 58, right: 12, top: 8, bottom: 34 };

export class LinePlot {
  readonly node: HTMLDivElement;
  private canvas: HTMLCanvasElement;
  private tip: HTMLDivElement;
  private lines: ILine[] = [];
  private options: IPlotOptions;
  private frame = { x0: 0, x1: 1, y0: 0, y1: 1 };
  private mouseX: number | null = null;
  /** the x-range shown (null: all of it), and where a drag began */
  private zoom: [number, number] | null = null;
  private dragFrom: number | null = null;

  constructor(readonly title: string, options: IPlotOptions, height = 200) {
    this.options = options;
    this.node = document.createElement('div');
    this.node.className = 'labkit-plot';
    this.canvas = document.createElement('canvas');
    this.canvas.style.height = `${height}px`;
    this.canvas.style.width = '100%';
    this.canvas.setAttribute('role', 'img');
    this.canvas.setAttribute('aria-label', `plot of ${title}`);
    this.tip = document.createElement('div');
    this.tip.className = 'labkit-plot-tip';
    this.tip.hidden = true;
    this.node.append(this.canvas, this.tip);
    this.canvas.addEventListener('mousemove', e => {
      this.mouseX = e.offsetX;
      this.draw();
    });
    this.canvas.addEventListener('mouseleave', () => {
      this.mouseX = null;
      this.tip.hidden = true;
      this.draw();
    });
    this.canvas.addEventListener('mousedown', e => {
      if (e.button === 0) {
        e.preventDefault();
        this.dragFrom = e.offsetX;
      }
    });
    // NOTE: on the window, so a drag that ends outside the canvas still ends
    const up = (e: MouseEvent) => {
      if (this.dragFrom === null) {
        return;
      }
      const from = this.dragFrom;
      this.dragFrom = null;
      const to = e.clientX - this.canvas.getBoundingClientRect().left;
      const w = this.canvas.clientWidth - PAD.left - PAD.right;
      const r = zoomRange(from, to, PAD.left, w, this.frame.x0, this.frame.x1);
      if (r) {
        this.setZoom(r);
      } else {
        this.draw();
      }
    };
    window.addEventListener('mouseup', up);
    this.unlisten = () => window.removeEventListener('mouseup', up);
    this.canvas.addEventListener('dblclick', () => this.setZoom(null));
  }

  /** Stop listening to the window (when the plot is thrown away). */
  readonly unlisten: () => void;

  /** Show only ``range`` of x (null: everything), as a drag and a double-click do. */
  setZoom(range: [number, number] | null): void {
    this.zoom = range;
    if (range) {
      this.node.dataset.zoom = `${range[0]},${range[1]}`;
    } else {
      delete this.node.dataset.zoom;
    }
    this.canvas.title = range ? 'double-click to show all' : 'drag across to zoom';
    this.draw();
  }

  setOptions(options: IPlotOptions): void {
    if (this.zoom && options.xLabel !== this.options.xLabel) {
      this.setZoom(null);  // another x axis: the range shown meant other values
    }
    this.options = options;
  }

  setLines(lines: ILine[]): void {
    this.lines = lines;
  }

  /** The y values to draw for ``line``: smoothed when asked, positive only on a log axis. */
  private values(line: ILine, raw: boolean): (number | null)[] {
    const y = raw ? line.y : smooth(line.y, this.options.smoothing);
    return this.options.logY ? y.map(v => (v !== null && v > 0 ? v : null)) : y;
  }

  draw(): void {
    const canvas = this.canvas;
    const w = canvas.clientWidth;
    const h = canvas.clientHeight;
    if (!w || !h) {
      return;
    }
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext('2d');
    if (!ctx) {
      return;
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const fg = cssVar(this.node, '--jp-ui-font-color1', '#222');
    const fg2 = cssVar(this.node, '--jp-ui-font-color2', '#666');
    const grid = cssVar(this.node, '--jp-border-color2', '#ddd');
    const font = cssVar(this.node, '--jp-ui-font-family', 'sans-serif');
    ctx.font = `11px ${font}`;
    const shown = this.lines.filter(l => !l.hidden && l.x.length);
    const { logY } = this.options;
    const f = (v: number) => (logY ? Math.log10(v) : v);
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const l of shown) {
      x0 = Math.min(x0, l.x[0]);
      x1 = Math.max(x1, l.x[l.x.length - 1]);
    }
    if (this.zoom) {
      [x0, x1] = this.zoom;
    }
    for (const l of shown) {
      // y fits what the x-range shows
      const e = yExtent(l.x, this.values(l, true), x0, x1, f);
      if (e) {
        y0 = Math.min(y0, e[0]);
        y1 = Math.max(y1, e[1]);
      }
    }
    const pw = w - PAD.left - PAD.right;
    const ph = h - PAD.top - PAD.bottom;
    if (!isFinite(x0) || !isFinite(y0) || !(x1 >= x0)) {
      ctx.fillStyle = fg2;
      ctx.textAlign = 'center';
      ctx.fillText(shown.length || !this.lines.length ? 'waiting for the first values…'
                   : 'no positive values for a log axis', w / 2, h / 2);
      return;
    }
    if (x1 === x0) {
      x1 = x0 + 1;
    }
    if (y1 === y0) {
      y0 -= 0.5;
      y1 += 0.5;
    }
    const margin = (y1 - y0) * 0.05;
    y0 -= margin;
    y1 += margin;
    this.frame = { x0, x1, y0, y1 };
    const sx = (x: number) => PAD.left + ((x - x0) / (x1 - x0)) * pw;
    const sy = (y: number) => PAD.top + (1 - (f(y) - y0) / (y1 - y0)) * ph;
    // grid, ticks and labels
    ctx.strokeStyle = grid;
    ctx.fillStyle = fg2;
    ctx.lineWidth = 1;
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (const t of ticks(y0, y1, 4)) {
      const py = PAD.top + (1 - (t - y0) / (y1 - y0)) * ph;
      ctx.beginPath();
      ctx.moveTo(PAD.left, py);
      ctx.lineTo(PAD.left + pw, py);
      ctx.stroke();
      ctx.fillText(formatNumber(logY ? Math.pow(10, t) : t), PAD.left - 4, py);
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    let xt = ticks(x0, x1, Math.max(2, Math.floor(pw / 90)));
    if (this.options.integerX) {
      xt = xt.filter(t => Number.isInteger(t));
    }
    for (const t of xt) {
      ctx.fillText(this.options.formatX(t), sx(t), PAD.top + ph + 4);
    }
    ctx.fillStyle = fg;
    ctx.fillText(this.options.xLabel, PAD.left + pw / 2, h - 13);
    ctx.save();
    ctx.translate(11, PAD.top + ph / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = 'middle';
    ctx.fillText(this.title + (logY ? ' (log)' : ''), 0, 0);
    ctx.restore();
    ctx.strokeStyle = fg2;
    ctx.strokeRect(PAD.left, PAD.top, pw, ph);
    // curves: clipped to the frame, one min/max pair per pixel column
    ctx.save();
    ctx.beginPath();
    ctx.rect(PAD.left, PAD.top, pw, ph);
    ctx.clip();
    const smoothing = this.options.smoothing > 0;
    for (const l of shown) {
      if (smoothing) {
        this.curve(ctx, l, this.values(l, true), sx, sy, 0.25, 1);
      }
      this.curve(ctx, l, this.values(l, false), sx, sy, l.dense && !smoothing ? 0.8 : 1,
                 l.dense ? 1.2 : 2);
      if (!l.dense && l.x.length <= 200) {
        const ys = this.values(l, false);
        ctx.fillStyle = l.color;
        l.x.forEach((x, i) => {
          const v = ys[i];
          if (v !== null && isFinite(v)) {
            ctx.beginPath();
            ctx.arc(sx(x), sy(v), 2.5, 0, 2 * Math.PI);
            ctx.fill();
          }
        });
      }
    }
    ctx.restore();
    if (this.dragFrom !== null && this.mouseX !== null) {
      // the range a drag would zoom to
      const a = Math.max(PAD.left, Math.min(this.dragFrom, this.mouseX));
      const b = Math.min(PAD.left + pw, Math.max(this.dragFrom, this.mouseX));
      ctx.fillStyle = fg2;
      ctx.globalAlpha = 0.15;
      ctx.fillRect(a, PAD.top, Math.max(0, b - a), ph);
      ctx.globalAlpha = 1;
    }
    if (this.zoom) {
      ctx.fillStyle = fg2;
      ctx.textAlign = 'right';
      ctx.textBaseline = 'top';
      ctx.fillText('zoomed · double-click to show all', PAD.left + pw - 4, PAD.top + 3);
    }
    this.hover(ctx, shown, sx, sy, pw, ph, fg2);
  }

  private curve(ctx: CanvasRenderingContext2D, l: ILine, ys: (number | null)[],
                sx: (x: number) => number, sy: (y: number) => number, alpha: number,
                width: number): void {
    ctx.strokeStyle = l.color;
    ctx.globalAlpha = alpha;
    ctx.lineWidth = width;
    ctx.beginPath();
    let pen = false;
    let col = NaN, lo = 0, hi = 0, lastY = 0;
    const flush = () => {
      if (!isNaN(col)) {
        ctx.lineTo(col, lo);
        if (hi !== lo) {
          ctx.lineTo(col, hi);
          ctx.lineTo(col, lastY);
        }
      }
    };
    for (let i = 0; i < l.x.length; i++) {
      const v = ys[i];
      if (v === null || !isFinite(v)) {
        flush();
        col = NaN;
        pen = false;
        continue;
      }
      const px = Math.round(sx(l.x[i]));
      const py = sy(v);
      if (!pen) {
        ctx.moveTo(px, py);
        pen = true;
        col = px;
        lo = hi = lastY = py;
      } else if (px === col) {
        lo = Math.min(lo, py);
        hi = Math.max(hi, py);
        lastY = py;
      } else {
        flush();
        col = px;
        lo = hi = lastY = py;
      }
    }
    flush();
    ctx.stroke();
    ctx.globalAlpha = 1;
  }

  private hover(ctx: CanvasRenderingContext2D, shown: ILine[], sx: (x: number) => number,
                sy: (y: number) => number, pw: number, ph: number, color: string): void {
    const mx = this.mouseX;
    if (mx === null || mx < PAD.left || mx > PAD.left + pw || !shown.length) {
      this.tip.hidden = true;
      return;
    }
    const { x0, x1 } = this.frame;
    const at = x0 + ((mx - PAD.left) / pw) * (x1 - x0);
    // the step under the mouse: the nearest x of any curve, inside the range shown
    let best = NaN;
    for (const l of shown) {
      const b = nearestIn(l.x, at, x0, x1);
      if (!isNaN(b) && (isNaN(best) || Math.abs(b - at) < Math.abs(best - at))) {
        best = b;
      }
    }
    if (isNaN(best)) {
      this.tip.hidden = true;
      return;
    }
    ctx.strokeStyle = color;
    ctx.setLineDash([3, 3]);
    ctx.beginPath();
    ctx.moveTo(sx(best), PAD.top);
    ctx.lineTo(sx(best), PAD.top + ph);
    ctx.stroke();
    ctx.setLineDash([]);
    const rows: HTMLElement[] = [];
    const div = (...parts: (string | Node)[]) => {
      const d = document.createElement('div');
      d.append(...parts);
      return d;
    };
    for (const l of shown) {
      const ys = this.values(l, false);
      const i = lastAtOrBefore(l.x, best);
      if (i < 0 || ys[i] === null) {
        continue;
      }
      const v = ys[i] as number;
      if (l.x[i] >= x0) {  // a value from before a zoomed range is listed, not drawn
        ctx.fillStyle = l.color;
        ctx.beginPath();
        ctx.arc(sx(l.x[i]), sy(v), 3.5, 0, 2 * Math.PI);
        ctx.fill();
      }
      const when = l.x[i] === best ? '' : ` (at ${this.options.formatX(l.x[i])})`;
      const swatch = document.createElement('span');
      swatch.style.color = l.color;
      swatch.textContent = '■';
      const value = document.createElement('b');
      value.textContent = formatNumber(v);
      rows.push(div(swatch, ` ${l.key} `, value, when));
    }
    // every value as text (a metric's key is whatever the training code logged)
    this.tip.replaceChildren(div(`${this.options.xLabel} ${this.options.formatX(best)}`),
                             ...rows);
    this.node.dataset.hoverX = String(best);
    this.tip.hidden = false;
    const left = sx(best) + 12;
    this.tip.style.left = `${left > PAD.left + pw * 0.6 ? sx(best) - 12 - this.tip.offsetWidth
                            : left}px`;
    this.tip.style.top = `${PAD.top + 4}px`;
  }
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, c => `&#${c.charCodeAt(0)};`);
}
