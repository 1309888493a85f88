#!/usr/bin/env bash
# The GPU checks, as one prepared script for a machine with an NVIDIA GPU (run from the
# repository root). It installs the CuPy extra matching the CUDA major version, then runs
# the op cross-check and the whole-pipeline check with CuPy, and the pipeline benchmark.
# Figures go to stdout and, when $OUT is set, to $OUT/device_check.txt.
set -euo pipefail
cuda_major=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader >/dev/null 2>&1 &&
             nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p' || true)
extra="cuda${cuda_major:-12}"
[ "$extra" = "cuda13" ] || extra="cuda12"
python3 -m pip install --quiet -e ".[${extra},test]"
{
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  python3 -c "import cupy; print('cupy', cupy.__version__, cupy.cuda.runtime.getDeviceCount(), 'device(s)')"
  nlaverify verify --backends numpy,jax,mpmath,cupy | tail -40
  nlaverify verify --preset tiny --backends cupy,jax | tail -14
  python3 benchmarks/pipeline.py --repeats 20
} 2>&1 | tee "${OUT:-/tmp}/device_check.txt"
