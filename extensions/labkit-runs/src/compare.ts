/**
 * The compare page: several runs side by side, from one request (``GET compare?ids=``). Their
 * curves overlaid per metric (a colour per run, one chart per metric key, hover values per
 * run), a table of the config keys that differ (the ones the same in all listed once above it)
 * with start time, duration, status and the best value of a chosen metric, sortable and
 * filterable by any column, and a parallel-coordinates view of config against that metric.
 * A run whose row in the store cannot be read (``damaged``) keeps its place, labelled with why:
 * its curves are drawn from the metrics that could be read, its config is unknown (left out of
 * the config table's differences and of the parallel coordinates). Every value is rendered as
 * text, never as HTML.
 */
import { Panel, Widget } from '@lumino/widgets';

import { api } from './api';
import {
  bestOf,
  configDiff,
  damageOf,
  defaultMode,
  duration,
  filterRows,
  IRow,
  knownConfigs,
  runLabels,
  sameText,
  sortRows,
  valueText
} from './compare_model';
import { ParCoords } from './parcoords';
import { formatNumber, LinePlot } from './plot';
import { chartControls, IChartOptions } from './plotcontrols';
import {
  append,
  clock,
  firstTime,
  ISeriesData,
  orderGroups,
  plottable,
  progressOf,
  thin,
  xFormat,
  xValues
} from './series';
import { el } from './dom';
import { statusClass } from './sidebar';

/** A run as ``compare`` gives it: its public record and its downsampled metrics. */
export interface ICompareRun {
  id: string;
  name: string | null;
  status: string;
  created: number | null;
  started?: number | null;
  ended?: number | null;
  heartbeat?: number | null;
  config: Record<string, unknown>;
  progress?: unknown;
  metrics: Record<string, ISeriesData>;
  /** why its row in the store cannot be read (status ``damaged``): its config is unknown */
  damaged?: string;
}

const LIVE = ['created', 'running', 'paused'];
/** how many run colours the stylesheet defines (``--labkit-run-color-N``) */
const COLORS = 10;
const FIXED = ['run', 'status', 'started', 'duration', 'best'];
/** the points per metric key asked for (the server may send fewer: its cap per answer) */
const MAX_POINTS = 500;

function dateText(t: unknown): string {
  if (typeof t !== 'number' || !isFinite(t)) {
    return '—';
  }
  const d = new Date(t * 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export class ComparePanel extends Panel {
  constructor(readonly runIds: string[], private interval = () => 5) {
    super();
    this.addClass('labkit-compare');
    this.title.label = `compare · ${runIds.length} runs`;
    this.title.caption = `labkit: compare runs ${runIds.join(', ')}`;
    this.title.closable = true;

    const head = new Widget();
    head.addClass('labkit-compare-head');
    const bar = el('div', 'labkit-compare-toolbar');
    this.metricSelect = el('select', 'labkit-compare-metric');
    this.metricSelect.title = 'the metric whose best value the table and the parallel ' +
      'coordinates show';
    this.modeSelect = el('select', 'labkit-compare-mode');
    for (const m of ['min', 'max']) {
      this.modeSelect.append(new Option(m === 'min' ? 'lowest' : 'highest', m));
    }
    this.metricSelect.onchange = () => {
      this.mode = defaultMode(this.metricSelect.value);
      this.modeSelect.value = this.mode;
      this.metric = this.metricSelect.value;
      this.renderTable(true);
    };
    this.modeSelect.onchange = () => {
      this.mode = this.modeSelect.value as 'min' | 'max';
      this.renderTable(true);
    };
    // the x axis (iteration, epoch, wall time since each run started), log y, smoothing:
    // the run page's controls
    const options = chartControls(this.options, () => this.drawCharts());
    options.classList.add('labkit-compare-option');
    const refresh = el('button', 'jp-mod-styled', 'Refresh');
    refresh.onclick = () => void this.load();
    bar.append(el('span', 'labkit-compare-caption', 'best'), this.metricSelect,
               this.modeSelect, options, refresh);
    this.message = el('div', 'labkit-compare-message');
    this.damage = el('ul', 'labkit-compare-damage');
    this.legend = el('div', 'labkit-compare-legend');
    head.node.append(bar, this.message, this.damage, this.legend);

    this.charts = new Widget();
    this.charts.addClass('labkit-compare-charts');
    this.configBox = new Widget();
    this.configBox.addClass('labkit-compare-config');
    this.same = el('details', 'labkit-compare-same');
    this.table = el('table', 'labkit-compare-table');
    const wrap = el('div', 'labkit-compare-tablewrap');
    wrap.append(this.table);
    this.parcoords = new ParCoords(280, formatNumber);
    this.parcoords.onHover = id => this.highlight(id);
    const pcTitle = el('h3', undefined, 'Config against the metric');
    this.configBox.node.append(el('h3', undefined, 'Runs'), this.same, wrap, pcTitle,
                               this.parcoords.node);
    this.addWidget(head);
    this.addWidget(this.charts);
    this.addWidget(this.configBox);

    // NOTE: the theme's name changes before its CSS has loaded: draw again once it has
    this.themeObserver = new MutationObserver(() => {
      for (const ms of [0, 150, 500, 1500]) {
        window.setTimeout(() => !this.isDisposed && this.drawAll(), ms);
      }
    });
    this.themeObserver.observe(document.body, { attributes: true,
                                                attributeFilter: ['data-jp-theme-name'] });
    this.resizeObserver = new ResizeObserver(() => this.drawAll());
    this.resizeObserver.observe(this.node);
    void this.load();
  }

  private metricSelect: HTMLSelectElement;
  private modeSelect: HTMLSelectElement;
  private message: HTMLDivElement;
  private damage: HTMLUListElement;
  private legend: HTMLDivElement;
  private charts: Widget;
  private configBox: Widget;
  private same: HTMLDetailsElement;
  /** The columns and titles the table's header was made for (``renderTable``). */
  private headKey = '';
  private table: HTMLTableElement;
  private parcoords: ParCoords;
  private themeObserver: MutationObserver;
  private resizeObserver: ResizeObserver;
  private timer: number | undefined;
  private plots = new Map<string, LinePlot>();
  private runs: ICompareRun[] = [];
  private labels: string[] = [];
  private differ: string[] = [];
  private rows: IRow[] = [];
  private metric = '';
  private mode: 'min' | 'max' = 'min';
  private options: IChartOptions = { xAxis: 'iteration', logY: false, smoothing: 0 };
  /** the points per key the server sent (it lowers what was asked to fit its cap) */
  private maxPoints = MAX_POINTS;
  private sortColumn = 'run';
  private descending = false;
  private filters: Record<string, string> = {};

  dispose(): void {
    window.clearTimeout(this.timer);
    this.themeObserver.disconnect();
    this.resizeObserver.disconnect();
    super.dispose();
  }

  protected onAfterShow(): void {
    this.drawAll();
  }

  /** The colour of the run at ``i``, from the theme (``--labkit-run-color-N``). */
  color(i: number): string {
    const v = getComputedStyle(this.node).getPropertyValue(`--labkit-run-color-${i % COLORS}`);
    return v.trim() || '#888';
  }

  /** Read every run's whole history (downsampled); then, while some run is live, only the
   * live runs' new points (``since_iteration``), appended. */
  async load(): Promise<void> {
    window.clearTimeout(this.timer);
    const ids = this.runIds.map(encodeURIComponent).join(',');
    try {
      const body = await api<{ runs: ICompareRun[]; max_points?: number }>(
        `compare?ids=${ids}&max_points=${MAX_POINTS}`);
      this.runs = body.runs;
      this.maxPoints = body.max_points ?? MAX_POINTS;
      this.message.textContent = '';
    } catch (e) {
      this.message.textContent = `labkit: ${(e as Error).message}`;
      return;
    }
    this.render();
    this.schedule();
  }

  /** Poll the live runs again after the interval (only while the page is seen). */
  private schedule(): void {
    window.clearTimeout(this.timer);
    if (this.isDisposed || !this.runs.some(r => LIVE.includes(r.status))) {
      return;
    }
    this.timer = window.setTimeout(() => {
      if (this.isVisible && !document.hidden) {
        void this.poll();
      } else {
        this.schedule();
      }
    }, this.interval() * 1000);
  }

  /** The live runs' records and their points after the last iteration the page holds. */
  private async poll(): Promise<void> {
    const live = this.runs.filter(r => LIVE.includes(r.status));
    const since = live.map(r => {
      const lasts = Object.values(r.metrics).map(s => s.iteration[s.iteration.length - 1])
        .filter((i): i is number => typeof i === 'number');
      return lasts.length ? Math.min(...lasts) : -1;
    });
    try {
      const body = await api<{ runs: ICompareRun[] }>(
        `compare?ids=${live.map(r => encodeURIComponent(r.id)).join(',')}` +
        `&since_iteration=${since.join(',')}&max_points=${this.maxPoints}`);
      for (const fresh of body.runs) {
        const i = this.runs.findIndex(r => r.id === fresh.id);
        if (i < 0) {
          continue;
        }
        const metrics = { ...this.runs[i].metrics };
        for (const [k, more] of Object.entries(fresh.metrics)) {
          const joined = append(metrics[k], more);
          // NOTE: thinned again in the browser once it holds twice what the server sent
          metrics[k] = joined.iteration.length > 2 * this.maxPoints
            ? thin(joined, this.maxPoints) : joined;
        }
        this.runs[i] = { ...fresh, metrics };
      }
      this.message.textContent = '';
      this.render();
    } catch (e) {
      this.message.textContent = `labkit: ${(e as Error).message}`;
    }
    this.schedule();
  }

  private render(): void {
    this.labels = runLabels(this.runs);
    // NOTE: a damaged run's config comes empty: unknown, not a config whose every key differs
    const known = knownConfigs(this.runs);
    const diff = configDiff(known);
    this.differ = diff.differ;
    // the metric chooser: every plottable key of any run
    const keys = orderGroups([...new Set(this.runs.flatMap(r => Object.keys(r.metrics)))]
      .filter(plottable)).flatMap(([, ks]) => ks);
    if (!keys.includes(this.metric)) {
      this.metric = keys[0] || '';
      this.mode = defaultMode(this.metric);
    }
    // NOTE: the options are made again only when the keys change (at each poll, an open
    // list closed)
    const shown = Array.from(this.metricSelect.options, o => o.value);
    if (JSON.stringify(keys) !== JSON.stringify(shown)) {
      this.metricSelect.replaceChildren(...keys.map(k => new Option(k, k)));
    }
    this.metricSelect.value = this.metric;
    this.modeSelect.value = this.mode;
    // the damaged runs, each with why (the rest of the page shows what could be read)
    this.damage.replaceChildren(...this.runs.flatMap((r, i) => {
      const why = damageOf(r);
      if (why === null) {
        return [];
      }
      const item = el('li', 'labkit-compare-damaged');
      item.dataset.runId = r.id;
      item.append(el('span', 'labkit-run-status labkit-status-damaged', 'damaged'),
                  el('b', undefined, this.labels[i]),
                  document.createTextNode(`: ${why}. Its config is unknown; ` +
                    (Object.keys(r.metrics || {}).length ? 'its curves are drawn from the ' +
                      'metrics that could be read.' : 'it has no metrics to draw.')));
      item.title = `${r.id}: ${why}`;
      return [item];
    }));
    // the legend: a colour per run, its name and short id
    this.legend.replaceChildren(...this.runs.map((r, i) => {
      const item = el('span', 'labkit-compare-legend-item');
      item.dataset.runId = r.id;
      const why = damageOf(r);
      item.title = `${r.id} (${r.status})` + (why === null ? '' : `: ${why}`);
      const swatch = el('span', 'labkit-compare-swatch');
      swatch.style.background = `var(--labkit-run-color-${i % COLORS})`;
      item.append(swatch, document.createTextNode(this.labels[i]));
      if (why !== null) {
        item.classList.add('labkit-compare-damaged');
        item.append(el('span', 'labkit-compare-damaged-mark', ' (damaged)'));
      }
      item.onmouseenter = () => this.highlight(r.id);
      item.onmouseleave = () => this.highlight(null);
      return item;
    }));
    const summary = (diff.same.length
      ? `Same in all ${known.length} runs (${diff.same.length}): ${sameText(diff.same)}`
      : 'No config key has the same value in all runs') +
      (known.length < this.runs.length
        ? ` (${this.runs.length - known.length} damaged: config unknown)` : '');
    const items = diff.same.map(([k, v]) => `${k} = ${valueText(v)}`);
    const sameKey = JSON.stringify([summary, items]);
    if (this.same.dataset.key !== sameKey) {  // NOTE: as the header: not at every poll
      this.same.dataset.key = sameKey;
      this.same.replaceChildren(el('summary', undefined, summary));
      const list = el('ul');
      for (const item of items) {
        list.append(el('li', undefined, item));
      }
      this.same.append(list);
    }
    this.renderCharts(keys);
    this.renderTable(true);
  }

  private renderCharts(keys: string[]): void {
    // NOTE: the figures stay while the keys do (a live run's poll): a chart moved into a new
    // figure between a press and its release got no click (a double-click's zoom reset was
    // lost)
    const chartsKey = JSON.stringify(keys);
    if (this.charts.node.dataset.keys === chartsKey) {
      this.drawCharts();
      return;
    }
    this.charts.node.dataset.keys = chartsKey;
    const figures: HTMLElement[] = [];
    for (const key of keys) {
      let plot = this.plots.get(key);
      if (!plot) {
        plot = new LinePlot(key, this.plotOptions(), 190);
        this.plots.set(key, plot);
      }
      const figure = el('div', 'labkit-compare-figure');
      figure.dataset.key = key;
      figure.append(plot.node);
      figures.push(figure);
    }
    for (const k of [...this.plots.keys()]) {
      if (!keys.includes(k)) {
        this.plots.delete(k);
      }
    }
    this.charts.node.replaceChildren(...(figures.length ? figures
      : [el('div', 'labkit-compare-empty', 'These runs have no metrics yet.')]));
    this.drawCharts();
  }

  private plotOptions() {
    const axis = this.options.xAxis;
    return { logY: this.options.logY, smoothing: this.options.smoothing,
             xLabel: axis === 'time' ? 'wall time (since each run started)' : axis,
             formatX: axis === 'iteration' ? formatNumber : xFormat(axis),
             integerX: axis === 'iteration' };
  }

  private drawCharts(): void {
    for (const [key, plot] of this.plots) {
      plot.setOptions(this.plotOptions());
      plot.setLines(this.runs.flatMap((r, i) => {
        const s = r.metrics[key];
        // wall time: each run from its own first point, so that their paces compare
        const x = s && xValues(s, this.options.xAxis, firstTime(Object.values(r.metrics)),
                               progressOf(r).epoch_length);
        return s && x ? [{ key: this.labels[i], color: this.color(i),
                           dense: s.iteration.length > 60, x, y: s.value }] : [];
      }));
      plot.draw();
    }
  }

  private drawAll(): void {
    if (!this.runs.length) {
      return;
    }
    this.drawCharts();
    this.drawParcoords();
  }

  private bestColumn(): string {
    return `best ${this.metric || 'metric'} (${this.mode === 'min' ? 'lowest' : 'highest'})`;
  }

  /** The table's header (when ``head``) and rows, sorted and filtered. */
  private renderTable(head = false): void {
    const now = Date.now() / 1000;
    this.rows = this.runs.map((r, i) => {
      const flat = configDiff([r.config]).flat[0];
      const best = bestOf(r.metrics[this.metric], this.mode);
      const cells: Record<string, unknown> = {
        run: this.labels[i], status: r.status, started: r.started ?? r.created,
        duration: duration(r, now), best: best?.value
      };
      for (const k of this.differ) {
        cells[`config:${k}`] = flat[k];
      }
      return { id: r.id, cells };
    });
    const columns = [...FIXED, ...this.differ.map(k => `config:${k}`)];
    // NOTE: the header is made again only when its columns or titles change, not at each
    // poll of live runs: a sort click whose press and release straddled a redraw was lost,
    // and a filter being typed in lost its focus
    const headKey = JSON.stringify([columns, this.bestColumn()]);
    if (head && (headKey !== this.headKey || !this.table.tHead)) {
      this.headKey = headKey;
      const typing = document.activeElement as HTMLInputElement | null;
      const typed = typing && this.table.contains(typing) ? typing.dataset.column : undefined;
      const names = (c: string) => (c === 'best' ? this.bestColumn() : c.replace(/^config:/, ''));
      const titles = el('tr', 'labkit-compare-titles');
      const inputs = el('tr', 'labkit-compare-filters');
      for (const c of columns) {
        const th = el('th', c.startsWith('config:') ? 'labkit-compare-key' : undefined);
        th.dataset.column = c;
        th.title = 'sort by this column (click again to reverse)';
        th.append(el('span', undefined, names(c)), el('span', 'labkit-compare-sort'));
        th.onclick = () => {
          this.descending = this.sortColumn === c ? !this.descending : false;
          this.sortColumn = c;
          this.renderTable();
        };
        titles.append(th);
        const cell = el('th');
        const input = el('input', 'labkit-compare-filter');
        input.dataset.column = c;
        input.placeholder = 'filter';
        input.title = 'text to look for, or a comparison: > 0.1, <= 3, = adam, != 2';
        input.value = this.filters[c] || '';
        input.oninput = () => {
          this.filters[c] = input.value;
          this.renderTable();
        };
        cell.append(input);
        inputs.append(cell);
      }
      this.table.replaceChildren(el('thead'), el('tbody'));
      this.table.tHead!.append(titles, inputs);
      const again = typed === undefined ? null
        : inputs.querySelector<HTMLInputElement>(`input[data-column="${CSS.escape(typed)}"]`);
      if (again && typing) {
        again.focus();
        again.setSelectionRange(typing.selectionStart, typing.selectionEnd);
      }
    }
    for (const th of Array.from(this.table.querySelectorAll<HTMLElement>('.labkit-compare-titles th'))) {
      const on = th.dataset.column === this.sortColumn;
      th.classList.toggle('labkit-compare-sorted', on);
      (th.querySelector('.labkit-compare-sort') as HTMLElement).textContent =
        on ? (this.descending ? ' ▼' : ' ▲') : '';
    }
    const shown = sortRows(filterRows(this.rows, this.filters), this.sortColumn, this.descending);
    const body = this.table.tBodies[0];
    body.replaceChildren(...shown.map(row => {
      const i = this.runs.findIndex(r => r.id === row.id);
      const tr = el('tr');
      tr.dataset.runId = row.id;
      tr.onmouseenter = () => this.highlight(row.id);
      tr.onmouseleave = () => this.highlight(null);
      const why = damageOf(this.runs[i]);
      if (why !== null) {
        tr.classList.add('labkit-compare-damaged');
      }
      for (const c of columns) {
        const v = row.cells[c];
        const text = c === 'started' ? dateText(v)
          : c === 'duration' ? (typeof v === 'number' ? clock(v) : '—')
            : c === 'best' ? (typeof v === 'number' ? formatNumber(v) : '—')
              : valueText(v);
        const td = el('td', undefined, c === 'status' ? undefined : text);
        if (c === 'status') {
          td.append(el('span', `labkit-run-status ${statusClass(v)}`, text));
        }
        td.title = why !== null && (c === 'status' || c.startsWith('config:'))
          ? `damaged: ${why}` : text;  // the whole value where a long one is cut short
        if (c === 'run') {
          const swatch = el('span', 'labkit-compare-swatch');
          swatch.style.background = `var(--labkit-run-color-${i % COLORS})`;
          td.prepend(swatch);
          td.title = `${text} (${row.id})`;
        }
        tr.append(td);
      }
      return tr;
    }));
    if (!shown.length) {
      const tr = el('tr');
      const td = el('td', 'labkit-compare-empty', 'No run matches the filters.');
      td.colSpan = columns.length;
      tr.append(td);
      body.append(tr);
    }
    this.drawParcoords(new Set(shown.map(r => r.id)));
  }

  private shownIds: Set<string> | null = null;

  /** The parallel coordinates: the differing config keys, then the chosen metric's best; the
   * runs the table's filters keep. */
  private drawParcoords(shown?: Set<string>): void {
    if (shown) {
      this.shownIds = shown;
    }
    const keys = [...this.differ, this.bestColumn()];
    // a damaged run's config is unknown: it has no line against it
    const sound = new Set(this.runs.filter(r => damageOf(r) === null).map(r => r.id));
    const lines = this.rows
      .filter(r => sound.has(r.id) && (!this.shownIds || this.shownIds.has(r.id)))
      .map(r => {
        const i = this.runs.findIndex(x => x.id === r.id);
        return { id: r.id, label: this.labels[i], color: this.color(i),
                 values: [...this.differ.map(k => r.cells[`config:${k}`]), r.cells.best] };
      });
    this.parcoords.setData(keys, lines);
    this.parcoords.draw();
  }

  /** Bring run ``id`` forward in the table, the legend and the parallel coordinates. */
  highlight(id: string | null): void {
    this.parcoords.highlight(id);
    for (const e of Array.from(this.node.querySelectorAll<HTMLElement>(
      '.labkit-compare-table tbody tr, .labkit-compare-legend-item'))) {
      e.classList.toggle('labkit-compare-active', id !== null && e.dataset.runId === id);
    }
  }
}
