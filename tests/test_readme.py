"""The README's Python examples run as written: each block on its own, as a script, in a fresh
process (so a missing import or a worker process started outside ``__main__`` fails here as it
would for a reader who copies one block)."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# NOTE: a block inside a list item is indented as the item is; it runs dedented
BLOCKS = [textwrap.dedent(b) for b in
          re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)]

# what each block must print (a fragment), by a phrase its code contains
EXPECT = {
    "print(lk.devices())": ["Device('cpu')", "cl:0"],
    "resumed bit for bit": ["resumed bit for bit: True"],
    "check_resume": ["ResumeCheck: identical", "finished ["],
    "lk.runs.rename": ["['baseline', 'lr:0.01']\n['lr:0.01']\nwide-mlp loss plateaus"],
    "def train_step(x, y)": ["train_step: 5 calls, 2 traced, 3 replayed, 0 retraces\n0 True"],
    "lk.scan(step, x": ["(4, 10, 8) (8, 8)"],
    "lk.dist.resume(job.run_id, n=1)": ["True failed\n0 40"],
}


def test_the_readme_has_its_blocks():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs_on_its_own(index, tmp_path):
    code = BLOCKS[index]
    script = tmp_path / f"block{index}.py"
    script.write_text(code)
    env = {**os.environ, "LABKIT_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"README block {index} failed as a script:\n{code}\n" \
                                f"{out.stdout}\n{out.stderr}"
    for phrase, wanted in EXPECT.items():
        if phrase in code:
            for w in wanted:
                assert w in out.stdout, (index, w, out.stdout)


def test_readme_names_the_two_commands():
    text = README.read_text()
    assert 'pip install -e ".[dev]"' in text and "labkit demo" in text and "\npytest\n" in text
