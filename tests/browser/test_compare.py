"""The compare page (``extensions/labkit-runs/src/compare.ts``) in a real browser.

A store seeded by real trainings of the tests' tiny loop: two runs that differ only in their
learning rate, and a third with a different width whose name and one config value carry markup.
Opened from the command palette (the command asks which runs), the page draws both runs' curves
in their colours on one chart per metric, lists the config keys the same in all runs once and
only the differing key as a table column, sorts by a column on a click, hides a row by a filter,
and highlights a run's line in the parallel coordinates under the mouse (and its table row).
Screenshots in the light and the dark theme.
"""

import re

import pytest

from .conftest import INKED_IN, dark_theme, require_browser, seeded_lab, shot, wait_for

require_browser()

EVIL = '<img src=x onerror="window.__pwned=1">'
SEED = f"EVIL = {EVIL!r}\n" + """
import json
from labkit.training import build
from tests.training.helpers import make_loop

ids = []
for name, config in [("tiny-mlp", {"epochs": 3, "lr": 0.01}),
                     ("tiny-mlp", {"epochs": 3, "lr": 0.05}),
                     (EVIL, {"epochs": 3, "lr": 0.05, "hidden": 16, "note": EVIL})]:
    loop = build(make_loop, config, name=name)
    loop.run()
    loop.close()
    ids.append(loop.run_id)
print(json.dumps(ids))
"""

# pixels of a canvas close to a CSS colour (a per-batch curve is drawn at 80% alpha)
# how many of a canvas's pixels are opaque and light (text drawn for a dark theme)
LIGHT_INK = """(c) => {
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] > 100 && d[i] > 170 && d[i + 1] > 170 && d[i + 2] > 170) { n++; }
  }
  return n;
}"""



@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with seeded_lab(tmp_path_factory, "compare-lab", SEED) as lab:
        yield lab


def compare_from_palette(page, ids):
    """Run the palette's Compare command and pick ``ids`` in its dialog."""
    palette = page.locator(".lm-CommandPalette-input")
    for _ in range(3):  # NOTE: the menu's first click is sometimes taken by a closing popup
        page.keyboard.press("Escape")
        page.locator(".lm-MenuBar-itemLabel", has_text="View").click()
        page.locator(".lm-Menu-itemLabel", has_text="Command Palette").first.click()
        try:
            palette.wait_for(state="visible", timeout=5000)
            break
        except Exception:  # playwright's TimeoutError: click the menu again
            continue
    palette.fill("Compare labkit runs")
    page.keyboard.press("Enter")
    dialog = page.locator(".jp-Dialog")
    wait_for(lambda: dialog.locator("option").count() >= len(ids), timeout=15,
             what="the runs to pick")
    options = dialog.locator("option").all_inner_texts()
    dialog.locator("select").select_option(
        index=[i for i, o in enumerate(options) if o.split(" ")[0] in ids])
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
    panel = page.locator(".labkit-compare:visible")
    wait_for(lambda: panel.locator(".labkit-compare-legend-item").count() == len(ids)
             and panel.locator(".labkit-compare-table tbody tr").count() == len(ids),
             timeout=30, what="the compare page")
    return panel


def order(panel):
    rows = panel.locator(".labkit-compare-table tbody tr")
    return [rows.nth(i).get_attribute("data-run-id") for i in range(rows.count())]


def test_compare_two_runs(browser, lab):
    slow, fast, evil = lab.ids
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(lab.page_url("lab?reset"))
    page.wait_for_selector(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']", timeout=90_000)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
    tab = page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']")
    tab.click()  # focus the app
    # the Runs sidebar closed: the palette's picker lists the runs all the same
    tab.click()
    wait_for(lambda: not page.locator("#labkit-runs").is_visible(), what="the sidebar closed")
    panel = compare_from_palette(page, [slow, fast])

    # the legend: each run's name and short id, a colour each
    legend = panel.locator(".labkit-compare-legend-item")
    assert sorted(legend.all_inner_texts()) == sorted(
        [f"tiny-mlp · {slow.split('-')[2][:4]}", f"tiny-mlp · {fast.split('-')[2][:4]}"])
    colors = panel.evaluate("(e) => [0, 1].map(i => getComputedStyle(e)"
                            ".getPropertyValue(`--labkit-run-color-${i}`).trim())")
    assert colors[0] and colors[1] and colors[0] != colors[1], colors
    # one chart per metric, both runs' curves drawn in their colours on it
    keys = panel.locator(".labkit-compare-figure").evaluate_all(
        "(fs) => fs.map(f => f.dataset.key)")
    assert keys[0] == "loss" and "accuracy" in keys, keys
    canvas = panel.locator(".labkit-compare-figure[data-key='loss'] canvas")
    for color in colors:
        wait_for(lambda c=color: canvas.evaluate(INKED_IN, c) > 150,
                 timeout=20, what=f"the loss curve drawn in {color}")
    # hover values per run
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.4)
    tip = panel.locator(".labkit-compare-figure[data-key='loss'] .labkit-plot-tip")
    wait_for(lambda: tip.is_visible(), what="the hover values")
    assert tip.inner_text().count("tiny-mlp ·") == 2, tip.inner_text()
    assert tip.inner_text().startswith("iteration "), tip.inner_text()
    page.mouse.move(5, 600)

    # the run page's chart options: x as epoch or wall time (each run from its start), smoothing
    for axis, label in (("epoch", r"epoch \d+(\.\d+)?"),
                        ("time", r"wall time \(since each run started\) (\d+:)?\d+:\d\d")):
        panel.locator(".labkit-x").select_option(axis)
        page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.4)
        wait_for(lambda lb=label: tip.is_visible() and re.match(lb, tip.inner_text()),
                 what=f"the hover's x on the {axis} axis")
        page.mouse.move(5, 600)
    panel.locator(".labkit-smoothing").fill("0.9")
    assert panel.locator(".labkit-smoothing-value").inner_text() == "0.9"
    for color in colors:
        wait_for(lambda c=color: canvas.evaluate(INKED_IN, c) > 150,
                 timeout=20, what=f"the smoothed curve drawn in {color}")
    shot(page, "16-compare-time-smoothed")
    panel.locator(".labkit-x").select_option("iteration")
    panel.locator(".labkit-smoothing").fill("0")

    # the table: only the key that differs; the others once, above it
    assert panel.locator(".labkit-compare-key").all_inner_texts() == ["lr"]
    same = panel.locator(".labkit-compare-same summary").inner_text()
    assert "Same in all 2 runs" in same and "epochs=3" in same and "hidden=32" in same, same
    assert "lr=" not in same
    heads = [h.rstrip(" ▲▼") for h in panel.locator(".labkit-compare-titles th")
             .all_inner_texts()]
    assert heads[:4] == ["run", "status", "started", "duration"], heads
    assert heads[4].startswith("best loss (lowest)"), heads
    cells = panel.locator(f"tr[data-run-id='{fast}'] td").all_inner_texts()
    assert cells[1] == "finished" and cells[-1] == "0.05"
    assert re.fullmatch(r"\d+:\d\d", cells[3]) and re.fullmatch(r"\d\.\d+(e-\d+)?", cells[4])

    # sorting by lr: ascending, then descending on a second click
    lr_head = panel.locator(".labkit-compare-titles th[data-column='config:lr']")
    lr_head.click()
    assert order(panel) == [slow, fast]
    lr_head.click()
    assert order(panel) == [fast, slow]
    assert "▼" in lr_head.inner_text()

    # a filter hides the row it does not match
    lr_filter = panel.locator(".labkit-compare-filter[data-column='config:lr']")
    lr_filter.fill("> 0.02")
    wait_for(lambda: order(panel) == [fast], what="the filter to hide the slow run")
    assert panel.locator(".labkit-parcoords-line").count() == 1
    lr_filter.fill("")
    wait_for(lambda: len(order(panel)) == 2, what="both rows back")

    # the parallel coordinates: hovering a run's line highlights it and its table row
    line = panel.locator(f".labkit-parcoords-line[data-run-id='{slow}']")
    points = [tuple(map(float, p.split(","))) for p in line.get_attribute("points").split()]
    assert len(points) == 2, points  # lr, then best loss
    svg = panel.locator(".labkit-parcoords svg").bounding_box()
    (x0, y0), (x1, y1) = points
    page.mouse.move(svg["x"] + (x0 + x1) / 2, svg["y"] + (y0 + y1) / 2)
    wait_for(lambda: "labkit-parcoords-active" in (line.get_attribute("class") or ""),
             what="the hovered line highlighted")
    other = panel.locator(f".labkit-parcoords-line[data-run-id='{fast}']")
    assert "labkit-parcoords-active" not in (other.get_attribute("class") or "")
    assert "labkit-compare-active" in panel.locator(
        f".labkit-compare-table tr[data-run-id='{slow}']").get_attribute("class")
    assert slow.split("-")[2][:4] in panel.locator(".labkit-parcoords-tip").inner_text()
    shot(page, "16-compare-light")
    page.mouse.move(5, 600)

    # three runs, one named with markup and a config value with markup: shown as text
    panel3 = compare_from_palette(page, [slow, fast, evil])
    assert sorted(panel3.locator(".labkit-compare-key").all_inner_texts()) == \
        ["hidden", "lr", "note"]
    assert EVIL in panel3.locator(f"tr[data-run-id='{evil}']").inner_text()
    assert EVIL in panel3.locator(".labkit-compare-legend").inner_text()
    assert page.locator(".labkit-compare img").count() == 0
    assert page.evaluate("window.__pwned") is None
    shot(page, "16-compare-three-light")

    # dark: the page follows the theme
    dark_theme(page)
    panel3 = page.locator(".labkit-compare:visible")
    wait_for(lambda: panel3.locator(".labkit-compare-figure canvas").count() >= 2,
             what="the charts after the theme switch")
    background = panel3.evaluate("(e) => getComputedStyle(e).backgroundColor")
    text = panel3.locator(".labkit-compare-titles th").first.evaluate(
        "(e) => getComputedStyle(e).color")
    assert luminance(background) < 0.3 and luminance(text) > 0.6, (background, text)
    # the charts redrawn once the theme's CSS has loaded: their axis text light on dark
    loss3 = panel3.locator(".labkit-compare-figure[data-key='loss'] canvas")
    wait_for(lambda: loss3.evaluate(LIGHT_INK) > 30, timeout=20,
             what="the charts redrawn in the dark theme")
    shot(page, "16-compare-dark")
    page.close()


def luminance(css: str) -> float:
    r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255
