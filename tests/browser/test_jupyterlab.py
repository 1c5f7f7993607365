"""Tutorials in a real browser: JupyterLab started by the test, Debian's Chromium driven by
Playwright (the harness is in conftest.py).

Tutorial 04: the Dashboard's plot gains points while training runs, Pause stops the step
counter, Resume continues it, Checkpoint writes a checkpoint that the CheckpointBrowser lists.
"""

import re
import time

import pytest

from .conftest import ROOT, open_and_run, require_browser, shot, start_lab, wait_for

require_browser()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    import shutil

    tmp = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", tmp / "root")
    with start_lab(tmp, tmp / "root", tmp / "home",
                   extra_env={"LABKIT_TUTORIAL_SECONDS": "120"}) as lab:
        yield lab


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
