/**
 * labkit's JupyterLab extension: a Runs sidebar over the server's REST API
 * ({base_url}labkit/api/), run panels, commands and a status-bar item.
 *
 * Modules: ``api`` (the REST client), ``code`` (the Python the commands insert), ``sidebar``,
 * ``runpanel``, ``commands`` (command ids), ``sweepview`` (the notebook's sweep view made to
 * act); this file wires them into JupyterLab.
 */
import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  MainAreaWidget,
  showErrorMessage
} from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import { api, IRun, isRunId, runPath } from './api';
import { dashboardCode, resumeCode } from './code';
import { CommandIDs } from './commands';
import { forkForm, IForkRequest } from './forkform';
import { ComparePanel } from './compare';
import { pickRuns } from './picker';
import { RunPanel } from './runpanel';
import { MAX_COMPARE, RunsPanel, runsIcon } from './sidebar';
import { installSweepView } from './sweepview';

export { api, isRunId, runPath, RUN_ID } from './api';
export { dashboardCode, pyString, resumeCode } from './code';
export { CommandIDs } from './commands';
export { ComparePanel } from './compare';
export { pickLabel, pickRuns, PICK_LIMIT } from './picker';
export { RunPanel } from './runpanel';
export { progressText, RunsPanel, runsIcon } from './sidebar';

const PLUGIN_ID = 'labkit-runs:plugin';

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
    // sw.show() in a notebook: its buttons ask the sweep, its rows open their runs
    installSweepView(document.body, id => void app.commands.execute(CommandIDs.open, { id }));
    /** The run a command is for: its ``id`` argument, the row right-clicked, or one the user
     * picks (from the palette). Only a valid run id is ever returned. */
    const runFromArgs = async (args: Record<string, unknown>): Promise<string | null> => {
      if (args.id !== undefined) {
        if (isRunId(args.id)) {
          return args.id;
        }
        void showErrorMessage('labkit', `Not a run id: ${String(args.id).slice(0, 40)}`);
        return null;
      }
      const node = app.contextMenuHitTest(n => !!(n as HTMLElement).dataset?.runId);
      if (node) {
        const id = (node as HTMLElement).dataset.runId;
        return isRunId(id) ? id : null;
      }
      // NOTE: its own request, not the sidebar's window: the sidebar may be closed
      const [id] = await pickRuns('Which labkit run?');
      return isRunId(id) ? id : null;
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
        // the label (name and short id) and caption (full id) come from the run page
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
        const checkpoint = Number.isSafeInteger(args.checkpoint) ? (args.checkpoint as number) : null;
        // the form of the run's config (forkform.ts): typed values, only changes are sent
        let form: IForkRequest | null;
        try {
          form = await forkForm(id, checkpoint);
        } catch (e) {
          void showErrorMessage('labkit: cannot fork', (e as Error).message);
          return;
        }
        if (!form) {
          return;
        }
        try {
          const body = await api<{ run: IRun }>(runPath(id, 'fork'), {
            method: 'POST',
            body: JSON.stringify({ checkpoint: form.checkpoint, changes: form.changes })
          });
          const child = body.run?.id;
          if (isRunId(child) && form.name) {
            await api(runPath(child), { method: 'PATCH', body: JSON.stringify({ name: form.name }) });
          }
          await panel.refresh();
          // a notebook open: the cell that trains the fork, shown; none: the fork's run page
          if (isRunId(child) && !insertCell(shell, tracker, resumeCode(child))) {
            void app.commands.execute(CommandIDs.open, { id: child });
          }
        } catch (e) {
          void showErrorMessage('labkit: fork failed', (e as Error).message);
        }
      }
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh labkit runs',
      execute: () => panel.refresh()
    });
    app.commands.addCommand(CommandIDs.compare, {
      label: 'Compare labkit runs...',
      caption: 'Overlay several runs\' curves and compare their configs and best metrics',
      execute: async args => {
        let ids: unknown = args.ids;
        if (ids === undefined) {  // from the palette: pick the runs
          ids = await pickRuns('Compare which labkit runs? (Ctrl or Shift to pick several)',
                               true);
          if (!(ids as string[]).length) {
            return;
          }
        }
        const bad = Array.isArray(ids) ? ids.find(i => !isRunId(i)) : ids;
        if (!Array.isArray(ids) || bad !== undefined || !ids.length || ids.length > MAX_COMPARE) {
          void showErrorMessage('labkit', !Array.isArray(ids) || bad !== undefined
            ? `Compare takes a list of run ids; not a run id: ${String(bad).slice(0, 40)}`
            : `Compare 1 to ${MAX_COMPARE} runs (${ids.length} were given)`);
          return;
        }
        const unique = [...new Set(ids as string[])];
        const areaId = `labkit-compare-area-${[...unique].sort().join('_')}`;
        if (Array.from(shell.widgets('main')).some(w => w.id === areaId)) {
          shell.activateById(areaId);
          return;
        }
        const widget = new MainAreaWidget({ content: new ComparePanel(unique) });
        widget.id = areaId;
        widget.title.icon = runsIcon;
        shell.add(widget, 'main');
        shell.activateById(widget.id);
      }
    });
    for (const command of [CommandIDs.open, CommandIDs.resume, CommandIDs.fork,
                           CommandIDs.dashboard]) {
      app.contextMenu.addItem({ command, selector: '.labkit-run-row' });
    }
    if (palette) {
      for (const command of [CommandIDs.open, CommandIDs.resume, CommandIDs.fork,
                             CommandIDs.dashboard, CommandIDs.refresh,
                             CommandIDs.compare]) {
        palette.addItem({ command, category: 'labkit' });
      }
    }
    if (statusBar) {
      // a button (click, Enter or Space) that opens the Runs sidebar filtered to live runs;
      // its text in JupyterLab's own status text class, so it sits on the others' line
      const item = new Widget();
      item.addClass('labkit-statusbar');
      item.addClass('jp-StatusBar-TextItem');
      item.addClass('jp-mod-highlighted');
      item.node.setAttribute('role', 'button');
      item.node.tabIndex = 0;
      item.node.title = 'Show the labkit runs training now (Runs sidebar)';
      item.node.textContent = 'labkit: -';
      const reveal = () => {
        shell.activateById(panel.id);
        panel.showLive();
      };
      item.node.addEventListener('click', reveal);
      item.node.addEventListener('keydown', (e: KeyboardEvent) => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          reveal();
        }
      });
      panel.changed = () => {
        // live: running or paused, training now: the runs a click shows
        const n = panel.counts.live ?? 0;
        item.node.textContent = `labkit: ${n} live`;
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
