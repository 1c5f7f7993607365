"""Damaged rows in a real browser: a run whose config is not JSON on the compare page, and a
damaged sweep (and one whose trials cannot be read) in the Runs sidebar's Sweeps section.

The store is seeded directly (two sound runs with a loss curve, one run whose config column is
damaged but whose metrics are whole, and three sweeps: one sound, one whose settings are not a
JSON object, one with a trial whose params are not JSON). The compare page of the three runs
draws every curve, names the damaged run and why, and keeps the config table to the key the
sound runs differ in; the Sweeps section lists all three sweeps, the damaged one as one row
naming its damage, and opens the sound one's trials while the other open one says its trials
cannot be read. Screenshots in the light and the dark theme.
"""

import pytest

from .conftest import (
    ARTIFACTS,
    INKED_IN,
    dark_theme,
    require_browser,
    seeded_lab,
    shot,
    wait_for,
)

require_browser()

EVIL = '<img src=x onerror="window.__pwned=1">'
SEED = f"EVIL = {EVIL!r}\n" + """
import json
import labkit as lk

store = lk.runs.store()
SETTINGS = {"metric": "loss", "mode": "min", "trials": 2}


def run(name, config, scale):
    rid = store.create_run(name, config)
    store.add_metrics(rid, [(i, i // 20, "loss", scale / (i + 1), float(i)) for i in range(60)])
    store.update_run(rid, status="finished", progress={"iteration": 59, "epoch": 2})
    return rid


slow = run("tiny-mlp", {"lr": 0.01, "epochs": 3}, 1.0)
bad = run("broken-config", {"lr": 0.03, "epochs": 3}, 2.0)
fast = run("tiny-mlp", {"lr": 0.05, "epochs": 3}, 0.5)
store._conn().execute("UPDATE runs SET config = ? WHERE id = ?", ('{"lr": 0.03, ' + EVIL, bad))

ok = store.create_sweep("sound sweep", None, "{}", SETTINGS, [{"lr": 0.01}, {"lr": 0.05}])
store.update_trials(ok, {0: {"status": "finished", "value": 0.02, "run_id": slow},
                         1: {"status": "finished", "value": 0.01, "run_id": fast}})
store.update_sweep(ok, status="finished")
odd = store.create_sweep("odd trial", None, "{}", SETTINGS, [{"lr": 0.1}])
store.update_sweep(odd, status="finished")
store._conn().execute("UPDATE trials SET params = 'nope' WHERE sweep_id = ?", (odd,))
broken = store.create_sweep(EVIL, None, "{}", SETTINGS, [{"lr": 0.1}])
store.update_sweep(broken, status="finished")
store._conn().execute("UPDATE sweeps SET settings = '[1, 2]' WHERE id = ?", (broken,))
print(json.dumps({"slow": slow, "bad": bad, "fast": fast, "ok": ok, "odd": odd,
                  "broken": broken}))
"""

# how many of a canvas's pixels are close to a CSS colour



@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with seeded_lab(tmp_path_factory, "damaged-lab", SEED) as lab:
        yield lab


def sweep(page, sweep_id):
    return page.locator(f".labkit-sweep[data-sweep-id='{sweep_id}']")


def test_damaged_run_on_the_compare_page_and_damaged_sweeps_in_the_sidebar(browser, lab):
    ids = lab.ids
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(lab.page_url("lab?reset"))
    page.wait_for_selector(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']", timeout=90_000)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
    dark_theme(page, dark=False)
    if not page.locator("#labkit-runs").is_visible():
        page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()
    sidebar = page.locator("#labkit-runs")

    # the Sweeps section: all three, the damaged one as one row naming its damage
    for sid in (ids["ok"], ids["odd"], ids["broken"]):
        wait_for(lambda s=sid: sweep(page, s).count() == 1, timeout=30,
                 what=f"sweep {sid} listed")
    broken = sweep(page, ids["broken"])
    assert "labkit-sweep-damaged" in broken.get_attribute("class")
    assert broken.locator(".labkit-run-status").inner_text() == "damaged"
    assert broken.locator(".labkit-sweep-damage").inner_text() == \
        "its settings is not a JSON object"
    assert broken.locator(".labkit-run-name").inner_text() == EVIL  # text, never markup
    assert broken.locator("button").count() == 0  # nothing to compare, pause or stop
    broken.locator(".labkit-sweep-header").click()  # nothing opens
    assert broken.locator(".labkit-sweep-trials, .labkit-sweep-empty").count() == 0
    # the sweep whose trial cannot be read says so under its own header; the sound one opens
    sweep(page, ids["odd"]).locator(".labkit-run-name").click()
    failed = sweep(page, ids["odd"]).locator(".labkit-sweep-failed")
    wait_for(lambda: failed.count() == 1, timeout=30, what="the odd sweep's failure")
    assert failed.inner_text().startswith("its trials cannot be read: trial 0 of sweep")
    assert "its params is not JSON" in failed.inner_text()
    sweep(page, ids["ok"]).locator(".labkit-run-name").click()
    trials = sweep(page, ids["ok"]).locator(".labkit-trial-row")
    wait_for(lambda: trials.count() == 2, timeout=30, what="the sound sweep's trials")
    assert trials.first.get_attribute("data-run-id") == ids["fast"]  # best first
    assert failed.count() == 1 and sidebar.locator(".labkit-sweeps-error").inner_text() == ""
    assert sweep(page, ids["ok"]).locator(".labkit-sweep-header .labkit-run-status").inner_text() \
        == "finished"
    # the damaged run in the run list: its status, and why in its tooltip
    bad_row = sidebar.locator(f".labkit-run-row[data-run-id='{ids['bad']}']")
    assert bad_row.locator(".labkit-run-status").inner_text() == "damaged"
    assert "damaged: its config is not JSON" in bad_row.get_attribute("title")
    shot(page, "damaged-sweeps-light")
    sidebar.screenshot(path=str(ARTIFACTS / "damaged-sidebar-light.png"))

    # the compare page of the three runs, from the sidebar's selection
    for rid in (ids["slow"], ids["bad"], ids["fast"]):
        sidebar.locator(f".labkit-run-row[data-run-id='{rid}'] .labkit-run-check").click()
    sidebar.locator(".labkit-runs-compare").click()
    panel = page.locator(".labkit-compare:visible")
    wait_for(lambda: panel.locator(".labkit-compare-table tbody tr").count() == 3, timeout=30,
             what="the compare page with three rows")
    assert panel.locator(".labkit-compare-message").inner_text() == ""
    damage = panel.locator(".labkit-compare-damage li")
    assert damage.count() == 1 and damage.get_attribute("data-run-id") == ids["bad"]
    text = damage.inner_text()
    assert text.startswith("damaged") and "broken-config" in text, text
    assert "its config is not JSON" in text and "curves are drawn" in text, text
    legend = panel.locator(f".labkit-compare-legend-item[data-run-id='{ids['bad']}']")
    assert legend.inner_text().endswith("(damaged)")
    bad_tr = panel.locator(f".labkit-compare-table tr[data-run-id='{ids['bad']}']")
    assert bad_tr.locator(".labkit-run-status").inner_text() == "damaged"
    # the config table: the key the sound runs differ in, not every key of theirs
    assert panel.locator(".labkit-compare-key").all_inner_texts() == ["lr"]
    same = panel.locator(".labkit-compare-same summary").inner_text()
    assert "Same in all 2 runs" in same and "epochs=3" in same and "1 damaged" in same, same
    # every run's curve is drawn, the damaged one's too; only sound runs in parcoords
    canvas = panel.locator(".labkit-compare-figure[data-key='loss'] canvas")
    colors = panel.evaluate("(e) => [0, 1, 2].map(i => getComputedStyle(e)"
                            ".getPropertyValue(`--labkit-run-color-${i}`).trim())")
    for color in colors:
        wait_for(lambda c=color: canvas.evaluate(INKED_IN, c) > 100, timeout=20,
                 what=f"the loss curve drawn in {color}")
    assert panel.locator(".labkit-parcoords-line").count() == 2
    assert panel.locator(f".labkit-parcoords-line[data-run-id='{ids['bad']}']").count() == 0
    shot(page, "damaged-compare-light")

    # dark: the page (restored after the theme's reload) and the sidebar follow the theme
    dark_theme(page)
    panel = page.locator(".labkit-compare:visible")
    wait_for(lambda: panel.locator(".labkit-compare-damage li").count() == 1
             and panel.locator(".labkit-compare-table tbody tr").count() == 3, timeout=30,
             what="the compare page in the dark")
    if not sidebar.is_visible():  # the reload may close the sidebar
        page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()
    wait_for(lambda: sweep(page, ids["broken"]).is_visible(), timeout=30,
             what="the sweeps in the dark")
    shot(page, "damaged-compare-dark")
    sidebar.screenshot(path=str(ARTIFACTS / "damaged-sidebar-dark.png"))
    assert page.evaluate("window.__pwned") is None
    page.close()
