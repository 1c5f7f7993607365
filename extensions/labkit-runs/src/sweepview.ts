/**
 * The notebook's sweep view (``sw.show()``, ``labkit/sweep/view.py``) is plain HTML, so that it
 * reads anywhere; in JupyterLab this makes it act. One click listener on the page, for views in
 * notebook outputs only: a view's Pause, Resume and Stop buttons send their request
 * (``POST sweeps/ID/<request>``, as the Runs sidebar's buttons do), and a click on a trial's
 * row opens that trial's run page. Ids are checked before they reach a URL or a command.
 */
import { askSweep, isRunId, isSweepRequest, SweepRequest } from './api';
import { keepClicks } from './clicks';

/** What a click on ``target`` asks, in a sweep view of a notebook output: a request of one
 * of its buttons, or a trial's run page. */
function actionAt(target: EventTarget | null, openRun: (id: string) => void):
    { run: () => void; button: boolean } | undefined {
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
      ? { run: () => void send(button, sweep, request), button: true }
      : undefined;
  }
  const id = (el.closest('tr.trial-row') as HTMLElement | null)?.dataset.runId;
  return isRunId(id) ? { run: () => openRun(id), button: false } : undefined;
}

/** Listen on ``root`` (the page) for clicks in sweep views; ``openRun`` opens a run page.
 *
 * The view is replaced at each refresh (every ``every`` seconds while trials change), and a
 * press and release that straddle a refresh land on two elements, so the browser fires no
 * click (one click in a few was lost, and a browser test timed out waiting for a run page):
 * the view's rows and buttons say what they do (``data-labkit-press``, written by
 * labkit/sweep/view.py), and ``keepClicks`` gives such a click to the new row or button that
 * does the same, as in the Runs sidebar. */
export function installSweepView(root: HTMLElement, openRun: (id: string) => void): void {
  keepClicks(root);
  root.addEventListener('click', event => {
    const action = actionAt(event.target, openRun);
    if (action === undefined) {
      return;
    }
    if (action.button) {
      event.preventDefault();
      event.stopPropagation();
    }
    action.run();
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
