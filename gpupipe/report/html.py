"""RUN/report.html: one self-contained page (inline CSS and SVG, no script, no external reference) of what a run did.

Counts come from the stats files as they are (RUN/stats.json, the manifest, the mixture ledger), never recounted
from the documents, so the page cannot disagree with them. Distributions (signal histograms, tokens per document)
are what stats files do not hold: those are read from the stages' Parquet parts, only the needed columns, and
sampled (seeded) when there are more than `MAX_VALUES` rows. Every chart is a <figure data-chart=...> and every
table a <table data-table=...>, with the plotted numbers in a data-values attribute, so tests and scripts can find
and check them.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pyarrow.parquet as pq
import pyarrow.types as pat
import yaml

from gpupipe.run.rundir import CONFIG_FILE, RunLayout, StageDir, stage_name
from gpupipe.report import audit as audit_mod
from gpupipe.report import charts
from gpupipe.report.sample import MAX_VALUES, sample_columns

AUDIT_ROWS_SHOWN = 25     # samples per stage shown in the page (all are in RUN/audit/NN-name.jsonl)
SIGNAL_COLUMNS = {"lang_score", "quality_score", "perplexity"}   # signals whose names do not start with q_

# Which config keys are the thresholds of a signal column, per stage: {stage: [(column regex, [key paths])]}.
# A path may use \1 from the regex; a key holding a mapping (langid min_score) gives one threshold per entry.
THRESHOLDS: dict[str, list[tuple[str, list[str]]]] = {
    "langid": [("lang_score", ["min_score"])],
    "doc_filter": [("q_word_count", ["min_words", "max_words"]),
                   ("q_mean_word_length", ["min_mean_word_length", "max_mean_word_length"]),
                   ("q_cjk_fraction", ["cjk_fraction_skip_mean"])],
    "quality_classifier": [("quality_score", ["min_score"])],
    "classifier": [(".+", ["min_score"])],   # its score column, named by its config (`column`)
    "perplexity": [("perplexity", ["min_perplexity", "max_perplexity"])],
    "quality": [
        ("q_zh_chars", ["zh.min_chars", "zh.max_chars"]),
        ("q_zh_cn_char_ratio", ["zh.min_cn_char_ratio"]),
        ("q_zh_punctuation_ratio", ["zh.max_punctuation_ratio"]),
        ("q_zh_bad_char_ratio", ["zh.max_bad_char_ratio"]),
        ("q_zh_latin1_ratio", ["zh.max_latin1_ratio"]),
        ("q_zh_rare_han_ratio", ["zh.max_rare_han_ratio"]),
        ("q_gopher_word_count", ["gopher_quality.min_words", "gopher_quality.max_words"]),
        ("q_gopher_mean_word_length", ["gopher_quality.min_mean_word_length",
                                       "gopher_quality.max_mean_word_length"]),
        ("q_gopher_(hash|ellipsis)_ratio", ["gopher_quality.max_symbol_word_ratio"]),
        ("q_gopher_bullet_lines_frac", ["gopher_quality.max_bullet_lines_ratio"]),
        ("q_gopher_ellipsis_lines_frac", ["gopher_quality.max_ellipsis_lines_ratio"]),
        ("q_gopher_alpha_words_frac", ["gopher_quality.min_alpha_words_ratio"]),
        ("q_gopher_stop_words", ["gopher_quality.min_stop_words"]),
        ("q_gopher_rep_(dup_para_frac|dup_para_char_frac|dup_line_frac|dup_line_char_frac)",
         [r"gopher_repetition.\1"]),
        (r"q_gopher_rep_top_(\d+)gram_frac", [r"gopher_repetition.top_ngrams.\1"]),
        (r"q_gopher_rep_dup_(\d+)gram_frac", [r"gopher_repetition.dup_ngrams.\1"]),
        ("q_c4_sentences", ["c4.min_num_sentences"]),
        ("q_fineweb_line_punct_ratio", ["fineweb.line_punct_thr"]),
        ("q_fineweb_short_line_ratio", ["fineweb.short_line_thr"]),
        ("q_fineweb_char_dup_ratio", ["fineweb.char_duplicates_ratio"]),
        ("q_fineweb_list_ratio", ["fineweb.new_line_ratio"]),
        ("q_seed002_word_count", ["seed002.min_words", "seed002.max_words"]),
        ("q_seed002_avg_word_length", ["seed002.min_avg_word_length", "seed002.max_avg_word_length"]),
        ("q_seed002_special_char_ratio", ["seed002.max_special_char_ratio"]),
        ("q_seed002_digit_ratio", ["seed002.max_digit_ratio"]),
        ("q_seed002_unique_word_ratio", ["seed002.min_unique_word_ratio"]),
        ("q_seed002_dup_line_ratio", ["seed002.max_line_dup_ratio"]),
        ("q_seed002_stop_word_ratio", ["seed002.min_stop_word_ratio"]),
    ],
}


# -- the run directory -----------------------------------------------------------------------------------------


@dataclass
class Run:
    root: Path
    stats: dict[str, Any]
    config: dict[str, Any]
    config_text: str
    manifest: dict[str, Any] | None
    location: str | None = None   # where the run lives when root is a local copy of it (its URL)

    @classmethod
    def load(cls, root: str | Path, location: str | None = None) -> "Run":
        root = Path(root)
        layout = RunLayout(root)
        stats = json.loads(layout.stats.read_text(encoding="utf-8"))
        cfg_file = layout.config
        text = cfg_file.read_text(encoding="utf-8") if cfg_file.is_file() else ""
        man = layout.manifest
        manifest = json.loads(man.read_text(encoding="utf-8")) if man.is_file() else None
        return cls(root, stats, yaml.safe_load(text) or {}, text, manifest, location)

    @property
    def name(self) -> str:
        """The run directory as the user names it."""
        return self.location or str(self.root)

    @property
    def stages(self) -> list[dict[str, Any]]:
        return self.stats["stages"]

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.root)

    def stage(self, i: int) -> StageDir:
        """The folder of stats entry i."""
        return self.layout.stage_of(self.stats, i)

    def folder(self, i: int) -> Path:
        return self.stage(i).root

    def stage_config(self, i: int) -> dict[str, Any]:
        """Stage i's resolved parameters (stats index 0 is `read`, which is the config's `input`)."""
        if i == 0:
            return self.config.get("input", {})
        items = self.config.get("stages", [])
        if i - 1 >= len(items):
            return {}
        return next(iter(items[i - 1].values())) or {}

    def find(self, name: str) -> list[int]:
        return [i for i, s in enumerate(self.stages) if s["name"] == name]


def lookup(cfg: Any, path: str) -> Any:
    """cfg at a dotted path; YAML mappings with integer keys (top_ngrams: {2: 0.2}) match "2" too."""
    node = cfg
    for key in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(key, node.get(int(key)) if key.isdigit() else None)
    return node


def thresholds(stage: str, cfg: dict[str, Any], column: str) -> list[tuple[str, float]]:
    """(label, value) of the thresholds that judge `column` in this stage's resolved config (THRESHOLDS)."""
    out: list[tuple[str, float]] = []
    for pattern, paths in THRESHOLDS.get(stage, []):
        m = re.fullmatch(pattern, column)
        if not m:
            continue
        for path in paths:
            key = m.expand(path)
            value = lookup(cfg, key)
            names = key.split(".")
            label = ".".join(names[-2:]) if names[-1].isdigit() else names[-1]   # min_words, top_ngrams.2
            if isinstance(value, dict):
                out += [(f"{label} {k}", float(v)) for k, v in value.items() if isinstance(v, (int, float))]
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append((label, float(value)))
    return out




def model_columns(run: Run, i: int) -> set[str]:
    """The score column of a `classifier` stage (a signal whatever its configured name)."""
    return {run.stage_config(i).get("column", "model_score")} if run.stages[i]["name"] == "classifier" else set()


def stage_signals(run: Run, i: int) -> tuple[list[charts.Signal], int]:
    """The signal columns stage i added (q_*, lang_score, ...), with their values and thresholds; and how many
    kept documents the values are drawn from."""
    stage = run.stage(i)
    parts = stage.kept_parts()
    if not parts:
        return [], 0
    own = set(stage.columns())  # a fused stage's parts are its chain's: they hold later stages' columns too
    schema = pq.ParquetFile(parts[0]).schema_arrow
    before = set(run.stage(i - 1).columns()) if i else set()
    cols = [f.name for f in schema if f.name in own and f.name not in before
            and (f.name.startswith("q_") and not f.name.startswith("q_scope_") or f.name in SIGNAL_COLUMNS
                 or f.name in model_columns(run, i))
            and (pat.is_integer(f.type) or pat.is_floating(f.type))]
    if not cols:
        return [], 0
    seed = int(run.config.get("seed", 0))
    kept = sample_columns(parts, cols, seed, MAX_VALUES)
    removed = sample_columns(stage.reject_parts(), cols, seed + 1, MAX_VALUES)
    cfg, name = run.stage_config(i), run.stages[i]["name"]
    sigs = [charts.Signal(c, kept[c], removed.get(c), thresholds(name, cfg, c)) for c in cols if c in kept]
    return sigs, run.stages[i]["docs_out"]


# -- HTML helpers ----------------------------------------------------------------------------------------------

e = html.escape


def num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,}"          # every digit stats.json has: what is shown is what is stored
    return e(str(v))


def td(v: Any, key: str | None = None) -> str:
    """A cell whose exact value is in data-value (the text may carry thousands separators)."""
    attrs = f' data-key="{e(key)}"' if key else ""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f'<td class="n"{attrs} data-value="{v!r}">{num(v)}</td>'
    return f"<td{attrs}>{num(v) if not isinstance(v, str) else e(v)}</td>"


def table(table_id: str, header: Iterable[str], rows: Iterable[str], caption: str = "") -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    cap = f"<caption>{e(caption)}</caption>" if caption else ""
    return (f'<table id="table-{table_id}" data-table="{table_id}">{cap}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def figure(chart_id: str, fig, values: Any, caption: str) -> str:
    data = e(json.dumps(values, ensure_ascii=False, sort_keys=True))
    return (f'<figure id="chart-{chart_id}" data-chart="{chart_id}" data-values="{data}">'
            f"{charts.to_svg(fig, chart_id)}<figcaption>{e(caption)}</figcaption></figure>")


def section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{e(title)}</h2>{body}</section>'


def note(text: str) -> str:
    return f'<p class="note">{e(text)}</p>'


# -- sections --------------------------------------------------------------------------------------------------


def run_time(stats: dict[str, Any]) -> str:
    """The run's time in words. stats.json `seconds` is the last invocation's: a resumed run spent its time in
    earlier ones, so the stages' recorded seconds are summed and the resumed stages counted."""
    stages = stats["stages"]
    resumed = sum(1 for st in stages if st.get("resumed"))
    if not resumed:
        return f"{stats.get('seconds')} s"
    total = round(sum(st["seconds"] for st in stages), 3)
    return (f"{total} s in its stages, {resumed} of {len(stages)} resumed from an earlier invocation "
            f"(this one took {stats.get('seconds')} s)")


def summary_section(run: Run) -> str:
    s = run.stats
    keys = ["input_records", "output_docs", "removed_total", "docs_added_total", "conservation_ok", "seconds",
            "started_at", "run_date", "device", "executor", "workers", "gpupipe_version", "results_hash", "curated_dir", "shards_dir"]
    rows = [f"<tr><th>{e(k)}</th>{td(s.get(k), k)}</tr>" for k in keys]
    resumed = [st["name"] for st in run.stages if st.get("resumed")]
    if resumed:   # `seconds` above is only the last invocation's
        rows.insert(keys.index("seconds") + 1,
                    f"<tr><th>stage seconds (all invocations)</th>"
                    f"{td(round(sum(st['seconds'] for st in run.stages), 3), 'stage_seconds')}</tr>"
                    f"<tr><th>resumed stages</th>{td(', '.join(resumed), 'resumed_stages')}</tr>")
    if run.manifest:
        m = run.manifest
        rows += [f"<tr><th>manifest {e(k)}</th>{td(m.get(k), 'manifest.' + k)}</tr>"
                 for k in ("tokens", "stream_tokens", "sequences", "seq_len", "documents_packed",
                           "dropped_remainder_tokens", "vocab_size", "dtype") if k in m]
        rows.append(f"<tr><th>manifest shards</th>{td(len(m.get('shards', [])), 'manifest.shards')}</tr>")
    warnings = "".join(f'<p class="warning" data-warning>warning: {e(w)}</p>' for w in s.get("warnings", []))
    return section("summary", "Run", warnings + table("summary", ["field", "value"], rows,
                                                      f"RUN/stats.json of {run.name}"))


def funnel_section(run: Run) -> str:
    st = run.stages
    names = [f"{i:02d} {s['name']}" for i, s in enumerate(st)]
    reasons = sorted({r for s in st for r in s["removed"]})
    removed = {r: [s["removed"].get(r, 0) for s in st] for r in reasons}
    kept = [s["docs_out"] for s in st]
    docs = figure("funnel-docs", charts.funnel_docs(names, [s["docs_in"] for s in st], kept, removed),
                  {"stages": [s["name"] for s in st], "docs_in": [s["docs_in"] for s in st], "kept": kept,
                   "removed": removed},
                  "Documents in, kept and removed by reason, per stage (RUN/stats.json).")
    mb = {"MB in": [s["bytes_in"] / 1e6 for s in st], "MB out": [s["bytes_out"] / 1e6 for s in st]}
    nbytes = figure("funnel-bytes", charts.grouped_barh(names, mb, "MB (UTF-8 text; read: input file / HTML)",
                                                        "bytes through each stage"),
                    {"stages": [s["name"] for s in st], "bytes_in": [s["bytes_in"] for s in st],
                     "bytes_out": [s["bytes_out"] for s in st]},
                    "Bytes in and out per stage; extraction shrinks HTML to text, filters and dedup remove.")
    rows = []
    for s in st:
        why = "<br>".join(f'<span data-reason="{e(r)}" data-value="{n}">{e(r)} {n:,}</span>'
                          for r, n in sorted(s["removed"].items(), key=lambda kv: -kv[1])) or "-"
        if s["extra"].get("docs_added"):       # a splitting stage: more documents out than in
            why += f'<br><span data-added="{s["extra"]["docs_added"]}">(+{s["extra"]["docs_added"]:,} added)</span>'

        if s.get("skipped"):
            why += f'<br><span data-skipped="true">skipped, did nothing: {e(s["skipped"])}</span>'
        kept_pct = f"{100 * s['docs_out'] / s['docs_in']:.1f}%" if s["docs_in"] else "-"
        rows.append(f'<tr data-stage="{e(s["name"])}"><td>{e(s["name"])}</td>{td(s["docs_in"], "docs_in")}'
                    f'{td(s["docs_out"], "docs_out")}<td class="n">{kept_pct}</td>'
                    f'<td data-key="removed">{why}</td>{td(s["bytes_in"], "bytes_in")}'
                    f'{td(s["bytes_out"], "bytes_out")}</tr>')
    t = table("funnel", ["stage", "docs in", "docs out", "kept", "removed (by reason)", "bytes in", "bytes out"],
              rows, "Every document is kept or removed for a reason: docs in (+ added by a splitting stage) = "
                    "docs out + removed.")
    return section("funnel", "Funnel", docs + nbytes + t)


def _extra(s: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix):]: v for k, v in s["extra"].items() if k.startswith(prefix)}


def languages_section(run: Run) -> str:
    body = []
    for i in run.find("langid"):
        langs = dict(sorted(_extra(run.stages[i], "kept_lang_").items(), key=lambda kv: -kv[1]))
        body.append(figure(f"languages-{i:02d}", charts.bars(list(langs), list(langs.values()), "documents",
                                                             "documents kept by langid, per language"),
                           langs, f"Documents per language after {stage_name(i, 'langid')} (extra kept_lang_*)."))
    for i in run.find("tokenize"):
        toks = {k: v for k, v in _extra(run.stages[i], "tokens_").items()}
        toks = dict(sorted(toks.items(), key=lambda kv: -kv[1]))
        if toks:
            body.append(figure(f"tokens-lang-{i:02d}", charts.bars(list(toks), list(toks.values()), "tokens",
                                                                   "tokens per language"),
                               toks, f"Tokens per language out of {stage_name(i, 'tokenize')} (extra tokens_<lang>)."))
    return section("languages", "Languages", "".join(body) or note("No langid or tokenize stage in this run."))


def signals_section(run: Run) -> str:
    body = []
    for i, s in enumerate(run.stages):
        sigs, n = stage_signals(run, i)
        if not sigs:
            continue
        shown = {g.column: {"kept": int(len(g.kept)), "removed": int(len(g.removed)) if g.removed is not None
                            else None, "thresholds": dict(g.thresholds)} for g in sigs}
        fid = f"signals-{stage_name(i, s['name'])}"
        sampled = any(v["kept"] < n for v in shown.values())
        body.append(figure(fid, charts.signal_grid(sigs, f"{stage_name(i, s['name'])}: signal columns"), shown,
                           f"{stage_name(i, s['name'])}: histograms of the signal columns it added, over "
                           f"{'a seeded sample of ' if sampled else ''}its kept documents (blue) and, where its "
                           f"rejects carry the column, its removed ones (orange); dashed lines are the thresholds "
                           f"of RUN/config.resolved.yaml, named above each plot."))
    return section("signals", "Quality signals", "".join(body) or note("No stage added signal columns."))


_SIZE_ORDER = re.compile(r"\d+")


def dedup_section(run: Run) -> str:
    body, rows = [], []
    for i, s in enumerate(run.stages):
        if not s["name"].endswith("dedup"):
            continue
        for k, v in s["extra"].items():
            if not k.startswith("cluster_size_"):
                rows.append(f'<tr data-stage="{e(s["name"])}"><td>{e(s["name"])}</td><td>{e(k)}</td>'
                            f"{td(v, k)}</tr>")
        sizes = _extra(s, "cluster_size_")
        if sizes:
            order = sorted(sizes, key=lambda k: (int(_SIZE_ORDER.search(k).group()), k.startswith(">")))
            sizes = {k: sizes[k] for k in order}
            body.append(figure(f"clusters-{i:02d}", charts.bars(order, list(sizes.values()), "clusters",
                                                                "near-duplicate clusters by size"),
                               sizes, f"{stage_name(i, s['name'])}: clusters by number of documents (extra "
                                      f"cluster_size_*); one document of each stays."))
        sample = run.stage(i).clusters_sample
        if sample.is_file():
            body.append(_cluster_samples(sample))
    if rows:
        body.append(table("dedup", ["stage", "counter", "value"], rows, "Counters of the dedup stages."))
    return section("dedup", "Duplicates", "".join(body) or note("No dedup stage in this run."))


def _cluster_samples(path: Path, shown: int = 5) -> str:
    items = audit_mod.read_jsonl(path, shown)
    out = []
    for c in items:
        removed = "".join(f"<h4>removed {e(str(r['id']))}</h4><div class=text>{e(r['text'][:600])}</div>"
                          for r in c["removed"])
        out.append(f"<details><summary>cluster {c['cluster']}: kept {e(str(c['kept']['id']))}, "
                   f"{len(c['removed'])} removed</summary><h4>kept</h4>"
                   f"<div class=text>{e(c['kept']['text'][:600])}</div>{removed}</details>")
    return f'<div class="clusters"><h3>sample clusters ({path.parent.name}/{path.name})</h3>{"".join(out)}</div>'


def tokens_section(run: Run) -> str:
    body = []
    seed = int(run.config.get("seed", 0))
    seq_len = next((run.stage_config(i).get("seq_len") for i in run.find("pack")), None)
    for i in run.find("tokenize"):
        got = sample_columns(run.stage(i).parts(), ["token_count", "n_tokens", "compression_ratio"], seed,
                                 MAX_VALUES)
        vals = got.get("token_count", got.get("n_tokens"))   # runs made before token_count have n_tokens only
        if vals is None:
            continue
        n = run.stages[i]["docs_out"]
        lines = [("seq_len", float(seq_len))] if seq_len else []
        sample = ", a seeded sample" if len(vals) < n else ""
        body.append(figure(f"tokens-hist-{i:02d}", charts.histogram(vals, "tokens per document",
                                                                    "token count per document", lines),
                           {"documents": n, "histogram_of": int(len(vals)), "tokens": run.stages[i]["extra"]
                            .get("tokens")},
                           f"{stage_name(i, 'tokenize')}: tokens per document (token_count of its parts{sample}); "
                           f"dashed: pack's seq_len."))
        if "compression_ratio" in got:
            ratio = got["compression_ratio"]
            body.append(figure(f"compression-hist-{i:02d}", charts.histogram(
                ratio, "characters per token", "compression ratio per document"),
                {"documents": n, "histogram_of": int(len(ratio))},
                f"{stage_name(i, 'tokenize')}: characters per token of each document (compression_ratio{sample})."))
        for kind, label in (("by_language", "language"), ("by_source", "source")):
            groups = (_metrics(run).get("token_stats") or {}).get(kind) or {}
            if groups:
                body.append(_token_stats_table(f"token-stats-{label}-{i:02d}", label, groups))
    m = run.manifest
    if m and m.get("tokens_per_source"):
        tps = m["tokens_per_source"]
        body.append(table("tokens-source", ["source", "tokens (stream, with EOS)"],
                          [f'<tr data-source="{e(k)}"><td>{e(k)}</td>{td(v, "tokens")}</tr>'
                           for k, v in sorted(tps.items(), key=lambda kv: -kv[1])],
                          "Tokens per source (manifest tokens_per_source)."))
    for i in run.find("tokenize"):
        toks, chars = _extra(run.stages[i], "tokens_"), _extra(run.stages[i], "chars_")
        if toks:
            body.append(table(f"tokens-lang-{i:02d}", ["language", "tokens", "characters"],
                              [f'<tr data-lang="{e(k)}"><td>{e(k)}</td>{td(v, "tokens")}{td(chars.get(k), "chars")}'
                               f"</tr>" for k, v in sorted(toks.items(), key=lambda kv: -kv[1])],
                              f"Tokens and characters per language ({stage_name(i, 'tokenize')} extra)."))
    return section("tokens", "Tokens", "".join(body) or note("No tokenize stage in this run."))


_Q = ("p10", "p50", "p90", "p99")


def _token_stats_table(table_id: str, label: str, groups: dict[str, Any]) -> str:
    rows = []
    for k, g in sorted(groups.items(), key=lambda kv: -kv[1]["tokens"]):
        tc, cr = g.get("token_count", {}), g.get("compression_ratio", {})
        rows.append(f'<tr data-group="{e(k)}"><td>{e(k)}</td>{td(g["documents"], "documents")}'
                    f'{td(g["tokens"], "tokens")}{td(g["chars"], "chars")}'
                    f'{td(g["chars_per_token"], "chars_per_token")}'
                    + "".join(td(tc.get(q), f"token_count_{q}") for q in _Q)
                    + "".join(td(cr.get(q), f"compression_ratio_{q}") for q in _Q) + "</tr>")
    return table(table_id, [label, "documents", "tokens", "characters", "chars/token",
                            *(f"tokens {q}" for q in _Q), *(f"chars/token {q}" for q in _Q)], rows,
                 f"Per-document token statistics per {label} (token_count, char_count, compression ratio): "
                 f"counts exact (tokenize counters), "
                 f"quantiles over a seeded sample of the documents (stats.json metrics.token_stats).")


def _metrics(run: Run) -> dict[str, Any]:
    """stats.json `metrics`; computed here for a run made before they were written."""
    if "metrics" not in run.stats:
        from gpupipe.report.metrics import run_metrics

        run.stats["metrics"] = run_metrics(run.stats, run.root, int(run.config.get("seed", 0)))
    return run.stats["metrics"]


def metrics_section(run: Run) -> str:
    """The dashboard: pipeline health, data quality, output; the same numbers as RUN/metrics.prom."""
    m = _metrics(run)
    body = []
    rows = [f'<tr data-stage="{e(h["name"])}"><td>{e(stage_name(i, h["name"]))}</td>'
            + "".join(td(h[k], k) for k in ("docs_per_second", "partition_seconds_p50", "partition_seconds_p99",
                                            "errors", "error_rate", "retries")) + "</tr>"
            for i, h in enumerate(m["stages"])]
    body.append(table("health", ["stage", "docs/s", "partition p50 s", "partition p99 s", "errors", "error rate",
                                 "retries"], rows,
                      "Pipeline health. Errors: documents removed as unreadable_record, decode_error or "
                      "extract_error; latency per partition task for map stages and tokenize (others: -); "
                      "retries: storage calls tried again, tasks run again after a worker process died, LLM "
                      "judge requests asked again (a failed task still fails the run, which resumes by stage)."))
    hist = m["token_count_histogram"]
    if hist:
        labels = [f"{lo}-{2 * int(lo) - 1}" for lo in hist]
        body.append(figure("token-count-bins", charts.bars(labels, list(hist.values()), "documents",
                                                           "documents per token-count bin"), hist,
                           "Token-count histogram of the output documents, exact: power-of-two bins "
                           "(tokenize counters token_count_bin_<lo>, lo <= token_count < 2 lo)."))
    if m["dedup_rate"]:
        body.append(table("dedup-rate", ["stage", "documents removed", "bytes removed"],
                          [f'<tr data-stage="{e(k)}"><td>{e(k)}</td>{td(r["docs"], "docs")}{td(r["bytes"], "bytes")}'
                           f"</tr>" for k, r in m["dedup_rate"].items()], "Dedup rate by stage (share of its input)."))
    for stage, bins in m["quality_scores"].items():
        body.append(figure(f"quality-bins-{stage}", charts.bars(list(bins), list(bins.values()), "documents",
                                                                f"{stage}: documents per score bin"), bins,
                           f"{stage}: quality-score distribution (its score_bin_*/perplexity_bin_* counters)."))
    if m["top_domains"]:
        body.append(table("top-domains", ["domain", "documents", "tokens"],
                          [f'<tr data-domain="{e(d["domain"])}"><td>{e(d["domain"])}</td>'
                           f'{td(d["documents"], "documents")}{td(d["tokens"], "tokens")}</tr>'
                           for d in m["top_domains"]],
                          f"Top {len(m['top_domains'])} of {m['domains_total']:,} domains of the output documents."))
    if m["sources"]:
        body.append(table("sources", ["source", "documents", "tokens"],
                          [f'<tr data-source="{e(k)}"><td>{e(k)}</td>{td(r["documents"], "documents")}'
                           f'{td(r["tokens"], "tokens")}</tr>' for k, r in m["sources"].items()],
                          "Category (source) distribution of the output documents."))
    body.append(note("The same numbers, for a dashboard to scrape: RUN/metrics.prom (Prometheus text format)."))
    return section("metrics", "Dashboard metrics", "".join(body))


def mixture_section(run: Run) -> str:
    ledger = (run.manifest or {}).get("mixture")
    for i in run.find("mixture"):            # a run that stops before pack: the stage's own ledger file
        f = run.stage(i).ledger
        if not ledger and f.is_file():
            ledger = json.loads(f.read_text(encoding="utf-8"))
    if not ledger:
        return section("mixture", "Mixture", note("No mixture stage in this run (no ledger in the manifest)."))
    src = ledger.get("sources", {})
    cols = ["weight", "target_share", "share", "target_tokens", "tokens", "available_tokens", "target_epochs",
            "epochs", "max_epochs", "documents", "unique_documents"]
    rows = [f'<tr data-source="{e(k)}"><td>{e(k)}</td>' + "".join(td(r.get(c), c) for c in cols) + "</tr>"
            for k, r in src.items()]
    t = table("mixture", ["source", *cols], rows,
              f"Mixture ledger (manifest `mixture`): total {ledger.get('total_tokens'):,} tokens, target "
              f"{ledger.get('target_total_tokens')}, limited by {ledger.get('limited_by')}.")
    shares = {"target share": [r.get("target_share", 0) for r in src.values()],
              "achieved share": [r.get("share", 0) for r in src.values()]}
    fig = figure("mixture", charts.grouped_barh(list(src), shares, "share of packed tokens",
                                                "mixture: target vs achieved", "{:.4f}"),
                 {k: {"target_share": r.get("target_share"), "share": r.get("share")} for k, r in src.items()},
                 "Target and achieved token shares per source (ledger).")
    return section("mixture", "Mixture", fig + t)


def throughput_section(run: Run) -> str:
    st = run.stages
    names = [f"{i:02d} {s['name']}" for i, s in enumerate(st)]
    secs = [s["seconds"] for s in st]
    fig = figure("time", charts.bars(names, secs, "seconds", "time per stage", "{:.2f} s"),
                 {"stages": [s["name"] for s in st], "seconds": secs},
                 f"Wall time per stage; the whole run took {run_time(run.stats)}.")
    rows = []
    for s in st:
        mbps = round(s["bytes_in"] / 1e6 / s["seconds"], 3) if s["seconds"] else None
        rows.append(f'<tr data-stage="{e(s["name"])}"><td>{e(s["name"])}</td>{td(s["seconds"], "seconds")}'
                    f'{td(s.get("docs_per_second"), "docs_per_second")}{td(mbps, "mb_per_second")}'
                    f'{td(s.get("partition_seconds_p50"), "partition_seconds_p50")}'
                    f'{td(s.get("partition_seconds_p99"), "partition_seconds_p99")}'
                    f'{td(s.get("partitions"), "partitions")}{td(bool(s.get("resumed")), "resumed")}</tr>')
    t = table("throughput", ["stage", "seconds", "docs/s", "MB/s (in)", "partition p50 s", "partition p99 s",
                             "partitions", "resumed"], rows,
              "A resumed stage shows the time of the run that made it. Partition p50/p99: wall time of one "
              "partition task (map stages and tokenize; - for stages that do not run per partition).")
    return section("throughput", "Throughput", fig + t)


def extra_section(run: Run) -> str:
    rows = [f'<tr data-stage="{e(s["name"])}"><td>{e(stage_name(i, s["name"]))}</td><td>{e(k)}</td>{td(v, k)}</tr>'
            for i, s in enumerate(run.stages) for k, v in s["extra"].items()]
    if not rows:
        return section("counters", "Stage counters", note("No stage counters."))
    return section("counters", "Stage counters",
                   f"<details><summary>every stage's `extra` counters ({len(rows)})</summary>"
                   + table("extra", ["stage", "counter", "value"], rows) + "</details>")


def audit_section(run: Run, index: dict[str, Any], shown: int) -> str:
    body = [note(f"A seeded random sample per stage (seed {index.get('seed')}, up to {index.get('size')} "
                 f"documents, kept and removed balanced) in RUN/audit/NN-name.jsonl; the first {shown} of each "
                 f"are below. Review with: gpupipe audit {run.name} --stage NAME [--review FILE]. Gate: pass "
                 f"rate >= {audit_mod.MIN_PASS_RATE} PASS, >= {audit_mod.ESCALATION_THRESHOLD} WARN, else "
                 f"ESCALATE.")]
    for folder, info in index.get("stages", {}).items():
        path = run.layout.audit / info["file"]
        samples = audit_mod.read_jsonl(path, shown) if path.is_file() else []
        rev_path = run.layout.audit / f"{folder}.review.json"
        rev = json.loads(rev_path.read_text(encoding="utf-8")) if rev_path.is_file() else None
        verdict = (f"review: {rev['verdict']} {rev['passed']}/{rev['reviewed']}" if rev and rev.get("verdict")
                   else "not reviewed")
        rows = [f'<tr data-sample="{e(s["sample_id"])}"><td>{e(s["sample_id"])}</td><td>{e(s["status"])}</td>'
                f'<td>{e(s.get("reason") or "")}</td><td>{e(str(s.get("id")))}<br><small>{e(s.get("url") or "")}'
                f'</small></td><td>{e(s.get("lang") or "")}</td><td><div class=text>{e(s["text"])}</div></td></tr>'
                for s in samples]
        n = info["kept_sampled"] + info["removed_sampled"]
        body.append(f'<details id="audit-{e(folder)}" class="audit" data-stage="{e(folder)}" data-samples="{n}" '
                    f'data-kept="{info["kept_sampled"]}" data-removed="{info["removed_sampled"]}">'
                    f"<summary>{e(folder)}: {n:,} samples ({info['kept_sampled']:,} of {info['kept']:,} kept, "
                    f"{info['removed_sampled']:,} of {info['removed']:,} removed) · {e(verdict)}</summary>"
                    + table(f"audit-{folder}", ["sample_id", "status", "reason", "id / url", "lang",
                                                "text (prefix)"], rows) + "</details>")
    return section("audit", "Audit samples", "".join(body))


def config_section(run: Run) -> str:
    return section("config", "Resolved config",
                   f'<pre id="config-resolved" data-file="{e(CONFIG_FILE)}">{e(run.config_text)}</pre>')


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header,main{max-width:1200px;margin:0 auto;padding:0 24px}
header{padding-top:16px} h1{font-size:22px;margin:8px 0} h2{border-bottom:1px solid #ccc;padding-bottom:4px}
nav a{margin-right:12px;color:#2255aa}
section{margin:24px 0} figure{margin:16px 0;background:#fff;border:1px solid #e4e4e4;padding:8px}
figure svg{max-width:100%;height:auto;display:block} figcaption{color:#555;font-size:13px}
table{border-collapse:collapse;margin:12px 0;background:#fff;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top} td.n{text-align:right}
caption{caption-side:bottom;text-align:left;color:#555;font-size:12px;padding-top:4px}
tbody tr:nth-child(even){background:#f5f7fa}
details{margin:6px 0;background:#fff;border:1px solid #e4e4e4;padding:4px 8px} summary{cursor:pointer}
.text{white-space:pre-wrap;max-height:9em;overflow:auto;font-size:12px;max-width:640px}
pre{background:#fff;border:1px solid #e4e4e4;padding:8px;overflow:auto;font-size:12px} .note{color:#555}
.warning{background:#fff4d6;border-left:4px solid #e0a000;padding:6px 10px}
"""

SECTIONS = [("summary", "Run"), ("funnel", "Funnel"), ("languages", "Languages"), ("signals", "Quality signals"),
            ("dedup", "Duplicates"), ("tokens", "Tokens"), ("mixture", "Mixture"), ("throughput", "Throughput"),
            ("metrics", "Dashboard"), ("counters", "Counters"), ("audit", "Audit"), ("config", "Config")]


def render(run: Run, audit_index: dict[str, Any], audit_rows: int = AUDIT_ROWS_SHOWN) -> str:
    s = run.stats
    title = f"gpupipe report: {run.name.rstrip('/').rsplit('/', 1)[-1]}"
    nav = "".join(f'<a href="#{sid}">{e(label)}</a>' for sid, label in SECTIONS)
    body = "".join([summary_section(run), funnel_section(run), languages_section(run), signals_section(run),
                    dedup_section(run), tokens_section(run), mixture_section(run), throughput_section(run),
                    metrics_section(run), extra_section(run), audit_section(run, audit_index, audit_rows),
                    config_section(run)])
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(title)}</title><style>{CSS}</style></head><body>"
            f"<header><h1>{e(title)}</h1><p>{s['input_records']:,} input records → {s['output_docs']:,} "
            f"documents · {len(run.stages)} stages · {e(run_time(s))} · device {e(str(s.get('device')))} · "
            f"gpupipe {e(str(s.get('gpupipe_version')))}</p><nav>{nav}</nav></header>"
            f"<main>{body}</main></body></html>\n")


__all__ = ["MAX_VALUES", "Run", "THRESHOLDS", "render", "stage_signals", "thresholds"]
