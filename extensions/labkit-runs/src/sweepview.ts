/**
 * The notebook's sweep view (``sw.show()``, ``labkit/sweep/view.py``) is plain HTML, so that it
 * reads anywhere; in JupyterLab this makes it act. One click listener on the page, for views in
 * notebook outputs only: a view's Pause, Resume and Stop buttons send their request
 * (``POST sweeps/ID/<request>``, as the Runs sidebar's buttons do), and a click on a trial's
 * row opens that trial's run page. Ids are checked before they reach a URL or a command.
 */
import { askSweep, isRunId, isSweepRequest, SweepRequest } from './api';

/** The run id of the trial row ``target`` is in, in a sweep view of a notebook output. */
function trialRow(target: EventTarget | null): string | undefined {
  const el = target as Element | null;
  const view = el?.closest?.('.labkit-sweep-view') as HTMLElement | null;
  if (!el || !view || !view.closest('.jp-OutputArea-output') || !isRunId(view.dataset.sweepId)) {
    return undefined;
  }
  const id = (el.closest('tr.trial-row') as HTMLElement | null)?.dataset.runId;
  return isRunId(id) ? id : undefined;
}

/** Listen on ``root`` (the page) for clicks in sweep views; ``openRun`` opens a run page.
 *
 * A trial's row opens when the button is released on the row it was pressed on, by run id:
 * the view is replaced at each refresh (every ``every`` seconds while trials change), and a
 * press and release that straddle a refresh land on two rows, so the browser fires no click
 * on either (one click in a few was lost, and a browser test timed out waiting for the page).
 * A click with no press before it (from the keyboard or a script) opens the row too. */
export function installSweepView(root: HTMLElement, openRun: (id: string) => void): void {
  let pressed: string | undefined;
  let opened = false;
  root.addEventListener('mousedown', event => {
    pressed = event.button === 0 ? trialRow(event.target) : undefined;
    opened = false;
  });
  root.addEventListener('mouseup', event => {
    const id = event.button === 0 ? trialRow(event.target) : undefined;
    if (id !== undefined && id === pressed) {
      opened = true;
      openRun(id);
    }
    pressed = undefined;
  });
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
    const id = trialRow(target);
    if (id !== undefined && !opened) {
      openRun(id);
    }
    opened = false;
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
