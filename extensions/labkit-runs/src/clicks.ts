/**
 * Clicks on elements that a refresh replaces.
 *
 * The Runs sidebar draws its rows again at each poll (every 2 s), and the run page its
 * checkpoints and lineage while the run trains. A press and a release that straddle such a
 * redraw land on two elements (the pressed one is gone), and the browser fires no click on
 * either: about one click in twenty on a sidebar row did nothing. An element marked with
 * ``pressKey`` says what it does by a key that its redrawn copy shares (``run ID``,
 * ``check ID``...); when the pressed element has left the page by the release, and the
 * release is over an element with the same key, that element gets the click the browser
 * did not fire, with the release's modifier keys. A press and release on one element are
 * left to the browser, as are clicks from the keyboard.
 */

/** Mark ``node`` as doing what ``key`` names (its redrawn copy gets the same key). */
export function pressKey(node: HTMLElement, key: string): void {
  node.dataset.labkitPress = key;
}

function keyed(target: EventTarget | null): HTMLElement | null {
  const node = target as Element | null;
  return (node?.closest?.('[data-labkit-press]') as HTMLElement | null) ?? null;
}

/** The last press of the main button anywhere on the page: its keyed element and the root
 * (of those given to ``keepClicks``) it was in. Any press replaces it, so a press released
 * outside its root is never taken up by a later release; a context menu (Ctrl-click on a
 * Mac) forgets it. */
let last: { node: HTMLElement; root: HTMLElement } | null = null;
let listening = false;

function listen(): void {
  document.addEventListener('mousedown', event => {
    const node = event.button === 0 ? keyed(event.target) : null;
    const root = node?.closest('[data-labkit-keep-clicks]') as HTMLElement | null;
    last = node && root ? { node, root } : null;
  }, true);
  document.addEventListener('contextmenu', () => (last = null), true);
  listening = true;
}

/** Give the clicks lost to a redraw inside ``root`` back to the redrawn elements. */
export function keepClicks(root: HTMLElement): void {
  if (!listening) {
    listen();
  }
  root.dataset.labkitKeepClicks = '';
  root.addEventListener('mouseup', event => {
    const press = last;
    last = null;
    if (!press || press.root !== root || event.button !== 0 || press.node.isConnected) {
      return;  // NOTE: nothing was redrawn: the browser's own click follows
    }
    const node = keyed(event.target);
    if (!node || node.dataset.labkitPress !== press.node.dataset.labkitPress ||
        !root.contains(node)) {
      return;
    }
    node.dispatchEvent(new MouseEvent('click', {
      bubbles: true,
      cancelable: true,
      view: window,
      button: 0,
      detail: 1,
      clientX: event.clientX,
      clientY: event.clientY,
      shiftKey: event.shiftKey,
      ctrlKey: event.ctrlKey,
      altKey: event.altKey,
      metaKey: event.metaKey
    }));
  });
}
