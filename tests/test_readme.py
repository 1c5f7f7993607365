"""The README's Python examples run as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 4
    ns: dict = {}
    for code in blocks:
        exec(compile(code, str(README), "exec"), ns)  # noqa: S102 - our own documentation
    out = capsys.readouterr().out
    assert "Device('cpu')" in out and "cl:0" in out
    assert "resumed bit for bit: True" in out
    assert "ResumeCheck: identical" in out and "finished [" in out


def test_readme_names_the_two_commands():
    text = README.read_text()
    assert 'pip install -e ".[dev]"' in text and "labkit demo" in text and "\npytest\n" in text
