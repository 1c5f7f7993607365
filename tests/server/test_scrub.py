"""Paths in the API's messages (``labkit.server.scrub``): paths with spaces, quotes and any
letter are hidden whole, the words around them are kept."""

import json
import os

import pytest

import labkit as lk
from labkit.server import scrub as S
from labkit.server.handlers import scrub

# (message, what scrub makes of it): paths the server does not know
UNKNOWN = [
    ("cannot read /tmp/my runs/x/checkpoint.json: bad", "cannot read <path>: bad"),
    ("cannot read '/tmp/my runs/x/checkpoint.json' (gone)", "cannot read '<path>' (gone)"),
    ('cannot read "/home/u/mes données/ckpt.json": bad', 'cannot read "<path>": bad'),
    ("[Errno 2] No such file or directory: \"/x/it's here/a b.h5\"",
     '[Errno 2] No such file or directory: "<path>"'),
    ("path=`/opt/my app/x y` ok", "path=`<path>` ok"),
    ("/home/ü/ñ/数据/x.h5 broke", "<path> broke"),
    ("loaded /data/it's/a.h5, then failed", "loaded <path>, then failed"),
    ("two: '/a b/c' and '/d e/f'.", "two: '<path>' and '<path>'."),
    ("checkpoint-/tmp/x/ckpt-1 failed", "checkpoint-<path> failed"),
    ("3/home/u/a.h5", "3<path>"),
    # text that only looks like paths is kept
    ("ratio 3/4, valid/loss", "ratio 3/4, valid/loss"),
    ("loss is NaN at iteration 3/10 (lr 1/3); valid/loss went up", None),
    ("can't find it's 'x' at /tmp/a, don't retry", "can't find it's 'x' at <path>, don't retry"),
    ("lr 1e-3 at /tmp/x: train/loss diverged", "lr 1e-3 at <path>: train/loss diverged"),
    ("quote 'text' and \"more text\" stays", None),
]


@pytest.mark.parametrize("message, want", UNKNOWN)
def test_paths_with_spaces_quotes_and_unicode_are_hidden_whole(message, want):
    assert scrub(message) == (message if want is None else want)


def test_folders_the_server_knows_are_hidden_whole_even_unquoted(tmp_path, monkeypatch):
    """A run directory's folder, the store's folder and LABKIT_HOME are replaced literally:
    spaces in them, and the rest of the path after them, leave nothing behind."""
    home = tmp_path / "lab home ü"
    monkeypatch.setenv("LABKIT_HOME", str(home))
    with lk.runs.use_store(tmp_path / "my store" / "runs.sqlite") as store:
        rid = store.create_run("r")
        runs_dir = tmp_path / "lab runs" / "été 2026"
        store.update_run(rid, directory=str(runs_dir / rid))
        S._known.clear()
        cases = [
            (f"{runs_dir}/{rid}/ckpt 3/manifest.json: bad CRC", "<path>: bad CRC"),
            (f"cannot write {runs_dir}/{rid} (disk full)", "cannot write <path> (disk full)"),
            (f"{store.path}: the run store is damaged", "the run store: the run store is damaged"),
            (f"{store.path}-wal is locked", "the run store is locked"),
            (f"{tmp_path}/my store/backup.sqlite is old", "<path> is old"),
            (f"dataset {home}/my data/x.npz missing", "dataset <path> missing"),
            (f"/mnt{runs_dir}/x is another path", "<path> is another path"),
        ]
        for message, want in cases:
            got = scrub(message)
            if want is not None:
                assert got == want, (message, got)
            assert str(tmp_path) not in got and "été" not in got and "ü" not in got, got


async def test_a_run_error_naming_its_folder_with_spaces_leaves_no_trace(jp_fetch, tmp_path):
    with lk.runs.use_store(tmp_path / "a store" / "runs.sqlite") as store:
        rid = store.create_run("r")
        folder = tmp_path / "my runs" / rid
        store.update_run(rid, directory=str(folder), status="failed",
                         error=f"OSError: cannot open {folder}/ckpt 7/tensors.safetensors",
                         progress={"last_checkpoint": f"{folder}/ckpt 7"})
        S._known.clear()
        for path in (("runs",), ("runs", rid)):
            body = (await jp_fetch("labkit", "api", *path)).body.decode()
            assert str(tmp_path) not in body and "ckpt 7" not in body, body
        run = json.loads(body)
        assert run["error"] == "OSError: cannot open <path>"
        assert run["progress"] == {"last_checkpoint": "<path>"}


def test_scrub_never_fails_without_a_store(tmp_path):
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    lk.runs._override.append(broken)
    try:
        S._known.clear()
        assert scrub(f"{os.sep}tmp/a b/c.json failed") == "<path> failed"
    finally:
        lk.runs._override.pop()
