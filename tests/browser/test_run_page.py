"""The run page (``extensions/labkit-runs/src/runpanel.ts``) in a real browser.

A store seeded by real trainings of the tests' tiny loop: one finished with two checkpoints, the
older one corrupted afterwards (a byte flipped in its tensors); one that fails when its loss
raises (the message carries markup); a fork of the first. Opened from the Runs sidebar, the run
page draws the cockpit's charts, shows the config as a table, the checkpoints re-checked (the
corrupted one invalid, without a Fork button), the lineage as links that open run pages, the
failed run's error (as text), a tab titled with the run's name and short id; Delete asks first
and removes the run, and a run training elsewhere is refused with the server's message.
Screenshots in the light and the dark theme.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from .conftest import ARTIFACTS, ROOT, dark_theme, require_browser, shot, start_lab, wait_for

require_browser()

EVIL = '<img src=x onerror="window.__pwned=1">'
SEED = f"EVIL = {EVIL!r}\n" + """
import json
from pathlib import Path
import labkit as lk
from labkit.training import build
from tests.training.helpers import make_loop

ok = build(make_loop, {"epochs": 3, "checkpoint_every": 6}, name="tiny-mlp")
ok.run()
ok.close()
old, new = lk.runs.checkpoints(ok.run_id)
f = Path(old["path"]) / "tensors.safetensors"
data = bytearray(f.read_bytes())
data[-3] ^= 0xFF
f.write_bytes(bytes(data))

bad = build(make_loop, {"epochs": 3, "lr": 0.5}, name="diverging-mlp")
loss = bad.loss_fn
def exploding(model, batch):
    if bad.status["iteration"] >= 25:
        raise FloatingPointError("loss became NaN at iteration 25 " + EVIL)
    return loss(model, batch)
bad.loss_fn = exploding
try:
    bad.run()
except FloatingPointError:
    pass
bad.close()
child = lk.runs.fork(ok.run_id, new["id"], {"lr": 0.02})
# a run training on another host (its heartbeat fresh for an hour): the API refuses to delete it
import time
live = lk.runs.store().create_run("elsewhere")
lk.runs.store().update_run(live, status="running", host="another-host", pid=1,
                           heartbeat=time.time() + 3600)
print(json.dumps({"ok": ok.run_id, "failed": bad.run_id, "child": child, "live": live,
                  "corrupted": old["id"], "intact": new["id"]}))
"""

# how many pixels of a canvas are drawn (not transparent)
INKED = """(c) => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0; for (let i = 3; i < d.length; i += 4) { if (d[i]) { n++; } } return n; }"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run-page-lab")
    root, home = tmp / "root", tmp / "home"
    root.mkdir()
    env = {**os.environ, "LABKIT_HOME": str(home), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", SEED], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    with start_lab(tmp, root, home) as lab:
        lab.ids = ids
        yield lab


def page_of(page, run_id):
    return page.locator(f"#labkit-run-area-{run_id} .labkit-run-panel")


def open_from_sidebar(page, run_id):
    page.locator(f".labkit-run-row[data-run-id='{run_id}']").click()
    panel = page_of(page, run_id)
    wait_for(lambda: panel.locator(".labkit-runpage-config").count(), timeout=20,
             what="the run page")
    return panel


def tab(page, run_id):
    return page.locator(f".lm-DockPanel-tabBar .lm-TabBar-tab[title*='{run_id}']")


def test_run_page(browser, lab):
    ids = lab.ids
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(lab.page_url("lab?reset"))
    page.wait_for_selector(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']", timeout=90_000)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()
    wait_for(lambda: page.locator(".labkit-run-row").count() == 4, what="the four runs")

    # the finished run: charts, config, checkpoints re-checked, lineage, tab title
    ok = open_from_sidebar(page, ids["ok"])
    wait_for(lambda: ok.locator(".labkit-cockpit .labkit-plot canvas").count() >= 2,
             what="the cockpit's charts")
    canvas = ok.locator(".labkit-figure[data-group='loss'] canvas")
    wait_for(lambda: canvas.evaluate(INKED) > 1000, what="the loss chart drawn")
    assert ok.locator(".labkit-legend", has_text="train_loss").count() == 1
    config = ok.locator(".labkit-run-config")
    assert config.locator("tr[data-key='epochs'] td").nth(1).inner_text() == "3"
    assert config.locator("tr[data-key='device'] td").nth(1).inner_text() == '"cpu"'
    bad_row = ok.locator(f".labkit-checkpoints tr[data-checkpoint='{ids['corrupted']}']")
    good_row = ok.locator(f".labkit-checkpoints tr[data-checkpoint='{ids['intact']}']")
    wait_for(lambda: "invalid" in bad_row.inner_text(), what="the corrupted checkpoint invalid")
    assert "CRC" in bad_row.locator(".labkit-runpage-reason").inner_text()
    assert "/" not in bad_row.locator(".labkit-runpage-reason").inner_text()  # no paths
    assert bad_row.locator("button").count() == 0, "an invalid checkpoint has a Fork button"
    assert "valid" in good_row.inner_text() and "invalid" not in good_row.inner_text()
    assert good_row.locator("button", has_text="Fork").count() == 1
    # the checkpoint's metrics, as columns
    heads = ok.locator(".labkit-checkpoints th").all_inner_texts()
    assert "loss" in heads and "accuracy" in heads, heads
    assert re.fullmatch(r"0\.\d+", good_row.locator("td").nth(heads.index("loss")).inner_text())
    short = ids["ok"].split("-")[2][:4]
    wait_for(lambda: tab(page, ids["ok"]).inner_text().strip() == f"tiny-mlp · {short}",
             what="the tab titled with the run's name and short id")
    assert ok.locator(".labkit-runpage-error").count() == 0
    shot(page, "16-run-page-light")

    # the failed run: its error, prominent and as text
    failed = open_from_sidebar(page, ids["failed"])
    error = failed.locator(".labkit-runpage-error")
    wait_for(lambda: error.count() == 1, what="the failed run's error")
    assert ("FloatingPointError: loss became NaN at iteration 25 " + EVIL) in error.inner_text()
    assert page.locator(".labkit-run-panel img").count() == 0
    assert page.evaluate("window.__pwned") is None
    shot(page, "16-run-page-failed-light")

    # lineage: the fork's link opens its page, whose parent link leads back
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="tiny-mlp").click()
    ok.locator(f".labkit-lineage a[data-run-id='{ids['child']}']").click()
    child = page_of(page, ids["child"])
    wait_for(lambda: f"forked from {ids['ok']}" in child.locator(".labkit-lineage").inner_text(),
             what="the fork's run page")
    assert f"at checkpoint {ids['intact']}" in child.locator(".labkit-lineage").inner_text()
    assert child.locator("tr[data-key='lr'] td").nth(1).inner_text() == "0.02"

    # Delete asks first: Cancel keeps the run, Delete removes it and closes its page
    child.locator(".labkit-runpage-delete").click()
    page.locator(".jp-Dialog .jp-Dialog-button", has_text="Cancel").click()
    assert page.locator(f".labkit-run-row[data-run-id='{ids['child']}']").count() == 1
    child.locator(".labkit-runpage-delete").click()
    assert "cannot be undone" in page.locator(".jp-Dialog").inner_text()
    page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-warn").click()
    wait_for(lambda: page.locator(f".labkit-run-row[data-run-id='{ids['child']}']").count()
             == 0 and page_of(page, ids["child"]).count() == 0,
             what="the deleted run gone from the sidebar and its page closed")

    # a run training elsewhere: the server's refusal is shown, and the run stays
    live = open_from_sidebar(page, ids["live"])
    live.locator(".labkit-runpage-delete").click()
    page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-warn").click()
    refusal = page.locator(".jp-Dialog", has_text="was not deleted")
    wait_for(lambda: refusal.count() == 1, what="the refusal")
    assert "is training" in refusal.inner_text()
    refusal.locator(".jp-Dialog-button").last.click()
    assert page.locator(f".labkit-run-row[data-run-id='{ids['live']}']").count() == 1
    assert page_of(page, ids["live"]).count() == 1

    # dark: the page follows the theme
    dark_theme(page)
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="tiny-mlp").click()
    # NOTE: the cockpit redraws when the theme's name changes, which can come before the dark
    # CSS does (its axes then keep light-theme colours until the next draw): the mouse over
    # each chart and away draws them again (the cockpit's own fix is for cockpit.ts)
    for i in range(ok.locator(".labkit-plot canvas").count()):
        ok.locator(".labkit-plot canvas").nth(i).hover()
    page.mouse.move(5, 600)
    background = ok.evaluate("(e) => getComputedStyle(e).backgroundColor")
    text = ok.locator(".labkit-runpage-key").first.evaluate("(e) => getComputedStyle(e).color")
    assert luminance(background) < 0.3 and luminance(text) > 0.6, (background, text)
    shot(page, "16-run-page-dark")
    ok.locator(".labkit-runpage-checkpoints").screenshot(
        path=str(shot_path("16-run-page-checkpoints-dark")))
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="diverging-mlp").click()
    shot(page, "16-run-page-failed-dark")
    page.close()


def luminance(css: str) -> float:
    r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def shot_path(name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / f"{name}.png"
