/**
 * One run: metric charts, config, checkpoints and lineage; refreshed while it trains.
 * Every value is rendered as text (``textContent``), never as HTML.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Widget } from '@lumino/widgets';

import { api, ICheckpoint, IRun, ISeries, isRunId, runPath } from './api';
import { CommandIDs } from './commands';
import { el, fmt, progressText, sparkline } from './sidebar';

export class RunPanel extends Widget {
  constructor(
    readonly runId: string,
    private app: JupyterFrontEnd,
    private interval = () => 2
  ) {
    super();
    this.addClass('labkit-run-panel');
    // a run id is checked before a panel opens: it is safe in an element id
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
        api<IRun>(runPath(this.runId)),
        api<{ metrics: Record<string, ISeries> }>(`${runPath(this.runId, 'metrics')}?max_points=400`),
        api<{ checkpoints: ICheckpoint[] }>(runPath(this.runId, 'checkpoints'))
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

  private render(run: IRun, metrics: Record<string, ISeries>, checkpoints: ICheckpoint[]): void {
    const body = this.body;
    body.textContent = '';
    const p = run.progress || {};
    body.append(
      el('h2', undefined, `${run.name || 'unnamed'} · ${run.status}`),
      el('div', 'labkit-run-id', `${run.id} · ${progressText(p)}`)
    );
    const charts = el('div', 'labkit-charts');
    for (const [key, s] of Object.entries(metrics)) {
      if (key.startsWith('time') || !s.value.length) {
        continue;
      }
      const box = el('div', 'labkit-chart');
      box.dataset.key = key;
      const last = s.value[s.value.length - 1];
      const ys = s.value.filter((v): v is number => typeof v === 'number' && isFinite(v));
      const n = s.value.length;
      const its = s.iteration;
      box.append(el('div', undefined, `${key}: ${fmt(last)} at iteration ${fmt(its[n - 1])}`));
      box.appendChild(sparkline(s.value, 260, 80));
      const range = ys.length
        ? `${n} point${n === 1 ? '' : 's'} · iterations ${fmt(its[0])}-${fmt(its[n - 1])} · ` +
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
    for (const h of ['id', 'iteration', 'epoch', 'MB', 'valid', '']) {
      head.appendChild(el('th', undefined, h));
    }
    table.appendChild(head);
    for (const c of checkpoints) {
      const tr = el('tr');
      const fork = el('button', 'jp-mod-styled', 'fork');
      fork.onclick = () =>
        void this.app.commands.execute(CommandIDs.fork, { id: run.id, checkpoint: c.id });
      const cell = el('td');
      cell.appendChild(fork);
      tr.append(
        el('td', undefined, fmt(c.id)),
        el('td', undefined, fmt(c.iteration)),
        el('td', undefined, fmt(c.epoch)),
        el('td', undefined, (Number(c.size) / 1e6).toFixed(2)),
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
    if (isRunId(run.parent_run)) {
      const at = typeof run.parent_checkpoint === 'number'
        ? ` at checkpoint ${run.parent_checkpoint}`
        : ' (its checkpoint was given by path)';
      lineage.append('forked from ', link(run.parent_run), at);
    } else {
      lineage.append('not a fork');
    }
    lineage.append(' · ');
    const children = (run.children || []).filter(isRunId);
    if (children.length) {
      lineage.append('forks: ');
      children.forEach((c, i) => lineage.append(...(i ? [', ', link(c)] : [link(c)])));
    } else {
      lineage.append('no forks');
    }
    body.append(lineage);
  }
}
