"""Runs made inside a ``labkit launch`` job, listed for the launcher.

mpiexec ends every rank with SIGKILL as soon as one fails, so a run that rank 0 was training
is left ``running`` (shown *dead* once its heartbeat stops). ``labkit launch`` gives its ranks
a file in ``LABKIT_DIST_RUNS``; ``RunStore.create_run`` adds each new run to it, and after a
job that failed the launcher records the runs it left unfinished as failed, with the reason
the job's output gives (``labkit.dist.launch``).
"""

from __future__ import annotations

import json
import os

#: the file a launcher reads back: one JSON object per line, ``{"store": path, "run": id}``
VAR = "LABKIT_DIST_RUNS"


def note(store_path, run_id: str) -> None:
    """List ``run_id`` of the store at ``store_path`` for the launcher, if there is one."""
    path = os.environ.get(VAR)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            # NOTE: on a line of its own even after a line a killed process cut short
            f.write("\n" + json.dumps({"store": str(store_path), "run": run_id}) + "\n")
    except OSError:
        pass  # NOTE: a courtesy to the launcher: never a reason for a run not to start


def listed(path) -> list[tuple[str, str]]:
    """The ``(store path, run id)`` pairs noted in ``path``, each once, in order."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            d = json.loads(line)
            item = (d["store"], d["run"])
        except (ValueError, TypeError, KeyError):
            continue  # NOTE: a line cut short by a rank killed while writing it
        if all(isinstance(v, str) for v in item) and item not in out:
            out.append(item)
    return out
