"""``labkit launch -n N script.py [args]``: ``mpiexec -n N python -m mpi4py script.py [args]``.

``python -m mpi4py`` turns an exception on any rank into ``MPI_Abort``, so mpiexec ends every rank
within seconds instead of leaving the others waiting in a collective forever. Each rank gets one
BLAS thread (``OMP_NUM_THREADS`` and friends): ranks with the default thread count ran 250x slower
here, each one's threads fighting the others' for the same cores.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from .comm import DistError

#: the BLAS thread-count variables set for each rank
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def mpiexec() -> str:
    """The MPICH ``mpiexec`` of this environment (the ``mpich`` wheel puts it beside python)."""
    here = Path(sys.executable).parent / "mpiexec"
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if found is None:
        raise DistError("launch: no mpiexec found; pip install 'labkit[dist]' (mpi4py and the "
                        "mpich wheel) into this environment")
    return found


def command(n: int, script, args=(), *, python: str | None = None) -> list[str]:
    """The command line that starts ``script`` on ``n`` ranks."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DistError(f"launch: -n must be a whole number >= 1, got {n!r}")
    script = Path(script)
    if not script.is_file():
        raise DistError(f"launch: no script {str(script)!r}")
    return [mpiexec(), "-n", str(n), python or sys.executable, "-m", "mpi4py", str(script),
            *map(str, args)]


def environment(threads: int = 1, base: dict | None = None) -> dict:
    """``base`` (default: this process's environment) with ``threads`` BLAS threads per rank."""
    env = dict(os.environ if base is None else base)
    for k in THREAD_VARS:
        env[k] = str(threads)
    return env


def check_threads(threads, what: str) -> None:
    """BLAS threads per rank: a whole number >= 1, else a DistError naming ``what``."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise DistError(f"{what}: threads must be a whole number >= 1, got {threads!r}")


def launch(n: int, script, args=(), *, threads: int = 1, timeout: float | None = None) -> int:
    """Run ``script`` on ``n`` ranks and return the job's exit status (non-zero when any rank
    failed). mpiexec stays in this process group, so Ctrl-C reaches every rank (and an
    interrupt checkpoint can be written); past ``timeout`` seconds the job is ended."""
    check_threads(threads, "launch")
    cmd = command(n, script, args)
    proc = subprocess.Popen(cmd, env=environment(threads))
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        print(f"labkit launch: the job ran past {timeout} s; ending it", file=sys.stderr)
        return 124
    except KeyboardInterrupt:
        # NOTE: the ranks got the SIGINT too; give them a moment to write their interrupt
        # checkpoint before mpiexec is ended below
        try:
            return proc.wait(30)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            return 130
    finally:
        if proc.poll() is None:
            # mpiexec ends its ranks when terminated; kill it if it does not go
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
