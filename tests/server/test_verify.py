"""``GET runs/ID/checkpoints?verify=1``: each checkpoint's files checked again on view."""

from pathlib import Path

import pytest

import labkit as lk

from .test_api import call, trained  # noqa: F401  (a fixture)


def flip_byte(path: Path, offset: int = -3) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


async def test_verify_finds_a_damaged_and_a_missing_checkpoint(jp_fetch, trained):  # noqa: F811
    recs = lk.runs.checkpoints(trained.run_id)
    assert len(recs) == 2
    damaged, intact = recs
    flip_byte(Path(damaged["path"]) / "tensors.safetensors")

    # as recorded: both valid (nothing read); no reason
    code, body = await call(jp_fetch, "runs", trained.run_id, "checkpoints")
    assert code == 200 and [c["valid"] for c in body["checkpoints"]] == [True, True]
    assert all("reason" not in c for c in body["checkpoints"])

    code, body = await call(jp_fetch, "runs", trained.run_id, "checkpoints", verify="1")
    assert code == 200
    bad, good = body["checkpoints"]
    assert bad["id"] == damaged["id"] and bad["valid"] is False
    assert "tensors.safetensors" in bad["reason"] and "CRC" in bad["reason"], bad["reason"]
    assert good["valid"] is True and good["reason"] is None
    # the record's metrics and size go with it; no path anywhere
    assert good["size"] > 0 and isinstance(good["metrics"], dict)
    assert str(Path(damaged["path"]).parent) not in str(body) and "path" not in bad

    # the files gone: invalid, said plainly
    lk.checkpoint.remove(intact["path"])
    code, body = await call(jp_fetch, "runs", trained.run_id, "checkpoints", verify="true")
    assert body["checkpoints"][1] == {**body["checkpoints"][1], "valid": False,
                                      "reason": "its files are gone"}
    # verify=0 is the plain listing; the store is not changed by a check
    code, plain = await call(jp_fetch, "runs", trained.run_id, "checkpoints", verify="0")
    assert [c["valid"] for c in plain["checkpoints"]] == [True, True]


@pytest.mark.parametrize("value", ["2", "yes", "x" * 5000])
async def test_a_bad_verify_is_a_400(jp_fetch, trained, value):  # noqa: F811
    code, body = await call(jp_fetch, "runs", trained.run_id, "checkpoints", verify=value)
    assert code == 400 and "verify" in body["message"], body


async def test_verify_of_no_run_is_a_404(jp_fetch):
    code, body = await call(jp_fetch, "runs", "20260101-000000-abcdef", "checkpoints",
                            verify="1")
    assert code == 404 and "no run" in body["message"]
