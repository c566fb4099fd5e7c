"""Extraction quality through the real pipeline: `gpupipe run` with `extract: {}` on a folder of HTML pages.

Where `bench_extract.py` calls the Extract stage in-process on a hand-built frame, this goes the user's way: the
read stage reads DATA_DIR/html as an HTML folder (urls from the pages themselves, or none), the extract stage runs
with its defaults, and the extracted parts are scored against DATA_DIR/ground-truth.json.gz with bench_extract.py's
scoring. Pages the pipeline dropped score as empty predictions, so the F1 should equal bench_extract.py's
"extract (auto)" row (the default config since #19); the drop reasons of every stage are printed (extract_error should
be 0).

Usage:  python profiling/bench_extract_run.py DATA_DIR [--out RUN_DIR] [--workers 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from bench_extract import metrics, tp_fp_fn  # noqa: E402

from gpupipe.cli import main as gpupipe_main  # noqa: E402
from gpupipe.io.parts import part_paths, read_part  # noqa: E402


def run_extract(html_dir: Path, out: Path, workers: int) -> dict:
    cfg = {"input": {"path": str(html_dir)}, "output": str(out / "run"), "device": "cpu",
           "executor": {"kind": "local", "workers": workers, "partition_docs": 100},
           "stages": [{"extract": {}}]}
    cfg_path = out / "extract.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    if gpupipe_main(["run", str(cfg_path)]) != 0:
        raise SystemExit("gpupipe run failed")
    return json.loads((out / "run" / "stats.json").read_text())


def predictions(run_dir: Path) -> dict[str, str]:
    """Extracted text per page key (the file name's stem, as in ground-truth.json.gz)."""
    parts = part_paths(run_dir / "stages" / "01-extract")
    frames = [read_part(p)[["id", "text"]] for p in parts]
    return {doc_id.split("/")[-1].split(".")[0]: text for f in frames for doc_id, text in zip(f["id"], f["text"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="run folder (default: a temporary one)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with gzip.open(args.data_dir / "ground-truth.json.gz", "rt", encoding="utf-8") as fh:
        truth = json.load(fh)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        stats = run_extract(args.data_dir / "html", out, args.workers)
        preds = predictions(out / "run")
    keys = sorted(truth)
    counts = np.array([tp_fp_fn(truth[k].get("articleBody", ""), preds.get(k)) for k in keys])
    f1, p, r = metrics(counts)
    read, extract = stats["stages"][0], stats["stages"][1]
    print(f"{len(keys)} pages in ground truth, {read['docs_in']} read, {extract['docs_out']} extracted")
    for s in stats["stages"]:
        print(f"  {s['name']}: removed {s['removed']}, extra {s.get('extra', {})}")
    print(f"F1 {f1:.4f}  precision {p:.4f}  recall {r:.4f}  "
          f"extract_error {extract['removed'].get('extract_error', 0)}")


if __name__ == "__main__":
    main()
