"""The run page (``extensions/labkit-runs/src/runpanel.ts``) in a real browser.

A store seeded by real trainings of the tests' tiny loop: one finished with two checkpoints, the
older one corrupted afterwards (a byte flipped in its tensors); one that fails when its loss
raises (the message carries markup); a fork of the first. Opened from the Runs sidebar, the run
page draws the cockpit's charts, shows the config as a table, the checkpoints re-checked (the
corrupted one invalid, without a Fork button), the lineage as links that open run pages, the
failed run's error (as text), a tab titled with the run's name and short id; Delete asks first
and removes the run, and a run training elsewhere is refused with the server's message.
Screenshots in the light and the dark theme.

Then what people do on a run page: rename a run (the tab follows, and it stays after a
reload), tag it, write a note; fork it through the form of its config (only the changed key is
sent, the new run has it); read a failed run's traceback tail; zoom a chart (drag, hover inside
the range, double-click back); and Pause, Resume, Checkpoint and Stop a run that a script
trains in another process.
"""

import json
import re
import subprocess
import sys
from contextlib import contextmanager

import pytest

from .conftest import (
    ARTIFACTS,
    ROOT,
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
    with seeded_lab(tmp_path_factory, "run-page-lab", SEED) as lab:
        lab.page = None  # the page the module's tests share (open_lab)
        yield lab
        if lab.page is not None and not lab.page.is_closed():
            lab.page.close()


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
    page = open_lab(browser, lab)
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
    # the lineage as a tree: the parent (a link) holds this run, which started from a checkpoint
    nested = child.locator(f".labkit-lineage li[data-run-id='{ids['ok']}'] "
                           f"li[data-run-id='{ids['child']}'] .labkit-lineage-self")
    wait_for(lambda: nested.count() == 1, what="the fork's run page with its lineage")
    parent_link = child.locator(f".labkit-lineage a[data-run-id='{ids['ok']}']")
    assert parent_link.inner_text() == f"tiny-mlp · {ids['ok'].split('-')[2][:4]}"
    assert f"from checkpoint {ids['intact']} (iteration " in \
        child.locator(".labkit-lineage").inner_text()
    assert "forked from tiny-mlp" in child.locator(".labkit-lineage-summary").inner_text()
    shot(page, "16-lineage-light")
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


def luminance(css: str) -> float:
    r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def shot_path(name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / f"{name}.png"


def set_theme(page, name):
    """Settings → Theme → JupyterLab ``name`` ("Light" or "Dark"), waited for."""
    light = "true" if name == "Light" else "false"
    if page.locator(f"body[data-jp-theme-light='{light}']").count():
        return
    if name == "Dark":
        dark_theme(page)
        return
    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").click()
    page.locator(".lm-Menu-itemLabel", has_text="Theme").first.hover()
    page.locator(".lm-Menu-itemLabel").filter(has_text=re.compile("^JupyterLab Light$")).click()
    page.wait_for_selector("body[data-jp-theme-light='true']", state="attached", timeout=30_000)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=30_000)


def open_lab(browser, lab, theme="Light"):
    """JupyterLab with no tab open in its main area, the theme ``theme`` and the Runs sidebar
    listing the runs. One page serves the module's tests (JupyterLab takes seconds to start in
    a new page): each test finds it as a fresh one, every tab the test before opened closed
    (File → Close All Tabs), so its run pages are made anew. A page left with a dialog open
    (a test that failed halfway) is replaced by a new one."""
    page = lab.page
    if page is not None and not page.is_closed() and page.locator(".jp-Dialog").count():
        page.close()
    if page is None or page.is_closed():
        page = lab.page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.goto(lab.page_url("lab?reset"))
        page.wait_for_selector(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']",
                               timeout=90_000)
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
    else:
        page.keyboard.press("Escape")  # no menu left open
        page.locator(".lm-MenuBar-itemLabel", has_text="File").click()
        page.locator(".lm-Menu-itemLabel").filter(has_text=re.compile("^Close All Tabs$")) \
            .click()
        # the Launcher comes back in the empty main area, as on a fresh page
        tabs = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab")
        wait_for(lambda: set(tabs.all_inner_texts()) <= {"Launcher"}
                 and page.locator(".labkit-run-panel").count() == 0,
                 what="every tab closed")
    set_theme(page, theme)
    if not page.locator("#labkit-runs").is_visible():
        page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()
    wait_for(lambda: page.locator(".labkit-run-row").count() >= 3, what="the runs")
    return page


TAGS = "(els) => els.map(e => e.dataset.tag)"


def test_rename_tags_and_note_are_saved_and_stay(browser, lab):
    ids = lab.ids
    page = open_lab(browser, lab)
    ok = open_from_sidebar(page, ids["ok"])
    short = ids["ok"].split("-")[2][:4]
    name = ok.locator(".labkit-runpage-name")
    wait_for(lambda: name.input_value() == "tiny-mlp", what="the name in its input")
    name.fill("tiny-mlp-wide")
    name.press("Enter")
    row = ok.locator(".labkit-runpage-name-row")
    wait_for(lambda: "renamed" in row.inner_text(), timeout=20,
             what=f"the rename saved (the page says {row.inner_text()!r})")
    wait_for(lambda: tab(page, ids["ok"]).inner_text().strip() == f"tiny-mlp-wide · {short}",
             what="the tab to follow the new name")
    assert ids["ok"] in tab(page, ids["ok"]).get_attribute("title")  # the caption: full id
    wait_for(lambda: "tiny-mlp-wide" in page.locator(
        f".labkit-run-row[data-run-id='{ids['ok']}']").inner_text(), what="the sidebar's name")

    tag_input = ok.locator(".labkit-runpage-tag-input")
    chips = ok.locator(".labkit-runpage-tags .labkit-tag")
    for t in ("baseline", "lr:0.01"):
        tag_input.fill(t)
        tag_input.press("Enter")
        wait_for(lambda t=t: ok.locator(f".labkit-tag[data-tag='{t}']").count() == 1,
                 what=f"the tag {t}")
    tag_input.fill("two words")
    ok.locator(".labkit-runpage-tag-add").click()
    assert "not a tag" in ok.locator(".labkit-runpage-tags-row .labkit-runpage-saved") \
        .inner_text()
    assert chips.count() == 2
    ok.locator(".labkit-tag[data-tag='baseline'] .labkit-tag-remove").click()
    wait_for(lambda: chips.evaluate_all(TAGS) == ["lr:0.01"], what="the removed tag gone")

    ok.locator(".labkit-runpage-note-box summary").click()
    note = ok.locator(".labkit-runpage-note-text")
    save = ok.locator(".labkit-runpage-note-save")
    assert save.is_disabled()
    note.fill("lr too high after epoch 2?\n<b>not bold</b>")
    assert "not saved" in ok.locator(".labkit-runpage-note-bar").inner_text()
    save.click()
    wait_for(lambda: "note saved" in ok.locator(".labkit-runpage-note-bar").inner_text(),
             what="the note saved")
    assert save.is_disabled() and ok.locator(".labkit-runpage-notes b").count() == 0
    shot(page, "16-run-page-notes-light")

    # a reload reads them back from the store
    page.reload()
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()
    if not page_of(page, ids["ok"]).count():
        open_from_sidebar(page, ids["ok"])
    ok = page_of(page, ids["ok"])
    wait_for(lambda: ok.locator(".labkit-runpage-name").input_value() == "tiny-mlp-wide",
             what="the name after a reload")
    wait_for(lambda: tab(page, ids["ok"]).inner_text().strip() == f"tiny-mlp-wide · {short}",
             what="the tab title after a reload")
    assert ok.locator(".labkit-tag").evaluate_all(TAGS) == ["lr:0.01"]
    assert ok.locator(".labkit-runpage-note-text").input_value() == \
        "lr too high after epoch 2?\n<b>not bold</b>"
    set_theme(page, "Dark")
    ok.locator(".labkit-runpage-note-box summary").click()
    ok.locator(".labkit-runpage-notes").screenshot(path=str(shot_path("16-run-page-notes-dark")))
    shot(page, "16-run-page-notes-dark-page")


def test_fork_form_sends_only_the_changed_key(browser, lab):
    ids = lab.ids
    page = open_lab(browser, lab)
    ok = open_from_sidebar(page, ids["ok"])
    ok.locator(".labkit-run-toolbar button", has_text="Fork...").click()
    form = page.locator(".jp-Dialog .labkit-fork-form")
    form.wait_for(timeout=30_000)
    select = form.locator(".labkit-fork-checkpoint")
    # the newest valid checkpoint by default; the corrupted one listed, disabled, with why
    assert select.input_value() == str(ids["intact"])
    bad = select.locator(f"option[value='{ids['corrupted']}']")
    assert bad.is_disabled() and "invalid" in bad.inner_text()
    lr = form.locator(".labkit-fork-field[data-key='lr']")
    assert lr.locator("input").input_value() == "0.01"
    assert form.locator(".labkit-fork-field[data-key='device'] input").input_value() == "cpu"
    lr.locator("input").fill("0.05")
    assert "labkit-fork-changed" in lr.get_attribute("class")
    assert form.locator(".labkit-fork-changed").count() == 1
    epochs = form.locator(".labkit-fork-field[data-key='epochs']")
    epochs.locator("input").fill("three")
    assert "labkit-fork-invalid" in epochs.get_attribute("class")
    assert "expected a number" in epochs.inner_text()
    assert "epochs" in form.locator(".labkit-fork-summary").inner_text()
    epochs.locator("input").fill("3")
    assert form.locator(".labkit-fork-summary").inner_text() == "changes sent: lr"
    form.locator(".labkit-fork-name").fill("forked-by-form")
    shot(page, "16-fork-form-light")
    fork_post = re.compile(r"/runs/[^/]+/fork(\?|$)")
    with page.expect_request(lambda r: r.method == "POST" and fork_post.search(r.url)) as req:
        page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept").click()
    sent = json.loads(req.value.post_data)
    assert sent == {"checkpoint": ids["intact"], "changes": {"lr": 0.05}}, sent
    # the new run: its page opens, named, with the changed value and its lineage
    child_tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="forked-by-form")
    wait_for(lambda: child_tab.count() == 1, what="the fork's run page")
    child_id = re.search(r"labkit run (\S+) ", child_tab.get_attribute("title")).group(1)
    child = page_of(page, child_id)
    wait_for(lambda: child.locator(".labkit-run-config tr[data-key='lr']").count(),
             what="the fork's config")
    assert child.locator(".labkit-run-config tr[data-key='lr'] td").nth(1).inner_text() == "0.05"
    assert child.locator(".labkit-run-config tr[data-key='epochs'] td").nth(1) \
        .inner_text() == "3"
    assert f"from checkpoint {ids['intact']}" in child.locator(".labkit-lineage").inner_text()
    set_theme(page, "Dark")
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="tiny-mlp").first.click()
    ok.locator(".labkit-run-toolbar button", has_text="Fork...").click()
    form.wait_for(timeout=30_000)
    form.locator(".labkit-fork-field[data-key='hidden'] input").fill("64")
    shot(page, "16-fork-form-dark")
    page.locator(".jp-Dialog .jp-Dialog-button", has_text="Cancel").click()


def test_a_failed_run_shows_its_traceback_tail(browser, lab):
    ids = lab.ids
    page = open_lab(browser, lab)
    failed = open_from_sidebar(page, ids["failed"])
    tb = failed.locator(".labkit-runpage-traceback")
    wait_for(lambda: tb.count() == 1, what="the traceback block")
    assert not tb.locator("pre").is_visible()  # folded until asked for
    tb.locator("summary").click()
    text = tb.locator("pre").inner_text()
    lines = text.splitlines()
    assert lines[-1] == "FloatingPointError: loss became NaN at iteration 25 " + EVIL
    assert "in exploding" in text and 'File "loop.py"' in text
    assert "/" not in "".join(re.findall(r'File "([^"]*)"', text))  # file names, no paths
    assert len(lines) <= 31
    assert page.locator(".labkit-run-panel img").count() == 0
    assert page.evaluate("window.__pwned") is None
    family = tb.locator("pre").evaluate("(e) => getComputedStyle(e).fontFamily")
    assert "mono" in family.lower() or "courier" in family.lower(), family
    shot(page, "16-traceback-light")
    set_theme(page, "Dark")
    failed.locator(".labkit-runpage-error").screenshot(path=str(shot_path("16-traceback-dark")))


# the mouse over a chart, as a share of its width and height
def at(box, fx, fy=0.5):
    return box["x"] + box["width"] * fx, box["y"] + box["height"] * fy


def test_zoom_a_chart_then_hover_then_reset(browser, lab):
    ids = lab.ids
    page = open_lab(browser, lab)
    ok = open_from_sidebar(page, ids["ok"])
    figure = ok.locator(".labkit-figure[data-group='loss'] .labkit-plot")
    canvas = figure.locator("canvas")
    wait_for(lambda: canvas.evaluate(INKED) > 1000, what="the loss chart drawn")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    page.mouse.move(*at(box, 0.40))
    page.mouse.down()
    page.mouse.move(*at(box, 0.55), steps=5)
    page.mouse.move(*at(box, 0.70), steps=5)
    page.mouse.up()
    zoom = wait_for(lambda: figure.get_attribute("data-zoom"), what="the chart zoomed")
    lo, hi = (float(v) for v in zoom.split(","))
    assert 0 < lo < hi < 36, (lo, hi)  # a part of the 36 iterations
    page.mouse.move(*at(box, 0.62))
    tip = figure.locator(".labkit-plot-tip")
    wait_for(lambda: tip.is_visible(), what="the hover after zooming")
    x = float(figure.get_attribute("data-hover-x"))
    assert lo <= x <= hi, (lo, x, hi)
    assert f"iteration {round(x)}" in tip.inner_text()
    assert re.search(r"loss \d", tip.inner_text()), tip.inner_text()
    shot(page, "16-zoom-light")
    canvas.dblclick()
    wait_for(lambda: figure.get_attribute("data-zoom") is None, what="the zoom reset")
    page.mouse.move(*at(box, 0.97))
    wait_for(lambda: float(figure.get_attribute("data-hover-x") or 0) > hi,
             what="the hover beyond the old range")


TRAIN_ELSEWHERE = """
import sys, time, labkit as lk
from labkit.training import build
from tests.training.helpers import make_loop
loop = build(make_loop, {"epochs": 100000}, name="elsewhere-training")
loop.add(lambda loop: time.sleep(0.02), event="after_batch")
loop.add(lambda loop: print(loop.run_id, flush=True), event="before_training")
loop.run()
"""


@contextmanager
def training_elsewhere(lab):
    proc = subprocess.Popen([sys.executable, "-c", TRAIN_ELSEWHERE], env=lab.env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        yield proc, proc.stdout.readline().strip()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def stored(lab, run_id):
    """The run and its checkpoints as the lab's store has them (read in a subprocess: this
    process's store is another one)."""
    code = (f"import json, labkit as lk; r = lk.runs.get({run_id!r}); "
            f"print(json.dumps([r['status'], len(lk.runs.checkpoints({run_id!r}))]))")
    out = subprocess.run([sys.executable, "-c", code], env=lab.env, capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_pause_a_run_training_in_another_process(browser, lab):
    page = open_lab(browser, lab)
    with training_elsewhere(lab) as (proc, run_id):
        assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]+", run_id), run_id
        wait_for(lambda: page.locator(f".labkit-run-row[data-run-id='{run_id}']").count(),
                 what="the script's run in the sidebar")
        run = open_from_sidebar(page, run_id)
        cockpit = run.locator(".labkit-cockpit")
        wait_for(lambda: cockpit.get_attribute("data-status") == "running" and
                 cockpit.locator("button", has_text="Pause").is_enabled(),
                 what="the script's run, live")
        cockpit.locator("button", has_text="Pause").click()
        # acted on by the script's loop: the store says paused (generous waits: no timing)
        wait_for(lambda: stored(lab, run_id)[0] == "paused", timeout=30,
                 what="the script's loop to pause")
        wait_for(lambda: cockpit.get_attribute("data-status") == "paused",
                 what="the page to show it paused")
        shot(page, "16-run-page-other-process-paused")
        before = stored(lab, run_id)[1]
        cockpit.locator("button", has_text="Checkpoint").click()
        wait_for(lambda: stored(lab, run_id)[1] > before, timeout=30,
                 what="a checkpoint written on request")
        wait_for(lambda: cockpit.locator("button", has_text="Resume").is_enabled(),
                 what="Resume enabled")
        cockpit.locator("button", has_text="Resume").click()
        wait_for(lambda: stored(lab, run_id)[0] == "running", timeout=30,
                 what="the script's loop to resume")
        wait_for(lambda: cockpit.locator("button", has_text="Stop").is_enabled(),
                 what="Stop enabled")
        cockpit.locator("button", has_text="Stop").click()
        assert proc.wait(60) == 0
        wait_for(lambda: cockpit.get_attribute("data-status") == "finished", timeout=30,
                 what="the run finished on the page")
