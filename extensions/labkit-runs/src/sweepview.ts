/**
 * The notebook's sweep view (``sw.show()``, ``labkit/sweep/view.py``) is plain HTML, so that it
 * reads anywhere; in JupyterLab this makes it act. One click listener on the page, for views in
 * notebook outputs only: a view's Pause, Resume and Stop buttons send their request
 * (``POST sweeps/ID/<request>``, as the Runs sidebar's buttons do), and a click on a trial's
 * row opens that trial's run page. Ids are checked before they reach a URL or a command.
 */
import { askSweep, isRunId, isSweepRequest, SweepRequest } from './api';

/** What a press on ``target`` asks, in a sweep view of a notebook output: a request of one
 * of its buttons, or a trial's run page; ``key`` names it the same way in a refreshed view. */
function actionAt(target: EventTarget | null, openRun: (id: string) => void):
    { key: string; run: () => void; button: boolean } | undefined {
  const el = target as Element | null;
  const view = el?.closest?.('.labkit-sweep-view') as HTMLElement | null;
  const sweep = view?.dataset.sweepId;
  if (!el || !view || !view.closest('.jp-OutputArea-output') || !isRunId(sweep)) {
    return undefined;
  }
  const button = el.closest('button.labkit-sweep-view-action') as HTMLButtonElement | null;
  if (button) {
    const request = button.dataset.labkitRequest;
    return isSweepRequest(request) && !button.disabled
      ? { key: `${sweep} ${request}`, run: () => void send(button, sweep, request), button: true }
      : undefined;
  }
  const id = (el.closest('tr.trial-row') as HTMLElement | null)?.dataset.runId;
  return isRunId(id) ? { key: `${sweep} run ${id}`, run: () => openRun(id), button: false }
    : undefined;
}

/** Listen on ``root`` (the page) for clicks in sweep views; ``openRun`` opens a run page.
 *
 * A button or a trial's row acts when the mouse button is released on the one it was pressed
 * on (by what it asks, not by element): the view is replaced at each refresh (every ``every``
 * seconds while trials change), and a press and release that straddle a refresh land on two
 * elements, so the browser fires no click on either (one click in a few was lost, and a
 * browser test timed out waiting for a run page). A click with no press before it (from the
 * keyboard or a script) acts too. */
export function installSweepView(root: HTMLElement, openRun: (id: string) => void): void {
  let pressed: string | undefined;
  let done = false;
  root.addEventListener('mousedown', event => {
    pressed = event.button === 0 ? actionAt(event.target, openRun)?.key : undefined;
    done = false;
  });
  root.addEventListener('mouseup', event => {
    const action = event.button === 0 ? actionAt(event.target, openRun) : undefined;
    if (action !== undefined && action.key === pressed) {
      done = true;  // NOTE: the click that follows, if the browser fires one, does nothing
      setTimeout(() => (done = false), 0);
      action.run();
    }
    pressed = undefined;
  });
  root.addEventListener('click', event => {
    const action = actionAt(event.target, openRun);
    if (action === undefined) {
      return;
    }
    if (action.button) {
      event.preventDefault();
      event.stopPropagation();
    }
    if (!done) {
      action.run();
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
