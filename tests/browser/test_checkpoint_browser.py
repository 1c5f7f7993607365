"""The CheckpointBrowser in a real browser: a trained run's checkpoints in one table with the
actions on each row; Delete asks first and Cancel keeps the checkpoint; the widget follows
JupyterLab's light and dark themes (screenshots of both)."""

import json
import re

import pytest

from .conftest import ARTIFACTS, open_and_run, require_browser, shot, start_lab, wait_for

require_browser()

NOTEBOOK = "checkpoint_browser.ipynb"
CELL = """import labkit as lk
from labkit import training as T
from tests.training.helpers import make_loop

loop = T.build(make_loop, {"epochs": 2, "checkpoint_every": 6})
loop.run()
browser = lk.notebook.CheckpointBrowser(loop)
browser"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "root"
    root.mkdir()
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": CELL}
    (root / NOTEBOOK).write_text(json.dumps({
        "cells": [cell], "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                                     "display_name": "Python 3"}},
        "nbformat": 4, "nbformat_minor": 5}))
    with start_lab(tmp, root, tmp / "home") as lab:
        yield lab


# the row boxes of the table and of the action buttons beside it, top to bottom
GEOMETRY = """(w) => {
  const rows = [...w.querySelectorAll("table.labkit-checkpoints tr")].slice(1)
    .map(r => r.getBoundingClientRect());
  const acts = [...w.querySelectorAll(".labkit-actions")].map(a => {
    const b = a.querySelector("button").getBoundingClientRect(); return [b.top, b.bottom]; });
  return rows.map((r, i) => [r.top, r.bottom, acts[i]]); }"""

# the luminance (0 dark .. 1 light) of the table's background and of its text
LUMINANCE = """(w) => { const t = w.querySelector("table.labkit-checkpoints");
  const lum = (c) => { const v = c.match(/[\\d.]+/g).map(Number);
    return (0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]) / 255; };
  const s = getComputedStyle(t), cell = getComputedStyle(t.querySelector("td"));
  return [lum(s.backgroundColor), lum(cell.color)]; }"""


def element_shot(locator, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    locator.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def delete_then_cancel(page, widget, theme):
    widget.locator(".labkit-actions").first.locator("button", has_text="Delete").click()
    confirm = widget.locator(".labkit-confirm")
    confirm.wait_for(state="visible", timeout=30_000)
    assert "Delete checkpoint at iteration 18? This removes its files." in confirm.inner_text()
    element_shot(page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea").first,
                 f"checkpoint-browser-confirm-{theme}")
    confirm.locator("button", has_text="Cancel").click()
    confirm.wait_for(state="hidden", timeout=30_000)
    wait_for(lambda: "nothing deleted" in widget.locator(".labkit-message").inner_text(),
             what="the cancel message")
    assert widget.locator("table.labkit-checkpoints tr").count() == 3, "Cancel deleted a row"


def test_checkpoint_browser_delete_asks_first_in_light_and_dark(browser, lab):
    page = open_and_run(browser, lab, NOTEBOOK, 1,
                        ".labkit-checkpoint-browser table.labkit-checkpoints")
    widget = page.locator(".labkit-checkpoint-browser").first
    widget.scroll_into_view_if_needed()
    rows = widget.locator("table.labkit-checkpoints tr")
    assert rows.count() == 3  # the header and checkpoints 18 and 24 (keep_last=2)
    assert rows.nth(1).locator("td").first.inner_text() == "18"
    # each row's buttons stand beside it: the button's box lies inside the row's
    for top, bottom, (b_top, b_bottom) in widget.evaluate(GEOMETRY):
        assert top - 1 <= b_top and b_bottom <= bottom + 1, (top, bottom, b_top, b_bottom)
    background, text = widget.evaluate(LUMINANCE)
    assert background > 0.8 and text < 0.3, "light theme: dark text on a light table"
    output = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea").first
    element_shot(output, "checkpoint-browser-light")
    delete_then_cancel(page, widget, "light")

    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").click()
    page.locator(".lm-Menu-itemLabel", has_text="Theme").first.hover()
    page.locator(".lm-Menu-itemLabel").filter(has_text=re.compile("^JupyterLab Dark$")).click()
    page.wait_for_selector("body[data-jp-theme-light='false']", state="attached",
                           timeout=30_000)
    wait_for(lambda: widget.evaluate(LUMINANCE)[0] < 0.3, what="the dark table")
    background, text = widget.evaluate(LUMINANCE)
    assert text > 0.7, "dark theme: light text on a dark table"
    element_shot(output, "checkpoint-browser-dark")
    delete_then_cancel(page, widget, "dark")
    widget.locator(".labkit-actions").first.locator("button", has_text="Fork").click()
    widget.locator(".labkit-fork").wait_for(state="visible", timeout=30_000)
    assert '"lr": 0.01' in widget.locator(".labkit-fork textarea").input_value()
    element_shot(output, "checkpoint-browser-fork-dark")
    shot(page, "checkpoint-browser-page-dark")
    page.close()
