"""Seed 002's language-plus-code targets (zh 0.25, en 0.55, code 0.15, other 0.05) on a real mixed input (#34):
a web corpus (JSONL with `text`) plus the installed packages' source files and docs (code_samples.py: code files
and .md/.rst/METADATA/licences, no docstrings), through `gpupipe run` (langid with the seed's threshold keys, so
code detection is on → tokenize → mixture by lang → pack). Prints what langid called each input kind, and the
planned vs packed share table (mixture_table.py).

    python profiling/mixture_code_targets.py ../shared/data/corpus/corpus.jsonl.gz --out runs/code_targets
"""
from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from gpupipe.stages.filters.code_samples import labelled_samples

TARGETS = {"zh": 0.25, "en": 0.55, "code": 0.15, "other": 0.05}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus")
    ap.add_argument("--out", default="runs/code_targets")
    ap.add_argument("--per-kind", type=int, default=1500, help="code files and prose files of the installed packages")
    ap.add_argument("--total-tokens", type=int, default=20_000_000)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "mixed.jsonl.gz"
    files = [s for s in labelled_samples(per_kind=args.per_kind) if s.kind != "docstring"]
    with gzip.open(data, "wt", encoding="utf-8") as f, gzip.open(args.corpus, "rt", encoding="utf-8") as src:
        n_web = 0
        for line in src:
            f.write(json.dumps({"id": f"web-{n_web}", "source": "web", "text": json.loads(line).get("text") or ""},
                               ensure_ascii=False) + "\n")
            n_web += 1
        for i, s in enumerate(files):
            f.write(json.dumps({"id": f"{'code' if s.label else 'docs'}-{i}", "source": "code" if s.label else "docs",
                                "text": s.text}, ensure_ascii=False) + "\n")
    print(f"input: {n_web} web documents, {sum(s.label for s in files)} code files, "
          f"{sum(1 - s.label for s in files)} docs")
    config = {"input": {"path": str(data)}, "output": str(out / "run"), "device": "cpu", "seed": 1234,
              "stages": [{"langid": {"min_score": {"zh": 0.65, "en": 0.80, "code": 0.50, "other": 0.85}}},
                         {"tokenize": {"vocab_size": 8000}},
                         {"mixture": {"by": "lang", "total_tokens": args.total_tokens,
                                      "sources": {g: {"weight": w, "epochs": None} for g, w in TARGETS.items()}}},
                         {"pack": {"seq_len": 2048, "blocks_per_shard": 1024}}]}
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    print(f"gpupipe run {path}")
    rc = subprocess.call([sys.executable, "-m", "gpupipe", "run", str(path)])
    if rc:
        return rc
    from gpupipe.run.rundir import kept_parts

    langid = next(p for p in sorted((out / "run" / "stages").iterdir()) if p.name.endswith("-langid"))
    parts = kept_parts(langid) + sorted((langid / "rejects").glob("*.parquet"))
    both = pd.concat([pd.read_parquet(p, columns=["id", "lang"]) for p in parts])
    both["source"] = both["id"].str.split("-").str[0]
    print("langid's label by input kind (every document: kept and rejected by langid):")
    print(pd.crosstab(both["source"], both["lang"].where(both["lang"].isin(["zh", "en", "code"]), "other"),
                      margins=True).to_string())
    return subprocess.call([sys.executable, str(Path(__file__).parent / "mixture_table.py"),
                            str(out / "run" / "shards")])


if __name__ == "__main__":
    sys.exit(main())
