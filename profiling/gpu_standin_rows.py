"""gpu_check.sh's rows on a machine without a GPU (`--allow-no-gpu`): every GPU host path through the CuPy stand-in
(tests/gpu_standin; README "GPU code without a GPU"), then the figures table with what the stand-in showed and
SKIP for every figure only a device can give. Imports nothing of Dask, cuDF or trafilatura (checked at the end).

    python profiling/gpu_standin_rows.py [--table PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/kernels/test_gpu_standin_paths.py", "tests/gpu_standin/test_standin.py"]
# figure -> the stand-in tests that stand for it (by name fragment); device-only figures have none
ROWS = [
    ("parity: near-dedup chain (MinHash, band fold, edges, Jaccard, components)", ["chain_equals", "overlap"]),
    ("parity: find_duplicates / fuzzy_dedup device steps", ["find_duplicates", "fuzzy_stage"]),
    ("parity: minhash + shingle kernels", ["minhash_and_shingles"]),
    ("parity: text_hash + exact dedup keys", ["text_hash"]),
    ("parity: ngram_hash lookup + decontaminate", ["ngram_lookup", "decontamination"]),
    ("stream ordering (hazards caught, constants, events)", ["missing_event", "constants", "ordering_rules",
                                                             "disjoint_ranges"]),
    ("host syncs per batch (minhash)", ["syncs_do_not_grow"]),
    ("device memory bound (hub and star)", ["memory_bound"]),
    ("components on long chains (FastSV rounds)", ["components_hook"]),
    ("end-to-end script (gpu_near_dedup_e2e.py) at 4 MB", ["end_to_end_script"]),
]
DEVICE_ONLY = ["GB/s per kernel", "end-to-end GB/s and TB/GPU-hour (per step)", "DLPack hand-off GB/s",
               "peak device memory (real allocator)", "compute-sanitizer memcheck/racecheck"]
FORBIDDEN = ("dask", "distributed", "cudf", "trafilatura")


class Outcomes:
    def __init__(self):
        self.results: dict[str, str] = {}

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.results[report.nodeid] = report.outcome


def main() -> int:
    import pytest

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, help="also write the table here")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    plugin = Outcomes()
    rc = pytest.main(["-q", "-p", "no:cacheprovider", *[str(ROOT / t) for t in TESTS]], plugins=[plugin])
    lines = [f"{'figure (no GPU here: stand-in rows)':<72} {'result':<6}"]
    for label, keys in ROWS:
        hits = [o for node, o in plugin.results.items() if any(k in node for k in keys)]
        verdict = "FAIL" if not hits or any(o != "passed" for o in hits) else "pass"
        lines.append(f"{label:<72} {verdict:<6} ({len(hits)} tests, stand-in)")
    for label in DEVICE_ONLY:
        lines.append(f"{label:<72} {'SKIP':<6} (needs a GPU)")
    imported = [m for m in FORBIDDEN if m in sys.modules]
    lines.append(f"{'imports nothing of Dask, cuDF or trafilatura':<72} {'FAIL' if imported else 'pass':<6} "
                 f"{imported or ''}")
    table = "\n".join(lines)
    print("\n== figures\n" + table)
    if args.table:
        args.table.write_text(table + "\n")
    return 1 if rc != 0 or imported or "FAIL" in table else 0


if __name__ == "__main__":
    sys.exit(main())
