#!/usr/bin/env bash
# Profile one gpupipe run with Nsight Systems (CUDA API + kernels, NVTX ranges, OS runtime calls).
#
#   profiling/nsys.sh CONFIG [nsys profile args ...] [-- gpupipe run args ...]
#   profiling/nsys.sh --list            print the NVTX ranges gpupipe emits, and exit
#
# Runs:  nsys profile --trace=cuda,nvtx,osrt -o OUT [nsys args] gpupipe run CONFIG --device gpu [gpupipe args]
# then prints `nsys stats` summaries (NVTX ranges, CUDA kernels, memory copies) of OUT.nsys-rep.
# OUT: $NSYS_OUT, or profiling/results/nsys-<config>-<time>. gpupipe: $GPUPIPE, or `gpupipe` on PATH.
# Example:  profiling/nsys.sh configs/default.yaml --sample=none -- --executor local --output runs/nsys
# The local executor keeps every range in one process (dask workers are child processes: nsys follows them,
# but the timeline is then split per process). How to read the result: profiling/README.md.
set -euo pipefail

list_ranges() {
    cat <<'EOF'
NVTX ranges gpupipe emits. Made with gpupipe.nvtx_ranges.annotate (the nvtx package): domain "gpupipe".
The CUDA kernel ranges (text_hash, minhash, ngram_hash) come through CuPy: the default domain.
  gpupipe/read                       read stage, one range per input file (parse WARC/JSONL, write parts)
  gpupipe/<stage>                    one partition of a map stage (extract, normalize, langid, url_filter,
                                     line_filter, doc_filter, quality, quality_classifier, perplexity, pii,
                                     tokenize, decontaminate) and the apply phase of dedup stages
                                     (exact_dedup, url_dedup, fuzzy_dedup, substring_dedup): read part,
                                     run, write part + rejects
  gpupipe/<stage>/keys               global stages (exact_dedup, url_dedup): keys of one partition, routed
  gpupipe/<stage>/reduce             global stages: one bucket of keys resolved into removals
  gpupipe/fuzzy_dedup/sign           MinHash signatures + LSH band hashes of one partition
  gpupipe/simhash_dedup/sign         SimHash fingerprints of one partition
  gpupipe/substring_dedup/group      suffix-array pass over one partition group
  gpupipe/substring_dedup/cross      cross-group pass over one batch of regions
  gpupipe/pack                       the whole packing loop (stream, blocks, shards)
  gpupipe/kernel/text_hash           128-bit document hash kernel (exact_dedup keys on the GPU)
  gpupipe/kernel/minhash             MinHash kernels, all batches of one call (fuzzy_dedup sign)
  gpupipe/kernel/shingles            shingle-hash kernels, all batches of one call (Jaccard check on the GPU)
  gpupipe/kernel/ngram_hash          n-gram hash lookup kernels (decontaminate)
  gpupipe/kernel/suffix_array        suffix array of one group's bytes (CPU; substring_dedup)
  gpupipe/kernel/lcp                 LCP array of one group's bytes (CPU; substring_dedup)
EOF
}

if [[ "${1:-}" == "--list" ]]; then
    list_ranges
    exit 0
fi
if [[ $# -lt 1 || "$1" == -* ]]; then
    echo "usage: $0 CONFIG [nsys profile args ...] [-- gpupipe run args ...]   |   $0 --list" >&2
    exit 2
fi
CONFIG="$1"
shift
NSYS_ARGS=()
RUN_ARGS=()
while [[ $# -gt 0 ]]; do
    if [[ "$1" == "--" ]]; then
        shift
        RUN_ARGS=("$@")
        break
    fi
    NSYS_ARGS+=("$1")
    shift
done

command -v nsys >/dev/null || { echo "nsys not found: install Nsight Systems (part of the CUDA toolkit)" >&2; exit 2; }
GPUPIPE="${GPUPIPE:-gpupipe}"
command -v "$GPUPIPE" >/dev/null || { echo "$GPUPIPE not found: pip install -e . (or set GPUPIPE)" >&2; exit 2; }
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${NSYS_OUT:-$REPO/profiling/results/nsys-$(basename "${CONFIG%.*}")-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$(dirname "$OUT")"

set -x
nsys profile --trace=cuda,nvtx,osrt --force-overwrite=true -o "$OUT" ${NSYS_ARGS[@]+"${NSYS_ARGS[@]}"} \
    "$GPUPIPE" run "$CONFIG" --device gpu ${RUN_ARGS[@]+"${RUN_ARGS[@]}"}
set +x

# Summaries: report names changed in nsys 2023 (nvtxsum -> nvtx_sum ...); try the new, then the old.
for pair in "nvtx_sum nvtxsum" "cuda_gpu_kern_sum gpukernsum" "cuda_gpu_mem_time_sum gpumemtimesum"; do
    read -r new old <<<"$pair"
    nsys stats --report "$new" "$OUT.nsys-rep" 2>/dev/null || nsys stats --report "$old" "$OUT.nsys-rep" || true
done
echo
list_ranges
echo
echo "profile: $OUT.nsys-rep  (open in the Nsight Systems GUI: nsys-ui $OUT.nsys-rep)"
