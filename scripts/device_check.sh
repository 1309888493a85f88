#!/usr/bin/env bash
# The GPU checks as one prepared script, for a machine with an NVIDIA GPU and NO network
# (run from the repository root). Nothing is downloaded: the project runs from the checkout
# (PYTHONPATH), and Python packages the machine lacks are installed from wheels carried in
# ./.whl (see docs/guide/pipeline.md, "The GPU check"), e.g. for the H200 machine:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux2014_x86_64 -d .whl \
#     array-api-compat array-api-strict
# It runs: the op cross-check with CuPy, the whole tiny pipeline node by node with CuPy and
# the strict stand-in, verification below float64 (float32 with matmuls pinned to full
# precision, bfloat16), check_op on CuPy and JAX-GPU kernels in low precision
# (scripts/gpu_check_op.py), the pipeline benchmark, and the whole test suite with as many xdist
# workers as cores (JAX allocates GPU memory on demand: tests/conftest.py).
# Figures go to stdout and, when $OUT is set, to $OUT/device_check.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
log="${OUT:-/tmp}/device_check.txt"
: > "$log"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/nlaverify-site .whl/*.whl || exit 2
  export PYTHONPATH="$PWD:/tmp/nlaverify-site${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
missing=$(python3 - <<'PY'
import importlib.util as u
need = ["numpy", "scipy", "sympy", "mpmath", "networkx", "jax", "hypothesis", "pytest",
        "xdist", "array_api_compat", "array_api_strict", "cupy", "matplotlib"]
print(" ".join(m for m in need if u.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
  echo "device_check: missing Python packages: $missing (carry their wheels in .whl)" | tee -a "$log"
  exit 2
fi
status=0
step() {  # run one check, keep going on failure, remember it
  echo "== $*" | tee -a "$log"
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "== FAILED ($rc): $*" | tee -a "$log"; status=1; }
}
nv() { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; }
step nv
step python3 -c "import cupy, jax; print('cupy', cupy.__version__, cupy.cuda.runtime.getDeviceCount(), 'device(s); jax', jax.__version__, jax.devices())"
step python3 -m nlaverify.cli verify --backends numpy,jax,mpmath,cupy,strict
step python3 -m nlaverify.cli verify --preset tiny --backends cupy,jax,strict
step python3 -m nlaverify.cli verify --preset tiny --dtype float32
step python3 -m nlaverify.cli verify --preset tiny --dtype bfloat16
step python3 scripts/gpu_check_op.py
step python3 benchmarks/pipeline.py --repeats 20
step python3 -m pytest -q -n "$(nproc)" -p no:cacheprovider
echo "device_check: $([ $status -eq 0 ] && echo passed || echo FAILED)" | tee -a "$log"
exit $status
