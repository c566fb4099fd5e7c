"""Accuracy and throughput of the `langid` stage on a labelled JSONL corpus ({"lang": ..., "text": ...} a line,
.gz or plain; e.g. an English + Chinese corpus), before and after the script-aware correction.

Accuracy is of the `lang` column with every label kept (no `keep`, thresholds not applied), per true language,
per length bucket (characters of the stripped text), with the confusion table (the labels given to each true
language). Rows:
  fasttext   fastText (lid.176) on every document, min_chars 0, no correction: fastText's own labels
  before     the stage as it was: short documents `und`, fastText's label as it is
             (`script_rules: false, casefold_below: 0, merge: {}`, which is the stage before the correction)
  after      the stage's defaults (script rules, case-folded retry when unsure, merge of wuu/yue into zh)
  paragraph_before, paragraph   the same two at `level: paragraph`
Then: documents per rule (`lang_rule`), `lang_script` of the Chinese documents, and the thresholds
`min_score: fineweb2` would choose on this corpus (max(0.3, min(0.9, median - std)) per language of `after`'s
scores) with the share of each language they would drop.

Throughput: the stage's `run_partition` (transform, reasons, stats) over the corpus cut into partitions of
--partition-docs documents, `before` and `after` alternately in the same process (--repeat rounds), after a
warm-up call (numba compile, the script table): wall seconds and CPU seconds of the process (all threads; the
steadier on a shared machine, as in bench_extract.py), median and best of the rounds.

--warc FILE...: pages of WARC files read and extracted with the project's own reader and `extract` stage, with
their labels before (lang_raw) and after, at both levels: e.g. real Japanese pages must stay `ja`.

Usage:  python profiling/bench_langid.py CORPUS.jsonl[.gz] [--partition-docs 20000] [--repeat 3] [--warc F ...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections import Counter

import numpy as np
import pandas as pd

from gpupipe.stages.base import RunContext
from gpupipe.stages.filters.langid import LangId, LangIdConfig, fineweb2_threshold

BUCKETS = [(0, 30), (30, 100), (100, 1000), (1000, None)]
BEFORE = {"script_rules": False, "casefold_below": 0.0, "merge": {}}


def read_corpus(path: str) -> pd.DataFrame:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    df = pd.DataFrame({"id": [str(r.get("id", i)) for i, r in enumerate(rows)], "truth": [r["lang"] for r in rows],
                       "text": [r["text"] for r in rows]})
    return df.assign(doc_index=np.arange(len(df)))


def stage(model_stage: LangId | None, **params) -> LangId:
    s = LangId(LangIdConfig(**params), RunContext())
    if model_stage is None:
        s.setup()
    else:
        s._model = model_stage._model
    return s


def accuracy_report(name: str, truth: pd.Series, lang: pd.Series, chars: np.ndarray) -> list[str]:
    out = [f"## {name}"]
    for t in sorted(truth.unique()):
        m = (truth == t).to_numpy()
        parts = [f"{t}: {np.mean(lang[m] == t):.4f} of {m.sum():,}"]
        for lo, hi in BUCKETS:
            b = m & (chars >= lo) & (chars < (hi if hi is not None else np.inf))
            if b.any():
                parts.append(f"[{lo},{hi if hi is not None else ''}) {np.mean(lang[b] == t):.4f} of {b.sum():,}")
        out.append("  accuracy " + " | ".join(parts))
        wrong = lang[m][lang[m] != t].value_counts()
        out.append(f"  confusion {t} -> " + (", ".join(f"{k} {v:,}" for k, v in wrong.head(10).items()) or "none")
                   + (f", ... ({len(wrong) - 10} more labels)" if len(wrong) > 10 else ""))
    return out


def timed(stages: dict[str, LangId], parts: list[pd.DataFrame], repeat: int) -> dict[str, dict[str, list]]:
    """Wall and CPU seconds (this process, all its threads) of each round per stage, the stages alternately so
    that both see the same machine load. On a shared machine the CPU seconds are the steadier measure: they count
    the work, not the waiting for a core."""
    seconds: dict[str, dict[str, list]] = {k: {"wall": [], "cpu": []} for k in stages}
    for _ in range(repeat):
        for k, s in stages.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for p in parts:
                s.run_partition(p)
            seconds[k]["wall"].append(time.perf_counter() - t0)
            seconds[k]["cpu"].append(time.process_time() - c0)
    return seconds


def warc_pages(paths: list[str]) -> list[str]:
    from gpupipe.io.warc import iter_warc
    from gpupipe.stages.text.extract import Extract, ExtractConfig

    out = ["## WARC pages (the project's reader and `extract` stage, extractor auto)"]
    ex = Extract(ExtractConfig(), RunContext())
    ex.setup()
    for path in paths:
        docs = pd.DataFrame([d for d in iter_warc(path) if isinstance(d, dict)])
        kept, _, _ = ex.run_partition(docs.assign(doc_index=np.arange(len(docs))))
        for level in ("document", "paragraph"):
            o = stage(None, level=level).transform(kept)
            raw = dict(Counter(o["lang_raw"]).most_common())
            after = dict(Counter(o["lang"]).most_common())
            changed = [f"{r.url} {r.lang_raw}->{r.lang} ({r.lang_rule})" for r in o.itertuples() if r.lang_rule]
            out.append(f"  {path.rsplit('/', 1)[-1]} {level}: {len(o)} pages; before {raw}; after {after}"
                       + ("".join(f"\n    {c}" for c in changed) if changed else "; none changed"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--partition-docs", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warc", nargs="*", default=[])
    args = ap.parse_args()

    df = read_corpus(args.corpus)
    chars = df["text"].str.strip().str.len().to_numpy()
    print(f"{len(df):,} documents, {df['text'].str.len().sum() / 1e6:.1f} M characters; "
          f"by language {dict(Counter(df['truth']).most_common())}")

    base = stage(None)
    runs = {"fasttext": stage(base, min_chars=0, **BEFORE), "before": stage(base, **BEFORE), "after": base,
            "paragraph_before": stage(base, level="paragraph", **BEFORE), "paragraph": stage(base, level="paragraph")}
    for s in runs.values():
        s.run_partition(df.head(500))     # warm-up: numba compile (cached on disk), the script table
    # Timed first, on a small heap: the outputs kept for the accuracy tables below hold millions of Python objects,
    # which would make every garbage collection of a timed run slower (the stage that allocates more, more so).
    parts = [df.iloc[i:i + args.partition_docs].drop(columns="truth").reset_index(drop=True)
             for i in range(0, len(df), args.partition_docs)]
    rounds = timed({"before": runs["before"], "after": runs["after"]}, parts, args.repeat)
    cols = df.drop(columns="truth")
    out = {k: s.transform(cols) for k, s in runs.items()}
    lines = []
    for k, o in out.items():
        lines += accuracy_report(k, df["truth"], o["lang"], chars)
    after = out["after"]
    lines.append("## after: documents per rule (lang_rule)")
    rules = after["lang_rule"].astype(str)
    lines.append("  " + ", ".join(f"{k} {v:,}" for k, v in rules[rules != ""].value_counts().items()))
    for k in ("after", "paragraph"):
        rules = pd.crosstab(out[k]["lang_rule"].astype(str).replace("", "(none)"), df["truth"])
        lines.append(f"## {k}: rule x true language\n" + rules.to_string())
    zh = (after["lang"] == "zh").to_numpy()
    lines.append(f"## after: lang_script of documents labelled zh: {dict(Counter(after['lang_script'][zh]))}")
    lines.append("## min_score: fineweb2 on this corpus (after's scores): threshold, share of the language dropped")
    for lang, s in after[after["lang"] != "und"].groupby("lang")["lang_score"]:
        if len(s) >= 100:
            v, c = np.unique(s.to_numpy(), return_counts=True)
            t = fineweb2_threshold(v, c)
            lines.append(f"  {lang}: {t:.4f}, drops {np.mean(s.to_numpy() < t):.4f} of {len(s):,}")

    lines.append(f"## throughput: run_partition over {len(parts)} partitions of <= {args.partition_docs:,} docs, "
                 f"{args.repeat} rounds, alternately")
    for k, r in rounds.items():
        for kind, unit in (("wall", "docs/s"), ("cpu", "docs per CPU-second")):
            ts = r[kind]
            lines.append(f"  {k} {kind}: median {np.median(ts):.3f} s, {len(df) / np.median(ts):,.0f} {unit}; "
                         f"best {min(ts):.3f} s (rounds: " + ", ".join(f"{t:.2f}" for t in ts) + ")")
    for kind in ("wall", "cpu"):
        b, a = rounds["before"][kind], rounds["after"][kind]
        lines.append(f"  after / before, {kind}: {np.median(b) / np.median(a):.3f} (median rounds), "
                     f"{min(b) / min(a):.3f} (best rounds)")
    if args.warc:
        lines += warc_pages(args.warc)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
