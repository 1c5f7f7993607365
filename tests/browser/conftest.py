"""The real-browser harness: JupyterLab started by the test, Debian's Chromium driven by
Python Playwright. Screenshots go to $LABKIT_TEST_ARTIFACTS (default test-artifacts/ in the
repository)."""

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("LABKIT_TEST_ARTIFACTS", ROOT / "test-artifacts"))
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def require_browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does)",
                    allow_module_level=True)
    return pytest.importorskip("playwright.sync_api").sync_playwright


class Lab:
    """A running JupyterLab: ``url`` ends with the base URL's slash, ``token`` logs in."""

    def __init__(self, url, token, root, env, log):
        self.url, self.token, self.root, self.env, self.log = url, token, root, env, log

    def page_url(self, path):
        return f"{self.url}{path}{'&' if '?' in path else '?'}token={self.token}"


#: labs told to stop (SIGTERM) whose exit is not yet waited for: (process, log file)
_stopping = []


def finish_stopping():
    """Wait for the labs told to stop (killed after 20 s), and close their logs."""
    while _stopping:
        proc, log = _stopping.pop()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="package", autouse=True)
def _no_lab_left():
    """After the last browser test, no lab is left running (each lab's exit is waited for
    while the next one starts, see ``start_lab``)."""
    yield
    finish_stopping()


@contextmanager
def start_lab(tmp, root, home, base_url="/", extra_env=None):
    """Start JupyterLab on a free port with its own config, runtime, settings and workspaces
    under ``tmp``, the labkit home ``home``, serving ``root``."""
    # NOTE: the server takes a port the system chooses (port 0, no retries) and says which in
    # its runtime file: a port found free here could be taken (by a kernel of another test)
    # before the server binds it, and the server would then listen elsewhere
    token = secrets.token_hex(16)
    env = {**os.environ, "LABKIT_HOME": str(home), "OMP_NUM_THREADS": "1",
           "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
           **(extra_env or {})}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           "--ServerApp.port=0", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}",
           f"--ServerApp.base_url={base_url}",
           f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={tmp / 'settings'}",
           f"--LabApp.workspaces_dir={tmp / 'workspaces'}", "--allow-root"]
    # no "notified about official Jupyter news?" toast over the screenshots
    news = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True, exist_ok=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    log_path = tmp / "lab.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    info = tmp / "runtime" / f"jpserver-{proc.pid}.json"
    t = time.monotonic()
    try:
        # NOTE: the lab before this one (SIGTERM sent as its module ended) shuts its kernels
        # down while this one starts; its exit was waited for at its teardown, 0.5-3 s each
        finish_stopping()
        while True:
            try:
                port = json.loads(info.read_text())["port"]
                url = f"http://127.0.0.1:{port}{base_url}"
                urllib.request.urlopen(f"{url}api/status?token={token}", timeout=2)
                break
            except (OSError, ValueError, KeyError):  # not written yet, or not yet listening
                if proc.poll() is not None or time.monotonic() - t > 90:
                    raise RuntimeError("JupyterLab did not start:\n"
                                       + log_path.read_text()) from None
                time.sleep(0.05)
        yield Lab(url, token, root, env, log_path)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _stopping.append((proc, log))  # waited for by the next start_lab, or _no_lab_left


@contextmanager
def seeded_lab(tmp_path_factory, name, seed, args=(), threads="1"):
    """A lab over a store that the Python code ``seed`` writes in a fresh process (its last
    line of output: the JSON of what it made, as ``lab.ids``)."""
    import json

    tmp = tmp_path_factory.mktemp(name)
    root, home = tmp / "root", tmp / "home"
    root.mkdir()
    env = {**os.environ, "LABKIT_HOME": str(home)}
    if threads:
        env["OMP_NUM_THREADS"] = threads
    out = subprocess.run([sys.executable, "-c", seed, *args], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    with start_lab(tmp, root, home) as lab:
        lab.ids = ids
        yield lab


# NOTE: module-scoped, not session-scoped: a live sync Playwright keeps its asyncio loop
# marked running in this thread, so the tests after tests/browser that use asyncio
# (jupyter_client, nbval) would fail; a launch costs only ~0.2 s
@pytest.fixture(scope="module")
def browser():
    sync_playwright = require_browser()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def shot(page, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def wait_for(cond, timeout=60.0, what="condition"):
    """``cond()``'s first true value, polled until ``timeout`` seconds have passed. The polls
    start 20 ms apart and back off to 200 ms: most conditions hold within a fraction of a
    second, and a fixed 200 ms poll would wait 100 ms too long on average each time."""
    t = time.monotonic()
    pause = 0.02
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() - t > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 1.5, 0.2)


#: a keyed element's key (``clicks.ts``): its own or its closest keyed ancestor's, '' if none
_KEY_OF = "e => (e && e.closest && e.closest('[data-labkit-press]')?.dataset.labkitPress) || ''"
#: presses of ``press_across_redraw`` made again when the page moved under the pointer
PRESS_TRIES = 4


def press_across_redraw(page, locator, modifiers=()):
    """Press the mouse on ``locator``'s element, hold it until a refresh has drawn that element
    again (the element pressed has left the page), and release it over the new one. The
    browser fires no click then (press and release were on two elements); labkit's views give
    it back (``extensions/labkit-runs/src/clicks.ts``). ``modifiers``: keys held throughout.

    A redraw may also move the element (a line above it drawn taller, a message shown for a
    poll): a press that landed on another element, or a release that would land on one, is
    let go away from every keyed element (nothing is clicked) and made again, as a user's
    second try would be; the clicks are given back only to what was pressed and released on,
    so the test still fails if they are not."""
    key = wait_for(lambda: locator.evaluate(_KEY_OF), timeout=30,
                   what="the element to press, keyed (data-labkit-press)")
    for _ in range(PRESS_TRIES):
        # NOTE: in one call on the element found then (Playwright's
        # scroll_into_view_if_needed failed with "not attached" when a redraw replaced
        # the element while it waited for it to be stable)
        locator.evaluate("e => e.scrollIntoView({block: 'nearest', inline: 'nearest'})")
        box = wait_for(locator.bounding_box, timeout=30, what="the element to press, shown")
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        for k in modifiers:
            page.keyboard.down(k)
        # NOTE: the element that the press lands on, whichever it is (a redraw may come
        # between the box and the press)
        page.evaluate("""() => { window.__lkPressed = null;
            document.addEventListener('mousedown', e => { window.__lkPressed = e.target; },
                                      { capture: true, once: true }); }""")
        page.mouse.down()
        pressed = page.wait_for_function(  # NOTE: [its key] (a list: '' is a key too)
            f"() => window.__lkPressed && [({_KEY_OF})(window.__lkPressed)]", timeout=30_000)
        landed = pressed.json_value() == [key]
        if landed:  # NOTE: then held until the redraw, and released where it was pressed
            page.wait_for_function("() => !window.__lkPressed.isConnected", timeout=30_000)
            landed = page.evaluate(f"([x, y]) => ({_KEY_OF})(document.elementFromPoint(x, y))",
                                   [x, y]) == key
        if not landed:
            page.mouse.move(1, 1)  # NOTE: JupyterLab's logo: no key, so nothing is clicked
        page.mouse.up()
        for k in modifiers:
            page.keyboard.up(k)
        if landed:
            return
    raise AssertionError(f"the page moved under every press of {key!r} ({PRESS_TRIES} tries)")


def open_notebook(browser, lab, notebook):
    """A new page with ``notebook`` open and its kernel idle."""
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(lab.page_url(f"lab/tree/{notebook}?reset"))
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=90_000)
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('Idle')", timeout=90_000)
    return page


#: the index of the open notebook's active cell (-1: none)
ACTIVE_CELL = """() => [...document.querySelectorAll(
  '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')].findIndex(
  (c) => c.classList.contains('jp-mod-active'))"""


def shift_enter(page, steps):
    """Shift+Enter through ``steps`` cells of the open notebook from its active one, each
    press once the notebook has moved on to the next cell (it slept 0.3 s after each)."""
    for _ in range(steps):
        before = page.evaluate(ACTIVE_CELL)
        page.keyboard.press("Shift+Enter")
        wait_for(lambda before=before: page.evaluate(ACTIVE_CELL) > before, timeout=30,
                 what=f"Shift+Enter to move on from cell {before}")


def open_and_run(browser, lab, notebook, steps, until):
    """Open ``notebook`` with a fresh kernel view and Shift+Enter through ``steps`` cells."""
    page = open_notebook(browser, lab, notebook)
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.click()
    shift_enter(page, steps)
    page.wait_for_selector(until, timeout=120_000)
    return page


#: for locator.evaluate: resolves once the element's box has stood still for three
#: animation frames in a row (a scroll or a layout has settled and been painted)
STILL = """(el) => new Promise((resolve) => {
  let last = null, same = 0;
  const tick = () => {
    const r = el.getBoundingClientRect();
    const now = [r.x, r.y, r.width, r.height].join();
    same = now === last ? same + 1 : 0;
    last = now;
    if (same >= 3) resolve(true); else requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})"""


def dark_theme(page, dark=True):
    """Switch JupyterLab to its dark theme (Settings → Theme; ``dark=False``: the light one)
    and wait until it has loaded. The choice is a user setting: it outlives the page."""
    name = "JupyterLab Dark" if dark else "JupyterLab Light"
    if page.locator(f"body[data-jp-theme-light='{str(not dark).lower()}']").count():
        return
    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").click()
    page.locator(".lm-Menu-itemLabel", has_text="Theme").first.hover()
    page.locator(".lm-Menu-itemLabel").filter(has_text=re.compile(f"^{name}$")).click()
    page.wait_for_selector(f"body[data-jp-theme-light='{str(not dark).lower()}']",
                           state="attached", timeout=30_000)
    # NOTE: JupyterLab shows its splash while the theme loads; it takes the clicks meanwhile
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=30_000)
    # NOTE: the attribute and the splash can be ahead of the theme's stylesheet (a screenshot
    # then showed a light menu bar "in the dark"): wait for its colours, then for a paint
    page.wait_for_function(THEMED, arg=dark, timeout=30_000)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


#: for page.wait_for_function(THEMED, arg=dark): whether the page's layout colour is that of a
#: dark theme (or of a light one), read from the computed style
THEMED = """(dark) => {
  const v = getComputedStyle(document.body).getPropertyValue('--jp-layout-color1').trim();
  if (!v) return false;
  const probe = document.createElement('canvas').getContext('2d');
  probe.fillStyle = v;
  const hex = probe.fillStyle;
  if (!/^#[0-9a-f]{6}$/.test(hex)) return false;
  const level = [1, 3, 5].map(i => parseInt(hex.slice(i, i + 2), 16)).reduce((a, b) => a + b) / 3;
  return dark ? level < 100 : level > 155;
}"""


#: a script for canvas.evaluate: how many pixels of the canvas are inked in ``color`` (any CSS
#: colour), within a small distance
INKED_IN = """(c, color) => {
  const probe = document.createElement('canvas').getContext('2d');
  probe.fillStyle = color;
  const hex = probe.fillStyle;  // the colour normalised to #rrggbb
  const want = [1, 3, 5].map(i => parseInt(hex.slice(i, i + 2), 16));
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] > 100 && Math.abs(d[i] - want[0]) + Math.abs(d[i + 1] - want[1]) +
        Math.abs(d[i + 2] - want[2]) < 40) { n++; }
  }
  return n;
}"""
