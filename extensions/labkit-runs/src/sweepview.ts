/**
 * The notebook's sweep view (``sw.show()``, ``labkit/sweep/view.py``) is plain HTML, so that it
 * reads anywhere; in JupyterLab this makes it act. One click listener on the page, for views in
 * notebook outputs only: a view's Pause, Resume and Stop buttons send their request
 * (``POST sweeps/ID/<request>``, as the Runs sidebar's buttons do), and a click on a trial's
 * row opens that trial's run page. Ids are checked before they reach a URL or a command.
 */
import { askSweep, isRunId, isSweepRequest, SweepRequest } from './api';

/** Listen on ``root`` (the page) for clicks in sweep views; ``openRun`` opens a run page. */
export function installSweepView(root: HTMLElement, openRun: (id: string) => void): void {
  root.addEventListener('click', event => {
    const target = event.target as Element | null;
    const view = target?.closest?.('.labkit-sweep-view') as HTMLElement | null;
    if (!target || !view || !view.closest('.jp-OutputArea-output')) {
      return;
    }
    const sweep = view.dataset.sweepId;
    if (!isRunId(sweep)) {
      return;
    }
    const button = target.closest('button.labkit-sweep-view-action') as HTMLButtonElement | null;
    if (button) {
      const request = button.dataset.labkitRequest;
      if (!isSweepRequest(request)) {
        return;
      }
      event.preventDefault();
      event.stopPropagation();
      void send(button, sweep, request);
      return;
    }
    const row = target.closest('tr.trial-row') as HTMLElement | null;
    const id = row?.dataset.runId;
    if (isRunId(id)) {
      openRun(id);
    }
  });
}

/** Send one request from ``button``, which says what happened (the view's next refresh
 * replaces it with the sweep's new state). */
async function send(button: HTMLButtonElement, sweep: string,
                    request: SweepRequest): Promise<void> {
  button.disabled = true;
  try {
    await askSweep(sweep, request);
    button.textContent = `${request} asked`;
  } catch (e) {
    button.disabled = false;
    button.textContent = `${request} failed`;
    button.title = `labkit: ${(e as Error).message}`;
  }
}
