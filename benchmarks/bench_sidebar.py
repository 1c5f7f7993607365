"""The Runs sidebar at scale: a store of 10,000 runs (some with metrics), listed through the
REST API as the sidebar asks for it (one window of 60 runs with their loss sparklines, the
total and the counts), and the time from opening the sidebar in JupyterLab (Chromium, through
Playwright) to its rows shown.

    python benchmarks/bench_sidebar.py [--runs 10000] [--repeat 3] [--no-browser]

Targets (issue 16): the sidebar shows 10,000 runs in <= 1 s in the browser. Printed, not
asserted (run it three times).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from labkit.runs.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
#: what the sidebar asks for: a window, the chosen metric's sparklines
QUERY = "runs?offset=0&limit=60&sort=newest&metric=loss&points=40"


def seed(path, n=10_000, with_metrics=300, points=2_000, live=3):
    """A store at ``path`` with ``n`` runs named ``run-00000``...: every 7th failed, the last
    ``live`` running (a fresh heartbeat from this process), and the ``with_metrics`` newest of
    them with a ``loss`` series of up to ``points`` iterations (one in 10 with 100,000)."""
    s = RunStore(path)
    c = s._conn()  # NOTE: creating 10,000 runs one transaction each takes ~20 s; one is enough
    now = time.time()
    ids = []
    with c:
        for i in range(n):
            rid = f"20261204-{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}-" \
                f"{os.urandom(8).hex()}"
            status = "failed" if i % 7 == 3 else "finished"
            if i >= n - live:
                status = "running"
            c.execute("INSERT INTO runs (id, name, status, created, started, heartbeat, host, "
                      "pid, config) VALUES (?,?,?,?,?,?,?,?,?)",
                      (rid, f"run-{i:05d}", status, now - (n - i) * 60, now - (n - i) * 60,
                       now, _host(), _pid(),
                       json.dumps({"lr": 10 ** -(i % 4), "i": i})))
            ids.append(rid)
    for k, rid in enumerate(ids[-with_metrics:]):
        m = 100_000 if k % 10 == 0 else points * (k % 5 + 1) // 5
        for a in range(0, m, 50_000):
            s.add_metrics(rid, [(it, it // 500, "loss", 2 * math.exp(-it / (m / 3)) + 0.1
                                 * math.sin(it / 40 + k), 0.0)
                                for it in range(a, min(m, a + 50_000))])
    return s, ids


def _host():
    import socket

    return socket.gethostname()


def _pid():
    return os.getpid()


def rest_times(lab, repeat=5):
    url = f"{lab.url}labkit/api/{QUERY}"
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        with urllib.request.urlopen(f"{url}&token={lab.token}", timeout=60) as r:
            body = json.loads(r.read())
        out.append(time.perf_counter() - t)
    return out, body


def browser_time(browser, lab):
    """Milliseconds from the click on the Runs tab to the first rows shown (in page time)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(lab.page_url("lab?reset"))
    page.wait_for_selector(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']", timeout=90_000)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
    time.sleep(1.0)
    page.evaluate("""() => { window.__lkShown = new Promise(done => {
        document.addEventListener('pointerdown', () => {
            const t0 = performance.now();
            const shown = () => document.querySelector('.labkit-run-row .labkit-run-name');
            const check = () => shown() ? done(performance.now() - t0)
                                        : requestAnimationFrame(check);
            check();
        }, { capture: true, once: true });
    }); }""")
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='labkit-runs']").click()
    ms = page.evaluate("() => window.__lkShown")
    rows = page.locator(".labkit-run-row").count()
    total = page.locator(".labkit-runs-count").inner_text()
    page.close()
    return ms, rows, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.browser.conftest import ARGS, CHROMIUM, start_lab

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        home, root = tmp / "home", tmp / "root"
        home.mkdir()
        root.mkdir()
        t = time.perf_counter()
        s, ids = seed(home / "runs.sqlite", args.runs)
        print(f"{args.runs:,} runs seeded in {time.perf_counter() - t:.1f} s")
        direct = []
        for _ in range(5):
            t = time.perf_counter()
            s.page(limit=60, metric="loss", points=40)
            direct.append(time.perf_counter() - t)
        print(f"store.page (window of 60 + sparklines): median "
              f"{statistics.median(direct) * 1e3:.1f} ms (min {min(direct) * 1e3:.1f})")
        with start_lab(tmp, root, home) as lab:
            rest, body = rest_times(lab)
            print(f"REST {QUERY}: median {statistics.median(rest) * 1e3:.1f} ms "
                  f"(min {min(rest) * 1e3:.1f}, max {max(rest) * 1e3:.1f}); total "
                  f"{body['total']:,}, {len(body['runs'])} runs in the window")
            if args.no_browser:
                return
            from playwright.sync_api import sync_playwright

            with sync_playwright() as p:
                b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                for i in range(args.repeat):
                    ms, rows, total = browser_time(b, lab)
                    print(f"browser, open sidebar -> rows shown, try {i + 1}: {ms:.0f} ms "
                          f"({rows} rows in the DOM; {total})")
                b.close()


if __name__ == "__main__":
    main()
