/**
 * labkit's JupyterLab extension: a Runs sidebar over the server's REST API
 * ({base_url}labkit/api/), run panels, commands and a status-bar item.
 */
import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, InputDialog, MainAreaWidget } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

const PLUGIN_ID = 'labkit-runs:plugin';

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
  }
  return svg;
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

  /** Poll while visible, with backoff after errors; paused while hidden. */
  schedule(seconds = this.delay): void {
    window.clearTimeout(this.timer);
    if (!this.isVisible || document.hidden) {
      return;
    }
    this.timer = window.setTimeout(() => void this.refresh(), seconds * 1000);
  }

  protected onAfterShow(): void {
    this.schedule(0);
  }

  protected onAfterHide(): void {
    window.clearTimeout(this.timer);
  }

  async refresh(): Promise<void> {
    try {
      const body = await api<{ runs: IRun[] }>('runs');
      this.runs = body.runs;
      this.error.textContent = '';
      this.delay = this.interval;
      await this.loadSparklines();
      this.render();
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
      const prog =
        p.epoch_length && p.epoch_iteration !== undefined
          ? `epoch ${p.epoch} · batch ${p.epoch_iteration}/${p.epoch_length}`
          : `epoch ${p.epoch ?? 0} · iteration ${p.iteration ?? 0}`;
      const last = Object.entries(p.last || {})
        .filter(([k]) => !k.startsWith('time'))
        .slice(0, 3)
        .map(([k, v]) => `${k} ${fmt(v)}`)
        .join(', ');
      const line = el('div', 'labkit-run-last', `${prog}${last ? ' · ' + last : ''}`);
      line.appendChild(sparkline(this.sparks.get(r.id) || []));
      row.append(head, el('div', 'labkit-run-id', r.id), line);
      row.onclick = () => void this.app.commands.execute(CommandIDs.open, { id: r.id });
      this.list.appendChild(row);
    }
  }
}

/** One run: metric charts, config, checkpoints and lineage. */
export class RunPanel extends Widget {
  constructor(readonly runId: string) {
    super();
    this.addClass('labkit-run-panel');
    this.id = `labkit-run-${runId}`;
    this.title.label = `run ${runId}`;
    this.title.closable = true;
    void this.load();
  }

  async load(): Promise<void> {
    this.node.textContent = 'loading...';
    try {
      const [run, metrics, cks] = await Promise.all([
        api<IRun>(`runs/${this.runId}`),
        api<{ metrics: Record<string, ISeries> }>(`runs/${this.runId}/metrics?max_points=400`),
        api<{ checkpoints: Record<string, unknown>[] }>(`runs/${this.runId}/checkpoints`)
      ]);
      this.node.textContent = '';
      this.node.append(
        el('h2', undefined, `${run.name || 'unnamed'} · ${run.status}`),
        el('div', 'labkit-run-id', run.id)
      );
      const charts = el('div', 'labkit-charts');
      for (const [key, s] of Object.entries(metrics.metrics)) {
        if (key.startsWith('time') || !s.value.length) {
          continue;
        }
        const box = el('div', 'labkit-chart');
        box.append(el('div', undefined, `${key}: ${fmt(s.value[s.value.length - 1])}`));
        box.appendChild(sparkline(s.value, 260, 80));
        charts.appendChild(box);
      }
      this.node.append(el('h3', undefined, 'metrics'), charts);
      this.node.append(el('h3', undefined, 'config'));
      this.node.append(el('pre', undefined, JSON.stringify(run.config, null, 1)));
      this.node.append(el('h3', undefined, 'checkpoints'));
      const table = el('table', 'labkit-checkpoints');
      const head = el('tr');
      for (const h of ['id', 'step', 'epoch', 'MB', 'valid']) {
        head.appendChild(el('th', undefined, h));
      }
      table.appendChild(head);
      for (const c of cks.checkpoints) {
        const tr = el('tr');
        tr.append(
          el('td', undefined, fmt(c.id)),
          el('td', undefined, fmt(c.step)),
          el('td', undefined, fmt(c.epoch)),
          el('td', undefined, ((c.size as number) / 1e6).toFixed(2)),
          el('td', undefined, c.valid ? 'yes' : 'NO')
        );
        table.appendChild(tr);
      }
      this.node.appendChild(table);
      this.node.append(el('h3', undefined, 'lineage'));
      const lineage = [
        run.parent_run ? `forked from ${run.parent_run}` : 'not a fork',
        run.children && run.children.length ? `forks: ${run.children.join(', ')}` : 'no forks'
      ];
      this.node.append(el('div', 'labkit-lineage', lineage.join(' · ')));
    } catch (e) {
      this.node.textContent = `labkit: ${(e as Error).message}`;
    }
  }
}

function insertCell(tracker: INotebookTracker, code: string): boolean {
  const panel = tracker.currentWidget;
  if (!panel) {
    return false;
  }
  const notebook = panel.content;
  NotebookActions.insertBelow(notebook);
  const cell = notebook.activeCell;
  if (!cell) {
    return false;
  }
  cell.model.sharedModel.setSource(code);
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
    const runFromArgs = (args: Record<string, unknown>): string | null => {
      if (typeof args.id === 'string') {
        return args.id;
      }
      const node = app.contextMenuHitTest(n => !!(n as HTMLElement).dataset?.runId);
      return node ? (node as HTMLElement).dataset.runId || null : null;
    };
    app.commands.addCommand(CommandIDs.open, {
      label: 'Open labkit run',
      execute: args => {
        const id = runFromArgs(args);
        if (!id) {
          return;
        }
        const widget = new MainAreaWidget({ content: new RunPanel(id) });
        widget.id = `labkit-run-area-${id}`;
        widget.title.label = `run ${id}`;
        shell.add(widget, 'main');
        shell.activateById(widget.id);
      }
    });
    app.commands.addCommand(CommandIDs.resume, {
      label: 'Resume labkit run in the notebook',
      execute: args => {
        const id = runFromArgs(args);
        if (id && !insertCell(tracker, `run = lk.resume("${id}")`)) {
          window.alert('Open a notebook first: the command inserts a cell into it.');
        }
      }
    });
    app.commands.addCommand(CommandIDs.dashboard, {
      label: 'Open a labkit Dashboard of the run in the notebook',
      execute: args => {
        const id = runFromArgs(args);
        if (id) {
          insertCell(tracker, `lk.notebook.Dashboard("${id}")`);
        }
      }
    });
    app.commands.addCommand(CommandIDs.fork, {
      label: 'Fork labkit run...',
      execute: async args => {
        const id = runFromArgs(args);
        if (!id) {
          return;
        }
        const answer = await InputDialog.getText({
          title: `Fork run ${id}: config changes as JSON`,
          text: '{}'
        });
        if (!answer.button.accept) {
          return;
        }
        const body = await api<{ run: IRun }>(`runs/${id}/fork`, {
          method: 'POST',
          body: JSON.stringify({ changes: JSON.parse(answer.value || '{}') })
        });
        await panel.refresh();
        insertCell(tracker, `run = lk.resume("${body.run.id}")`);
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
      for (const command of [CommandIDs.resume, CommandIDs.fork, CommandIDs.dashboard,
                             CommandIDs.refresh]) {
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
