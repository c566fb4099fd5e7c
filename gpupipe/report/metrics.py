"""The dashboard metrics (pipeline health, data quality, output; the user's monitoring spec): `metrics` in
RUN/stats.json and RUN/metrics.prom.

    pipeline health   per stage: docs/s, partition latency p50/p99, error rate, retries (gpupipe/retries.py)
    data quality      language distribution, quality-score distributions, token-count histogram, dedup rate by stage
    output            total tokens by language, top-100 domains, category (source) distribution, per-document token
                      statistics (token_count, char_count, compression_ratio) per language and per source, the
                      daily output volume (this run's output under its run date)

`run_metrics(stats, root)` derives them from the stage stats (counts are exact: summed counters) and from the output
documents' Parquet parts: domains and sources are counted exactly, one part at a time (columns url, source, lang,
token_count only); quantiles come from a seeded sample of at most report.html.MAX_VALUES documents.
`prometheus_text(stats)` writes the same numbers in the Prometheus text exposition format (version 0.0.4), so a
node-exporter textfile collector or any scraper of the run directory can chart them. docs/stats_schema.md documents
every field and metric name.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from gpupipe.report.sample import sample_columns
from gpupipe.retries import retries_of
from gpupipe.run.rundir import METRICS_FILE, RunLayout, StageDir, stage_name
# removal reasons that are failures to read a record rather than decisions about its content (gpupipe/io/records.py
# REASONS, extract.py): the error rate's numerator
ERROR_REASONS = ("unreadable_record", "decode_error", "extract_error")
TOP_DOMAINS = 100
QUANTILES = (0.1, 0.5, 0.9, 0.99)
TOKEN_COUNT_BIN = "token_count_bin_"         # the tokenize stage's counters (gpupipe/stages/tokens/tokenize.py)
SCORE_BIN_PREFIXES = ("score_bin_", "perplexity_bin_")
# a URL's host (lower-cased after; 'www.' kept: a host of its own); a string without one counts under no domain
_HOST_ARROW = r"^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?(?P<host>\[[^\]]*\]|[^:/?#]+)"


def _extra(stage: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix):]: v for k, v in stage["extra"].items() if k.startswith(prefix)}


def _rate(num: float, den: float) -> float | None:
    return round(num / den, 6) if den else None


def stage_health(s: dict[str, Any]) -> dict[str, Any]:
    errors = sum(s["removed"].get(r, 0) for r in ERROR_REASONS)
    return {
        "name": s["name"],
        "docs_per_second": s.get("docs_per_second"),
        "partition_seconds_p50": s.get("partition_seconds_p50"),
        "partition_seconds_p99": s.get("partition_seconds_p99"),
        "errors": errors,
        "error_rate": _rate(errors, s["docs_in"]) if s["docs_in"] else 0.0,
        # the stage's `<kind>_retries` counters (gpupipe/retries.py): storage calls retried, tasks run again on a
        # fresh pool after a worker died, LLM judge requests asked again. distributed re-runs a task lost with its
        # worker (distributed.scheduler.allowed-failures) without telling the client: not counted.
        "retries": retries_of(s.get("extra", {})),
    }


def daily_output_volume(stats: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Seed 002's daily_output_volume for this run: {run_date: {documents, tokens}}, the output this run produced
    (documents out of its last stage, tokens of its tokenize stage, without EOS). A run that resumed its last stage
    produced nothing new that day: 0. A dashboard sums the runs' entries by date."""
    date = stats.get("run_date")
    if not date:
        return {}
    st = stats["stages"]
    fresh = bool(st) and not st[-1].get("resumed")
    tok = [s for s in st if s["name"] == "tokenize"]
    tokens = int(tok[-1]["extra"].get("tokens", 0)) if tok else 0
    return {date: {"documents": stats["output_docs"] if fresh else 0, "tokens": tokens if fresh else 0}}


def _output_folder(stats: dict[str, Any], root: Path) -> StageDir | None:
    """The folder of the output documents: the tokenize stage's (they carry token counts), else the curated one."""
    layout = RunLayout(root)
    names = [s["name"] for s in stats["stages"]]
    if "tokenize" in names:
        return layout.stage(len(names) - 1 - names[::-1].index("tokenize"), "tokenize")
    curated = stats.get("curated_dir")   # a stage folder; a URL when the run directory is in a bucket
    return layout.stage_named(curated.rstrip("/").rsplit("/", 1)[-1]) if curated else None


def _count_outputs(parts: list[Path]) -> dict[str, Counter]:
    """Exact documents and tokens per domain and per source, one part (three columns) at a time, in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = {k: Counter() for k in ("domain_docs", "domain_tokens", "source_docs", "source_tokens")}
    for p in parts:
        names = pq.ParquetFile(p).schema_arrow.names
        tcol = next((c for c in ("token_count", "n_tokens") if c in names), None)
        cols = [c for c in ("url", "source", tcol) if c and c in names]
        if not cols:
            continue
        t = pq.read_table(p, columns=cols)
        n = t[tcol] if tcol else pa.array(np.zeros(t.num_rows, np.int64))
        keys = {}
        # A column with no value at all is stored as Arrow's null type (e.g. JSONL without urls): no key there.
        if "url" in names and (pa.types.is_string(t["url"].type) or pa.types.is_large_string(t["url"].type)):
            keys["domain"] = pc.utf8_lower(pc.struct_field(pc.extract_regex(t["url"], _HOST_ARROW), [0]))
        if "source" in names and not pa.types.is_null(t["source"].type):
            keys["source"] = t["source"]
        for kind, key in keys.items():
            g = pa.table({"k": key, "n": n}).group_by("k").aggregate([("n", "count"), ("n", "sum")])
            for k, docs, toks in zip(*(g[c].to_pylist() for c in ("k", "n_count", "n_sum"))):
                if k is not None:
                    out[f"{kind}_docs"][k] += docs
                    out[f"{kind}_tokens"][k] += int(toks or 0)
    return out


def _quantiles(v: np.ndarray) -> dict[str, float]:
    if not len(v):
        return {}
    qs = np.quantile(v.astype(float), QUANTILES)
    return {f"p{round(q * 100)}": round(float(x), 4) for q, x in zip(QUANTILES, qs)}


def token_stats(stats: dict[str, Any], root: Path, seed: int = 0) -> dict[str, Any]:
    """Per language and per source: documents, tokens, characters, characters per token (exact, from the tokenize
    counters) and the quantiles of token_count and compression_ratio per document (a seeded sample of the parts)."""
    tok = [s for s in stats["stages"] if s["name"] == "tokenize"]
    if not tok:
        return {}
    s, folder = tok[-1], _output_folder(stats, root)
    sample = sample_columns(folder.kept_parts(), ["lang", "source", "token_count", "compression_ratio"], seed)
    out: dict[str, Any] = {}
    for column, prefix in (("lang", ""), ("source", "source_")):
        docs = _extra(s, f"{prefix}documents_")
        groups = {}
        for key in sorted(docs):
            tokens, chars = s["extra"].get(f"{prefix}tokens_{key}", 0), s["extra"].get(f"{prefix}chars_{key}", 0)
            g = {"documents": docs[key], "tokens": tokens, "chars": chars, "chars_per_token": _rate(chars, tokens)}
            if column in sample and "token_count" in sample:
                mask = sample[column] == key
                g["token_count"] = _quantiles(sample["token_count"][mask])
                g["compression_ratio"] = _quantiles(sample["compression_ratio"][mask])
            groups[key] = g
        out["by_language" if column == "lang" else "by_source"] = groups
    return out


def run_metrics(stats: dict[str, Any], root: str | Path, seed: int = 0) -> dict[str, Any]:
    """The `metrics` object of RUN/stats.json (docs/stats_schema.md): see the module docstring."""
    root = Path(root)
    st = stats["stages"]
    langs: dict[str, int] = {}
    for s in st:
        if s["name"] == "langid":
            langs = _extra(s, "kept_lang_")
    tok = [s for s in st if s["name"] == "tokenize"]
    if not langs and tok:
        langs = _extra(tok[-1], "documents_")
    scores = {stage_name(i, s["name"]): {k: v for k, v in s["extra"].items() if k.startswith(SCORE_BIN_PREFIXES)}
              for i, s in enumerate(st)}
    hist = sorted(((int(k), v) for k, v in _extra(tok[-1], TOKEN_COUNT_BIN).items()) if tok else [])
    folder = _output_folder(stats, root)
    counts = _count_outputs(folder.kept_parts() if folder is not None and folder.root.is_dir() else [])
    top = sorted(counts["domain_docs"].items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_DOMAINS]
    return {
        "stages": [stage_health(s) for s in st],
        "languages": dict(sorted(langs.items(), key=lambda kv: (-kv[1], kv[0]))),
        "quality_scores": {k: v for k, v in scores.items() if v},
        "token_count_histogram": {str(lo): n for lo, n in hist},
        "dedup_rate": {stage_name(i, s["name"]): {"docs": _rate(sum(s["removed"].values()), s["docs_in"]),
                                                 "bytes": _rate(s["bytes_in"] - s["bytes_out"], s["bytes_in"])}
                       for i, s in enumerate(st) if s["name"].endswith("dedup")},
        "tokens_by_language": ({k: v for k, v in sorted(_extra(tok[-1], "tokens_").items())} if tok else {}),
        "top_domains": [{"domain": d, "documents": n, "tokens": counts["domain_tokens"][d]} for d, n in top],
        "domains_total": len(counts["domain_docs"]),
        "sources": {k: {"documents": n, "tokens": counts["source_tokens"][k]}
                    for k, n in sorted(counts["source_docs"].items())},
        "token_stats": token_stats(stats, root, seed),
        "daily_output_volume": daily_output_volume(stats),
    }


# -- Prometheus text exposition format --------------------------------------------------------------------------


def _label(v: Any) -> str:
    return str(v).replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def _num(v: float) -> str:
    if isinstance(v, float) and math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if isinstance(v, float) else str(int(v))


class _Prom:
    """Metric families in the order first added; all series of a family together (the format requires it)."""

    def __init__(self, run: str):
        self.run, self.families = run, {}

    def add(self, name: str, kind: str, help_: str, value: Any, suffix: str = "", **labels: Any) -> None:
        if value is None:
            return
        lines = self.families.setdefault(name, [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"])
        lab = ",".join(f'{k}="{_label(v)}"' for k, v in {"run": self.run, **labels}.items())
        lines.append(f"{name}{suffix}{{{lab}}} {_num(value)}")

    def text(self) -> str:
        return "".join(line + "\n" for lines in self.families.values() for line in lines)


def prometheus_text(stats: dict[str, Any], run_name: str) -> str:
    """RUN/metrics.prom: the run's stats and `metrics` as gauges (and one histogram), every series labelled run=."""
    m = stats.get("metrics") or {}
    p = _Prom(run_name)
    p.add("gpupipe_run_seconds", "gauge", "Wall time of the whole run.", stats["seconds"])
    p.add("gpupipe_run_input_records", "gauge", "Input records read.", stats["input_records"])
    p.add("gpupipe_run_output_documents", "gauge", "Documents out of the last stage.", stats["output_docs"])
    for kind, n in (stats.get("retries") or {}).items():
        if kind != "total":
            p.add("gpupipe_run_retries", "gauge", "Retries of the run by type (storage, task, judge, fetch).", n,
                  type=kind)
    health = {h["name"] + str(i): h for i, h in enumerate(m.get("stages", []))}
    for i, s in enumerate(stats["stages"]):
        lab = {"stage": s["name"], "position": f"{i:02d}"}
        h = health.get(s["name"] + str(i), {})
        p.add("gpupipe_stage_docs_in", "gauge", "Documents the stage received.", s["docs_in"], **lab)
        p.add("gpupipe_stage_docs_out", "gauge", "Documents the stage kept.", s["docs_out"], **lab)
        for reason, n in s["removed"].items():
            p.add("gpupipe_stage_removed", "gauge", "Documents the stage removed, by reason.", n, reason=reason,
                  **lab)
        p.add("gpupipe_stage_seconds", "gauge", "Wall time of the stage.", s["seconds"], **lab)
        p.add("gpupipe_stage_docs_per_second", "gauge", "Throughput: documents in per second.",
              s.get("docs_per_second"), **lab)
        for q in ("50", "99"):
            p.add("gpupipe_stage_partition_seconds", "gauge", "Per-task (partition, input file) latency quantiles.",
                  s.get(f"partition_seconds_p{q}"), quantile=f"0.{q}", **lab)
        p.add("gpupipe_stage_errors", "gauge", f"Documents removed as unreadable ({', '.join(ERROR_REASONS)}).",
              h.get("errors"), **lab)
        p.add("gpupipe_stage_error_rate", "gauge", "errors / docs_in.", h.get("error_rate"), **lab)
        p.add("gpupipe_stage_retries", "gauge", "Retries of the stage's work: storage calls, tasks run again after "
              "a worker died, LLM judge requests.", h.get("retries"), **lab)
    for stage, r in m.get("dedup_rate", {}).items():
        p.add("gpupipe_dedup_rate", "gauge", "Share of a dedup stage's input documents it removed.", r["docs"],
              stage=stage)
    for lang, n in m.get("languages", {}).items():
        p.add("gpupipe_language_documents", "gauge", "Documents kept per language.", n, lang=lang)
    for stage, bins in m.get("quality_scores", {}).items():
        for b, n in bins.items():
            p.add("gpupipe_quality_score_documents", "gauge", "Documents per quality-score bin.", n, stage=stage,
                  bin=b)
    hist = m.get("token_count_histogram", {})
    if hist:  # bins [lo, 2 lo) of integer counts: cumulative buckets le = 2 lo - 1
        name, help_ = "gpupipe_document_tokens", "Tokens per output document (the tokenize stage's token_count)."
        cum = 0
        for lo, n in hist.items():
            cum += n
            p.add(name, "histogram", help_, cum, "_bucket", le=str(2 * int(lo) - 1))
        total = next(s["extra"].get("tokens", 0) for s in stats["stages"][::-1] if s["name"] == "tokenize")
        p.add(name, "histogram", help_, cum, "_bucket", le="+Inf")
        p.add(name, "histogram", help_, int(total), "_sum")
        p.add(name, "histogram", help_, cum, "_count")
    for lang, n in m.get("tokens_by_language", {}).items():
        p.add("gpupipe_output_tokens", "gauge", "Tokens of the output documents per language (without EOS).", n,
              lang=lang)
    for d in m.get("top_domains", []):
        p.add("gpupipe_domain_documents", "gauge", f"Output documents of the top {TOP_DOMAINS} domains.",
              d["documents"], domain=d["domain"])
        p.add("gpupipe_domain_tokens", "gauge", f"Output tokens of the top {TOP_DOMAINS} domains.", d["tokens"],
              domain=d["domain"])
    for src, r in m.get("sources", {}).items():
        p.add("gpupipe_source_documents", "gauge", "Output documents per source (category).", r["documents"],
              source=src)
        p.add("gpupipe_source_tokens", "gauge", "Output tokens per source (category).", r["tokens"], source=src)
    for date, v in m.get("daily_output_volume", {}).items():
        p.add("gpupipe_daily_output_documents", "gauge", "Documents this run output, by its run date (UTC; sum "
              "over runs by date).", v["documents"], date=date)
        p.add("gpupipe_daily_output_tokens", "gauge", "Tokens this run output, by its run date (UTC; sum over "
              "runs by date).", v["tokens"], date=date)
    return p.text()


def write_metrics(root: str | Path, stats: dict[str, Any]) -> Path:
    from gpupipe.io.parts import atomic_write_text

    path = RunLayout(root).metrics
    atomic_write_text(path, prometheus_text(stats, Path(root).name))
    return path


__all__ = ["ERROR_REASONS", "METRICS_FILE", "prometheus_text", "run_metrics", "token_stats",
           "write_metrics"]
