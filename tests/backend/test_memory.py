"""Freed host memory kept for reuse (glibc's malloc): steps that free and allocate the same
sizes stop page-faulting."""

import json
import os
import platform
import subprocess
import sys

import pytest

import labkit as lk
from labkit.backend import memory

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="mallopt is glibc's")

FAULTS = """
import json, resource, numpy as np
import labkit
def step():
    a = [np.ones(1 << 21, np.float32) for _ in range(4)]   # 4 x 8 MiB, freed at return
    return sum(float(x[0]) for x in a)
for _ in range(3):
    step()
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(json.dumps({"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0,
                  "applied": labkit.backend.memory.applied}))
"""


def faults(keep):
    env = {**os.environ, "LABKIT_KEEP_FREED_MEMORY": keep, "NUMPY_MADVISE_HUGEPAGE": "0"}
    out = subprocess.run([sys.executable, "-c", FAULTS], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout)


@glibc
def test_freed_memory_is_reused_without_page_faults():
    kept, given_back = faults("1"), faults("0")
    assert kept["applied"] == {"mmap_threshold": 64 << 20, "trim_threshold": 256 << 20}
    assert given_back["applied"] is None
    # 20 steps x 32 MiB: about 164,000 pages faulted in when freed memory goes back
    assert given_back["faults"] > 20_000, given_back
    assert kept["faults"] < 2_000, kept


@glibc
def test_keep_freed_memory_is_on_in_this_process_and_checks_its_arguments():
    assert memory.applied is not None  # import labkit did it
    with pytest.raises(ValueError, match="mmap_threshold must be between"):
        memory.keep_freed_memory(mmap_threshold=0)
    with pytest.raises(ValueError, match="trim_threshold"):
        memory.keep_freed_memory(trim_threshold=1 << 40)
    assert lk.backend.memory.keep_freed_memory() is True
