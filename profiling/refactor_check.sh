#!/usr/bin/env bash
# Issue #29's behaviour check: a refactor leaves byte-identical shards and the same stats (timings aside) for
# configs/default.yaml and configs/full.yaml, local and Dask, and the corpus still keeps 110,528 of 118,709
# documents through exact + near dedup.
#
#   profiling/refactor_check.sh all ROOT [OLD]            the whole check; OLD: a commit (default e8d74e7: a
#                                                         worktree at ROOT/src-OLD) or a checkout of it (/tmp/old):
#       ROOT/inputs     the inputs both sides read (synthetic crawl, its benchmark file and decontamination index),
#                       written once by the old code and kept
#       ROOT/baseline   OLD's runs; kept and reused once complete
#                       (ROOT/baseline/DONE), so later checks only run the new side
#       ROOT/new        this repository's working tree as it is now (removed and rerun each time)
#     then `compare` of the two; exit 0 only when every pair is the same and the corpus count is as expected.
#   profiling/refactor_check.sh run OUT SRC [INPUTS]      one side: SRC's code and SRC/configs into OUT (fresh)
#   profiling/refactor_check.sh compare BASE NEW          same_outputs.py on each pair of runs, the corpus count,
#                                                         the synthetic crawl and decontamination index
#
# SRC is a source tree: this repository (run by the venv's own install: no PYTHONPATH) or another checkout, e.g. a
# worktree of an older commit (run as PYTHONPATH=SRC; its top-level kernels/ is linked to SRC/gpupipe/kernels,
# which is how the install names it). The script checks that `import gpupipe` loads SRC's before running.
# Environment: PYTHON (default: this repository's .venv/bin/python), WORKERS (Dask workers, default 2),
# EXPECT_KEPT / EXPECT_IN (the corpus count, default 110528 / 118709), CORPUS (the corpus JSONL).
#
# Runs (each a fresh run directory, run from INPUTS so the configs' relative paths resolve there):
#   default-local, default-dask   SRC/configs/default.yaml, --executor local / --executor dask --workers $WORKERS
#   full-local, full-dask         SRC/configs/full.yaml, the same
#   corpus-local, corpus-dask     exact_dedup {} + fuzzy_dedup {threshold: 0.8, num_perm: 128} (configs/default.yaml's)
#                                 over $CORPUS, JSONL input, no extract
#   synth/                        `gpupipe synth` and `gpupipe decontam-index` of SRC (compared byte for byte)
# OUT/timings.tsv: wall seconds of each step (the machine's load average alongside: timings are only indicative).
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
WORKERS=${WORKERS:-2}
EXPECT_KEPT=${EXPECT_KEPT:-110528}
EXPECT_IN=${EXPECT_IN:-118709}
CORPUS=${CORPUS:-/work/shared/data/corpus/corpus.jsonl.gz}
RUNS="default-local default-dask full-local full-dask corpus-local corpus-dask"

die() { echo "refactor_check: $*" >&2; exit 2; }

# the environment in which SRC's gpupipe is the one imported: prints the PYTHONPATH to use ("" for the venv's own)
pythonpath_for() {
  local src=$1 own
  own=$(cd / && "$PYTHON" -c 'import gpupipe, os; print(os.path.dirname(os.path.dirname(os.path.realpath(gpupipe.__file__))))') \
    || die "$PYTHON cannot import gpupipe"
  if [ "$(realpath "$src")" = "$own" ]; then echo ""; return; fi
  if [ -d "$src/kernels" ] && [ ! -e "$src/gpupipe/kernels" ]; then ln -s "$(realpath "$src")/kernels" "$src/gpupipe/kernels"; fi
  realpath "$src"
}

check_import() {   # PYTHONPATH SRC
  local got
  got=$(cd / && PYTHONPATH=$1 "$PYTHON" -c 'import gpupipe, gpupipe.kernels, os; print(os.path.realpath(gpupipe.__file__)); print(os.path.realpath(gpupipe.kernels.__file__))') \
    || die "cannot import gpupipe from $2"
  echo "$got" | sed 's/^/  imports /'
  echo "$got" | head -1 | grep -q "^$(realpath "$2")/" || die "gpupipe is imported from $(echo "$got" | head -1), not from $2"
}

gp() {   # run gpupipe of the current side (PP set by the caller)
  PYTHONPATH=$PP "$PYTHON" -m gpupipe "$@"
}

timed() {   # NAME LOG CMD... : run, log, append wall seconds to $OUT/timings.tsv
  local name=$1 log=$2; shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$@" >"$log" 2>&1; rc=$?
  t1=$(date +%s.%N)
  printf '%s\t%.1f\t%s\tload %s\n' "$name" "$(echo "$t1 - $t0" | bc)" "$rc" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/timings.tsv"
  printf '  %-14s %6.1f s  exit %s\n' "$name" "$(echo "$t1 - $t0" | bc)" "$rc"
  [ $rc -eq 0 ] || { echo "  $name failed (exit $rc); the end of $log:"; tail -15 "$log" | sed 's/^/    /'; }
  return $rc
}

make_inputs() {   # INPUTS: the synthetic crawl and decontamination index, once
  local inputs=$1
  if [ -f "$inputs/data/synthetic/benchmark.index.parquet" ]; then return 0; fi
  mkdir -p "$inputs" && (cd "$inputs" \
    && gp synth --out data/synthetic/crawl.warc.gz --docs 400 --seed 0 \
    && gp decontam-index --out data/synthetic/benchmark.index.parquet data/synthetic/crawl.benchmark.jsonl) \
    || die "could not write the inputs in $inputs"
}

cmd_run() {   # OUT SRC [INPUTS]
  [ $# -ge 2 ] || die "usage: run OUT SRC [INPUTS]"
  OUT=$1; local src; src=$(realpath "$2"); local inputs=${3:-$(dirname "$(realpath -m "$OUT")")/inputs}
  [ -f "$src/configs/default.yaml" ] || die "$src has no configs/default.yaml"
  PP=$(pythonpath_for "$src") || exit 2
  echo "side $OUT: code and configs of $src (PYTHONPATH=${PP:-<venv install>}), git $(git -C "$src" rev-parse --short HEAD 2>/dev/null)$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo ' + uncommitted changes')"
  check_import "$PP" "$src"
  make_inputs "$inputs"
  inputs=$(realpath "$inputs")
  rm -rf "$OUT"; mkdir -p "$OUT/logs"; OUT=$(realpath "$OUT")
  {
    echo "src=$src"; echo "commit=$(git -C "$src" rev-parse HEAD 2>/dev/null)"; echo "pythonpath=$PP"; echo "inputs=$inputs"
    git -C "$src" status --porcelain 2>/dev/null | sed 's/^/dirty: /'
  } >"$OUT/side.txt"
  printf 'step\tseconds\texit\tload\n' >"$OUT/timings.tsv"
  cat >"$OUT/corpus.yaml" <<EOF
# exact + near dedup as configs/default.yaml has them, on the benchmark corpus (JSONL: no extract)
input: {path: $CORPUS, format: jsonl}
output: runs/corpus
executor: {kind: local, workers: 2}
device: auto
seed: 0
stages:
  - exact_dedup: {}
  - fuzzy_dedup: {threshold: 0.8, num_perm: 128}
EOF
  local failed=0 run cfg exe
  # synth and decontam-index of this side, into its own folder (compared with the other side's byte for byte)
  mkdir -p "$OUT/synth"
  timed synth "$OUT/logs/synth.log" bash -c "cd '$OUT/synth' && PYTHONPATH='$PP' '$PYTHON' -m gpupipe synth --out data/synthetic/crawl.warc.gz --docs 400 --seed 0 && PYTHONPATH='$PP' '$PYTHON' -m gpupipe decontam-index --out data/synthetic/benchmark.index.parquet data/synthetic/crawl.benchmark.jsonl" || failed=1
  # numba's kernel cache is keyed by the kernel sources: compile once up front so the runs' times compare
  timed warmup "$OUT/logs/warmup.log" gp warmup || failed=1
  for run in $RUNS; do
    case $run in
      default-*) cfg=$src/configs/default.yaml ;;
      full-*) cfg=$src/configs/full.yaml ;;
      corpus-*) cfg=$OUT/corpus.yaml ;;
    esac
    case $run in
      *-local) exe=(--executor local) ;;
      *-dask) exe=(--executor dask --workers "$WORKERS") ;;
    esac
    timed "$run" "$OUT/logs/$run.log" bash -c 'cd "$1" && shift && "$@"' _ "$inputs" \
      env PYTHONPATH="$PP" "$PYTHON" -m gpupipe run "$cfg" --output "$OUT/$run" "${exe[@]}" || failed=1
  done
  for run in corpus-local corpus-dask; do corpus_count "$OUT/$run" || failed=1; done
  [ $failed -eq 0 ] && touch "$OUT/DONE"
  return $failed
}

corpus_count() {   # RUN: print docs kept, fail unless EXPECT_KEPT of EXPECT_IN
  "$PYTHON" - "$1" "$EXPECT_KEPT" "$EXPECT_IN" <<'EOF'
import json, sys
run, kept_want, in_want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    s = json.load(open(f"{run}/stats.json"))
except OSError as e:
    print(f"  corpus {run}: no stats.json ({e.strerror})"); sys.exit(1)
kept, got_in = s["output_docs"], s["input_records"]
ok = (kept, got_in) == (kept_want, in_want)
by = ", ".join(f"{st['name']} -{sum(st['removed'].values()):,}" for st in s["stages"])
print(f"  corpus {run.rsplit('/', 1)[-1]}: docs kept {kept:,} of {got_in:,} ({by})  "
      + ("as expected" if ok else f"EXPECTED {kept_want:,} of {in_want:,}"))
sys.exit(0 if ok else 1)
EOF
}

cmd_compare() {   # BASE NEW
  [ $# -eq 2 ] || die "usage: compare BASE NEW"
  local base=$1 new=$2 failed=0 run f rc results=""
  for run in $RUNS; do
    echo "== $run: $base/$run vs $new/$run"
    if [ ! -f "$base/$run/stats.json" ] || [ ! -f "$new/$run/stats.json" ]; then
      echo "  missing run: $( [ -f "$base/$run/stats.json" ] || echo "$base/$run ")$( [ -f "$new/$run/stats.json" ] || echo "$new/$run")"
      results+="$run\tMISSING RUN\n"; failed=1; continue
    fi
    "$PYTHON" "$HERE/same_outputs.py" "$base/$run" "$new/$run"; rc=$?
    if [ $rc -eq 0 ]; then results+="$run\tsame\n"; else results+="$run\tDIFFERENT (exit $rc)\n"; failed=1; fi
  done
  echo "== corpus count (expected $EXPECT_KEPT of $EXPECT_IN)"
  for run in corpus-local corpus-dask; do
    for side in "$base" "$new"; do
      if corpus_count "$side/$run"; then :; else results+="count $side/$run\tWRONG\n"; failed=1; fi
    done
  done
  echo "== synth + decontam-index outputs (byte for byte)"
  rc=0
  for f in crawl.warc.gz crawl.truth.jsonl crawl.benchmark.jsonl benchmark.index.parquet; do
    if cmp -s "$base/synth/data/synthetic/$f" "$new/synth/data/synthetic/$f"; then echo "  $f same"
    else echo "  $f DIFFERS (or missing)"; rc=1; fi
  done
  if [ $rc -eq 0 ]; then results+="synth\tsame\n"; else results+="synth\tDIFFERENT\n"; failed=1; fi
  echo "== summary: $base vs $new"
  printf "$results" | sed 's/^/  /'
  [ -f "$base/timings.tsv" ] && [ -f "$new/timings.tsv" ] && {
    echo "== wall seconds (base / new; load average in $base/timings.tsv, $new/timings.tsv)"
    join -t $'\t' <(tail -n +2 "$base/timings.tsv" | cut -f1,2 | sort) <(tail -n +2 "$new/timings.tsv" | cut -f1,2 | sort) \
      | awk -F'\t' '{printf "  %-14s %7s %7s\n", $1, $2, $3}'
  }
  if [ $failed -eq 0 ]; then echo "RESULT: SAME"; else echo "RESULT: DIFFERENT"; fi
  return $failed
}

cmd_all() {   # ROOT [OLD_COMMIT]
  [ $# -ge 1 ] || die "usage: all ROOT [OLD_COMMIT]"
  local root=$1 old=${2:-e8d74e7} src
  mkdir -p "$root"; root=$(realpath "$root")
  if [ -d "$old" ]; then   # a checkout of the old commit already there (e.g. /tmp/old)
    src=$(realpath "$old")
  else
    src=$root/src-$old
    if [ ! -d "$src" ]; then git -C "$REPO" worktree add --detach "$src" "$old" >/dev/null || die "no worktree of $old"; fi
    [ "$(git -C "$src" rev-parse HEAD)" = "$(git -C "$REPO" rev-parse "$old^{commit}")" ] || die "$src is not at $old"
  fi
  git -C "$src" status --porcelain --untracked-files=no | grep -q . && die "$src has uncommitted changes"
  echo "old side: $src at $(git -C "$src" rev-parse --short HEAD)"
  if [ -f "$root/baseline/DONE" ]; then
    echo "baseline: $root/baseline (complete; reused)"
    [ -f "$root/inputs/data/synthetic/benchmark.index.parquet" ] || die "the baseline's inputs $root/inputs are gone"
  else
    # the inputs are written by the old code
    PP=$(pythonpath_for "$src") || exit 2
    make_inputs "$root/inputs"
    (cmd_run "$root/baseline" "$src" "$root/inputs") || die "the baseline ($old) did not complete: see $root/baseline/logs"
  fi
  (cmd_run "$root/new" "$REPO" "$root/inputs")
  cmd_compare "$root/baseline" "$root/new"
}

case ${1:-} in
  all) shift; cmd_all "$@" ;;
  run) shift; cmd_run "$@" ;;
  compare) shift; cmd_compare "$@" ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 2 ;;
esac
