"""What the live Dashboard costs a training loop, measured in JupyterLab with the Dashboard
shown in a real browser (Debian's Chromium through Playwright), in one run:

- per-batch time of a ~1 ms step without a Dashboard and with one displayed, while the cell
  blocks in ``loop.run()`` and while the kernel is idle (``loop.start()``), rounds interleaved;
- the page's longest main-thread stall (long tasks) while the Dashboard draws;
- click-to-acknowledgement of Pause while a cell blocks.

    python benchmarks/bench_dashboard.py [--iterations 3000] [--rounds 3]

Target: overhead <= 5% idle and blocked; longest stall < 100 ms at the default rate (4/s).
Printed, not asserted (timings on a shared machine are noisy: run it three times).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.conftest import (  # noqa: E402
    ARGS,
    CHROMIUM,
    open_notebook,
    start_lab,
    wait_for,
)

SETUP = """\
import json, time
import labkit as lk, labkit.bricks as B, labkit.functions as F
from labkit import training as T
from labkit.data import DataStream, ScaleAndShift

def make(n, name):
    lk.bricks.set_seed(0)
    model = B.Sequence(B.Flatten(), B.Linear(64, 64), B.ReLU(), B.Linear(64, 10))
    s = ScaleAndShift(DataStream(lk.data.get("digits", split="train", load_in_memory=True),
                                 batch_size=32, shuffle=True, seed=0), 1 / 16, -0.5,
                      which_sources="features")
    def loss_fn(model, batch):
        logits = model(lk.tensor(batch["features"]))
        return {"loss": F.softmax_cross_entropy(logits, batch["targets"]),
                "accuracy": F.accuracy(logits, batch["targets"])}
    return T.MainLoop(model, lk.optimizers.Adam(lr=1e-3).setup(model), s, loss_fn, name=name,
                      extensions=[T.TrainingDataMonitoring(), T.FinishAfter(iterations=n)])

results = []
def note(scenario, loop):
    results.append({"scenario": scenario, "ms": 1000 * loop.elapsed / loop.status["iteration"]})
    json.dump(results, open("results.json", "w"))
"""


def cell(page, code, before_run=None):
    """Type ``code`` into the empty cell at the end (each Shift+Enter on the last cell leaves
    one), call ``before_run()``, and run it; returns at once."""
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").last \
        .locator(".cm-content").click()
    page.keyboard.type(code)
    if before_run is not None:
        before_run()
    page.keyboard.press("Shift+Enter")


def idle(page, timeout=600):
    wait_for(lambda: page.locator(".jp-StatusBar-TextItem:has-text('Idle')").count() > 0,
             timeout=timeout, what="the kernel to be idle")


STALLS = """() => { window.__stalls = []; if (window.__observer) window.__observer.disconnect();
  window.__observer = new PerformanceObserver(list => {
    for (const e of list.getEntries()) window.__stalls.push(e.duration); });
  window.__observer.observe({type: 'longtask'}); }"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    root = tmp / "root"
    root.mkdir()
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "setup",
                     "metadata": {}, "outputs": [], "source": SETUP}],
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                      "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
    (root / "bench.ipynb").write_text(json.dumps(nb))
    n = args.iterations
    stalls: list[float] = []
    try:
        with start_lab(tmp, root, tmp / "home") as lab, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = open_notebook(browser, lab, "bench.ipynb")
            page.locator(".jp-Cell").first.click()
            page.keyboard.press("Shift+Enter")
            idle(page)
            cell(page, "w = make(300, 'warm-up'); w.run(); note('warm-up', w)")
            idle(page)
            for r in range(args.rounds):
                print(f"round {r + 1}/{args.rounds}", flush=True)
                cell(page, f"a = make({n}, 'plain'); a.run(); note('no Dashboard, blocked', a)")
                idle(page)
                cell(page, f"b = make({n}, 'shown'); b.show()")
                page.wait_for_selector(f".labkit-cockpit >> nth={2 * r}", timeout=60_000)
                idle(page)
                # NOTE: long tasks counted from here: typing into JupyterLab's editor is not ours
                cell(page, "b.run(); note('Dashboard, blocked', b)",
                     lambda: page.evaluate(STALLS))
                idle(page)
                stalls += page.evaluate("() => window.__stalls")
                cell(page, f"c = make({n}, 'idle'); c.show()")
                page.wait_for_selector(f".labkit-cockpit >> nth={2 * r + 1}", timeout=60_000)
                idle(page)
                cell(page, "c.start();", lambda: page.evaluate(STALLS))
                time.sleep(1.0)
                idle(page)
                wait_for(lambda: page.locator(".labkit-cockpit").nth(2 * r + 1)
                         .get_attribute("data-status") not in ("running", "created", None),
                         timeout=600, what="background training to end")
                stalls += page.evaluate("() => window.__stalls")
                cell(page, "c.wait(); note('Dashboard, kernel idle', c)")
                idle(page)
                cell(page, f"d = make({n}, 'plain-idle'); d.start(); d.wait(); "
                           "note('no Dashboard, thread', d)")
                idle(page)
            # click-to-acknowledgement while a cell blocks
            cell(page, "e = make(10**6, 'pause'); e.show()")
            page.wait_for_selector(f".labkit-cockpit >> nth={2 * args.rounds}", timeout=60_000)
            idle(page)
            cell(page, "e.start(); e.wait()")
            cp = page.locator(".labkit-cockpit").nth(2 * args.rounds)
            wait_for(lambda: cp.get_attribute("data-status") == "running", what="training")
            acks = []
            for _ in range(5):
                for button, state in (("Pause", "paused"), ("Resume", "running")):
                    cp.evaluate("el => { delete el.dataset.lastAck; }")
                    cp.locator("button", has_text=button).click()
                    acks.append(float(wait_for(lambda: cp.get_attribute("data-last-ack"),
                                               what="the acknowledgement")))
                    wait_for(lambda: cp.get_attribute("data-status") == state, what=state)
            cp.locator("button", has_text="Stop").click()
            idle(page)
            browser.close()
        results = json.loads((root / "results.json").read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    by = {}
    for row in results:
        by.setdefault(row["scenario"], []).append(row["ms"])
    print(f"\nper-batch time, {n} iterations of a ~1 ms step, {args.rounds} rounds interleaved "
          "(median; min-max)")
    for k, v in by.items():
        print(f"  {k:28s} {statistics.median(v):7.3f} ms  ({min(v):.3f}-{max(v):.3f})")
    for shown, plain in (("Dashboard, blocked", "no Dashboard, blocked"),
                         ("Dashboard, kernel idle", "no Dashboard, thread")):
        ratio = statistics.median(by[shown]) / statistics.median(by[plain])
        print(f"  {shown} / {plain}: {ratio:.3f}  (overhead {100 * (ratio - 1):+.1f}%; "
              "target <= +5%)")
    print(f"longest main-thread stall while the Dashboard draws: {max(stalls, default=0):.0f} ms "
          f"({len(stalls)} long tasks over 50 ms; target < 100 ms)")
    print(f"Pause/Resume click to acknowledgement, cell blocked: median "
          f"{statistics.median(acks):.2f} s, max {max(acks):.2f} s (target <= 1 s)")


if __name__ == "__main__":
    main()
