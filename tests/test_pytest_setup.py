"""The README's test command in a venv without pytest-xdist (one made before it joined
``[dev]``): pyproject's ``--numprocesses`` and ``--dist`` are taken and ignored, and the header
says the tests run in one process, instead of pytest stopping at "unrecognized arguments"."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pytest_without_xdist_runs_the_tests_in_one_process():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider",
         "tests/test_file_sizes.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "pytest-xdist is not installed: the tests run in this process" in out.stdout
    assert "passed" in out.stdout and "created:" not in out.stdout
