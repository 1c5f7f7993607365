/**
 * A parallel-coordinates view in SVG: one vertical axis per column (numeric, linear or log, or
 * categorical), one polyline per item in its colour, the line nearest the mouse highlighted
 * with its values in a tip. Reusable (the compare page; sweeps): give it column keys and lines
 * of values; the maths is in ``parcoords_layout.ts``. Every label is set as text, never HTML.
 */
import { Axis, axisFor, axisTicks, axisX, IFrame, nearest, polyline } from './parcoords_layout';

export interface IParLine {
  id: string;
  label: string;
  /** any CSS colour (a ``var(...)`` follows the theme) */
  color: string;
  /** one value per column, in the columns' order (absent: undefined) */
  values: unknown[];
}

const SVG = 'http://www.w3.org/2000/svg';

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>,
                                                     text?: string): SVGElementTagNameMap[K] {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    e.setAttribute(k, String(v));
  }
  if (text !== undefined) {
    e.textContent = text;
  }
  return e;
}

/** A label no longer than ``n`` characters (the full one goes in a tooltip). */
function clip(s: string, n: number): string {
  return s.length <= n ? s : `${s.slice(0, n - 1)}…`;
}

export class ParCoords {
  readonly node: HTMLDivElement;
  /** called with the id of the line under the mouse, or null when it leaves them */
  onHover: (id: string | null) => void = () => undefined;
  private root: SVGSVGElement;
  private tip: HTMLDivElement;
  private keys: string[] = [];
  private axes: Axis[] = [];
  private lines: IParLine[] = [];
  private points: [number, number][][] = [];
  private active: string | null = null;

  constructor(private height = 280, private format: (v: number) => string = String) {
    this.node = document.createElement('div');
    this.node.className = 'labkit-parcoords';
    this.root = svg('svg', { height, role: 'img' });
    this.root.style.width = '100%';
    this.tip = document.createElement('div');
    this.tip.className = 'labkit-plot-tip labkit-parcoords-tip';
    this.tip.hidden = true;
    this.node.append(this.root, this.tip);
    this.root.addEventListener('mousemove', e => {
      const box = this.root.getBoundingClientRect();
      const i = nearest(this.points, e.clientX - box.left, e.clientY - box.top, 10);
      const id = i < 0 ? null : this.lines[i].id;
      if (id !== this.active) {
        this.highlight(id);
        this.onHover(id);
      }
      if (i >= 0) {
        this.showTip(this.lines[i], e.clientX - box.left, e.clientY - box.top);
      }
    });
    this.root.addEventListener('mouseleave', () => {
      this.highlight(null);
      this.onHover(null);
    });
  }

  /** The columns and the lines; the axes are fitted to the values. */
  setData(keys: string[], lines: IParLine[]): void {
    this.keys = keys;
    this.lines = lines;
    this.axes = keys.map((k, i) => axisFor(k, lines.map(l => l.values[i])));
  }

  /** Bring line ``id`` forward and dim the others (null: none). */
  highlight(id: string | null): void {
    this.active = id;
    this.root.classList.toggle('labkit-parcoords-dim', id !== null);
    for (const p of Array.from(this.root.querySelectorAll('.labkit-parcoords-line'))) {
      p.classList.toggle('labkit-parcoords-active', (p as SVGElement).dataset.runId === id);
    }
    const line = this.root.querySelector('.labkit-parcoords-active');
    if (line) {
      line.parentNode?.appendChild(line);  // drawn last: on top
    }
    if (id === null) {
      this.tip.hidden = true;
    }
  }

  private frame(): IFrame {
    return { width: this.root.clientWidth || this.node.clientWidth, height: this.height,
             left: 70, right: 70, top: 34, bottom: 18 };
  }

  draw(): void {
    const f = this.frame();
    if (!f.width) {
      return;
    }
    this.root.replaceChildren();
    this.points = [];
    if (!this.axes.length) {
      this.root.append(svg('text', { x: f.width / 2, y: f.height / 2, class: 'labkit-parcoords-empty',
                                     'text-anchor': 'middle' }, 'nothing to draw'));
      return;
    }
    const h = f.height - f.top - f.bottom;
    const xs = axisX(this.axes.length, f);
    const axesGroup = svg('g', { class: 'labkit-parcoords-axes' });
    this.axes.forEach((axis, i) => {
      const x = xs[i];
      const g = svg('g', { 'data-key': axis.key });
      g.append(svg('line', { x1: x, x2: x, y1: f.top, y2: f.top + h,
                             class: 'labkit-parcoords-axis' }));
      const label = svg('text', { x, y: f.top - 18, 'text-anchor': 'middle',
                                  class: 'labkit-parcoords-label' }, clip(axis.key, 22));
      label.append(svg('title', {}, `${axis.key}${axis.kind === 'log' ? ' (log scale)' : ''}`));
      g.append(label);
      for (const [t, p] of axisTicks(axis, this.format)) {
        const y = f.top + (1 - p) * h;
        g.append(svg('line', { x1: x - 3, x2: x + 3, y1: y, y2: y,
                               class: 'labkit-parcoords-axis' }));
        g.append(svg('text', { x: x + 5, y: y + 3, class: 'labkit-parcoords-tick' },
                     clip(t, 14)));
      }
      axesGroup.append(g);
    });
    const linesGroup = svg('g', { class: 'labkit-parcoords-lines' });
    for (const line of this.lines) {
      const pts = polyline(this.axes, line.values, f);
      this.points.push(pts);
      const el = svg('polyline', { points: pts.map(p => p.join(',')).join(' '),
                                   class: 'labkit-parcoords-line', fill: 'none' });
      el.style.stroke = line.color;
      el.dataset.runId = line.id;
      el.append(svg('title', {}, line.label));
      linesGroup.append(el);
      for (const [px, py] of pts) {
        const dot = svg('circle', { cx: px, cy: py, r: 2.5, class: 'labkit-parcoords-dot' });
        dot.style.fill = line.color;
        linesGroup.append(dot);
      }
    }
    this.root.append(linesGroup, axesGroup);
    this.highlight(this.active);
  }

  private showTip(line: IParLine, x: number, y: number): void {
    const rows = [line.label, ...this.keys.map((k, i) => {
      const v = line.values[i];
      const t = v === undefined || v === null ? '—'
        : typeof v === 'number' ? this.format(v) : typeof v === 'string' ? v : JSON.stringify(v);
      return `${k}: ${t}`;
    })];
    this.tip.replaceChildren(...rows.map((r, i) => {
      const d = document.createElement(i ? 'div' : 'b');
      d.textContent = r;
      return d;
    }));
    this.tip.hidden = false;
    const w = this.root.clientWidth;
    this.tip.style.left = `${x > w * 0.6 ? x - 16 - this.tip.offsetWidth : x + 16}px`;
    this.tip.style.top = `${Math.max(0, y - 10)}px`;
  }
}
