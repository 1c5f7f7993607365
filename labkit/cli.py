"""The ``labkit`` command line: demo, doctor, runs, resume, convert, launch, sweep
(``labkit --help``)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time

import numpy as np


def _selftest(index: int) -> tuple[bool, str]:
    """Build a kernel on cl:index, run an elementwise op, a reduction and a GEMM vs NumPy."""
    from .backend import opencl as cp

    rng = np.random.default_rng(0)
    a = rng.standard_normal((257, 129)).astype(np.float32)
    b = rng.standard_normal((129, 65)).astype(np.float32)
    dev = f"cl:{index}"
    t = time.perf_counter()
    da, db = cp.asarray(a, device=dev), cp.asarray(b, device=dev)
    checks = [
        ("tanh(a)*2+1", (cp.tanh(da) * 2 + 1).get(), np.tanh(a) * 2 + 1, 1e-5),
        ("sum(a, axis=0)", da.sum(axis=0).get(), a.sum(axis=0), 1e-4),
        ("a @ b", (da @ db).get(), a @ b, 1e-4),
    ]
    bad = [name for name, got, want, tol in checks
           if not np.allclose(got, want, rtol=tol, atol=tol * 10)]
    ms = (time.perf_counter() - t) * 1e3
    if bad:
        return False, f"MISMATCH vs NumPy in {', '.join(bad)}"
    return True, f"ok ({len(checks)} kernels vs NumPy, {ms:.0f} ms incl. builds)"


def doctor(args) -> int:
    import pyopencl as cl

    from . import __version__, config
    from .backend.device import default_device
    from .backend.opencl.context import NO_PLATFORM_HELP, probe
    from .backend.opencl.program import kernels_dir
    from .errors import LabkitError

    print(f"labkit {__version__}  Python {platform.python_version()}  NumPy {np.__version__}  "
          f"pyopencl {cl.VERSION_TEXT}")
    print(f"kernel sources: {kernels_dir()}")
    cache = config.kernel_cache_dir()
    print(f"kernel cache:   {cache}  (`labkit doctor --clear-cache` clears it)")
    if args.clear_cache:
        shutil.rmtree(cache, ignore_errors=True)
        print(f"cleared {cache}")
    print("\nsettings (environment variables; see labkit/config.py):")
    for name, value, help_ in config.describe():
        print(f"  {name:26s} {value:24s} {help_}")
    try:
        print(f"\ndefault device: {default_device()}")
    except LabkitError as e:
        print(f"\ndefault device: ERROR {e}")
    from .backend import memory

    kept = memory.applied
    print(f"\ncpu: NumPy {np.__version__}; freed host memory kept for reuse: "
          + (f"up to {kept['trim_threshold'] >> 20} MiB (LABKIT_KEEP_FREED_MEMORY=0 turns it off)"
             if kept else "no"))
    found = probe()
    if not found:
        print(f"\nOpenCL: {NO_PLATFORM_HELP}")
        return 1
    ok_all = True
    platforms = []
    for info, _ in found:
        if info.platform not in platforms:
            platforms.append(info.platform)
    for p in platforms:
        print(f"\nplatform: {p}")
        for info, _ in found:
            if info.platform != p:
                continue
            print(f"  cl:{info.index}  {info.name}  [{info.type}]  vendor {info.vendor}")
            print(f"        {info.version}, driver {info.driver_version}")
            print(f"        compute units {info.compute_units}, max work-group "
                  f"{info.max_work_group_size}, local mem {info.local_mem_size // 1024} KiB, "
                  f"global mem {info.global_mem_size / 2**30:.1f} GiB, "
                  f"fp64 {'yes' if info.fp64 else 'no'}, "
                  f"host-unified memory {'yes' if info.host_unified_memory else 'no'}")
            try:
                ok, msg = _selftest(info.index)
            except LabkitError as e:
                ok, msg = False, f"FAILED: {e}"
            ok_all &= ok
            print(f"        self-test: {msg}")
    return 0 if ok_all else 1


def demo(args) -> int:
    """Train an MLP on the shipped digits set (``--check-devices``: the forward-pass check)."""
    if args.check_devices:
        return check_devices()
    from threadpoolctl import threadpool_limits

    from .training.demo import main as train_demo

    cfg = {"epochs": args.epochs}
    if args.device:
        cfg["device"] = args.device
    # NOTE: a 64-128-10 MLP at batch 64 gains nothing from a second BLAS thread and loses 5x
    # when another process wants the core (8.5 s against 1.7 s measured on 2 busy cores)
    with threadpool_limits(args.threads, user_api="blas"):
        return train_demo(cfg)


def check_devices() -> int:
    """A real computation on every device, checked vs NumPy."""
    from .backend import Device, devices
    from .backend.random import Generator

    print("labkit demo: a two-layer network's forward pass (GEMM, bias, tanh, softmax) on a "
          "batch of 512, on every device, checked against NumPy in float64.\n")
    print(f"devices: {', '.join(str(d) for d in devices())}\n")
    g = Generator(seed=0)
    x = g.normal((512, 784))
    w1, w2 = g.normal((784, 256), std=784 ** -0.5), g.normal((256, 10), std=256 ** -0.5)
    b1 = g.uniform((256,), -0.1, 0.1)

    def forward(xp, x, w1, b1, w2):
        h = xp.tanh(x @ w1 + b1)
        z = h @ w2
        z = z - z.max(axis=1, keepdims=True)
        p = xp.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    ref = forward(np, *(a.astype(np.float64) for a in (x, w1, b1, w2)))
    ok = True
    for dev in devices():
        xp = dev.xp
        arrs = [a if dev.kind == "cpu" else xp.asarray(a, device=dev) for a in (x, w1, b1, w2)]
        forward(xp, *arrs)  # warm-up: builds and caches the kernels
        dev.synchronize()
        t = time.perf_counter()
        reps = 5
        for _ in range(reps):
            p = forward(xp, *arrs)
        dev.synchronize()
        ms = (time.perf_counter() - t) / reps * 1e3
        got = p if isinstance(p, np.ndarray) else p.get()
        err = float(np.abs(got - ref).max())
        good = err < 1e-4
        ok &= good
        name = dev.info.name if dev != Device("cpu") else "NumPy"
        print(f"  {str(dev):6s} {name[:40]:40s} {ms:8.2f} ms/forward   max |p - p_float64| = "
              f"{err:.1e}  {'ok' if good else 'MISMATCH'}")
    print("\nNext: `pytest` runs the test suite on cpu and on every OpenCL device.")
    return 0 if ok else 1


def convert(args) -> int:
    from .data import converters
    from .data._outputs import replaceable
    from .data.datasets import H5Dataset
    from .errors import DataError

    name, out = args.name, args.output
    needs = {"mnist": "the directory with the four IDX files",
             "cifar10": "cifar-10-binary.tar.gz or its extracted directory",
             "text": "a UTF-8 text file", "npz": "a .npz file",
             "h5": "a labkit HDF5 dataset file"}
    try:
        if out is not None and (refused := replaceable(out, args.force)):
            raise refused
        if name != "digits" and not args.source:
            raise DataError(f"give SOURCE: {needs[name]}")
        if name == "digits":
            path = converters.convert_digits(out)
        elif name == "text":
            path = converters.convert_text(args.source, out, level=args.level)
        else:
            path = converters.CONVERTERS[name](args.source, out)
        ds = H5Dataset(path, split=[])
    except DataError as e:
        print(f"labkit convert {name}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    print(f"  sources: {', '.join(ds.all_sources)}")
    print("  splits:  " + ", ".join(f"{k} {b - a}" for k, (a, b) in ds.splits.items()))
    return 0


def _when(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


def _number(v, spec: str) -> str:
    """``v`` formatted by ``spec`` where it is a number of that kind; else its repr, short (a
    stored progress edited by hand: one bad row made the whole listing a traceback)."""
    ok = (isinstance(v, int) and not isinstance(v, bool)) if spec.endswith("d") else (
        isinstance(v, (int, float)) and not isinstance(v, bool))
    from . import runs

    return format(v, spec) if ok else runs.printable(repr(v))[:12]


def runs_cmd(args) -> int:
    from . import runs

    show = runs.printable
    action = args.action or "ls"
    if action == "ls":
        rows = runs.list(status=getattr(args, "status", None))
        if not rows:
            print(f"no runs in {runs.store().path}")
            return 0
        print(f"{'id':32s} {'name':16s} {'status':12s} {'created':16s} {'epoch':>5s} "
              f"{'iter':>7s}  last")
        for r in rows:
            pr = r["progress"] if isinstance(r["progress"], dict) else {}
            metrics = pr.get("last") if isinstance(pr.get("last"), dict) else {}
            last = ", ".join(f"{show(k)} {_number(v, '.4g')}" for k, v in
                             list(metrics.items())[:3] if not str(k).startswith("time"))
            if "damaged" in r:  # its row cannot be read; `labkit runs rm ID` deletes it
                last = f"damaged: {show(r['damaged'])}"
            print(f"{show(r['id']):32s} {show(r['name'] or '-')[:16]:16s} "
                  f"{show(r['status']):12s} "
                  f"{_when(r['created']):16s} {_number(pr.get('epoch', 0), '5d'):>5s} "
                  f"{_number(pr.get('iteration', 0), '7d'):>7s}  {last}")
    elif action == "show":
        r = runs.get(args.id)
        print(f"run {show(r['id'])}  ({show(r['name'] or 'unnamed')})  status "
              f"{show(r['status'])}")
        print(f"  created {_when(r['created'])}, host {show(r['host'] or '-')}, pid {r['pid']}, "
              f"source {show(r['source'] or '-')}")
        if r["parent_run"]:
            print(f"  forked from {r['parent_run']} at {show(str(r['parent_checkpoint']))}")
        if r["error"]:
            print(f"  error: {show(r['error'])}")
        if r["tags"]:
            print(f"  tags: {show(' '.join(r['tags']))}")
        if r["note"]:
            print(f"  note: {show(r['note'])}")
        print(f"  config: {show(json.dumps(r['config']))}")
        print(f"  progress: {show(json.dumps(r['progress']))}")
        for k, m in runs.metrics(args.id).items():
            if m["value"]:
                print(f"  metric {show(k)}: {len(m['value'])} points, last {m['value'][-1]:.5g} "
                      f"at iteration {m['iteration'][-1]}")
        for c in runs.checkpoints(args.id):
            state = "valid" if c["valid"] else "INVALID"
            if "damaged" in c:
                state = "DAMAGED"
            elif not os.path.isdir(c["path"]):  # deleted behind the store's back
                state = "MISSING"
            it = "?" if c["iteration"] is None else c["iteration"]
            size = "?" if c["size"] is None else f"{c['size'] / 1e6:.2f}"
            print(f"  checkpoint at iteration {it:>6}  {size:>7} MB  {state:7s}  "
                  f"{show(c['path'] or c.get('damaged'))}")
    elif action == "rm":
        runs.delete(args.id, files=not args.keep_files, force=args.force)
        print(f"deleted run {args.id}")
    elif action == "rename":
        r = runs.rename(args.id, args.name)
        print(f"run {args.id} is now named {show(r['name'])}")
    elif action == "tag":
        tags = runs.tag(args.id, add=args.tags, remove=args.remove or ())
        print(f"run {args.id} tags: {show(' '.join(tags)) or '(none)'}")
    elif action == "note":
        text = sys.stdin.read() if args.text == "-" else args.text
        r = runs.note(args.id, text)
        print(f"run {args.id} note: {len(r['note'] or '')} characters")
    return 0


def resume_cmd(args) -> int:
    from . import runs
    from .training import resume
    from .training.resume import started_by_dist

    try:
        record = runs.get(args.id)
    except runs.RunStoreError:
        record = None  # a checkpoint or run directory: resume() says what it is
    if record is not None and record["status"] == "finished":
        print(f"run {args.id} already finished (iteration "
              f"{record['progress'].get('iteration', '?')}: at its budget's end, or stopped by "
              f"a command or an extension); nothing to resume. To train it further, fork it "
              f"(from its newest checkpoint; a larger budget where it reached its end): "
              f"lk.runs.fork({args.id!r}, epochs=N)")
        return 0
    if record is not None and not record.get("factory") and started_by_dist(record):
        from .dist.job import resume as resume_job

        # NOTE: the job ends with this command (killed, it takes the ranks along), and Ctrl-C
        # interrupts it as it does `labkit launch`: every rank checkpoints after the same batch
        job = resume_job(args.id, n=args.n, detach=False)
        print(f"run {args.id}: a data-parallel job, resumed on {job.command[2]} rank(s); "
              f"log {job.log_path}", flush=True)
        try:
            rc = job.wait()
        except KeyboardInterrupt:
            print(f"labkit resume: interrupting the job (every rank checkpoints); `labkit "
                  f"resume {args.id}` continues it", file=sys.stderr, flush=True)
            job.interrupt()
            return 130
        print(job.log(20))
        return rc
    if args.n is not None:
        print(f"labkit resume: -n is for data-parallel jobs (lk.dist.start); run {args.id} "
              "trains in one process", file=sys.stderr)
        return 2
    loop = resume(args.id)
    print(f"run {loop.run_id}: {loop.status['iteration']} iterations, epoch "
          f"{loop.status['epoch']}; last checkpoint {loop.last_checkpoint}")
    loop.close()
    status = runs.get(loop.run_id)["status"]
    if status == "finished":
        return 0
    # NOTE: Ctrl-C (or a pause from elsewhere) ended it early: `labkit resume ID && next` must
    # not go on as if it had finished
    print(f"run {loop.run_id} is {status}, not finished; `labkit resume {loop.run_id}` "
          "continues it", file=sys.stderr)
    return 130 if status == "interrupted" else 1


def _an_id(text: str) -> str:
    """A run or sweep id argument: not empty, not a page of text."""
    from .sweep.cli import id_argument

    return id_argument("an id", "`labkit runs ls` and `labkit sweep ls` list them")(text)


def _not_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a value, got an empty string")
    return text


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def launch_cmd(args) -> int:
    from .dist.launch import launch

    return launch(args.n, args.script, args.args, threads=args.threads)


DESCRIPTION = "labkit: train, inspect and resume deep-learning runs."
EPILOG = """examples:
  labkit demo                   train a small MLP on digits (about 1 s), into the run store
  labkit runs                   list the runs; labkit runs show ID for one of them
  labkit resume ID              continue a run from its newest valid checkpoint
  labkit convert mnist DIR      write MNIST (from its IDX files) in labkit's HDF5 layout
  labkit sweep run train.py --trials 20

`labkit COMMAND --help` says more about each command."""


def _parser() -> argparse.ArgumentParser:
    from .runs import STATUSES

    parser = argparse.ArgumentParser(prog="labkit", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND",
                                title="commands")
    p = sub.add_parser("doctor", help="list OpenCL devices, self-test each, show the settings",
                       description="List the OpenCL platforms and devices, build and run a "
                       "self-test on each (an elementwise op, a reduction and a GEMM against "
                       "NumPy), and show every LABKIT_* setting in effect.")
    p.add_argument("--clear-cache", action="store_true", help="delete the kernel binary cache")
    p.set_defaults(func=doctor)
    p = sub.add_parser(
        "demo", help="train an MLP on the shipped digits set (about 1 s on a CPU)",
        description="Train an MLP (64-128-10, dropout, Adam) on the 8x8 handwritten digits "
        "that ship with labkit: validation each epoch, checkpoints, early stopping, then the "
        "test accuracy. The run goes into the run store: `labkit runs show ID`, `labkit "
        "resume ID`. Nothing is downloaded.")
    p.add_argument("--device", type=_not_empty,
                   help="cpu, cl or cl:N (default: a GPU if there is one, else cpu)")
    p.add_argument("--epochs", type=_positive_int, default=30, help="at most this many epochs "
                   "(early stopping may end sooner; default 30)")
    p.add_argument("--threads", type=_positive_int, default=1, help="BLAS threads (default 1: "
                   "the fastest for a model this small, and robust when the machine is busy)")
    p.add_argument("--check-devices", action="store_true",
                   help="instead: a forward pass on every device, checked against NumPy")
    p.set_defaults(func=demo)
    p = sub.add_parser("runs", help="list, show, rename, tag, note or delete runs "
                       "($LABKIT_HOME/runs.sqlite)",
                       description="The run store: every training run, its config, metrics, "
                       "checkpoints and lineage. Example: `labkit runs ls --status failed`, then "
                       "`labkit runs show ID`.")
    rs = p.add_subparsers(dest="action", metavar="ACTION")
    q = rs.add_parser("ls", help="list runs, newest first (the default)")
    q.add_argument("--status", choices=[*STATUSES, "dead"],
                   help="only runs with this status (dead: running, but its process is gone)")
    q = rs.add_parser("show", help="a run's config, progress, metrics and checkpoints")
    q.add_argument("id", type=_an_id)
    q = rs.add_parser("rm", help="delete a run and its checkpoints")
    q.add_argument("id", type=_an_id)
    q.add_argument("--keep-files", action="store_true", help="keep the checkpoint directory")
    q.add_argument("--force", action="store_true", help="delete it even while it trains (its "
                   "trainer stops after that batch and writes nothing more)")
    q = rs.add_parser("rename", help="give a run a new name")
    q.add_argument("id", type=_an_id)
    q.add_argument("name")
    q = rs.add_parser("tag", help="add tags to a run (or remove them with --remove)",
                      description="Tags: 1 to 40 characters, a letter or digit first, then "
                      "letters, digits and _ . : + = @ / - (no spaces).")
    q.add_argument("id", type=_an_id)
    q.add_argument("tags", nargs="*", help="tags to add")
    q.add_argument("--remove", nargs="+", metavar="TAG", help="tags to remove")
    q = rs.add_parser("note", help="set a run's free-text note ('' clears it; - reads stdin)")
    q.add_argument("id", type=_an_id)
    q.add_argument("text")
    p.set_defaults(func=runs_cmd)
    p = sub.add_parser("resume", help="continue a run from its newest valid checkpoint",
                       description="Rebuild a run's loop (with the function lk.training.build "
                       "recorded), load its newest valid checkpoint and train on. A "
                       "data-parallel job (lk.dist.start) starts again on its ranks (or -n N) "
                       "and this command waits for it. Example: `labkit resume ID` (`labkit runs` "
                       "lists the ids).")
    p.add_argument("id", type=_an_id,
                   help="a run id, a checkpoint directory or a run directory")
    p.add_argument("-n", type=_positive_int, default=None,
                   help="ranks for a data-parallel job (default: as many as last time)")
    p.set_defaults(func=resume_cmd)
    p = sub.add_parser("convert", help="write a dataset in labkit's HDF5 layout",
                       description="Write a dataset in labkit's HDF5 layout (default: "
                       "$LABKIT_HOME/datasets/NAME.h5). Nothing is downloaded: digits ships with "
                       "labkit; the others read files you have. Example: `labkit convert text "
                       "corpus.txt -o corpus.h5 --level word`.")
    p.add_argument("name", choices=["digits", "mnist", "cifar10", "text", "npz", "h5"])
    p.add_argument("source", nargs="?", help="mnist: directory of IDX files; cifar10: "
                   "cifar-10-binary.tar.gz or its directory; text: a UTF-8 file; npz: a .npz; "
                   "h5: a labkit dataset file, rewritten in the current format (in place "
                   "unless -o)")
    p.add_argument("-o", "--output", type=_not_empty, help="the .h5 file to write (one "
                   "there already is replaced if it is a labkit dataset)")
    p.add_argument("--force", action="store_true", help="replace -o even if it is some other "
                   "file")
    p.add_argument("--level", choices=["char", "word"], default="char", help="text: tokens")
    p.set_defaults(func=convert)
    p = sub.add_parser("launch", help="run a script on N MPI ranks (data-parallel training)",
                       description="Run `mpiexec -n N python -m mpi4py SCRIPT ARGS` with one "
                       "BLAS thread per rank: an exception on any rank ends every rank. Needs "
                       "pip install 'labkit[dist]'. Example: `labkit launch -n 4 train.py --epochs "
                       "10`.")
    p.add_argument("-n", type=_positive_int, required=True, help="the number of ranks")
    p.add_argument("--threads", type=_positive_int, default=1,
                   help="BLAS threads per rank (default 1)")
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    p.set_defaults(func=launch_cmd)
    from .sweep.cli import add_parser as add_sweep_parser

    add_sweep_parser(sub)
    return parser


# ---- how a command that failed or whose reader left ends: one line naming the culprit
# (never a traceback), and nothing written to a closed pipe


class Reader:
    """``sys.stdout`` / ``sys.stderr`` that drops what is written once its reader has gone
    (``labkit demo | head``): the command finishes its work, and a run or sweep is not marked
    failed because nobody reads its progress any more."""

    def __init__(self, stream):
        self._stream = stream

    def _gone(self) -> None:
        try:  # NOTE: the fd too, so the flush at exit (and any child process) writes nowhere
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            self._stream = open(os.devnull, "w")

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def other_kind(args) -> str:
    """`` (it is a sweep: ...)`` where a sweep id was given for a run, or the other way round."""
    from . import runs

    rid = getattr(args, "id", None)
    if not rid:
        return ""
    try:
        if args.cmd == "sweep":
            if runs.store().exists(rid):
                return f"; it is a run: `labkit runs show {rid}`"
        else:
            runs.store().get_sweep(rid)
            return f"; it is a sweep: `labkit sweep show {rid}`"
    except (runs.RunStoreError, OSError):
        pass
    return ""


def message(args, e: Exception) -> str:
    text = str(e)
    if isinstance(e, OSError) and not isinstance(e, BrokenPipeError):
        # NOTE: a file labkit was asked to read or write: name it and say why
        names = " -> ".join(str(n) for n in (e.filename, e.filename2) if n is not None)
        text = f"{names}: {e.strerror or e}" if names else (e.strerror or repr(e))
    # "launch: no script ..." under "labkit launch: " says the command once
    for prefix in (f"{args.cmd}: ", f"{getattr(args, 'action', None)}: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if getattr(e, "reason", None) in ("not_found", "deleted"):
        text += other_kind(args)
    return text


def closed_pipe() -> int:
    # `labkit runs | head`: the reader left; say nothing more (and nothing at exit)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return 0


def main(argv=None) -> int:
    from .errors import LabkitError

    args = _parser().parse_args(argv)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Reader(sys.stdout), Reader(sys.stderr)
    try:
        return args.func(args)
    except (LabkitError, OSError) as e:
        if isinstance(e, BrokenPipeError):
            return closed_pipe()
        # NOTE: every error labkit raises on purpose already names the culprit and the fix: one
        # line, no traceback (a traceback is for bugs); an OSError names its file
        print(f"labkit {args.cmd}: {message(args, e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"labkit {args.cmd}: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout, sys.stderr = saved


if __name__ == "__main__":
    sys.exit(main())
