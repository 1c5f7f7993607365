"""Tutorials in a real browser: JupyterLab started by the test, Debian's Chromium driven by
Playwright (the harness is in conftest.py).

Tutorial 04: the Dashboard's plot gains points while training runs, Pause stops the step
counter, Resume continues it, Checkpoint writes a checkpoint that the CheckpointBrowser lists.
Tutorial 02: GraphView draws nodes; hover shows a node's details, clicks expand a brick and
show a parameter's statistics.
"""

import re
import time

import pytest

from .conftest import ROOT, open_notebook, require_browser, shot, start_lab, wait_for

require_browser()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    import shutil

    tmp = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", tmp / "root")
    with start_lab(tmp, tmp / "root", tmp / "home",
                   extra_env={"LABKIT_TUTORIAL_SECONDS": "120"}) as lab:
        yield lab


def open_and_run(browser, lab, notebook, steps, until):
    """Open ``notebook`` with a fresh kernel view and Shift+Enter through ``steps`` cells."""
    page = open_notebook(browser, lab, notebook)
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.click()
    for _ in range(steps):
        page.keyboard.press("Shift+Enter")
        time.sleep(0.3)
    page.wait_for_selector(until, timeout=120_000)
    return page


# the newest iteration plotted (the number of points stops growing at max_points: rollover)
NEWEST = """() => { let n = 0;
  for (const d of Bokeh.documents) for (const m of d._all_models.values()) {
    const data = m.data; if (!data || m.type !== "ColumnDataSource") continue;
    const x = data instanceof Map ? data.get("x") : data["x"];
    if (x && x.length) n = Math.max(n, x[x.length - 1]); }
  return n; }"""


# curves whose iterations do not strictly increase (points drawn twice, or out of order)
REPEATS = """() => { const bad = [];
  for (const d of Bokeh.documents) for (const m of d._all_models.values()) {
    const data = m.data; if (!data || m.type !== "ColumnDataSource") continue;
    const x = Array.from(data instanceof Map ? data.get("x") : data["x"]);
    for (let i = 1; i < x.length; i++)
      if (!(x[i] > x[i - 1])) { bad.push(x.slice(0, i + 1)); break; }
  }
  return bad; }"""


def test_dashboard_plots_live_and_its_buttons_work(browser, lab):
    page = open_and_run(browser, lab, "04_live_training_dashboard.ipynb", 5,
                        ".labkit-checkpoint-browser")
    dash = page.locator(".labkit-dashboard").first

    def iteration():
        m = re.search(r"iteration (\d+)", dash.locator(".labkit-status").inner_text())
        return int(m.group(1)) if m else -1

    first = wait_for(lambda: page.evaluate(NEWEST), what="plot points")
    wait_for(lambda: page.evaluate(NEWEST) > first + 10, what="new points while training")
    dash.evaluate("e => e.scrollIntoView()")
    shot(page, "04-dashboard-training")
    assert page.evaluate(REPEATS) == []
    dash.locator("button", has_text="Pause").click()
    wait_for(lambda: "paused" in dash.locator(".labkit-status").inner_text(), what="paused")
    paused_at = iteration()
    time.sleep(2.0)
    assert iteration() == paused_at > 0, "the step counter moved while paused"
    dash.locator("button", has_text="Checkpoint").click()
    wait_for(lambda: "written" in dash.locator(".labkit-message").inner_text(),
             what="the checkpoint")
    shot(page, "04-dashboard-paused-checkpoint")
    dash.locator("button", has_text="Resume").click()
    wait_for(lambda: iteration() > paused_at + 5, what="training to continue")
    browser_widget = page.locator(".labkit-checkpoint-browser").first
    browser_widget.locator("button", has_text="Refresh").click()
    wait_for(lambda: f"<td>{paused_at}</td>" in browser_widget.inner_html(),
             what="the checkpoint in the CheckpointBrowser")
    shot(page, "04-checkpoint-browser")
    dash.locator("button", has_text="Stop").click()
    wait_for(lambda: "finished" in dash.locator(".labkit-status").inner_text(), what="stop")
    assert page.evaluate(REPEATS) == []
    page.close()


NODE = """(kind) => {
  for (const v of Object.values(Bokeh.index)) {
    if (!(v.frame && v.model.title && v.model.title.text === "computational graph")) continue;
    for (const r of v.model.renderers) {
      const d = r.data_source && r.data_source.data; if (!d) continue;
      const get = (k) => d instanceof Map ? d.get(k) : d[k];
      const kinds = get("kind"); if (!kinds) continue;
      const i = Array.from(kinds).indexOf(kind); if (i < 0) return null;
      const box = v.canvas_view.el.getBoundingClientRect();
      return [box.x + v.frame.x_scale.compute(get("x")[i]),
              box.y + v.frame.y_scale.compute(get("y")[i])];
    }
  }
  return null; }"""

TOOLTIP_TEXT = """() => { const out = [];
  const walk = (root) => { for (const el of root.querySelectorAll("*")) {
      if (el.shadowRoot) walk(el.shadowRoot);
      if ((el.className || "").toString().includes("bk-Tooltip") || el.localName === "div" &&
          (el.className || "").toString().includes("tooltip")) out.push(el.innerText || "");
      if (el.shadowRoot && (el.className || "").toString().includes("bk-Tooltip"))
        out.push(el.shadowRoot.textContent || ""); } };
  walk(document); return out.join(" | "); }"""


def test_graphview_draws_hovers_and_clicks(browser, lab):
    page = open_and_run(browser, lab, "02_bricks_roles_graphview.ipynb", 5, ".labkit-graphview")
    view = page.locator(".labkit-graphview").first
    view.scroll_into_view_if_needed()
    wait_for(lambda: page.evaluate(NODE, "brick"), what="nodes drawn")
    x, y = page.evaluate(NODE, "input")
    page.mouse.move(x, y)
    wait_for(lambda: "dtype" in page.evaluate(TOOLTIP_TEXT), what="the hover tooltip")
    assert "shape" in page.evaluate(TOOLTIP_TEXT)
    shot(page, "02-graphview-hover")
    x, y = page.evaluate(NODE, "brick")
    page.mouse.click(x, y)
    wait_for(lambda: "expanded" in view.inner_text(), what="the brick to expand")
    wait_for(lambda: page.evaluate(NODE, "parameter"), what="parameters drawn")

    def click_parameter():
        # NOTE: clicked again until the details show: the first click can land while the
        # expanded graph is still being redrawn
        x, y = page.evaluate(NODE, "parameter")
        page.mouse.click(x, y)
        time.sleep(0.5)
        return "mean" in view.inner_text() and "gradient" in view.inner_text()
    wait_for(click_parameter, what="the parameter's statistics")
    shot(page, "02-graphview-details")
    page.close()
