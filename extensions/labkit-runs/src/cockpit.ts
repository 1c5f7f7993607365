/**
 * The live cockpit of one run: what ``lk.notebook.Dashboard`` shows in a notebook (as the
 * output type ``application/vnd.labkit.dashboard+json``) and what a run page embeds.
 *
 * It reads the run store through the server's REST API (never through the kernel): the run's
 * status and progress, and its metrics since the last point it holds, at most ``max_rate``
 * times a second while the run trains. Pause, Resume, Stop and Checkpoint are commands through
 * the same API, which the training loop takes between batches, so they act while a notebook
 * cell is busy and for runs in other processes. Before the first answer, and when the run is
 * not in this server's store (a notebook opened elsewhere), it draws the snapshot the kernel
 * put in the output.
 */
import { Panel, Widget } from '@lumino/widgets';

import { api, IRun, isRunId, runPath } from './api';
import { escapeHtml, formatNumber, ILine, LinePlot, PALETTE } from './plot';
import { chartControls, IChartOptions } from './plotcontrols';
import {
  append,
  clock,
  firstTime,
  groupOf,
  ISeriesData,
  orderGroups,
  plottable,
  progressOf,
  thin,
  xFormat,
  xValues
} from './series';

export { ISeriesData } from './series';

export const MIME_TYPE = 'application/vnd.labkit.dashboard+json';

export interface IDashboardData {
  run_id: string;
  metrics?: string[] | null;
  max_rate?: number;
  tail?: number;
  snapshot?: { run?: Partial<IRun> & Record<string, unknown>;
               series?: Record<string, ISeriesData> };
}

const LIVE = ['created', 'running', 'paused'];
/** the largest history fetched at first, per metric (min/max-downsampled by the server) */
const FIRST_POINTS = 2000;
/** points held per metric before they are thinned again (min/max, in the browser) */
const HOLD = 8000;

export class Cockpit extends Widget {
  series: Record<string, ISeriesData> = {};
  run: (Partial<IRun> & Record<string, unknown>) | null = null;
  /** how many times the kernel updated the output in place */
  updates = 0;
  /** why live data is not shown (the run is not in this server's store), or '' */
  offline = '';
  private plots = new Map<string, LinePlot>();
  private hidden = new Set<string>();
  private timer: number | null = null;
  private rate: { t: number; it: number; perSecond: number } | null = null;
  private fetched = false;
  private busy = false;
  private options: IChartOptions = { xAxis: 'iteration', logY: false, smoothing: 0 };
  private els: Record<string, HTMLElement> = {};
  private themeObserver: MutationObserver;
  private resizeObserver: ResizeObserver;

  constructor(private data: IDashboardData, private trusted: boolean) {
    super();
    this.addClass('labkit-cockpit');
    // for tests and the curious: the element leads to its cockpit (series, run)
    (this.node as unknown as { labkitCockpit: Cockpit }).labkitCockpit = this;
    this.node.innerHTML = `
      <div class="labkit-cockpit-head">
        <span class="labkit-cockpit-title"></span>
        <span class="labkit-badge"></span>
        <span class="labkit-cockpit-info"></span>
      </div>
      <div class="labkit-cockpit-bar"><div></div></div>
      <div class="labkit-cockpit-controls">
        <button data-command="pause" class="jp-mod-styled">Pause</button>
        <button data-command="resume" class="jp-mod-styled">Resume</button>
        <button data-command="stop" class="jp-mod-styled">Stop</button>
        <button data-command="checkpoint" class="jp-mod-styled">Checkpoint</button>
        <span class="labkit-cockpit-message" role="status"></span>
        <span class="labkit-cockpit-trial"></span>
      </div>
      <div class="labkit-cockpit-options"></div>
      <div class="labkit-cockpit-plots"></div>
      <div class="labkit-cockpit-log"></div>`;
    for (const [name, sel] of Object.entries({
      title: '.labkit-cockpit-title', badge: '.labkit-badge', info: '.labkit-cockpit-info',
      bar: '.labkit-cockpit-bar > div', message: '.labkit-cockpit-message',
      plots: '.labkit-cockpit-plots', log: '.labkit-cockpit-log'
    })) {
      this.els[name] = this.node.querySelector(sel) as HTMLElement;
    }
    this.node.querySelectorAll('button[data-command]').forEach(b => {
      b.addEventListener('click', () => void this.send((b as HTMLElement).dataset.command!));
    });
    // the x axis, log y and smoothing: the same controls as the compare page's
    this.node.querySelector('.labkit-cockpit-options')!.append(
      chartControls(this.options, () => this.render()));
    this.takeSnapshot(data);
    // NOTE: the theme's name changes before its CSS has loaded: draw again once it has
    this.themeObserver = new MutationObserver(() => {
      this.render();
      for (const ms of [150, 500, 1500]) {
        window.setTimeout(() => !this.isDisposed && this.render(), ms);
      }
    });
    this.themeObserver.observe(document.body, { attributes: true,
                                                attributeFilter: ['data-jp-theme-name'] });
    this.resizeObserver = new ResizeObserver(() => this.plots.forEach(p => p.draw()));
    this.resizeObserver.observe(this.node);
    this.render();
    if (isRunId(data.run_id)) {
      void this.poll();
    } else {
      this.offline = 'not a run id';
    }
  }

  /** The kernel's snapshot of the run: what to draw before the server answers (or when it
   * cannot); its points are appended after those held, never drawn twice. */
  takeSnapshot(data: IDashboardData): void {
    const snap = data.snapshot || {};
    if (!this.run || this.offline) {
      this.run = snap.run || this.run;
    }
    for (const [k, s] of Object.entries(snap.series || {})) {
      if (s && Array.isArray(s.iteration) && Array.isArray(s.value)) {
        this.series[k] = append(this.series[k], s);
      }
    }
  }

  /** New output data for the same run (the kernel wrote a fresh snapshot at the end of
   * training): keep what is shown and the reader's choices, take the new points. */
  setData(data: IDashboardData): void {
    this.updates += 1;
    this.data = { ...data, run_id: this.data.run_id };
    this.takeSnapshot(data);
    this.render();
  }

  get runId(): string {
    return this.data.run_id;
  }

  dispose(): void {
    if (this.timer !== null) {
      window.clearTimeout(this.timer);
    }
    this.themeObserver.disconnect();
    this.resizeObserver.disconnect();
    this.plots.forEach(p => p.unlisten());
    super.dispose();
  }

  private get live(): boolean {
    return !!this.run && LIVE.includes(String(this.run.status));
  }

  /** One round: the run, then its new points; again in 1/max_rate s while it is live. */
  async poll(): Promise<void> {
    if (this.isDisposed || this.busy) {
      return;
    }
    this.busy = true;
    try {
      const run = await api<IRun>(runPath(this.runId));
      this.run = run as IRun & Record<string, unknown>;
      const held = Math.max(-1, ...Object.values(this.series).map(
        z => z.iteration[z.iteration.length - 1] ?? -1));
      if (progressOf(run).iteration < held - 1) {
        // the run went back (resumed from an earlier checkpoint; the store dropped what came
        // after it): what is held past it may differ now, so all of it is read again
        this.series = {};
        this.fetched = false;
      }
      this.offline = '';
      await this.fetchMetrics();
      this.noteRate();
    } catch (e) {
      this.offline = (e as Error).message;
    } finally {
      this.busy = false;
    }
    this.render();
    if (this.isDisposed) {
      return;
    }
    const asked = Number(this.data.max_rate);
    const rate = isFinite(asked) ? Math.min(Math.max(asked, 0.2), 20) : 4;
    // fast while a loop trains it; a run created but not started is looked at every 2 s
    // (training may begin any moment), anything else every 5 s
    const training = this.live && progressOf(this.run).training;
    const wait = this.offline ? 10000 : training ? 1000 / rate
      : this.run?.status === 'created' ? 2000 : 5000;
    this.timer = window.setTimeout(() => void this.poll(), wait);
  }

  private async fetchMetrics(): Promise<void> {
    const lasts = Object.values(this.series).map(s => s.iteration[s.iteration.length - 1])
      .filter(x => typeof x === 'number');
    const query = new URLSearchParams();
    if (this.fetched && lasts.length) {
      // NOTE: from one before the newest point held: an epoch's metrics are logged at its
      // last iteration, and may reach the store a flush after that iteration's loss
      query.set('since_iteration', String(Math.max(...lasts) - 1));
      query.set('max_points', String(HOLD));
    } else {
      query.set('max_points', String(FIRST_POINTS));
    }
    const got = await api<{ keys: string[]; metrics: Record<string, ISeriesData> }>(
      `${runPath(this.runId, 'metrics')}?${query}`);
    for (const [k, s] of Object.entries(got.metrics || {})) {
      this.series[k] = thin(append(this.series[k], s), HOLD);
    }
    this.fetched = true;
  }

  private noteRate(): void {
    const pr = progressOf(this.run);
    if (pr.elapsed === null) {
      return;
    }
    const prev = this.rate;
    if (prev && pr.elapsed > prev.t && pr.iteration >= prev.it) {
      const now = (pr.iteration - prev.it) / (pr.elapsed - prev.t);
      // a moving average over the last few seconds of polls
      const perSecond = prev.perSecond ? prev.perSecond * 0.7 + now * 0.3 : now;
      this.rate = { t: pr.elapsed, it: pr.iteration, perSecond };
    } else if (!prev || pr.iteration < prev.it) {
      this.rate = { t: pr.elapsed, it: pr.iteration, perSecond: 0 };
    }
  }

  /** Send a command; say when the loop has acted on it, and how long it took. */
  async send(command: string): Promise<void> {
    const t0 = performance.now();
    this.say(`${command}: sent…`);
    try {
      const sent = await api<{ command: { id: number } }>(
        runPath(this.runId, 'commands'), { method: 'POST', body: JSON.stringify({ command }) });
      const cid = sent.command.id;
      for (let i = 0; i < 300 && !this.isDisposed; i++) {
        const got = await api<{ command: { acked: number | null; result: string | null } }>(
          runPath(this.runId, 'commands', cid));
        if (got.command.acked !== null) {
          const s = ((performance.now() - t0) / 1000).toFixed(2);
          this.say(`${got.command.result || command} (${s} s)`);
          this.node.dataset.lastAck = s;
          void this.poll();
          return;
        }
        await new Promise(r => window.setTimeout(r, 100));
      }
      this.say(`${command}: the loop did not answer in 30 s`);
    } catch (e) {
      this.say(`${command}: ${(e as Error).message}`);
    }
  }

  private say(text: string): void {
    this.els.message.textContent = text;
  }

  /** The x of each point of ``s`` on the chosen axis (wall time from the first point any
   * metric recorded). */
  private xs(s: ISeriesData): number[] {
    return xValues(s, this.options.xAxis, firstTime(Object.values(this.series)),
                   progressOf(this.run).epoch_length);
  }

  render(): void {
    this.renderHead();
    const wanted = this.data.metrics;
    const keys = Object.keys(this.series).filter(
      k => plottable(k) && (!wanted || wanted.includes(k) || wanted.includes(groupOf(k))));
    const groups = orderGroups(keys);
    const axis = this.options.xAxis;
    const opts = { logY: this.options.logY, smoothing: this.options.smoothing,
                   xLabel: axis === 'time' ? 'wall time' : axis, formatX: xFormat(axis),
                   integerX: axis === 'iteration' };
    const order: HTMLElement[] = [];
    for (const [g, ks] of groups) {
      let plot = this.plots.get(g);
      if (!plot) {
        plot = new LinePlot(g, opts);
        this.plots.set(g, plot);
      }
      plot.setOptions(opts);
      const lines: ILine[] = ks.map((k, i) => ({
        key: k, color: PALETTE[i % PALETTE.length], dense: k === g,
        x: this.xs(this.series[k]), y: this.series[k].value, hidden: this.hidden.has(k)
      }));
      plot.setLines(lines);
      order.push(this.figure(g, plot, lines));
    }
    const box = this.els.plots;
    if (!groups.length) {
      box.innerHTML = '<div class="labkit-cockpit-empty">waiting for the first values…</div>';
    } else if (order.some((el, i) => box.children[i] !== el) ||
               box.children.length !== order.length) {
      box.replaceChildren(...order);
    }
    this.plots.forEach(p => p.draw());
    this.renderLog(keys);
  }

  /** A figure: its legend (outside the data; click a name to hide its curve) and plot. */
  private figure(g: string, plot: LinePlot, lines: ILine[]): HTMLElement {
    let fig = plot.node.parentElement as HTMLElement | null;
    if (!fig || !fig.classList.contains('labkit-figure')) {
      fig = document.createElement('div');
      fig.className = 'labkit-figure';
      fig.dataset.group = g;
      const legend = document.createElement('div');
      legend.className = 'labkit-legend';
      fig.append(legend, plot.node);
    }
    const legend = fig.firstElementChild as HTMLElement;
    const want = lines.map(l => `${l.key}:${l.hidden ? 0 : 1}`).join(',');
    if (legend.dataset.keys !== want) {
      legend.dataset.keys = want;
      legend.replaceChildren(...lines.map(l => {
        const item = document.createElement('span');
        item.className = 'labkit-legend-item' + (l.hidden ? ' labkit-legend-off' : '');
        item.innerHTML = `<span style="background:${l.color}"></span>${escapeHtml(l.key)}`;
        item.title = 'click to hide or show this curve';
        item.addEventListener('click', () => {
          this.hidden.has(l.key) ? this.hidden.delete(l.key) : this.hidden.add(l.key);
          this.render();
        });
        return item;
      }));
    }
    return fig;
  }

  private renderHead(): void {
    const run = this.run || {};
    const st = String(run.status || (this.offline ? 'unknown' : 'loading'));
    const pr = progressOf(run);
    const planned = pr.planned;
    const name = run.name ? `${String(run.name)} · ` : '';
    this.els.title.textContent = `${name}run ${this.runId}`;
    this.els.badge.textContent = st;
    this.els.badge.className = `labkit-badge labkit-status-${st.replace(/[^a-z]/g, '')}`;
    this.node.dataset.status = st;
    const it = pr.iteration;
    const parts: string[] = [];
    const epochsDone = pr.epoch;
    const epochNow = epochsDone + (pr.epoch_iteration ? 1 : 0);
    parts.push(`epoch ${Math.max(epochNow, epochsDone)}` +
               (planned.epochs ? `/${planned.epochs}` : ''));
    if (pr.epoch_length) {
      parts.push(`batch ${pr.epoch_iteration || 0}/${pr.epoch_length}`);
    }
    parts.push(`iteration ${it}` + (planned.iterations ? `/${planned.iterations}` : ''));
    if (pr.elapsed !== null) {
      parts.push(`elapsed ${clock(pr.elapsed)}`);
    }
    const training = this.live && st !== 'created' && pr.training;
    const perSecond = this.rate?.perSecond || 0;
    if (training && st === 'running' && perSecond > 0) {
      // the whole run's ETA: whichever of its stopping rules comes first
      const left = [planned.iterations && planned.iterations > it
                      ? (planned.iterations - it) / perSecond : Infinity,
                    planned.seconds && pr.elapsed !== null
                      ? Math.max(0, planned.seconds - pr.elapsed) : Infinity];
      const eta = Math.min(...left);
      if (isFinite(eta)) {
        parts.push(`ETA ${clock(eta)}`);
      }
      parts.push(`${formatNumber(perSecond)} it/s`);
    }
    if (st === 'finished' || st === 'failed' || st === 'interrupted') {
      // the final value of every curve
      const keys = orderGroups(Object.keys(this.series).filter(plottable)).flatMap(g => g[1]);
      for (const k of keys) {
        const v = this.series[k].value;
        const y = v[v.length - 1];
        if (typeof y === 'number') {
          parts.push(`${escapeHtml(k)} <b>${formatNumber(y)}</b>`);
        }
      }
    } else {
      for (const [k, v] of Object.entries(pr.last)) {
        if (plottable(k) && groupOf(k) === 'loss') {
          parts.push(`${escapeHtml(k)} ${formatNumber(v)}`);
        }
      }
    }
    if (this.offline) {
      parts.push(`<span class="labkit-cockpit-offline">not live: ${escapeHtml(this.offline)}` +
                 '</span>');
    }
    this.els.info.innerHTML = parts.join(' · ');
    const fracs = [planned.iterations ? it / planned.iterations : 0,
                   planned.seconds && pr.elapsed !== null ? pr.elapsed / planned.seconds : 0];
    const frac = st === 'finished' ? 1 : Math.max(...fracs) ||
      (pr.epoch_length ? (pr.epoch_iteration || 0) / pr.epoch_length : 0);
    this.els.bar.style.width = `${Math.min(100, Math.max(0, frac * 100)).toFixed(1)}%`;
    // a sweep's trial takes no commands (the server refuses them): its sweep's driver decides
    // when it trains, pauses and stops
    const sweep = typeof run.sweep_id === 'string' ? run.sweep_id : '';
    const trial = this.node.querySelector('.labkit-cockpit-trial') as HTMLElement;
    trial.textContent = !sweep ? '' : training
      ? `a trial of sweep ${sweep}: pause or stop the sweep (Sweeps in the Runs sidebar)`
      : `a trial of sweep ${sweep}`;
    const can = this.trusted && !this.offline && !!training && !sweep;
    const set = (c: string, on: boolean) => {
      const b = this.node.querySelector(`button[data-command="${c}"]`) as HTMLButtonElement;
      b.disabled = !on;
      b.title = sweep ? `run ${this.runId} is a trial of sweep ${sweep}; its sweep decides ` +
        'when it trains, pauses and stops' : '';
    };
    set('pause', can && st === 'running');
    set('resume', can && st === 'paused');
    set('stop', can);
    set('checkpoint', can);
  }

  /** The newest epoch-level records (or per-batch ones when there are none): compact,
   * numbers right-aligned. */
  private renderLog(keys: string[]): void {
    const sparse = keys.filter(k => groupOf(k) !== k);
    const use = sparse.length ? sparse : keys;
    const rows = new Map<number, Record<string, number | null>>();
    for (const k of use) {
      const s = this.series[k];
      const n = s.iteration.length;
      for (let i = Math.max(0, n - (this.data.tail || 5)); i < n; i++) {
        const row = rows.get(s.iteration[i]) || { epoch: s.epoch?.[i] ?? null };
        row[k] = s.value[i];
        rows.set(s.iteration[i], row);
      }
    }
    const its = [...rows.keys()].sort((a, b) => a - b).slice(-(this.data.tail || 5));
    if (!its.length) {
      this.els.log.innerHTML = '';
      return;
    }
    const head = ['iteration', 'epoch', ...use].map(k => `<th>${escapeHtml(k)}</th>`).join('');
    const body = its.map(it => {
      const r = rows.get(it)!;
      const cells = [it, r.epoch, ...use.map(k => r[k])].map(
        v => `<td>${typeof v === 'number' ? formatNumber(v) : ''}</td>`);
      return `<tr>${cells.join('')}</tr>`;
    }).join('');
    this.els.log.innerHTML = `<table class="labkit-log"><thead><tr>${head}</tr></thead>` +
      `<tbody>${body}</tbody></table>`;
  }
}

/** The renderer JupyterLab uses for the Dashboard's output type. */
export class CockpitRenderer extends Panel {
  private cockpit: Cockpit | null = null;

  constructor() {
    super();
    this.addClass('labkit-cockpit-output');
  }

  async renderModel(model: { data: Record<string, unknown>; trusted: boolean }):
    Promise<void> {
    const data = model.data[MIME_TYPE] as IDashboardData;
    if (this.cockpit && data && this.cockpit.runId === data.run_id) {
      this.cockpit.setData(data);
      return;
    }
    if (this.cockpit) {
      this.cockpit.dispose();
      this.cockpit = null;
    }
    if (!data || typeof data !== 'object' || typeof data.run_id !== 'string') {
      const note = new Widget();
      note.node.textContent = 'labkit: this output holds no run';
      this.addWidget(note);
      return;
    }
    this.cockpit = new Cockpit(data, model.trusted);
    this.addWidget(this.cockpit);
  }

  dispose(): void {
    if (this.cockpit) {
      this.cockpit.dispose();
      this.cockpit = null;
    }
    super.dispose();
  }
}
