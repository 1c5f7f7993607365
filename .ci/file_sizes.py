"""Keep the files readable: print the largest source files and fail when a file in labkit/
grows past LIMIT lines, unless it is listed below with the reason it may.

    python .ci/file_sizes.py        # CI runs it; tests/test_file_sizes.py too
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 600
#: path -> why it may be longer (agreed; keep this list short)
EXCEPTIONS: dict[str, str] = {}


def sizes() -> list[tuple[int, str]]:
    files = [p for p in (ROOT / "labkit").rglob("*.py")]
    files += [p for p in (ROOT / "extensions" / "labkit-runs" / "src").rglob("*.ts")]
    return sorted(((len(p.read_text().splitlines()), p.relative_to(ROOT).as_posix())
                   for p in files), reverse=True)


def main() -> int:
    rows = sizes()
    print(f"largest source files (limit {LIMIT} lines in labkit/):")
    for n, path in rows[:12]:
        print(f"  {n:5d}  {path}" + (f"  (allowed: {EXCEPTIONS[path]})" if path in EXCEPTIONS
                                      else ""))
    over = [(n, p) for n, p in rows if n > LIMIT and p.startswith("labkit/")
            and p not in EXCEPTIONS]
    for n, p in over:
        print(f"{p}: {n} lines, over the limit of {LIMIT}; split it by concern (or list it in "
              ".ci/file_sizes.py with the reason)", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
