#!/usr/bin/env bash
# The one script to run on a GPU machine, from anywhere in the repo: machine info, the kernel
# tests (GPU parity included), the cuDF tests when cuDF is installed (string buffers read in place,
# and a `gpupipe run` on cuDF frames giving the CPU's shards; reported as skipped otherwise), then
# the benchmarks (text_hash, minhash, ngram_hash, the transformer classifier). Needs only python3 with numpy, numba, pyarrow
# and cupy (pytest, pandas, xxhash used when present). Whole run: well under 5 minutes.
# With $OUT set, everything printed is also written to $OUT/gpu_check.txt.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
if [[ -n "${OUT:-}" ]]; then
    mkdir -p "$OUT"
    exec > >(tee "$OUT/gpu_check.txt") 2>&1
fi
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
status=0

echo "== machine"
nvidia-smi -L || echo "nvidia-smi failed"
command -v nvcc >/dev/null && nvcc --version | tail -n 2
"$PY" -c 'import sys, numpy, numba, pyarrow
print("python", sys.version.split()[0], "| numpy", numpy.__version__, "| numba", numba.__version__,
      "| pyarrow", pyarrow.__version__)'
"$PY" -c 'import cupy
print("cupy", cupy.__version__, "|", cupy.cuda.runtime.getDeviceCount(), "device(s)")' \
    || echo "cupy missing or no device: GPU tests will skip"

# Import gpupipe.kernels from the plain source tree without installing. Installed, pyproject maps
# kernels/ to gpupipe.kernels; here a throwaway `gpupipe` package does the same: its __path__ is a
# folder holding a `kernels` symlink to the repo's kernels/, then the repo's gpupipe/ for the rest.
SHIM="$(mktemp -d)"
trap 'rm -rf "$SHIM"' EXIT
mkdir "$SHIM/gpupipe"
ln -s "$REPO/kernels" "$SHIM/gpupipe/kernels"
printf '__path__ = [%s, %s]\n' "'$SHIM/gpupipe'" "'$REPO/gpupipe'" > "$SHIM/gpupipe/__init__.py"
printf 'exec(open(%s).read())\n' "'$REPO/gpupipe/__init__.py'" >> "$SHIM/gpupipe/__init__.py"  # __version__
export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"

echo
echo "== tests: kernels (CPU and GPU parity) and nvcc compile"
if "$PY" -c 'import pytest' 2>/dev/null; then
    # Only the kernel test files: the rest of tests/ needs packages this machine lacks (dask, ...).
    # --noconftest and the cleared addopts keep the project's test setup out of this bare run.
    # Run from the shim folder: `python -m` puts the current folder first on sys.path, and from the
    # repo root that would be the repo's gpupipe/ (which has no kernels/) ahead of the shim.
    (cd "$SHIM" && timeout 240 "$PY" -m pytest -q -rs -p no:cacheprovider --noconftest \
        --rootdir "$REPO" -o addopts="" -o markers="gpu: needs a CUDA device" \
        "$REPO"/tests/test_kernels_*.py "$REPO/tests/test_cuda_compile.py") || status=$?
else
    echo "pytest missing: running the parity checks of the benchmark scripts instead"
    timeout 120 "$PY" profiling/bench_text_hash.py --check || status=$?
    timeout 120 "$PY" profiling/bench_minhash_kernel.py --check || status=$?
fi

echo
echo "== cuDF (RAPIDS path): string buffers in place, and a gpupipe run on cuDF frames vs the CPU"
if ! "$PY" -c 'import cudf' 2>/dev/null; then
    echo "skipped: cuDF is not installed (python -c 'import cudf' failed)"
elif ! "$PY" -c 'import pytest' 2>/dev/null; then
    echo "skipped: pytest is missing"
else
    # The end-to-end test needs gpupipe's own dependencies (pip install -e '.[gpu]'); it skips, with
    # the reason, where they are missing.
    (cd "$SHIM" && timeout 180 "$PY" -m pytest -q -rs -p no:cacheprovider --noconftest \
        --rootdir "$REPO" -o addopts="" -o markers="gpu: needs a CUDA device" \
        "$REPO/tests/test_rapids_path.py" -k test_cudf_) || status=$?
fi

echo
echo "== benchmark: text_hash"
timeout 200 "$PY" profiling/bench_text_hash.py --chunks 4 || status=$?

echo
echo "== benchmark: minhash (kernel only, num_perm=128; exits non-zero on a CPU/GPU mismatch)"
timeout 120 "$PY" profiling/bench_minhash_kernel.py --docs 20000 || status=$?

echo
echo "== benchmark: ngram_hash (decontamination lookup, kernel only; exits non-zero on a CPU/GPU mismatch)"
timeout 90 "$PY" profiling/bench_decontam.py --kernel-only --docs 20000 || status=$?

echo
echo "== benchmark: transformer classifier (random BERT-base size, 512 tokens, bf16; target 5B tokens/GPU-hour)"
if "$PY" -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
    timeout 300 "$PY" profiling/bench_classifier.py --device cuda --size base --max-length 512 --docs 8192 \
        --batch-size 256 --check || status=$?
else
    echo "skipped: needs torch with CUDA and transformers (pip install transformers)"
fi

echo
echo "== loader: DLPack hand-off (zero copy, stream safety, H2D throughput)"
timeout 120 "$PY" profiling/gpu_dlpack_check.py || status=$?

echo
echo "gpu_check: exit status $status"
exit "$status"
