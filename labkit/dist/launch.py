"""``labkit launch -n N script.py [args]``: ``mpiexec -n N python -m mpi4py script.py [args]``.

``python -m mpi4py`` turns an exception on any rank into ``MPI_Abort``, so mpiexec ends every rank
within seconds instead of leaving the others waiting in a collective forever. Each rank gets one
BLAS thread (``OMP_NUM_THREADS`` and friends): ranks with the default thread count ran 250x slower
here, each one's threads fighting the others' for the same cores.

Each rank runs under a small parent (``_rank.py``) that names the rank when it is killed by a
signal (mpiexec's own report names another process as often as not). Every process of a job
carries ``LABKIT_DIST_JOB`` (a token) in its environment, so the launcher can find and end
what mpiexec left behind; mpiexec ends (SIGTERM, which reaches the ranks) when ``launch`` is
killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from .comm import DistError

#: the BLAS thread-count variables set for each rank
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
#: the variable whose token marks every process of one job (``tag``, ``end_processes``)
JOB_VAR = "LABKIT_DIST_JOB"
#: the parent of each rank (run by its path): it names a rank killed by a signal
MONITOR = Path(__file__).with_name("_rank.py")
#: at most this many ranks per core of this machine (without a host file for mpiexec)
RANKS_PER_CORE = 8
#: never more ranks than this, whatever the machines
MAX_RANKS = 4096


def mpiexec() -> str:
    """The MPICH ``mpiexec`` of this environment (the ``mpich`` wheel puts it beside python)."""
    here = Path(sys.executable).parent / "mpiexec"
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if found is None:
        raise DistError("launch: no mpiexec found; pip install 'labkit[dist]' (mpi4py and the "
                        "mpich wheel) into this environment")
    return found


def max_ranks() -> int:
    """The most ranks ``command`` accepts: ``RANKS_PER_CORE`` per core of this machine, or
    ``MAX_RANKS`` where mpiexec is given other machines (``HYDRA_HOST_FILE``/``HYDRA_HOSTS``)."""
    if os.environ.get("HYDRA_HOST_FILE") or os.environ.get("HYDRA_HOSTS"):
        return MAX_RANKS
    return min(MAX_RANKS, RANKS_PER_CORE * (os.cpu_count() or 1))


def command(n: int, script, args=(), *, python: str | None = None) -> list[str]:
    """The command line that starts ``script`` on ``n`` ranks (each under ``_rank.py``)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DistError(f"launch: -n must be a whole number >= 1, got {n!r}")
    if n > max_ranks():
        raise DistError(f"launch: -n {n} is more ranks than this machine can run "
                        f"({os.cpu_count()} cores, at most {max_ranks()} ranks: each is a "
                        "Python process with its own copy of the model); use fewer ranks")
    args = () if args is None else args
    if isinstance(args, (str, bytes)) or not hasattr(args, "__iter__"):
        raise DistError(f"launch: the script's arguments must be a list (e.g. ['--lr', 0.1]), "
                        f"got {type(args).__name__} {args!r}")
    args = [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in args]
    bad = [a for a in args if "\0" in a]
    if bad:
        raise DistError(f"launch: an argument holds a NUL character: {bad[0]!r}")
    script = Path(script)
    try:
        found = script.is_file()
    except (OSError, ValueError):  # NOTE: a NUL in the name, a name too long
        found = False
    if not found:
        raise DistError(f"launch: no script {str(script)!r}")
    python = python or sys.executable
    return [mpiexec(), "-n", str(n), python, str(MONITOR), python, "-m", "mpi4py", str(script),
            *args]


def tag(env: dict) -> str:
    """Mark ``env`` (a job's environment) with a new job token; returns it."""
    token = uuid.uuid4().hex
    env[JOB_VAR] = token
    return token


def job_processes(token: str) -> list[int]:
    """The ids of the live processes whose environment holds job ``token`` (Linux: read from
    /proc, only this user's processes; elsewhere an empty list)."""
    mark = b"\0" + f"{JOB_VAR}={token}".encode() + b"\0"
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    me = os.getpid()
    for name in entries:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if mark in b"\0" + f.read() + b"\0":
                    found.append(int(name))
        except OSError:
            continue  # gone, or another user's
    return found


def end_processes(token: str, grace: float = 5.0) -> list[int]:
    """SIGKILL every process of job ``token`` still alive and wait (at most ``grace`` seconds)
    until they are gone; returns the ids that were found."""
    found = job_processes(token)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    left = found
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _running(p)]
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its parent does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def ends_with_parent():
    """For ``Popen(preexec_fn=)``: the child gets SIGTERM when this process (the thread that
    starts it) ends, however it ends. None where prctl cannot be had (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    try:
        import ctypes

        # NOTE: looked up here, in the parent: the child only calls it (no import after fork)
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_up():
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), signal.SIGTERM)
    return set_up


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
    env = environment(threads)
    token = tag(env)
    # NOTE: mpiexec stays in this process group (Ctrl-C reaches it) and ends with this process
    # (a killed `labkit launch` leaves no job running on its own)
    proc = subprocess.Popen(cmd, env=env, preexec_fn=ends_with_parent())
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
        end_processes(token)  # NOTE: ranks that outlived mpiexec (killed, or past timeout)
