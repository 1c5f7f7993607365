/**
 * The Runs sidebar: a virtual list of every run (only the rows in view are in the DOM), each a
 * two-line row — name, short id, status, start time, the chosen metric's last value and a
 * sparkline on a scale the rows in view share — over one request per refresh (``GET runs``
 * with a window, ``labkit/runs/listing.py``); several runs selected (checkbox, Ctrl- or
 * Shift-click) open the compare page. Every value is rendered as text (``textContent``), never
 * as HTML. The pure rules are in ``sidebar_model.ts``.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { api, IRun, isRunId, STATUSES } from './api';
import { keepClicks, pressKey } from './clicks';
import { CommandIDs } from './commands';
import { el } from './dom';
import {
  covers,
  formatValue,
  listQuery,
  rangeIds,
  relativeTime,
  ROW_HEIGHT,
  sharedScale,
  shortId,
  sparkSegments,
  visibleRange,
  windowFor
} from './sidebar_model';
import { SweepsSection } from './sweeps';

/** The sidebar's icon: a rising-then-falling training curve. */
export const runsIcon = new LabIcon({
  name: 'labkit-runs:runs',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
    '<path class="jp-icon3" fill="none" stroke="#616161" stroke-width="1.6" ' +
    'd="M1.5 2.5 C4 9 6 12 14.5 13"/><path class="jp-icon3" fill="#616161" ' +
    'd="M1 14.2h14v1H1zM1 1h1v14H1z"/></svg>'
});


/** A status the stylesheet knows, for a class name; anything else is ``unknown``. */
export function statusClass(status: unknown): string {
  // NOTE: damaged is no status a filter selects (the store counts such a run by its stored one)
  return `labkit-status-${STATUSES.includes(status as string) || status === 'damaged'
    ? status : 'unknown'}`;
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

/** A sparkline of ``values`` on a scale shared with other rows; gaps break the line. */
export function sharedSparkline(
  values: unknown[],
  scale: { lo: number; hi: number } | null,
  width: number,
  height: number
): SVGSVGElement {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.classList.add('labkit-sparkline');
  for (const seg of scale ? sparkSegments(values, scale, width, height) : []) {
    if (seg.includes(' ')) {
      const line = document.createElementNS(ns, 'polyline');
      line.setAttribute('points', seg);
      svg.appendChild(line);
    } else {
      const [x, y] = seg.split(',');
      const dot = document.createElementNS(ns, 'circle');
      dot.setAttribute('cx', x);
      dot.setAttribute('cy', y);
      dot.setAttribute('r', '1.8');
      svg.appendChild(dot);
    }
  }
  return svg;
}

/** A run as the sidebar's list request gives it: with its sparkline of the chosen metric. */
export interface IListedRun extends IRun {
  started?: number | null;
  metric?: {
    iteration: number[];
    value: (number | null)[];
    last: number | null;
    last_iteration: number;
  } | null;
}

interface IListBody {
  runs: IListedRun[];
  total: number;
  offset: number;
  counts: Record<string, number>;
  ids?: string[];
}

/** The status filter's choices: ``live`` is running or paused, training now. */
export const FILTERS = ['all', 'live', ...STATUSES.filter(s => s !== 'created')];
/** At most this many runs go to the compare page (its own limit). */
export const MAX_COMPARE = 50;

export class RunsPanel extends Widget {
  constructor(private app: JupyterFrontEnd) {
    super();
    this.id = 'labkit-runs';
    this.title.caption = 'labkit runs';
    this.title.label = 'Runs';
    this.title.icon = runsIcon;
    this.addClass('labkit-runs');
    const bar = el('div', 'labkit-runs-toolbar');
    this.filter = el('input', 'labkit-runs-filter');
    this.filter.type = 'search';
    this.filter.placeholder = 'filter by name or id';
    this.filter.setAttribute('aria-label', 'filter runs by name or id');
    this.filter.oninput = () => {
      window.clearTimeout(this.typing);
      this.typing = window.setTimeout(() => this.restart(), 200);
    };
    this.statusSelect = el('select');
    this.statusSelect.setAttribute('aria-label', 'status');
    for (const s of FILTERS) {
      const o = el('option', undefined, s === 'live' ? 'live (training)' : s);
      o.value = s;
      this.statusSelect.appendChild(o);
    }
    this.statusSelect.onchange = () => this.restart();
    this.sortSelect = el('select');
    this.sortSelect.setAttribute('aria-label', 'sort');
    for (const s of ['newest', 'oldest', 'name', 'status']) {
      const o = el('option', undefined, `sort: ${s}`);
      o.value = s;
      this.sortSelect.appendChild(o);
    }
    this.sortSelect.onchange = () => this.restart();
    const selects = el('div', 'labkit-runs-selects');
    selects.append(this.statusSelect, this.sortSelect);
    const actions = el('div', 'labkit-runs-actions');
    this.count = el('span', 'labkit-runs-count', '');
    this.compareButton = el('button', 'jp-mod-styled labkit-runs-compare', 'Compare');
    this.compareButton.title = 'Open the selected runs side by side (select with the boxes, ' +
      'Ctrl-click or Shift-click)';
    this.compareButton.onclick = () => void this.compare([...this.selected]);
    this.compareAllButton = el('button', 'jp-mod-styled labkit-runs-compare-all', 'All');
    this.compareAllButton.title = `Compare every run matching the filter (at most ${MAX_COMPARE})`;
    this.compareAllButton.onclick = () => void this.compareMatching();
    this.clearButton = el('button', 'jp-mod-styled labkit-runs-clear', '×');
    this.clearButton.title = 'Clear the selection';
    this.clearButton.onclick = () => {
      this.selected.clear();
      this.render();
    };
    actions.append(this.count, this.compareButton, this.compareAllButton, this.clearButton);
    bar.append(this.filter, selects, actions);
    this.list = el('div', 'labkit-runs-list');
    this.list.setAttribute('role', 'list');
    this.spacer = el('div', 'labkit-runs-spacer');
    this.list.appendChild(this.spacer);
    this.list.onscroll = () => this.onScroll();
    this.error = el('div', 'labkit-runs-error');
    this.sweeps = new SweepsSection(app);
    this.node.append(bar, this.sweeps.node, this.error, this.list);
    keepClicks(this.node);  // NOTE: rows and sweeps are drawn again at each poll
    document.addEventListener('visibilitychange', () => this.schedule(0));
  }

  /** The runs of the loaded window, in list order (only while the sidebar shows). */
  runs: IListedRun[] = [];
  /** How many runs match the filter; ``counts``: runs per status in the whole store. */
  total = 0;
  counts: Record<string, number> = {};
  interval = 2;
  maxBackoff = 60;
  /** Unused since the list is virtual (every run can be scrolled to); kept for the setting. */
  maxRuns = 50;
  sparklineKey = 'loss';
  private filter: HTMLInputElement;
  private statusSelect: HTMLSelectElement;
  private sortSelect: HTMLSelectElement;
  private count: HTMLSpanElement;
  private compareButton: HTMLButtonElement;
  private compareAllButton: HTMLButtonElement;
  private clearButton: HTMLButtonElement;
  private list: HTMLDivElement;
  private spacer: HTMLDivElement;
  private error: HTMLDivElement;
  /** The sweeps, above the runs (``sweeps.ts``): their own capped request per refresh. */
  readonly sweeps: SweepsSection;
  private timer: number | undefined;
  private typing: number | undefined;
  private scrollFetch: number | undefined;
  private frame = 0;
  private delay = 2;
  private seq = 0;
  private loaded: { offset: number; count: number; total: number } | null = null;
  private selected = new Set<string>();
  private anchor: number | null = null;

  /**
   * Poll with backoff after errors. While the sidebar is closed only the counts are fetched
   * (one run), five times less often, for the status bar; nothing while the page is hidden.
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

  /** Show only the runs training now, from the top (the status bar's item does this). */
  showLive(): void {
    this.statusSelect.value = 'live';
    this.filter.value = '';
    this.restart();
  }

  /** The filter changed: back to the top, and ask again now. */
  private restart(): void {
    this.list.scrollTop = 0;
    this.loaded = null;
    this.anchor = null;
    void this.refresh();
  }

  private query(offset: number, limit: number, extra: { ids?: boolean; metric?: string } = {}) {
    return listQuery({
      status: this.statusSelect.value,
      name: this.filter.value.trim(),
      sort: this.sortSelect.value,
      offset,
      limit,
      metric: extra.metric ?? '',
      ids: extra.ids
    });
  }

  /** One request: the window of runs around the rows in view, with their sparklines. */
  async refresh(): Promise<void> {
    window.clearTimeout(this.timer);
    const seq = ++this.seq;
    try {
      const visible = this.isVisible;
      if (visible) {
        void this.sweeps.refresh();
      }
      const win = visible ? windowFor(this.range()) : { offset: 0, limit: 1 };
      const body = await api<IListBody>(
        `runs?${this.query(win.offset, win.limit, { metric: visible ? this.sparklineKey : '' })}`
      );
      if (seq !== this.seq) {
        return; // a newer request (another filter, another window) answers instead
      }
      this.counts = body.counts || {};
      this.error.textContent = '';
      this.delay = this.interval;
      if (visible) {
        this.runs = (body.runs || []).filter(r => isRunId(r.id));
        this.total = body.total ?? this.runs.length;
        this.loaded = { offset: body.offset ?? win.offset, count: this.runs.length,
                        total: this.total };
        this.render();
      }
      this.changed();
    } catch (e) {
      if (seq !== this.seq) {
        return;
      }
      this.delay = Math.min(this.delay * 2, this.maxBackoff);
      this.error.textContent = `labkit runs: ${(e as Error).message} (retrying in ${this.delay} s)`;
    }
    this.schedule();
  }

  /** Called after each refresh (the status bar listens). */
  changed: () => void = () => undefined;

  private range(): { first: number; end: number } {
    const total = this.loaded ? this.total : Math.max(this.total, 1);
    return visibleRange(this.list.scrollTop, this.list.clientHeight || 400, total);
  }

  private onScroll(): void {
    if (!this.frame) {
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        this.render();
      });
    }
    if (!covers(this.loaded, this.range())) {
      // NOTE: while the scrollbar is dragged, ask once it rests a moment, not per event
      window.clearTimeout(this.scrollFetch);
      this.scrollFetch = window.setTimeout(() => void this.refresh(), 80);
    }
  }

  private runAt(i: number): IListedRun | undefined {
    const l = this.loaded;
    return l && i >= l.offset && i < l.offset + l.count ? this.runs[i - l.offset] : undefined;
  }

  render(): void {
    const total = this.loaded ? this.total : 0;
    this.spacer.style.height = `${total * ROW_HEIGHT}px`;
    this.count.textContent = `${total.toLocaleString('en-US')} run${total === 1 ? '' : 's'}` +
      (this.selected.size ? ` · ${this.selected.size} selected` : ` · ${this.sparklineKey}`);
    this.count.title = `The value and sparkline of each row: its ${this.sparklineKey} ` +
      '(the sparkline setting); the sparklines share one scale';
    this.compareButton.disabled = this.selected.size < 2;
    this.clearButton.disabled = !this.selected.size;
    this.compareAllButton.disabled = total < 2;
    const range = this.range();
    const shown: IListedRun[] = [];
    for (let i = range.first; i < range.end; i++) {
      const r = this.runAt(i);
      if (r) {
        shown.push(r);
      }
    }
    const scale = sharedScale(shown.map(r => r.metric?.value ?? []));
    const now = Date.now() / 1000;
    const rows: HTMLElement[] = [];
    if (this.loaded && !total) {
      rows.push(el('div', 'labkit-runs-empty',
                   this.filter.value || this.statusSelect.value !== 'all'
                     ? 'no run matches the filter' : 'no runs yet'));
    }
    for (let i = range.first; i < range.end && total; i++) {
      const r = this.runAt(i);
      rows.push(r ? this.row(r, i, scale, now) : this.placeholder(i));
    }
    this.spacer.replaceChildren(...rows);
  }

  private placeholder(i: number): HTMLElement {
    const row = el('div', 'labkit-run-row labkit-run-pending', '…');
    row.style.top = `${i * ROW_HEIGHT}px`;
    return row;
  }

  private row(r: IListedRun, i: number, scale: { lo: number; hi: number } | null,
              now: number): HTMLElement {
    const row = el('div', 'labkit-run-row');
    row.setAttribute('role', 'listitem');
    row.dataset.runId = r.id;
    pressKey(row, `run ${r.id}`);
    row.dataset.index = String(i);
    row.style.top = `${i * ROW_HEIGHT}px`;
    const picked = this.selected.has(r.id);
    row.classList.toggle('labkit-run-selected', picked);
    const box = el('input', 'labkit-run-check');
    box.type = 'checkbox';
    pressKey(box, `check ${r.id}`);
    box.checked = picked;
    box.setAttribute('aria-label', `select ${r.name || 'unnamed'} ${shortId(r.id)}`);
    box.onclick = e => {
      e.stopPropagation();
      this.pick(r.id, i, (e as MouseEvent).shiftKey ? 'range' : 'toggle');
    };
    const line1 = el('div', 'labkit-run-line');
    line1.append(el('span', 'labkit-run-name', String(r.name || 'unnamed')),
                 el('span', 'labkit-run-id', shortId(r.id)));
    const line2 = el('div', 'labkit-run-line labkit-run-meta');
    const when = relativeTime(r.started ?? r.created, now);
    line2.append(el('span', `labkit-run-status ${statusClass(r.status)}`, String(r.status)),
                 el('span', 'labkit-run-when', when));
    if (r.metric) {
      // the metric's name is said once, above the list
      line2.append(el('span', 'labkit-run-value', formatValue(r.metric.last)));
    }
    const text = el('div', 'labkit-run-text');
    text.append(line1, line2);
    const spark = sharedSparkline(r.metric?.value ?? [], scale, 56, 26);
    row.append(box, text, spark);
    const p = r.progress || {};
    row.title = `${r.name || 'unnamed'} · ${r.id}\n${r.status} · ${progressText(p)}\n` +
      `started ${new Date((r.started ?? r.created) * 1000).toLocaleString()}` +
      (r.metric ? `\n${this.sparklineKey} ${formatValue(r.metric.last)} at iteration ` +
        `${r.metric.last_iteration}` : '') +
      (r.damaged ? `\ndamaged: ${r.damaged}` : '');
    row.onclick = e => {
      if (e.shiftKey || e.ctrlKey || e.metaKey) {
        e.preventDefault();
        this.pick(r.id, i, e.shiftKey ? 'range' : 'toggle');
        return;
      }
      void this.app.commands.execute(CommandIDs.open, { id: r.id });
    };
    return row;
  }

  /** Select or unselect a run; a shift-click selects every loaded run since the last pick. */
  private pick(id: string, index: number, how: 'toggle' | 'range'): void {
    if (how === 'range' && this.anchor !== null) {
      const ids: (string | undefined)[] = [];
      for (let i = 0; i <= Math.max(index, this.anchor); i++) {
        ids.push(this.runAt(i)?.id);
      }
      for (const x of rangeIds(ids, this.anchor, index)) {
        this.selected.add(x);
      }
    } else if (this.selected.has(id)) {
      this.selected.delete(id);
    } else {
      this.selected.add(id);
    }
    this.anchor = index;
    this.render();
  }

  /** The ids selected, in the order they were picked. */
  selection(): string[] {
    return [...this.selected];
  }

  private async compare(ids: string[]): Promise<void> {
    if (ids.length < 2) {
      this.error.textContent = 'Select two runs or more to compare them.';
      return;
    }
    if (ids.length > MAX_COMPARE) {
      this.error.textContent = `${ids.length} runs: compare takes at most ${MAX_COMPARE}; ` +
        'narrow the filter or the selection.';
      return;
    }
    if (!this.app.commands.hasCommand(CommandIDs.compare)) {
      this.error.textContent = 'The compare page is not available in this JupyterLab ' +
        `(no command ${CommandIDs.compare}).`;
      return;
    }
    this.error.textContent = '';
    await this.app.commands.execute(CommandIDs.compare, { ids });
  }

  /** Compare every run the filter matches: one request for the total and (the server gives
   * at most ``MAX_COMPARE + 1`` of them) their ids; more than ``MAX_COMPARE`` are refused by
   * the total, before any id is used. */
  private async compareMatching(): Promise<void> {
    try {
      const body = await api<IListBody>(`runs?${this.query(0, 1, { ids: true })}`);
      if (body.total > MAX_COMPARE) {
        this.error.textContent = `${body.total.toLocaleString('en-US')} runs match: compare ` +
          `takes at most ${MAX_COMPARE}; narrow the filter or select runs.`;
        return;
      }
      await this.compare((body.ids || []).filter(isRunId));
    } catch (e) {
      this.error.textContent = `labkit runs: ${(e as Error).message}`;
    }
  }
}
