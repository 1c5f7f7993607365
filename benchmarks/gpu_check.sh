#!/usr/bin/env bash
# labkit on an NVIDIA GPU through the driver's own OpenCL library: the backend and autograd
# tests on that device, then GEMM and training steps against PyTorch CUDA on the same GPU.
#
#   WHEELS=.whl bash benchmarks/gpu_check.sh [pytest args...]
#
# Needs: Linux, an NVIDIA GPU and its driver (libnvidia-opencl.so.1), Python with NumPy, pytest
# and PyTorch with CUDA. Nothing is fetched from the network: labkit runs from this checkout
# (PYTHONPATH), and what it needs beyond that (pyopencl, pytools, siphash24, platformdirs) is
# installed from the folder $WHEELS, made on a machine with pip access by, e.g.:
#
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#       pyopencl pytools siphash24 platformdirs
#
# PoCL is deliberately not installed: the only OpenCL platform is then the GPU, so the tests'
# "cl" device (cl:0) is the GPU. Takes 3-6 minutes. Exit status: the tests' (or 2 when the GPU's
# OpenCL is not found). Logs go to $OUT (or ./gpu-check-out) as well as to the terminal.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
LOGS=${OUT:-$PWD/gpu-check-out}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1

nvidia-smi -L 2>/dev/null || echo "gpu_check: nvidia-smi not found (continuing)"
echo "== 1. Python packages (local wheels only) =="
if ! "$PY" -c "import pyopencl" 2>/dev/null; then
    if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        echo "gpu_check: pyopencl is not installed and $WHEELS holds no wheels (see the header)" >&2
        exit 2
    fi
    SITE=$(mktemp -d /tmp/labkit-gpu-site.XXXX)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
        "$WHEELS"/*.whl || exit 2
    export PYTHONPATH="$SITE"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import numpy, pyopencl, torch; print('numpy', numpy.__version__, '| pyopencl',
pyopencl.VERSION_TEXT, '| torch', torch.__version__, '| CUDA', torch.cuda.is_available())"

echo "== 2. the OpenCL loader pointed at the NVIDIA driver =="
LIB=""
for cand in $(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so/{print $NF}') \
            /usr/local/nvidia/lib64/libnvidia-opencl.so.1 /usr/local/nvidia/lib/libnvidia-opencl.so.1 \
            /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/lib64/libnvidia-opencl.so.1; do
    if [ -e "$cand" ]; then LIB=$cand; break; fi
done
if [ -z "$LIB" ]; then
    LIB=$(find / -xdev -name 'libnvidia-opencl.so*' 2>/dev/null | head -1)
fi
if [ -z "$LIB" ]; then
    echo "gpu_check: no libnvidia-opencl.so in ldconfig or the usual folders: is the NVIDIA driver's" \
         "OpenCL part installed?" >&2
    exit 2
fi
ICD=$(mktemp -d /tmp/labkit-icd.XXXX)
echo "$LIB" > "$ICD/nvidia.icd"
export OCL_ICD_VENDORS=$ICD OCL_ICD_FILENAMES=$LIB
export LD_LIBRARY_PATH="$(dirname "$LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "OpenCL driver: $LIB"
export LABKIT_CACHE_DIR=${LABKIT_CACHE_DIR:-$(mktemp -d /tmp/labkit-cache.XXXX)}
"$PY" - <<'PY' || exit 2
import sys
from labkit.backend.opencl.context import probe
devs = probe()
for info, _ in devs:
    print(f"  cl:{info.index}  {info.name}  ({info.platform})")
if not devs or "nvidia" not in (devs[0][0].platform + devs[0][0].name).lower():
    sys.exit("gpu_check: cl:0 is not the NVIDIA GPU; the tests would not run on it")
PY

echo "== 3. backend, autograd and some compile tests on the GPU (cl) and the CPU =="
N=$(( $(nproc) > 8 ? 8 : $(nproc) ))
XDIST=()
"$PY" -c "import xdist" 2>/dev/null && XDIST=(-n "$N")
timeout "${TEST_LIMIT:-600}" "$PY" -m pytest -q -o addopts="-ra" -p no:cacheprovider "${XDIST[@]}" \
    --timeout=300 --durations=5 \
    tests/backend tests/autograd tests/compile/test_sgd_products.py \
    tests/compile/test_capture.py tests/compile/test_lstm_cells.py "$@" 2>&1 \
    | tee "$LOGS/gpu-tests.log"
RC=${PIPESTATUS[0]}

echo "== 4. speed against PyTorch CUDA on the same GPU =="
timeout "${BENCH_LIMIT:-600}" "$PY" benchmarks/gpu_check.py 2>&1 | tee "$LOGS/gpu-bench.log"
echo "gpu_check: tests exit status $RC"
exit "$RC"
