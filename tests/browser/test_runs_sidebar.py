"""The labkit-runs JupyterLab extension in a real browser, under a non-root base URL.

The store is seeded by real trainings (the digits demo): one paused after 40 batches, one
finished. JupyterLab serves at ``/user/test/`` as behind JupyterHub. The Runs sidebar lists
both runs with status, progress and a sparkline; the status filter works; a click opens the run
page with its charts, config and checkpoint; the run's context menu inserts
``run = lk.resume("<id>")`` into the open notebook, and running that cell finishes the run, which
the sidebar shows without a reload; the palette's Dashboard command asks which run and inserts a
Dashboard that draws; Fork in the run panel creates a run with the config change and lineage.
"""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from .conftest import (
    STILL,
    dark_theme,
    open_notebook,
    press_across_redraw,
    require_browser,
    seeded_lab,
    shot,
    start_lab,
    wait_for,
)

require_browser()

BASE = "/user/test/"
#: how many points of the loss a cockpit holds
POINTS = "(el) => el.labkitCockpit.series.loss ? el.labkitCockpit.series.loss.iteration.length : 0"
EVIL = '<img src=x onerror="window.__pwned=1">'
SEED = f"EVIL = {EVIL!r}\n" + """
import json, labkit as lk
from labkit.training import build, demo
paused = build(demo.make_loop, {"epochs": 6, "device": "cpu"})
paused.run(max_batches=40)
paused.close()
done = build(demo.make_loop, {"epochs": 2, "device": "cpu", "hidden": 32})
done.run()
done.close()
# a run whose name is markup: the sidebar must show it as text
evil = lk.runs.store().create_run(EVIL)
print(json.dumps({"paused": paused.run_id, "finished": done.run_id, "evil": evil}))
"""


def notebook(*sources):
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": s} for s in sources]
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3",
                                                        "display_name": "Python 3",
                                                        "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs-lab")
    root, home = tmp / "root", tmp / "home"
    root.mkdir()
    (root / "scratch.ipynb").write_text(json.dumps(notebook("import labkit as lk")))
    env = {**os.environ, "LABKIT_HOME": str(home), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", SEED], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    with start_lab(tmp, root, home, base_url=BASE) as lab:
        lab.ids = ids
        yield lab


def lk_checkpoint_ids(lab, run_id):
    """The ids of the run's checkpoints, from the lab's store (read in a subprocess: this
    process's store is another one)."""
    code = f"import labkit as lk; print([c['id'] for c in lk.runs.checkpoints({run_id!r})])"
    out = subprocess.run([sys.executable, "-c", code], env=lab.env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(page, run_id):
    return page.locator(f".labkit-run-row[data-run-id='{run_id}']")


def cell_with(page, text):
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell", has_text=text)


def run_cell(page, cell):
    """Run ``cell`` and wait for its execution count (the kernel finished it)."""
    cell.locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")
    wait_for(lambda: "[*]" not in cell.locator(".jp-InputPrompt").inner_text()
             and any(c.isdigit() for c in cell.locator(".jp-InputPrompt").inner_text()),
             timeout=120, what="the cell to run")


def test_runs_sidebar_panel_and_commands(browser, lab):
    paused, finished = lab.ids["paused"], lab.ids["finished"]
    page = open_notebook(browser, lab, "scratch.ipynb")
    assert lab.url.endswith(BASE) and page.url.startswith(lab.url + "lab/")
    run_cell(page, cell_with(page, "import labkit as lk"))

    # the sidebar: both runs, their status, progress and sparkline
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()
    wait_for(lambda: row(page, paused).count() and row(page, finished).count(),
             what="both runs in the sidebar")
    assert "paused" in row(page, paused).locator(".labkit-run-status").inner_text()
    assert "finished" in row(page, finished).locator(".labkit-run-status").inner_text()
    # 40 batches, 21 per epoch (the progress is in the row's tooltip; the row is two lines)
    assert "iteration 40 · epoch 2, batch 19/21" in row(page, paused).get_attribute("title")
    assert "iteration 42 · 2 epochs done" in row(page, finished).get_attribute("title")
    value = row(page, paused).locator(".labkit-run-value").inner_text()
    assert re.fullmatch(r"[0-9.e+-]+", value), value
    assert "loss" in page.locator(".labkit-runs-count").inner_text()  # the metric shown
    wait_for(lambda: row(page, finished).locator("polyline").count() == 1, what="a sparkline")
    assert page.locator(".labkit-statusbar").inner_text() == "labkit: 0 live"
    # a name that is markup is shown as text, and runs nothing
    assert row(page, lab.ids["evil"]).locator(".labkit-run-name").inner_text() == EVIL
    assert page.locator(".labkit-runs-list img").count() == 0
    assert page.evaluate("window.__pwned") is None
    shot(page, "08-runs-sidebar")

    # filter by status
    page.locator(".labkit-runs-toolbar select").first.select_option("paused")
    wait_for(lambda: row(page, finished).count() == 0, what="the filter to hide a run")
    assert row(page, paused).count() == 1
    page.locator(".labkit-runs-toolbar select").first.select_option("all")

    # the run panel
    row(page, paused).click()
    run_panel = page.locator(f"#labkit-run-area-{paused} .labkit-run-panel")
    figures = run_panel.locator(".labkit-cockpit .labkit-figure")
    wait_for(lambda: figures.count() >= 2, what="the run's charts")
    groups = [figures.nth(i).get_attribute("data-group") for i in range(figures.count())]
    assert "loss" in groups and "accuracy" in groups, groups
    assert "valid_accuracy" in run_panel.locator(".labkit-figure[data-group='accuracy']"
                                                 " .labkit-legend").inner_text()
    assert re.search(r"iteration 40\b",
                     run_panel.locator(".labkit-cockpit-info").inner_text())
    assert run_panel.locator(".labkit-run-config tr[data-key='epochs'] td").nth(1) \
        .inner_text() == "6"
    assert run_panel.locator(".labkit-checkpoints tr").count() == 2    # header + one
    assert "not a fork" in run_panel.locator(".labkit-lineage").inner_text()
    shot(page, "08-run-panel")

    # resume from the run's context menu: a cell in the notebook, which finishes the run
    row(page, paused).click(button="right")
    page.locator(".lm-Menu-item", has_text="Resume labkit run in the notebook").click()
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="scratch.ipynb").click()
    resume = cell_with(page, f'run = lk.resume("{paused}")')
    wait_for(lambda: resume.count() == 1, what="the inserted resume cell")
    # it went into the empty cell the notebook had, not below it
    assert page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").count() == 2
    run_cell(page, resume)
    assert "Traceback" not in resume.inner_text(), resume.inner_text()
    assert "training finished at epoch 6" in resume.inner_text()
    wait_for(lambda: "finished" in row(page, paused).locator(".labkit-run-status").inner_text(),
             timeout=30, what="the sidebar to show the resumed run finished")
    shot(page, "08-resumed")

    # the palette's Dashboard command asks which run
    page.keyboard.press("Escape")
    page.keyboard.press("Control+Shift+c")
    page.locator(".lm-CommandPalette-input").fill("labkit Dashboard")
    page.keyboard.press("Enter")
    dialog = page.locator(".jp-Dialog")
    # the picker asks the server itself (the sidebar's window is not used)
    wait_for(lambda: dialog.locator("option").count() >= 2, what="the runs to pick")
    dialog.locator("select").select_option(index=[
        dialog.locator("option").nth(i).inner_text().startswith(finished)
        for i in range(dialog.locator("option").count())].index(True))
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
    dash_cell = cell_with(page, f'lk.notebook.Dashboard("{finished}")')
    wait_for(lambda: dash_cell.count() == 1, what="the inserted Dashboard cell")
    run_cell(page, dash_cell)
    wait_for(lambda: dash_cell.locator(".labkit-cockpit .labkit-plot canvas").count(),
             timeout=60, what="the Dashboard to draw")
    # it slept 1 s: the run's points drawn, the cockpit still
    cockpit = dash_cell.locator(".labkit-cockpit").first
    wait_for(lambda: cockpit.get_attribute("data-status") == "finished"
             and cockpit.evaluate(POINTS) > 0, what="the finished run's points")
    cockpit.evaluate(STILL)
    shot(page, "08-dashboard-from-palette")

    # fork from the run panel: a new run with the change, and its resume cell
    # the tab says the run's name and short id; its tooltip the whole id
    page.locator(f".lm-DockPanel-tabBar .lm-TabBar-tab[title*='{paused}']").click()
    run_panel.locator(".labkit-run-toolbar button", has_text="Fork...").click()
    dialog = page.locator(".jp-Dialog")
    # the Fork form (forkform.ts): one input per config key
    dialog.locator(".labkit-fork-field[data-key='lr'] input").fill("0.001")
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
    rows = page.locator(".labkit-run-row")
    wait_for(lambda: rows.count() == 4, what="the fork in the sidebar")
    fork = next(i for i in (rows.nth(k).get_attribute("data-run-id") for k in range(4))
                if i not in (paused, finished, lab.ids["evil"]))
    wait_for(lambda: cell_with(page, f'run = lk.resume("{fork}")').count() == 1,
             what="the fork's resume cell")
    row(page, fork).click()
    fork_panel = page.locator(f"#labkit-run-area-{fork} .labkit-run-panel")
    wait_for(lambda: fork_panel.locator(f".labkit-lineage a[data-run-id='{paused}']").count()
             == 1, what="the fork's lineage")
    ck = lk_checkpoint_ids(lab, paused)
    assert f"from checkpoint {ck[-1]}" in fork_panel.locator(".labkit-lineage").inner_text()
    assert fork_panel.locator(".labkit-run-config tr[data-key='lr'] td").nth(1) \
        .inner_text() == "0.001"
    shot(page, "08-fork")
    page.close()


TRAIN_ELSEWHERE = """
import time, labkit as lk
from labkit.training import build, demo
loop = build(demo.make_loop, {"epochs": 1000, "device": "cpu"})
loop.add(lambda loop: time.sleep(0.02), event="after_batch")
loop.add(lambda loop: print(loop.run_id, flush=True), event="before_training")
loop.run()
"""


def test_a_run_training_in_a_script_shows_live(browser, lab):
    """A script trains: the status bar counts it, its row's iteration grows without a reload,
    and Ctrl-C in the script shows as interrupted."""
    import signal

    page = open_notebook(browser, lab, "scratch.ipynb")
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()
    wait_for(lambda: page.locator(".labkit-run-row").count() >= 2, what="the runs")
    proc = subprocess.Popen([sys.executable, "-c", TRAIN_ELSEWHERE], env=lab.env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        run_id = proc.stdout.readline().strip()
        r = row(page, run_id)
        wait_for(lambda: r.count() and "running" in r.inner_text(), timeout=30,
                 what="the new run, running")
        wait_for(lambda: page.locator(".labkit-statusbar").inner_text() == "labkit: 1 live",
                 timeout=30, what="the status bar to count it")

        def iteration():
            return int(re.search(r"iteration (\d+)", r.get_attribute("title")).group(1))
        first = iteration()
        wait_for(lambda: iteration() > first + 20, timeout=30, what="live progress")
        shot(page, "08-training-elsewhere")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        wait_for(lambda: "interrupted" in r.locator(".labkit-run-status").inner_text(),
                 timeout=30, what="the run to show interrupted")
        wait_for(lambda: page.locator(".labkit-statusbar").inner_text() == "labkit: 0 live",
                 timeout=30, what="the status bar to count none")
    finally:
        if proc.poll() is None:
            proc.kill()
    page.close()


SEED_MANY = """
import json, math, os, socket, sys, time
import labkit as lk
s = lk.runs.store()
c = s._conn()
now, n = time.time(), int(sys.argv[1])
ids = []
with c:  # NOTE: one transaction: 10,000 create_run calls take ~20 s
    for i in range(n):
        rid = f"20261204-{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}-{os.urandom(8).hex()}"
        live = i == n - 3
        # the live run beats an hour ahead, so it stays live however slow the test is
        # the live run is a fork of the run before it (its run page links to it)
        c.execute("INSERT INTO runs (id, name, status, created, started, heartbeat, host, pid, "
                  "config, parent_run) VALUES (?,?,?,?,?,?,?,?,?,?)",
                  (rid, f"run-{i:05d}", "running" if live else "finished",
                   now - (n - i) * 60, now - (n - i) * 60, now + 3600, socket.gethostname(),
                   os.getppid() if live else 0, "{}", ids[-1] if live else None))
        ids.append(rid)
for k, rid in enumerate(ids[-4:]):
    s.add_metrics(rid, [(it, 0, "loss", (k + 1) * math.exp(-it / 300), 0.0)
                        for it in range(1000)])
print(json.dumps(ids))
"""
N_MANY = 10_000


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """A lab over a store of 10,000 runs: the newest four with a loss series, the third
    newest running (its pid: this test's process, its heartbeat fresh)."""
    with seeded_lab(tmp_path_factory, "many-lab", SEED_MANY, (str(N_MANY),),
                    threads=None) as lab:
        yield lab


def list_requests(page):
    """The sidebar's list requests (``GET labkit/api/runs?...``) and any per-run metrics
    request, as they are sent."""
    seen = []
    page.on("request", lambda r: seen.append((time.monotonic(), r.url))
            if "/labkit/api/runs" in r.url else None)
    return seen


def test_ten_thousand_runs_virtual_list_compare_and_status_item(browser, many):
    ids = many.ids
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    seen = list_requests(page)
    page.goto(many.page_url("lab?reset"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()
    sidebar = page.locator("#labkit-runs")
    wait_for(lambda: row(page, ids[-1]).count(), what="the newest run in the sidebar")
    wait_for(lambda: sidebar.locator(".labkit-runs-count").inner_text().startswith(
        "10,000 runs"), what="the count of every run")
    # only the rows in view (and a few either side) are in the DOM
    rows = sidebar.locator(".labkit-run-row")
    assert 5 <= rows.count() <= 60, rows.count()
    newest = row(page, ids[-1])
    assert newest.locator(".labkit-run-name").inner_text() == f"run-{N_MANY - 1:05d}"
    assert newest.locator(".labkit-run-id").inner_text() == ids[-1].split("-")[2][:4]
    # seeded a minute before the test; a slow machine may read it a minute or two later
    assert re.fullmatch(r"\d+ min ago", newest.locator(".labkit-run-when").inner_text())
    wait_for(lambda: newest.locator("polyline").count() == 1, what="a sparkline")
    assert re.fullmatch(r"[0-9.e+-]+", newest.locator(".labkit-run-value").inner_text())
    # the filter box is not clipped: it lies inside the 250 px sidebar
    box, side = sidebar.locator(".labkit-runs-filter").bounding_box(), sidebar.bounding_box()
    assert side["width"] <= 300 and box["x"] >= side["x"] \
        and box["x"] + box["width"] <= side["x"] + side["width"] + 0.5, (box, side)
    # each row is two lines high, whatever the name
    def heights():  # NOTE: a row redrawn (every 2 s) between finding and measuring: None
        boxes = [rows.nth(i).bounding_box() for i in range(5)]
        return None if None in boxes else [b["height"] for b in boxes]
    assert all(h <= 44 for h in wait_for(heights, timeout=10, what="five rows' boxes"))
    shot(page, "08-runs-10000-light")

    # a refresh is one request for the whole list, never one per row: three refreshes seen
    mark = len(seen)
    for _ in range(3):  # NOTE: Playwright delivers the request events while it waits
        with page.expect_request(lambda r: "/labkit/api/runs?" in r.url, timeout=30_000):
            pass
    window = [u for _, u in seen[mark:]]
    assert not [u for u in window if "/metrics" in u], window
    assert all("limit=" in u for u in window), window

    # "All" with 10,000 runs matching: refused by the total, before any id is used
    sidebar.locator(".labkit-runs-compare-all").click()
    wait_for(lambda: "10,000 runs match: compare takes at most 50" in
             sidebar.locator(".labkit-runs-error").inner_text(), what="All refused")
    asked = [u for _, u in seen if "ids=1" in u]
    assert asked and all("limit=1&" in u for u in asked), asked

    # scrolled to the end: the oldest run shows; the DOM still holds a few rows
    sidebar.locator(".labkit-runs-list").evaluate("e => { e.scrollTop = e.scrollHeight; }")
    wait_for(lambda: row(page, ids[0]).count() and row(page, ids[0]).is_visible(),
             what="the oldest run after scrolling to the end")
    assert row(page, ids[0]).locator(".labkit-run-name").inner_text() == "run-00000"
    assert rows.count() <= 60
    sidebar.locator(".labkit-runs-list").evaluate("e => { e.scrollTop = 0; }")
    wait_for(lambda: row(page, ids[-1]).count(), what="the newest run again")

    # select two runs (a box, then Ctrl-click) and compare them
    row(page, ids[-1]).locator(".labkit-run-check").click()
    row(page, ids[-2]).click(modifiers=["Control"])
    assert "2 selected" in sidebar.locator(".labkit-runs-count").inner_text()
    assert row(page, ids[-2]).locator(".labkit-run-check").is_checked()
    sidebar.locator(".labkit-runs-compare").click()
    area = f"#labkit-compare-area-{'_'.join(sorted(ids[-2:]))}"
    wait_for(lambda: page.locator(area).count(), what="the compare page of the two runs")
    # Shift-click selects a range
    sidebar.locator(".labkit-runs-clear").click()
    # a press and a release that straddle a poll's redraw (every 2 s) still click: the box
    # selects, a Ctrl-press on a row adds it, a plain one opens its run page (once)
    press_across_redraw(page, row(page, ids[-1]).locator(".labkit-run-check"))
    wait_for(lambda: "1 selected" in sidebar.locator(".labkit-runs-count").inner_text(),
             timeout=10, what="a run selected by a press across a redraw")
    assert row(page, ids[-1]).locator(".labkit-run-check").is_checked()
    press_across_redraw(page, row(page, ids[-4]), modifiers=["Control"])
    wait_for(lambda: "2 selected" in sidebar.locator(".labkit-runs-count").inner_text(),
             timeout=10, what="a second run selected by a Ctrl-press across a redraw")
    assert row(page, ids[-4]).locator(".labkit-run-check").is_checked()
    sidebar.locator(".labkit-runs-clear").click()
    press_across_redraw(page, row(page, ids[-6]).locator(".labkit-run-name"))
    opened = page.locator(f"#labkit-run-area-{ids[-6]}")
    wait_for(lambda: opened.count() == 1 and opened.is_visible(), timeout=30,
             what="the run page opened by a press across a redraw")
    assert "selected" not in sidebar.locator(".labkit-runs-count").inner_text()
    assert page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab",
                        has_text=ids[-6].split("-")[2][:4]).count() == 1
    # the live run's page is drawn again at each poll: its link to the run it was forked from
    # opens that run's page across a redraw too
    press_across_redraw(page, row(page, ids[-3]).locator(".labkit-run-name"))
    live_page = page.locator(f"#labkit-run-area-{ids[-3]}")
    wait_for(lambda: live_page.count() == 1 and live_page.is_visible(), timeout=30,
             what="the live run's page")
    parent = live_page.locator(f".labkit-lineage a[data-run-id='{ids[-4]}']")
    wait_for(lambda: parent.count() == 1, timeout=30, what="the link to the parent run")
    press_across_redraw(page, parent)
    parent_page = page.locator(f"#labkit-run-area-{ids[-4]}")
    wait_for(lambda: parent_page.count() == 1 and parent_page.is_visible(), timeout=30,
             what="the parent's run page opened by a press across the live page's redraw")
    row(page, ids[-1]).locator(".labkit-run-check").click()
    row(page, ids[-5]).click(modifiers=["Shift"])
    assert "5 selected" in sidebar.locator(".labkit-runs-count").inner_text()
    sidebar.locator(".labkit-runs-clear").click()

    # the compare page of a live run polls it; its header (sort titles, filters) and charts
    # are not made again at a poll, so a filter being typed in keeps its focus and its text,
    # and a click (a sort, a double-click on a chart) is not lost
    row(page, ids[-3]).locator(".labkit-run-check").click()
    row(page, ids[-4]).locator(".labkit-run-check").click()
    sidebar.locator(".labkit-runs-compare").click()
    live_compare = page.locator(f"#labkit-compare-area-{'_'.join(sorted(ids[-4:-2]))}")
    typed = live_compare.locator(".labkit-compare-filter[data-column='run']")
    wait_for(lambda: typed.count() == 1 and typed.is_visible(), timeout=30,
             what="the compare page of the live run")
    title = live_compare.locator(".labkit-compare-titles th").first.element_handle()
    figure = live_compare.locator(".labkit-compare-figure").first.element_handle()
    typed.click()
    page.keyboard.type("run-")
    for _ in range(2):
        with page.expect_response(lambda r: "/labkit/api/compare?" in r.url, timeout=30_000):
            pass
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert title.evaluate("e => e.isConnected"), "the header was made again at a poll"
    assert figure.evaluate("e => e.isConnected"), "the charts were made again at a poll"
    assert page.evaluate("() => document.activeElement?.dataset?.column") == "run"
    page.keyboard.type("0999")
    assert typed.input_value() == "run-0999"
    sidebar.locator(".labkit-runs-clear").click()

    # the status item: a button that shows the runs training now
    status = page.locator(".labkit-statusbar")
    wait_for(lambda: status.inner_text() == "labkit: 1 live", what="the status item")
    assert status.get_attribute("role") == "button"
    # on the line of its neighbours (their text's vertical centre)
    neighbour = page.locator("#jp-main-statusbar .jp-StatusBar-TextItem:not(.labkit-statusbar)")
    mid = [(b["y"] + b["height"] / 2) for b in (status.bounding_box(),
                                                 neighbour.first.bounding_box())]
    assert abs(mid[0] - mid[1]) <= 1.0, mid
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()  # closed
    wait_for(lambda: not sidebar.is_visible(), what="the sidebar to close")
    status.focus()
    page.keyboard.press("Enter")
    wait_for(lambda: sidebar.is_visible(), what="the sidebar opened from the status item")
    assert sidebar.locator(".labkit-runs-toolbar select").first.input_value() == "live"
    wait_for(lambda: sidebar.locator(".labkit-runs-count").inner_text().startswith("1 run"),
             what="the live filter")
    assert [rows.nth(i).get_attribute("data-run-id") for i in range(rows.count())] == [ids[-3]]
    assert "running" in row(page, ids[-3]).locator(".labkit-run-status").inner_text()
    sidebar.locator(".labkit-runs-toolbar select").first.select_option("all")
    wait_for(lambda: sidebar.locator(".labkit-runs-count").inner_text().startswith("10,000"),
             what="every run again")
    status.click()
    wait_for(lambda: sidebar.locator(".labkit-runs-count").inner_text().startswith("1 run"),
             what="the live filter from a click")
    shot(page, "08-runs-live-from-status")
    sidebar.locator(".labkit-runs-toolbar select").first.select_option("all")
    wait_for(lambda: row(page, ids[-1]).count(), what="every run again")

    # a filter by name or id: the count follows, the rows are the matching ones
    sidebar.locator(".labkit-runs-filter").fill("run-0999")
    wait_for(lambda: sidebar.locator(".labkit-runs-count").inner_text().startswith("10 runs"),
             what="the filtered count")
    sidebar.locator(".labkit-runs-filter").fill(ids[1234].split("-")[2][:10])
    wait_for(lambda: rows.count() == 1 and row(page, ids[1234]).count(), what="a run by id")
    sidebar.locator(".labkit-runs-filter").fill("")
    wait_for(lambda: row(page, ids[-1]).count(), what="every run again")

    dark_theme(page)
    if not sidebar.is_visible():
        page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()
    wait_for(lambda: newest.locator("polyline").count() == 1, what="the sparkline, dark")
    sidebar.evaluate(STILL)  # it slept 0.5 s
    shot(page, "08-runs-10000-dark")
    page.close()
