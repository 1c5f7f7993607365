"""The parent of one rank: run by its path in front of ``python -m mpi4py script.py`` by
``labkit launch`` and ``lk.dist.start`` (``launch.command``), never imported by labkit.

mpiexec (Hydra) kills every rank with SIGKILL as soon as one dies, and its own report names a
process id, often another rank's: nobody said which rank was lost. This small process forks the
rank (which then replaces itself with ``python -m mpi4py ...``: the rank's command line is
unchanged), replaces itself with a watcher whose command line and environment are no rank's
(``_rank.py --watch PID R N``, no ``PMI_RANK``: who looks for rank R finds the rank), waits for
the rank, and when it was killed by a signal that the job was not sent,
prints ``[labkit dist] rank R of N (pid P) was killed by signal 9 (SIGKILL)`` before mpiexec
ends the others (``Job`` puts that line in the run's error). It exits as the rank did.

The signals mpiexec forwards (Ctrl-C, SIGTERM from ``job.stop()``, SIGUSR1/2) reach the rank's
whole process group, this process included: it notes them and waits on, so the rank handles
them alone. The rank dies with this process (``PR_SET_PDEATHSIG`` on Linux), so killing it
here leaves no rank behind.
"""

import os  # NOTE: os and sys are loaded before any script: no file beside this one shadows them
import sys

if __name__ == "__main__" and sys.path and \
        os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    # NOTE: run by its path, this file's folder (labkit/dist) is sys.path[0]: drop it before
    # importing anything else, so no file there can stand for a module of the standard library
    del sys.path[0]

import signal  # noqa: E402

#: the prefix of every line this process prints (Job looks for it in the job's log)
NOTE = "[labkit dist] "
#: signals the job's process group gets from mpiexec or a terminal: noted, not obeyed
NOTED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def _die_with_parent() -> None:
    """SIGKILL this process when its parent (the monitor) ends (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def describe(status: int, pid: int, rank: str = "?", size: str = "?") -> str | None:
    """The note for a rank that ended with wait status ``status``; None for a clean exit."""
    who = f"rank {rank} of {size} (pid {pid})"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "unknown"
        return f"{NOTE}{who} was killed by signal {sig} ({name})"
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"{NOTE}{who} exited with status {code}"


def _noted() -> list:
    return [getattr(signal, n) for n in NOTED if hasattr(signal, n)]


def main(cmd: list[str]) -> int:
    """Fork the rank (``cmd``), then become its watcher (``watch``) under a command line and an
    environment that no longer look like a rank's: the script's name, ``PMI_RANK`` and the
    other variables of MPI are the rank's alone, so whoever looks for rank R's process (by its
    command line or its ``PMI_RANK``) finds the rank, not this process."""
    if not cmd:
        print(f"{NOTE}usage: python _rank.py PYTHON -m mpi4py SCRIPT [ARGS]", file=sys.stderr)
        return 2
    noted = _noted()
    for s in noted:  # NOTE: ignored until watch() notes them (an ignored signal stays so
        signal.signal(s, signal.SIG_IGN)  # across exec; the rank sets them back first)
    me = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            for s in noted:
                signal.signal(s, signal.SIG_DFL)
            _die_with_parent()
            if os.getppid() != me:  # the monitor died before the line above
                os._exit(137)
            os.execv(cmd[0], cmd)
        except BaseException as e:  # noqa: BLE001 - nothing but an exit may leave the fork
            print(f"{NOTE}could not start {cmd[0]}: {e}", file=sys.stderr, flush=True)
        os._exit(127)
    rank, size = os.environ.get("PMI_RANK", "?"), os.environ.get("PMI_SIZE", "?")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "MPI_", "MPIR_", "HYDRA", "I_MPI_"))}
    try:
        # NOTE: the rank stays this process's child across exec (and its parent-death signal
        # does not fire: the same single thread goes on)
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), "--watch",
                                   str(pid), rank, size], env)
    except OSError:
        return watch(pid, rank, size)


def watch(pid: int, rank: str, size: str) -> int:
    """Wait for the rank ``pid`` (a child of this process); note its death by a signal this
    process was not sent too, and end as it ended."""
    received: set[int] = set()
    for s in _noted():
        signal.signal(s, lambda signum, frame: received.add(signum))
    _, status = os.waitpid(pid, 0)  # NOTE: retried after each noted signal (PEP 475)
    note = describe(status, pid, rank, size)
    if note and not (os.WIFSIGNALED(status) and os.WTERMSIG(status) in received):
        print(note, file=sys.stderr, flush=True)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)  # NOTE: mpiexec sees the rank's own death
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--watch"]:
        sys.exit(watch(int(sys.argv[2]), sys.argv[3], sys.argv[4]))
    sys.exit(main(sys.argv[1:]))
