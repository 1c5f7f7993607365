"""No file in labkit/ grows past .ci/file_sizes.py's limit without an agreed reason."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_files_stay_readable():
    out = subprocess.run([sys.executable, str(ROOT / ".ci" / "file_sizes.py")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "largest source files" in out.stdout
