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
import tempfile
import time
import uuid
from pathlib import Path

from .._proc import THREAD_VARS, alive  # THREAD_VARS: set to 1 for each rank
from ..runs import launched
from .comm import DistError

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
        try:
            there = script.exists()
        except (OSError, ValueError):
            there = False
        raise DistError(f"launch: {str(script)!r} is not a file (a folder, a pipe or a device); "
                        "give a Python script" if there else
                        f"launch: no script {str(script)!r}")
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
    mark = _mark(token)
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


def exiting_rank(pid, token: str) -> bool:
    """Whether the live process ``pid`` is one of job ``token``'s, or one whose environment
    is gone already (empty, or unreadable with ESRCH: a process being torn down after a
    SIGKILL still exists, running and not yet a zombie, for a moment that a loaded machine
    makes longer); False for another job's or anybody else's process (Linux; elsewhere
    False)."""
    try:
        with open(f"/proc/{int(pid)}/environ", "rb") as f:
            env = f.read()
    except ProcessLookupError:  # NOTE: ESRCH: it exists, its memory is gone (being torn down)
        return True
    except (OSError, TypeError, ValueError):
        return False
    return not env or _mark(token) in b"\0" + env + b"\0"


def _mark(token: str) -> bytes:
    """Job ``token``'s variable as it sits in a /proc/PID/environ framed by NULs."""
    return b"\0" + f"{JOB_VAR}={token}".encode() + b"\0"


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
        left = [p for p in left if alive(p)]
    return found


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
    interrupt checkpoint can be written); past ``timeout`` seconds the job is ended.

    The job's stderr passes through, its last lines kept: a run the job made and left
    unfinished (mpiexec killed its rank when another failed) is recorded here as failed with
    the reason they give (``settle``), instead of being left *running*, then *dead*."""
    check_threads(threads, "launch")
    cmd = command(n, script, args)
    env = environment(threads)
    token = tag(env)
    with tempfile.TemporaryDirectory(prefix="labkit-launch-") as tmp:
        env[launched.VAR] = listing = os.path.join(tmp, "runs.jsonl")
        # NOTE: the job's stderr goes to a file that this thread copies to ours as it grows,
        # not to a pipe: a launcher killed outright would leave mpiexec writing into a pipe
        # nobody reads (SIGPIPE). And no second thread here: the kernel sends mpiexec the
        # parent-death signal again as each thread of a killed launcher ends, and a second
        # SIGTERM stops the ranks at once, without the interrupt checkpoint
        log = os.path.join(tmp, "stderr")
        with open(log, "ab") as err:
            # NOTE: mpiexec stays in this process group (Ctrl-C reaches it) and ends with this
            # process (a killed `labkit launch` leaves no job running on its own)
            proc = subprocess.Popen(cmd, env=env, preexec_fn=ends_with_parent(), stderr=err)
        with _Tail(log) as tail:
            rc, ended, status = None, None, "failed"
            try:
                rc = tail.follow(proc, timeout)
            except subprocess.TimeoutExpired:
                print(f"labkit launch: the job ran past {timeout} s; ending it", file=sys.stderr)
                rc, ended = 124, f"ended after the launch's timeout of {timeout} s"
            except KeyboardInterrupt:
                ended, status = "ended by Ctrl-C of labkit launch", "interrupted"
                # NOTE: the ranks got the SIGINT too; give them a moment to write their
                # interrupt checkpoint before mpiexec is ended below
                try:
                    rc = tail.follow(proc, 30)
                except (subprocess.TimeoutExpired, KeyboardInterrupt):
                    rc = 130
            finally:
                if proc.poll() is None:
                    # mpiexec ends its ranks when terminated; kill it if it does not go
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(5)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                end_processes(token)  # NOTE: ranks that outlived mpiexec (killed, past timeout)
                tail.copy()
        if rc != 0:
            settle(listing, rc, tail.text(), ended, status)
        return rc


class _Tail:
    """The file a job writes its stderr to, copied onto this process's stderr as it grows;
    its last ``KEEP`` bytes kept (the reasons a job failed)."""

    KEEP = 64 * 1024
    #: seconds between two looks at the file while the job runs
    EVERY = 0.05

    def __init__(self, path):
        self.file, self.tail = open(path, "rb"), bytearray()  # noqa: SIM115 - closed in __exit__

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def copy(self) -> None:
        """Copy what the job wrote since the last call."""
        out = getattr(sys.stderr, "buffer", None)
        while chunk := self.file.read(65536):
            self.tail += chunk
            del self.tail[:-self.KEEP]
            try:
                if out is not None:
                    out.write(chunk)
                    out.flush()
                else:
                    sys.stderr.write(chunk.decode(errors="replace"))
            except (OSError, ValueError):
                pass  # NOTE: our stderr closed: the tail is still kept

    def follow(self, proc, timeout=None) -> int:
        """Copy until ``proc`` ends; its exit status. ``subprocess.TimeoutExpired`` past
        ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.copy()
            left = self.EVERY if deadline is None else min(self.EVERY,
                                                           deadline - time.monotonic())
            try:
                rc = proc.wait(max(left, 0))
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            self.copy()
            return rc

    def text(self) -> str:
        return bytes(self.tail).decode(errors="replace")


def settle(listing, rc: int, text: str, ended: str | None = None,
           status: str = "failed") -> list[str]:
    """Record the runs listed in ``listing`` (``labkit.runs.launched``) that the job left
    ``created``, ``running`` or ``paused`` as ``status``: failed, with the reasons in the job's
    stderr ``text``, or interrupted (Ctrl-C: ``ended`` says how the launcher ended the job);
    the ids recorded."""
    from ..errors import RunStoreError
    from ..runs.store import RunStore
    from .job import settle_run

    if status == "interrupted":
        why = f"labkit launch: {ended} before its loop recorded it"
    elif ended:
        why = f"labkit launch: {ended}"
    else:
        def why(stored):
            return (f"labkit launch: the job exited with status {rc} while this run was "
                    f"{stored} (mpiexec ends every rank when one fails)")
    done = []
    for path, rid in launched.listed(listing):
        try:
            if not os.path.isfile(path):
                continue  # NOTE: never made here: a store is not created to be told of it
            if settle_run(RunStore(path), rid, status, why, text):
                done.append(rid)
        except (RunStoreError, OSError):
            continue  # NOTE: deleted meanwhile, or the store fails: nothing to record into
    return done
