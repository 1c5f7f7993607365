/**
 * labkit's JupyterLab extension: a Runs sidebar over the server's REST API
 * ({base_url}labkit/api/), run panels, commands and a status-bar item.
 */
import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  InputDialog,
  MainAreaWidget,
  showErrorMessage
} from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

const PLUGIN_ID = 'labkit-runs:plugin';

/** The sidebar's icon: a rising-then-falling training curve. */
export const runsIcon = new LabIcon({
  name: 'labkit-runs:runs',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
    '<path class="jp-icon3" fill="none" stroke="#616161" stroke-width="1.6" ' +
    'd="M1.5 2.5 C4 9 6 12 14.5 13"/><path class="jp-icon3" fill="#616161" ' +
    'd="M1 14.2h14v1H1zM1 1h1v14H1z"/></svg>'
});

/** The code a command inserts: it works in a notebook that has not imported labkit. */
export function resumeCode(id: string): string {
  return `import labkit as lk\n\nrun = lk.resume("${id}")`;
}

export function dashboardCode(id: string): string {
  return `import labkit as lk\n\nlk.notebook.Dashboard("${id}")`;
}

/** Command ids, in one place. */
export namespace CommandIDs {
  export const resume = 'labkit:resume-run';
  export const fork = 'labkit:fork-run';
  export const dashboard = 'labkit:open-dashboard';
  export const open = 'labkit:open-run';
  export const refresh = 'labkit:refresh-runs';
}

interface IRun {
  id: string;
  name: string | null;
  status: string;
  created: number;
  parent_run: string | null;
  parent_checkpoint: string | null;
  config: Record<string, unknown>;
  progress: {
    epoch?: number;
    iteration?: number;
    epoch_iteration?: number;
    epoch_length?: number | null;
    last?: Record<string, number>;
  };
  children?: string[];
}

interface ISeries {
  step: number[];
  value: (number | null)[];
}

/** A request to the server extension, relative to the server's base URL. */
export async function api<T>(path: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'labkit', 'api', path);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  const body = text ? JSON.parse(text) : {};
  if (!response.ok) {
    throw new Error(body.message || `${response.status} ${response.statusText}`);
  }
  return body as T;
}

function el<K extends keyof HTMLElementTagNameMap>(
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

/** An SVG polyline of the values, scaled to width x height. */
export function sparkline(values: (number | null)[], width = 90, height = 20): SVGSVGElement {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.classList.add('labkit-sparkline');
  const ys = values.filter((v): v is number => v !== null && isFinite(v));
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
  const it = `iteration ${p.iteration ?? 0}`;
  const done = p.epoch ?? 0;
  if (p.epoch_iteration) {
    const of = p.epoch_length ? `/${p.epoch_length}` : '';
    return `${it} · epoch ${done + 1}, batch ${p.epoch_iteration}${of}`;
  }
  return `${it} · ${done} epoch${done === 1 ? '' : 's'} done`;
}

function fmt(v: unknown): string {
  return typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : String(v);
}

/** The sidebar: runs with status, progress, last metrics and a sparkline; filter and sort. */
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
    for (const s of ['all', 'running', 'paused', 'finished', 'failed', 'interrupted', 'dead']) {
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
      this.runs = body.runs;
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
          const m = await api<{ metrics: Record<string, ISeries> }>(
            `runs/${r.id}/metrics?keys=${encodeURIComponent(this.sparklineKey)}&max_points=40`
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
        (!q || r.id.includes(q) || (r.name || '').toLowerCase().includes(q))
    );
    const key = this.sortSelect.value;
    if (key === 'name') {
      rs = rs.sort((a, b) => (a.name || '').localeCompare(b.name || ''));
    } else if (key === 'status') {
      rs = rs.sort((a, b) => a.status.localeCompare(b.status));
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
        el('span', 'labkit-run-name', r.name || 'unnamed'),
        el('span', `labkit-run-status labkit-status-${r.status}`, r.status)
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

/** One run: metric charts, config, checkpoints and lineage; refreshed while it trains. */
export class RunPanel extends Widget {
  constructor(
    readonly runId: string,
    private app: JupyterFrontEnd,
    private interval = () => 2
  ) {
    super();
    this.addClass('labkit-run-panel');
    this.id = `labkit-run-${runId}`;
    this.title.label = `run ${runId}`;
    this.title.closable = true;
    const bar = el('div', 'labkit-run-toolbar');
    const button = (label: string, run: () => unknown) => {
      const b = el('button', 'jp-mod-styled', label);
      b.onclick = () => void run();
      bar.appendChild(b);
    };
    button('Refresh', () => this.load());
    button('Resume in notebook', () =>
      app.commands.execute(CommandIDs.resume, { id: runId })
    );
    button('Dashboard in notebook', () =>
      app.commands.execute(CommandIDs.dashboard, { id: runId })
    );
    button('Fork...', () => app.commands.execute(CommandIDs.fork, { id: runId }));
    this.body = el('div', 'labkit-run-body', 'loading...');
    this.node.append(bar, this.body);
    void this.load();
  }

  private body: HTMLDivElement;
  private timer: number | undefined;

  protected onAfterShow(): void {
    void this.load();
  }

  protected onBeforeDetach(): void {
    window.clearTimeout(this.timer);
  }

  async load(): Promise<void> {
    window.clearTimeout(this.timer);
    let run: IRun;
    try {
      const [r, metrics, cks] = await Promise.all([
        api<IRun>(`runs/${this.runId}`),
        api<{ metrics: Record<string, ISeries> }>(`runs/${this.runId}/metrics?max_points=400`),
        api<{ checkpoints: Record<string, unknown>[] }>(`runs/${this.runId}/checkpoints`)
      ]);
      run = r;
      this.render(run, metrics.metrics, cks.checkpoints);
    } catch (e) {
      this.body.textContent = `labkit: ${(e as Error).message}`;
      return;
    }
    if (run.status === 'running' && this.isVisible && !document.hidden) {
      this.timer = window.setTimeout(() => void this.load(), this.interval() * 1000);
    }
  }

  private render(
    run: IRun,
    metrics: Record<string, ISeries>,
    checkpoints: Record<string, unknown>[]
  ): void {
    const body = this.body;
    body.textContent = '';
    const p = run.progress || {};
    body.append(
      el('h2', undefined, `${run.name || 'unnamed'} · ${run.status}`),
      el(
        'div',
        'labkit-run-id',
        `${run.id} · ${progressText(p)}`
      )
    );
    const charts = el('div', 'labkit-charts');
    for (const [key, s] of Object.entries(metrics)) {
      if (key.startsWith('time') || !s.value.length) {
        continue;
      }
      const box = el('div', 'labkit-chart');
      box.dataset.key = key;
      const last = s.value[s.value.length - 1];
      const ys = s.value.filter((v): v is number => v !== null && isFinite(v));
      const n = s.value.length;
      box.append(
        el('div', undefined, `${key}: ${fmt(last)} at step ${s.step[n - 1]}`)
      );
      box.appendChild(sparkline(s.value, 260, 80));
      const range = ys.length
        ? `${n} point${n === 1 ? '' : 's'} · steps ${s.step[0]}-${s.step[n - 1]} · ` +
          `min ${fmt(Math.min(...ys))} · max ${fmt(Math.max(...ys))}`
        : 'no finite values';
      box.append(el('div', 'labkit-chart-range', range));
      charts.appendChild(box);
    }
    body.append(el('h3', undefined, 'metrics'),
                charts.childElementCount ? charts : el('div', undefined, 'no metrics yet'));
    body.append(el('h3', undefined, 'config'));
    body.append(el('pre', 'labkit-run-config', JSON.stringify(run.config, null, 1)));
    body.append(el('h3', undefined, 'checkpoints'));
    const table = el('table', 'labkit-checkpoints');
    const head = el('tr');
    for (const h of ['id', 'step', 'epoch', 'MB', 'valid', '']) {
      head.appendChild(el('th', undefined, h));
    }
    table.appendChild(head);
    for (const c of checkpoints) {
      const tr = el('tr');
      const fork = el('button', 'jp-mod-styled', 'fork');
      fork.onclick = () =>
        void this.app.commands.execute(CommandIDs.fork, { id: run.id, checkpoint: c.id as number });
      const cell = el('td');
      cell.appendChild(fork);
      tr.append(
        el('td', undefined, fmt(c.id)),
        el('td', undefined, fmt(c.step)),
        el('td', undefined, fmt(c.epoch)),
        el('td', undefined, ((c.size as number) / 1e6).toFixed(2)),
        el('td', undefined, c.valid ? 'yes' : 'NO'),
        cell
      );
      table.appendChild(tr);
    }
    body.appendChild(checkpoints.length ? table : el('div', undefined, 'no checkpoints yet'));
    body.append(el('h3', undefined, 'lineage'));
    const lineage = el('div', 'labkit-lineage');
    const link = (id: string) => {
      const a = el('a', 'labkit-run-link', id);
      a.href = '#';
      a.onclick = e => {
        e.preventDefault();
        void this.app.commands.execute(CommandIDs.open, { id });
      };
      return a;
    };
    if (run.parent_run) {
      const at = run.parent_checkpoint
        ? ` at checkpoint ${run.parent_checkpoint.split(/[\\/]/).filter(Boolean).pop()}`
        : '';
      lineage.append('forked from ', link(run.parent_run), at);
    } else {
      lineage.append('not a fork');
    }
    lineage.append(' · ');
    if (run.children && run.children.length) {
      lineage.append('forks: ');
      run.children.forEach((c, i) => lineage.append(...(i ? [', ', link(c)] : [link(c)])));
    } else {
      lineage.append('no forks');
    }
    body.append(lineage);
  }
}

/** Put ``code`` into the active notebook and show it. */
function insertCell(shell: ILabShell, tracker: INotebookTracker, code: string): boolean {
  const panel = tracker.currentWidget;
  if (!panel) {
    return false;
  }
  const notebook = panel.content;
  const active = notebook.activeCell;
  // an empty cell where the user is gets the code; otherwise a new cell below it
  if (!active || active.model.type !== 'code' || active.model.sharedModel.getSource().trim()) {
    NotebookActions.insertBelow(notebook);
  }
  const cell = notebook.activeCell;
  if (!cell) {
    return false;
  }
  cell.model.sharedModel.setSource(code);
  shell.activateById(panel.id);
  return true;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'A Runs sidebar for labkit training runs, over the server REST API.',
  autoStart: true,
  requires: [ILabShell, INotebookTracker],
  optional: [ICommandPalette, ISettingRegistry, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    shell: ILabShell,
    tracker: INotebookTracker,
    palette: ICommandPalette | null,
    settings: ISettingRegistry | null,
    statusBar: IStatusBar | null
  ) => {
    const panel = new RunsPanel(app);
    shell.add(panel, 'left', { rank: 600 });
    /** The run a command is for: its ``id`` argument, the row right-clicked, or one the user
     * picks (from the palette). */
    const runFromArgs = async (args: Record<string, unknown>): Promise<string | null> => {
      if (typeof args.id === 'string') {
        return args.id;
      }
      const node = app.contextMenuHitTest(n => !!(n as HTMLElement).dataset?.runId);
      if (node) {
        return (node as HTMLElement).dataset.runId || null;
      }
      if (!panel.runs.length) {
        await panel.refresh();
      }
      if (!panel.runs.length) {
        void showErrorMessage('labkit', 'There are no runs in this workspace yet.');
        return null;
      }
      const labels = panel.runs.map(r => `${r.id} · ${r.name || 'unnamed'} · ${r.status}`);
      const answer = await InputDialog.getItem({ title: 'Which labkit run?', items: labels });
      if (!answer.button.accept || !answer.value) {
        return null;
      }
      return answer.value.split(' ')[0];
    };
    const insertOrSay = (code: string) => {
      if (!insertCell(shell, tracker, code)) {
        void showErrorMessage(
          'labkit',
          'Open a notebook first: this command inserts a cell into the active notebook.'
        );
      }
    };
    app.commands.addCommand(CommandIDs.open, {
      label: 'Open labkit run',
      execute: async args => {
        const id = await runFromArgs(args);
        if (!id) {
          return;
        }
        const areaId = `labkit-run-area-${id}`;
        const open = Array.from(shell.widgets('main')).find(w => w.id === areaId);
        if (open) {
          shell.activateById(areaId);
          return;
        }
        const content = new RunPanel(id, app, () => panel.interval);
        const widget = new MainAreaWidget({ content });
        widget.id = areaId;
        widget.title.label = `run ${id}`;
        widget.title.icon = runsIcon;
        shell.add(widget, 'main');
        shell.activateById(widget.id);
      }
    });
    /** A command that inserts ``code(id)`` for the run into the active notebook. */
    const addInsertCommand = (
      command: string,
      label: string,
      caption: string,
      code: (id: string) => string
    ) =>
      app.commands.addCommand(command, {
        label,
        caption,
        execute: async args => {
          const id = await runFromArgs(args);
          if (id) {
            insertOrSay(code(id));
          }
        }
      });
    addInsertCommand(
      CommandIDs.resume,
      'Resume labkit run in the notebook',
      'Insert a cell that continues the run from its newest checkpoint',
      resumeCode
    );
    addInsertCommand(
      CommandIDs.dashboard,
      'Open a labkit Dashboard of the run in the notebook',
      'Insert a cell that shows the run live, from the run store',
      dashboardCode
    );
    app.commands.addCommand(CommandIDs.fork, {
      label: 'Fork labkit run...',
      caption: 'A new run from a checkpoint, with config changes',
      execute: async args => {
        const id = await runFromArgs(args);
        if (!id) {
          return;
        }
        const checkpoint = typeof args.checkpoint === 'number' ? args.checkpoint : null;
        const answer = await InputDialog.getText({
          title: `Fork run ${id}${checkpoint === null ? '' : ` from checkpoint ${checkpoint}`}: config changes as JSON`,
          text: '{}'
        });
        if (!answer.button.accept) {
          return;
        }
        try {
          const changes = JSON.parse(answer.value || '{}');
          const body = await api<{ run: IRun }>(`runs/${id}/fork`, {
            method: 'POST',
            body: JSON.stringify({ checkpoint, changes })
          });
          await panel.refresh();
          insertOrSay(resumeCode(body.run.id));
        } catch (e) {
          void showErrorMessage('labkit: fork failed', (e as Error).message);
        }
      }
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh labkit runs',
      execute: () => panel.refresh()
    });
    for (const command of [CommandIDs.open, CommandIDs.resume, CommandIDs.fork,
                           CommandIDs.dashboard]) {
      app.contextMenu.addItem({ command, selector: '.labkit-run-row' });
    }
    if (palette) {
      for (const command of [CommandIDs.open, CommandIDs.resume, CommandIDs.fork,
                             CommandIDs.dashboard, CommandIDs.refresh]) {
        palette.addItem({ command, category: 'labkit' });
      }
    }
    if (statusBar) {
      const item = new Widget();
      item.addClass('labkit-statusbar');
      item.node.textContent = 'labkit: -';
      panel.changed = () => {
        const n = panel.runs.filter(r => r.status === 'running').length;
        item.node.textContent = `labkit: ${n} training`;
      };
      statusBar.registerStatusItem('labkit-runs:status', { item, align: 'left', rank: 10 });
    }
    if (settings) {
      void settings.load(PLUGIN_ID).then(s => {
        const apply = () => {
          panel.interval = s.get('refreshInterval').composite as number;
          panel.maxBackoff = s.get('maxBackoff').composite as number;
          panel.maxRuns = s.get('maxRuns').composite as number;
          panel.sparklineKey = s.get('sparklineKey').composite as string;
        };
        apply();
        s.changed.connect(apply);
      });
    }
    // the status bar counts training runs even while the sidebar is closed
    void panel.refresh();
  }
};

export default plugin;
