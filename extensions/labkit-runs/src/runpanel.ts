/**
 * The run page: one run's live cockpit (interactive charts; Pause, Resume, Stop, Checkpoint),
 * the error of a failed run, its config, checkpoints re-checked on view, lineage, and the
 * run-level actions (Resume and Dashboard in a notebook, Fork, Delete). Opened from the Runs
 * sidebar; refreshed while the run is live. Every value is rendered as text, never as HTML.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { Panel, Widget } from '@lumino/widgets';

import { api, runPath } from './api';
import { Cockpit } from './cockpit';
import { keepClicks } from './clicks';
import { CommandIDs } from './commands';
import {
  checkpointsSection,
  configSection,
  errorBox,
  ILineage,
  IRunRecord,
  IVerifiedCheckpoint,
  lineageSection,
  shortTitle,
  summaryLine
} from './runpage_sections';
import { RunNotes } from './runpage_notes';
import { el } from './dom';

const LIVE = ['created', 'running', 'paused'];

export class RunPanel extends Panel {
  constructor(
    readonly runId: string,
    private app: JupyterFrontEnd,
    private interval = () => 2
  ) {
    super();
    this.addClass('labkit-run-panel');
    // a run id is checked before a panel opens: it is safe in an element id
    this.id = `labkit-run-${runId}`;
    // until the run is read: its short id; then its name and short id (render)
    this.title.label = `… · ${(runId.split('-')[2] || runId).slice(0, 4)}`;
    this.title.caption = `labkit run ${runId}`;
    this.title.closable = true;

    const head = new Widget();
    head.addClass('labkit-runpage-head');
    const bar = el('div', 'labkit-run-toolbar');
    const button = (label: string, caption: string, run: () => unknown) => {
      const b = el('button', 'jp-mod-styled', label);
      b.title = caption;
      b.onclick = () => void run();
      bar.appendChild(b);
      return b;
    };
    button('Refresh', 'read the run again and re-check its checkpoints',
           () => this.load(true));
    button('Resume in notebook', 'insert a cell that continues the run from its newest checkpoint',
           () => app.commands.execute(CommandIDs.resume, { id: runId }));
    button('Dashboard in notebook', 'insert a cell that shows the run live',
           () => app.commands.execute(CommandIDs.dashboard, { id: runId }));
    button('Fork...', 'a new run from the newest valid checkpoint, with config changes',
           () => app.commands.execute(CommandIDs.fork, { id: runId }));
    const del = button('Delete...', 'delete the run, its metrics and its checkpoints',
                       () => this.delete());
    del.classList.add('labkit-runpage-delete');
    this.error = el('div', 'labkit-runpage-error-slot');
    this.message = el('div', 'labkit-runpage-message');
    // the name, tags and note: a rename retitles the tab and the sidebar shows it
    this.notes = new RunNotes(runId, run => {
      if (this.run) {
        this.run = { ...this.run, name: run.name, tags: run.tags, note: run.note };
        this.retitle(this.run);
      }
      void app.commands.execute(CommandIDs.refresh);
    });
    head.node.append(this.notes.node, bar, this.message, this.error);

    this.cockpit = new Cockpit({ run_id: runId, max_rate: 4, tail: 5 }, true);
    this.details = new Widget();
    this.details.addClass('labkit-run-body');
    this.details.node.textContent = 'loading...';
    this.addWidget(head);
    this.addWidget(this.cockpit);
    this.addWidget(this.details);
    keepClicks(this.node);  // NOTE: parts are drawn again at each poll while the run trains
    void this.load(true);
  }

  readonly cockpit: Cockpit;
  private notes: RunNotes;
  private details: Widget;
  private error: HTMLDivElement;
  private message: HTMLDivElement;
  private timer: number | undefined;
  private run: IRunRecord | null = null;
  private lineage: ILineage | null = null;
  /** the checkpoints as last re-checked by the server, and the ids that check covered */
  private checkpoints: IVerifiedCheckpoint[] = [];
  private checkedIds = '';

  protected onAfterShow(): void {
    void this.load();
  }

  protected onBeforeDetach(): void {
    window.clearTimeout(this.timer);
  }

  dispose(): void {
    window.clearTimeout(this.timer);
    super.dispose();
  }

  /** Read the run and its checkpoints; their files are re-checked on the first view, on
   * Refresh and when the checkpoints change (reading every file on each poll would cost a
   * live run's disk). */
  async load(verify = false): Promise<void> {
    window.clearTimeout(this.timer);
    let status: string;
    try {
      const [run, listed, lineage] = await Promise.all([
        api<IRunRecord>(runPath(this.runId)),
        api<{ checkpoints: IVerifiedCheckpoint[] }>(runPath(this.runId, 'checkpoints')),
        api<ILineage>(runPath(this.runId, 'lineage')).catch(() => null)
      ]);
      const ids = listed.checkpoints.map(c => `${c.id}:${c.valid}`).join(',');
      if (verify || ids !== this.checkedIds) {
        const checked = await api<{ checkpoints: IVerifiedCheckpoint[] }>(
          `${runPath(this.runId, 'checkpoints')}?verify=1`);
        this.checkpoints = checked.checkpoints;
        this.checkedIds = ids;
      }
      this.run = run;
      this.lineage = lineage;
      status = run.status;
      this.message.textContent = '';
      this.render(run);
    } catch (e) {
      this.message.textContent = `labkit: ${(e as Error).message}`;
      return;
    }
    if (LIVE.includes(status) && this.isVisible && !document.hidden &&
        !this.isDisposed) {
      this.timer = window.setTimeout(() => void this.load(), this.interval() * 1000);
    }
  }

  /** The tab: the run's name and short id; its tooltip the whole id. */
  private retitle(run: IRunRecord): void {
    this.title.label = shortTitle(run);
    this.title.caption = `${run.name || 'unnamed'}: labkit run ${run.id} (${run.status})`;
  }

  private render(run: IRunRecord): void {
    this.retitle(run);
    this.notes.show(run);
    const box = errorBox(run);
    // the traceback stays open (or folded) as the reader left it
    const open = this.error.querySelector('details')?.open;
    if (open) {
      box?.querySelector('details')?.setAttribute('open', '');
    }
    this.error.replaceChildren(...(box ? [box] : []));
    const fork = (c: IVerifiedCheckpoint) =>
      void this.app.commands.execute(CommandIDs.fork, { id: run.id, checkpoint: c.id });
    const openRun = (id: string) => void this.app.commands.execute(CommandIDs.open, { id });
    const note = this.checkpoints.some(c => !c.valid)
      ? 'An invalid checkpoint cannot be loaded or forked; its files were checked when this ' +
        'page read them.'
      : '';
    this.details.node.replaceChildren(
      summaryLine(run),
      configSection(run.config),
      checkpointsSection(this.checkpoints, fork, note),
      lineageSection(run, this.lineage, openRun)
    );
  }

  /** Ask, then delete the run (the server refuses one that is training: its message is
   * shown), refresh the sidebar and close this page. */
  async delete(): Promise<void> {
    const name = this.run?.name || 'unnamed';
    const answer = await showDialog({
      title: 'Delete this run?',
      body: `Run ${name} (${this.runId}), its metrics, its checkpoints and their files will ` +
        'be deleted. This cannot be undone.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      await api(runPath(this.runId), { method: 'DELETE' });
    } catch (e) {
      void showErrorMessage('labkit: the run was not deleted', (e as Error).message);
      return;
    }
    void this.app.commands.execute(CommandIDs.refresh);
    (this.parent ?? this).close();
  }
}
