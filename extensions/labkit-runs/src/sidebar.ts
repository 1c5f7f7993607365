/**
 * The Runs sidebar: runs with status, progress, last metrics and a sparkline; filter and sort.
 * Every value is rendered as text (``textContent``), never as HTML.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { api, IRun, ISeries, isRunId, runPath, STATUSES } from './api';
import { CommandIDs } from './commands';

/** The sidebar's icon: a rising-then-falling training curve. */
export const runsIcon = new LabIcon({
  name: 'labkit-runs:runs',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
    '<path class="jp-icon3" fill="none" stroke="#616161" stroke-width="1.6" ' +
    'd="M1.5 2.5 C4 9 6 12 14.5 13"/><path class="jp-icon3" fill="#616161" ' +
    'd="M1 14.2h14v1H1zM1 1h1v14H1z"/></svg>'
});

/** An element with a class and text content (never HTML). */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  cls?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) {
    e.className = cls;
  }
  if (text !== undefined) {
    e.textContent = text;
  }
  return e;
}

/** A status the stylesheet knows, for a class name; anything else is ``unknown``. */
export function statusClass(status: unknown): string {
  return `labkit-status-${STATUSES.includes(status as string) ? status : 'unknown'}`;
}

/** An SVG polyline of the values, scaled to width x height. */
export function sparkline(values: (number | null)[], width = 90, height = 20): SVGSVGElement {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.classList.add('labkit-sparkline');
  const ys = values.filter((v): v is number => typeof v === 'number' && isFinite(v));
  if (ys.length > 1) {
    const lo = Math.min(...ys);
    const hi = Math.max(...ys);
    const pts = ys.map((v, i) => {
      const x = (i / (ys.length - 1)) * (width - 2) + 1;
      const y = hi === lo ? height / 2 : height - 1 - ((v - lo) / (hi - lo)) * (height - 2);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    const line = document.createElementNS(ns, 'polyline');
    line.setAttribute('points', pts.join(' '));
    line.setAttribute('fill', 'none');
    line.setAttribute('stroke', 'var(--jp-brand-color1)');
    svg.appendChild(line);
  } else if (ys.length === 1) {
    const dot = document.createElementNS(ns, 'circle');
    dot.setAttribute('cx', String(width / 2));
    dot.setAttribute('cy', String(height / 2));
    dot.setAttribute('r', '2.5');
    dot.setAttribute('fill', 'var(--jp-brand-color1)');
    svg.appendChild(dot);
  }
  return svg;
}

/** "iteration 40 · epoch 2, batch 19/21", or "iteration 42 · 2 epochs done". */
export function progressText(p: IRun['progress']): string {
  const it = `iteration ${fmt(p.iteration ?? 0)}`;
  const done = typeof p.epoch === 'number' ? p.epoch : 0;
  if (p.epoch_iteration) {
    const of = p.epoch_length ? `/${fmt(p.epoch_length)}` : '';
    return `${it} · epoch ${done + 1}, batch ${fmt(p.epoch_iteration)}${of}`;
  }
  return `${it} · ${done} epoch${done === 1 ? '' : 's'} done`;
}

export function fmt(v: unknown): string {
  return typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : String(v);
}

export class RunsPanel extends Widget {
  constructor(private app: JupyterFrontEnd) {
    super();
    this.id = 'labkit-runs';
    this.title.caption = 'labkit runs';
    this.title.label = 'Runs';
    this.title.icon = runsIcon;
    this.addClass('labkit-runs');
    const bar = el('div', 'labkit-runs-toolbar');
    this.filter = el('input');
    this.filter.placeholder = 'filter by name or id';
    this.filter.oninput = () => this.render();
    this.statusSelect = el('select');
    for (const s of ['all', ...STATUSES.filter(s => s !== 'created')]) {
      const o = el('option', undefined, s);
      o.value = s;
      this.statusSelect.appendChild(o);
    }
    this.statusSelect.onchange = () => this.render();
    this.sortSelect = el('select');
    for (const s of ['newest', 'name', 'status']) {
      const o = el('option', undefined, `sort: ${s}`);
      o.value = s;
      this.sortSelect.appendChild(o);
    }
    this.sortSelect.onchange = () => this.render();
    bar.append(this.filter, this.statusSelect, this.sortSelect);
    this.list = el('div', 'labkit-runs-list');
    this.error = el('div', 'labkit-runs-error');
    this.node.append(bar, this.error, this.list);
    document.addEventListener('visibilitychange', () => this.schedule(0));
  }

  runs: IRun[] = [];
  interval = 2;
  maxBackoff = 60;
  maxRuns = 50;
  sparklineKey = 'loss';
  private filter: HTMLInputElement;
  private statusSelect: HTMLSelectElement;
  private sortSelect: HTMLSelectElement;
  private list: HTMLDivElement;
  private error: HTMLDivElement;
  private timer: number | undefined;
  private delay = 2;
  private sparks = new Map<string, (number | null)[]>();

  /**
   * Poll with backoff after errors. While the sidebar is closed only the run list is fetched,
   * five times less often, for the status bar; nothing is fetched while the page is hidden.
   */
  schedule(seconds?: number): void {
    window.clearTimeout(this.timer);
    if (document.hidden) {
      return;
    }
    const wait = seconds ?? (this.isVisible ? this.delay : Math.max(this.delay, this.interval * 5));
    this.timer = window.setTimeout(() => void this.refresh(), wait * 1000);
  }

  protected onAfterShow(): void {
    this.schedule(0);
  }

  async refresh(): Promise<void> {
    try {
      const body = await api<{ runs: IRun[] }>('runs');
      // the server lists only addressable runs; a run that is not is never used here either
      this.runs = (body.runs || []).filter(r => isRunId(r.id));
      this.error.textContent = '';
      this.delay = this.interval;
      if (this.isVisible) {
        await this.loadSparklines();
        this.render();
      }
      this.changed();
    } catch (e) {
      this.delay = Math.min(this.delay * 2, this.maxBackoff);
      this.error.textContent = `labkit runs: ${(e as Error).message} (retrying in ${this.delay} s)`;
    }
    this.schedule();
  }

  /** Called after each refresh (the status bar listens). */
  changed: () => void = () => undefined;

  private async loadSparklines(): Promise<void> {
    const shown = this.visibleRuns().slice(0, 20);
    await Promise.all(
      shown.map(async r => {
        if (this.sparks.has(r.id) && r.status !== 'running') {
          return;
        }
        try {
          const key = encodeURIComponent(this.sparklineKey);
          const m = await api<{ metrics: Record<string, ISeries> }>(
            `${runPath(r.id, 'metrics')}?keys=${key}&max_points=40`
          );
          this.sparks.set(r.id, m.metrics[this.sparklineKey]?.value ?? []);
        } catch {
          this.sparks.set(r.id, []);
        }
      })
    );
  }

  visibleRuns(): IRun[] {
    const q = this.filter.value.toLowerCase();
    const status = this.statusSelect.value;
    let rs = this.runs.filter(
      r =>
        (status === 'all' || r.status === status) &&
        (!q || r.id.includes(q) || String(r.name || '').toLowerCase().includes(q))
    );
    const key = this.sortSelect.value;
    if (key === 'name') {
      rs = rs.sort((a, b) => String(a.name || '').localeCompare(String(b.name || '')));
    } else if (key === 'status') {
      rs = rs.sort((a, b) => String(a.status).localeCompare(String(b.status)));
    }
    return rs.slice(0, this.maxRuns);
  }

  render(): void {
    this.list.textContent = '';
    const rs = this.visibleRuns();
    if (!rs.length) {
      this.list.appendChild(el('div', 'labkit-runs-empty', 'no runs yet'));
    }
    for (const r of rs) {
      const row = el('div', 'labkit-run-row');
      row.dataset.runId = r.id;
      const head = el('div');
      head.append(
        el('span', 'labkit-run-name', String(r.name || 'unnamed')),
        el('span', `labkit-run-status ${statusClass(r.status)}`, String(r.status))
      );
      const p = r.progress || {};
      const prog = progressText(p);
      const last = Object.entries(p.last || {})
        .filter(([k]) => !k.startsWith('time'))
        .slice(0, 3)
        .map(([k, v]) => `${k} ${fmt(v)}`)
        .join(', ');
      const text = el('div', 'labkit-run-text');
      text.append(head, el('div', 'labkit-run-id', r.id),
                  el('div', 'labkit-run-last', `${prog}${last ? ' · ' + last : ''}`));
      row.append(text, sparkline(this.sparks.get(r.id) || [], 70, 28));
      row.onclick = () => void this.app.commands.execute(CommandIDs.open, { id: r.id });
      this.list.appendChild(row);
    }
  }
}
