"""Rule filters benchmark: gpupipe's `quality` stage against datatrove's GopherQualityFilter, GopherRepetitionFilter,
C4QualityFilter and FineWebQualityFilter, side by side on the same documents: throughput and keep/drop agreement.

Usage:  python profiling/bench_quality.py CORPUS.jsonl[.gz] [--docs N] [--workers 2] [--repeat 1]
CORPUS lines are {"id", "lang", "text"}. --docs N takes N documents evenly spaced over the file (every k-th line,
so the language mix is the corpus's; 0: all of them; default 20,000); every method gets the same documents.

Throughput (MB/s of UTF-8 text, docs/s):
  datatrove  each filter on its own, through its filter(doc) method on datatrove Documents (built before the
             clock starts), in --workers spawn processes on interleaved shares of the documents, started together
             by a barrier after the imports, spaCy's English tokenizer and a warm-up document; the time is the
             slowest process's. Its word tokenizer (spaCy's rule-based English tokenizer) is what it runs by default.
  ours       QualityFilter's signals + decisions (quality_signals + decide, i.e. transform + reasons of the stage)
             on a pandas frame, in one process with numba's threads = --workers, then 1 thread; numba is compiled
             and warmed up before the clock starts. Per family: only that family enabled, configured to mirror
             datatrove (below); "all six families" is the stage's default config (one pass for every signal).
  ratio      ours (--workers threads) / datatrove (--workers processes), both on the same number of cores.

Agreement: for each family, the share of documents on which our keep/drop equals datatrove's, with our family
mirroring datatrove's defaults: same thresholds (our defaults), `apply_to_cjk: true` (datatrove judges every
document) and `cjk_words: false` (CJK runs are words as its English tokenizer sees them). The top disagreements
are listed as (our reason, datatrove's reason) with an example. A second line shows our default configuration
(CJK documents exempt from English-only rules, a CJK character is a word): the difference there is on purpose.

Peers live in their own venv so the main one stays clean (what this benchmark was run with):
  python3 -m venv /tmp/benchvenv
  /tmp/benchvenv/bin/pip install -e .                       # gpupipe itself
  /tmp/benchvenv/bin/pip install datatrove==0.10.1 "xxhash<4" spacy==3.8.18
  (spaCy is datatrove's English word tokenizer: spacy.blank("en"), rules only, no model download; datatrove's
   default English tokenizer is SpaCyTokenizer("en") in datatrove/assets/tokenizer_assignment.csv; nltk is not used)
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import sys
import time
from collections import Counter

import numpy as np

FAMILIES = ("gopher_quality", "gopher_repetition", "c4", "fineweb")
ALL_FAMILIES = ("zh", "gopher_quality", "gopher_repetition", "c4", "fineweb", "seed002")
DATATROVE = {"gopher_quality": "GopherQualityFilter", "gopher_repetition": "GopherRepetitionFilter",
             "c4": "C4QualityFilter", "fineweb": "FineWebQualityFilter"}
THREAD_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
WARM_TEXT = ("The quick brown fox jumps over the lazy dog. It was not the first time.\n" * 3
             + "今天天气很好，我们去公园散步吧。\n")

# Why our decisions differ from datatrove's: on CJK documents under our default configuration (on purpose), and
# what is left under the mirror configuration (the imitation of spaCy's tokenizer).
EXPLAIN_CJK = {
    "gopher_quality": "datatrove's English tokenizer (spaCy) makes one 'word' of each run of Chinese text between "
                      "spaces, so a Chinese document has too few words (gopher_short_doc) and no English stop "
                      "words; ours exempts CJK documents from Gopher's English rules",
    "gopher_repetition": "with one 'word' per Chinese run, datatrove's top n-gram (which also counts an n-gram "
                         "seen once) covers a large share of the text (top_2_gram); ours judges repetition on CJK "
                         "documents too, with one word per CJK character, so it drops repeated phrases instead "
                         "(in short texts mostly, which the stage's zh_min_chars reports first)",
    "c4": "Chinese lines end with '。', not with C4's . ? ! \" ', so no line counts a sentence (too_few_sentences); "
          "ours exempts CJK documents from C4",
    "fineweb": "short Chinese lines and lines without final punctuation (product reviews) fail FineWeb's ratios "
               "(line_punct_ratio, short_line_ratio); ours exempts CJK documents from FineWeb",
}
EXPLAIN_TOKENIZER = ("word tokenization: ours imitates spaCy's English rules (affixes, infixes, exceptions, URLs) "
                     "without spaCy; a spaCy exception ours does not list (some emoticons, 'itd', \"arn't\") "
                     "changes a word count by one, which matters only at a threshold")


# ---------------------------------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------------------------------

def load_corpus(path: str, n: int) -> tuple[list[tuple[str, str, str]], int]:
    """n documents (id, lang, text) evenly spaced over the file (all when n is 0), and the file's line count."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = f.readlines()
    total = len(lines)
    picks = range(total) if not n or n >= total else np.linspace(0, total - 1, n).round().astype(int)
    docs = []
    for i in picks:
        rec = json.loads(lines[i])
        docs.append((str(rec.get("id", i)), rec.get("lang") or "", rec.get("text") or ""))
    return docs, total


# ---------------------------------------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------------------------------------

def mirror_config(family: str) -> dict:
    """Only `family`, as datatrove runs it: every document judged, CJK runs as words."""
    cfg = {f: {"enabled": f == family} for f in ALL_FAMILIES}
    cfg[family]["apply_to_cjk"] = True
    return {**cfg, "cjk_words": False}


def default_config(family: str | None) -> dict:
    """Only `family` (all of them when None) with our defaults."""
    return {} if family is None else {f: {"enabled": f == family} for f in ALL_FAMILIES}


# ---------------------------------------------------------------------------------------------------------------
# Workers: warm-up outside the clock, a barrier, then the timed work
# ---------------------------------------------------------------------------------------------------------------

_W: dict = {}


def _init(kind: str, spec, barrier) -> None:
    _W.update(barrier=barrier, error=None)
    try:
        if kind == "ours":
            import numba

            from gpupipe.stages.filters.quality import QualityConfig, decide, quality_signals

            numba.set_num_threads(int(os.environ.get("NUMBA_NUM_THREADS", "1")))
            cfg = QualityConfig.model_validate(spec)
            _W.update(cfg=cfg, signals=quality_signals, decide=decide)
            warm = _frame(["", WARM_TEXT, WARM_TEXT], ["en", "en", "zh"])
            decide(warm.assign(**quality_signals(warm, cfg)), cfg)  # loads the compiled kernel, the char table
        else:
            from loguru import logger

            from datatrove.data import Document
            from datatrove.pipeline import filters

            logger.disable("datatrove")
            flt = getattr(filters, DATATROVE[spec])()
            flt.filter(Document(text=WARM_TEXT, id="warm"))   # spaCy loads lazily: here, untimed
            _W.update(filter=flt, Document=Document)
    except BaseException as e:  # noqa: BLE001 - reported by the task (ImportError included)
        _W["error"] = e


def _frame(texts, langs):
    """The documents as the stage sees them: a pandas frame with Arrow-backed strings."""
    import pandas as pd

    return pd.DataFrame({"text": pd.array(texts, dtype="string[pyarrow]"), "lang": langs})


def _task(kind: str, docs) -> tuple[float, list]:
    if _W["error"] is not None:
        raise _W["error"]
    if kind == "ours":
        df = _frame([t for _, _, t in docs], [lang for _, lang, _ in docs])
        cfg = _W["cfg"]
        _W["barrier"].wait(timeout=900)
        t0 = time.perf_counter()
        why, _ = _W["decide"](df.assign(**_W["signals"](df, cfg)), cfg)
        seconds = time.perf_counter() - t0
        return seconds, [w if w is not None else "keep" for w in why]
    documents = [_W["Document"](text=t, id=i) for i, _, t in docs]
    flt = _W["filter"]
    _W["barrier"].wait(timeout=900)
    t0 = time.perf_counter()
    results = [flt.filter(d) for d in documents]
    seconds = time.perf_counter() - t0
    return seconds, ["keep" if r is True else (r[1] if isinstance(r, tuple) else "drop") for r in results]


def run(kind: str, spec, docs, procs: int, threads: int) -> tuple[float, list]:
    """(seconds of the slowest process, decisions in document order)."""
    ctx = mp.get_context("spawn")
    saved = {k: os.environ.get(k) for k in THREAD_VARS}
    os.environ.update({k: str(threads) for k in THREAD_VARS})  # inherited by the spawned workers
    try:
        pool = ctx.Pool(procs, _init, (kind, spec, ctx.Barrier(procs)))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    with pool:
        out = pool.starmap(_task, [(kind, docs[i::procs]) for i in range(procs)], chunksize=1)
    decisions: list = [None] * len(docs)
    for i, (_, part) in enumerate(out):
        decisions[i::procs] = part
    return max(s for s, _ in out), decisions


def best_of(repeat: int, *args) -> tuple[float, list]:
    runs = [run(*args) for _ in range(max(1, repeat))]
    return min(s for s, _ in runs), runs[0][1]


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------

def rate(mb: float, n: int, seconds: float) -> str:
    return f"{mb / seconds:7.2f} MB/s {n / seconds:9,.0f} docs/s"


def agreement(ours: list, theirs: list, langs: list, docs, family: str, top: int, default: bool = False) -> None:
    o = np.array([r == "keep" for r in ours])
    t = np.array([r == "keep" for r in theirs])
    langs = np.array(langs)
    parts = [f"all {np.mean(o == t):.4%}"]
    for lang in sorted(set(langs)):
        m = langs == lang
        parts.append(f"{lang} {np.mean(o[m] == t[m]):.4%} (n={m.sum():,}; keep ours {o[m].sum():,} / "
                     f"datatrove {t[m].sum():,})")
    print("    " + "   ".join(parts))
    diff = Counter()
    example = {}
    for i in np.flatnonzero(o != t):
        key = (langs[i], ours[i], theirs[i])
        diff[key] += 1
        example.setdefault(key, i)
    for (lang, a, b), n in diff.most_common(top):
        i = example[(lang, a, b)]
        text = docs[i][2].replace("\n", "\\n")[:90]
        why = EXPLAIN_CJK[family] if lang in ("zh", "ja", "ko") and default else EXPLAIN_TOKENIZER
        print(f"      {n:6,}  {lang} ours {a} / datatrove {b}   e.g. id {docs[i][0]}: {text!r}")
        print(f"              why: {why}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--docs", type=int, default=20_000, help="documents, evenly spaced (0: all)")
    ap.add_argument("--workers", type=int, default=2, help="cores: datatrove processes, our numba threads")
    ap.add_argument("--repeat", type=int, default=1, help="best of this many timed runs (noisy machines)")
    ap.add_argument("--top", type=int, default=4, help="disagreements listed per family")
    args = ap.parse_args()

    t_start = time.perf_counter()
    docs, total = load_corpus(args.corpus, args.docs)
    n = len(docs)
    mb = sum(len(t.encode("utf-8")) for _, _, t in docs) / 1e6
    langs = [lang for _, lang, _ in docs]
    print(f"corpus {args.corpus}: {n:,} of {total:,} documents (evenly spaced), {mb:.2f} MB of UTF-8 text, "
          f"languages {dict(Counter(langs).most_common())}; {os.cpu_count()} cores, --workers {args.workers}, "
          f"python {sys.version.split()[0]}")

    w = args.workers
    rows = []
    decisions = {}
    for family in FAMILIES:
        try:
            dt_s, dt_dec = best_of(args.repeat, "datatrove", family, docs, w, 1)
        except Exception as e:  # noqa: BLE001
            dt_s, dt_dec = None, None
            print(f"  datatrove {DATATROVE[family]}: not available: {type(e).__name__}: {e}")
        ours_s, ours_dec = best_of(args.repeat, "ours", mirror_config(family), docs, 1, w)
        ours1_s, _ = best_of(args.repeat, "ours", mirror_config(family), docs, 1, 1)
        _, default_dec = run("ours", default_config(family), docs, 1, w)
        decisions[family] = (ours_dec, dt_dec, default_dec)
        rows.append((family, dt_s, ours_s, ours1_s))
        print(f"  {family:<18} datatrove {dt_s if dt_s else float('nan'):7.2f} s   ours {ours_s:6.2f} s "
              f"({w} threads), {ours1_s:6.2f} s (1 thread)", flush=True)
    all_s, _ = best_of(args.repeat, "ours", default_config(None), docs, 1, w)
    all1_s, _ = best_of(args.repeat, "ours", default_config(None), docs, 1, 1)

    print(f"\nthroughput on {n:,} documents, {mb:.2f} MB (datatrove: {w} spawn processes; ours: 1 process, "
          f"numba threads as shown)")
    print(f"{'family (datatrove filter)':<44}{'datatrove ' + str(w) + ' proc':>30}{'ours ' + str(w) + ' threads':>30}"
          f"{'ours 1 thread':>30}{'ours/datatrove':>16}")
    dt_total = 0.0
    for family, dt_s, ours_s, ours1_s in rows:
        dt_total += dt_s or 0
        ratio = f"{dt_s / ours_s:15.1f}x" if dt_s else f"{'-':>16}"
        dt = rate(mb, n, dt_s) if dt_s else "not available"
        print(f"{family + ' (' + DATATROVE[family] + ')':<44}{dt:>30}{rate(mb, n, ours_s):>30}"
              f"{rate(mb, n, ours1_s):>30}{ratio}")
    if all(r[1] for r in rows):
        print(f"{'all four, one after another':<44}{rate(mb, n, dt_total):>30}")
    print(f"{'ours: all six families in one pass':<44}{'':>30}{rate(mb, n, all_s):>30}{rate(mb, n, all1_s):>30}"
          + (f"{dt_total / all_s:15.1f}x" if all(r[1] for r in rows) else ""))

    print("\nagreement of keep/drop with datatrove (ours mirroring datatrove's defaults: apply_to_cjk true, "
          "cjk_words false)")
    for family in FAMILIES:
        ours_dec, dt_dec, default_dec = decisions[family]
        if dt_dec is None:
            print(f"  {family}: datatrove not available")
            continue
        print(f"  {family}")
        agreement(ours_dec, dt_dec, langs, docs, family, args.top)
        print("    our default configuration (CJK documents exempt from English-only rules, CJK character = word):")
        agreement(default_dec, dt_dec, langs, docs, family, 2, default=True)
    print(f"\nwhole benchmark: {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
