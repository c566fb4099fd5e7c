"""Seed 002 §5.2 token statistics and the §监控 dashboard metrics on real runs: the tokenize columns and counters,
stats.json `metrics` (recounted here from the Parquet files), RUN/metrics.prom, and the report's new tables."""

import json
import re
import shutil
from collections import Counter
from urllib.parse import urlsplit

import numpy as np
import pyarrow.parquet as pq
import pytest

from gpupipe.cli import main
from gpupipe.report.schema import validate_run_dir, validate_stats
from tests.helpers import ROOT


@pytest.fixture(scope="module")
def run(tmp_path_factory, synth_crawl):
    """The default config over a copy of the crawl with a damaged gzip member appended (unreadable records),
    in partitions of 25 documents (several per map stage, for latency quantiles)."""
    from tests.helpers import write_config

    tmp = tmp_path_factory.mktemp("metrics")
    warc = tmp / "crawl.warc.gz"
    shutil.copyfile(synth_crawl["warc"], warc)
    with open(warc, "ab") as f:
        f.write(b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"garbage that is no deflate stream" * 4)
    cfg = write_config(tmp / "c.yaml", input={"path": str(warc)}, output=str(tmp / "run"),
                       executor={"kind": "local", "partition_docs": 25})
    assert main(["run", str(cfg)]) == 0
    root = tmp / "run"
    stats = json.loads((root / "stats.json").read_text())
    return {"root": root, "stats": stats, "st": {s["name"]: s for s in stats["stages"]},
            "tok": sorted((root / "stages" / "08-tokenize").glob("part-*.parquet"))}


def test_tokenize_writes_token_statistics(run):
    import pyarrow as pa

    t = pa.concat_tables([pq.read_table(p) for p in run["tok"]])
    tokens = t["tokens"].to_pylist()
    text = t["text"].to_pylist()
    tc, cc, cr = (t[c].to_numpy() for c in ("token_count", "char_count", "compression_ratio"))
    assert (tc == [len(x) for x in tokens]).all() and (tc == t["n_tokens"].to_numpy()).all()
    assert (cc == [len(x) for x in text]).all()
    assert np.allclose(cr, cc / tc) and (cr > 0).all()
    extra = run["st"]["tokenize"]["extra"]
    # the exact histogram: power-of-two bins that add up to the documents, each in its bin
    bins = {int(k[len("token_count_bin_"):]): v for k, v in extra.items() if k.startswith("token_count_bin_")}
    assert sum(bins.values()) == len(tc) == run["st"]["tokenize"]["docs_out"]
    assert bins == dict(Counter(int(2 ** np.floor(np.log2(n))) for n in tc))
    for lang in set(t["lang"].to_pylist()):
        m = t["lang"].to_numpy(zero_copy_only=False) == lang
        assert (extra[f"documents_{lang}"], extra[f"tokens_{lang}"], extra[f"chars_{lang}"]) == \
            (m.sum(), tc[m].sum(), cc[m].sum())
    assert extra["source_documents_web"] == len(tc) and extra["source_tokens_web"] == tc.sum()


def test_stats_metrics_valid_and_recounted(run):
    stats, st = run["stats"], run["st"]
    assert validate_stats(stats) == [] and validate_run_dir(run["root"]) == []
    m = stats["metrics"]
    # pipeline health: latency of each partition task, errors = unreadable records over the records read
    for name in ("extract", "normalize", "langid", "doc_filter", "pii", "tokenize"):
        assert st[name]["partitions"] > 1 or name != "tokenize"
        assert 0 <= st[name]["partition_seconds_p50"] <= st[name]["partition_seconds_p99"], name
    assert "partition_seconds_p50" not in st["pack"]
    health = {h["name"]: h for h in m["stages"]}
    read = st["read"]
    assert read["removed"].get("unreadable_record", 0) > 0
    assert health["read"]["errors"] == read["removed"]["unreadable_record"] + read["removed"].get("decode_error", 0)
    assert health["read"]["error_rate"] == round(health["read"]["errors"] / read["docs_in"], 6)
    assert health["extract"]["partition_seconds_p99"] == st["extract"]["partition_seconds_p99"]
    assert all(h["retries"] == 0 for h in m["stages"])
    # data
    assert m["languages"] == {k[10:]: v for k, v in st["langid"]["extra"].items() if k.startswith("kept_lang_")}
    assert m["dedup_rate"]["06-exact_dedup"]["docs"] == round(
        st["exact_dedup"]["removed"]["exact_duplicate"] / st["exact_dedup"]["docs_in"], 6)
    assert sum(m["token_count_histogram"].values()) == st["tokenize"]["docs_out"]
    # output: recount domains, sources, tokens per language from the tokenize parts
    docs, toks = Counter(), Counter()
    for p in run["tok"]:
        t = pq.read_table(p, columns=["url", "token_count"])
        for url, n in zip(t["url"].to_pylist(), t["token_count"].to_pylist()):
            host = urlsplit(url).hostname
            docs[host] += 1
            toks[host] += n
    top = sorted(docs.items(), key=lambda kv: (-kv[1], kv[0]))[:100]
    assert [(d["domain"], d["documents"], d["tokens"]) for d in m["top_domains"]] == \
        [(h, n, toks[h]) for h, n in top]
    assert m["domains_total"] == len(docs)
    assert m["sources"] == {"web": {"documents": sum(docs.values()), "tokens": sum(toks.values())}}
    assert m["tokens_by_language"] == {k[7:]: v for k, v in st["tokenize"]["extra"].items()
                                       if k.startswith("tokens_")}
    zh = m["token_stats"]["by_language"]["zh"]
    assert zh["chars_per_token"] == round(st["tokenize"]["extra"]["chars_zh"] / st["tokenize"]["extra"]["tokens_zh"],
                                          6)
    assert zh["token_count"]["p10"] <= zh["token_count"]["p50"] <= zh["token_count"]["p90"]


def test_stats_schema_rejects_bad_metrics(run):
    bad = json.loads(json.dumps(run["stats"]))
    bad["metrics"]["stages"][0]["retries"] = -1
    bad["metrics"]["surprise"] = 1
    problems = validate_stats(bad)
    assert any("metrics.stages[0].retries" in p for p in problems)
    assert any("undocumented field 'surprise'" in p for p in problems)
    doc = (ROOT / "docs" / "stats_schema.md").read_text()
    from gpupipe.report.schema import METRICS_SCHEMA

    for key in METRICS_SCHEMA["properties"]:
        assert f"`{key}`" in doc, key


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\} (\S+)$')


def parse_prom(text: str) -> dict:
    """Prometheus text format: HELP/TYPE before a family's samples, each family's lines contiguous."""
    families, order, current = {}, [], None
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            name = line.split()[2]
            assert name not in order or name == current, f"family {name} split"
            if name not in order:
                order.append(name)
            current = name
            if line.startswith("# TYPE "):
                families.setdefault(name, {"type": line.split()[3], "samples": []})
            continue
        m = _SAMPLE.match(line)
        assert m, line
        name = m.group(1)
        base = re.sub(r"_(bucket|sum|count)$", "", name) if families.get(current, {}).get("type") == "histogram" \
            else name
        assert base == current, f"{name} outside its family {current}"
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2)))
        families[current]["samples"].append((name, labels, float(m.group(3))))
    return families


def test_metrics_prom_matches_stats(run):
    text = (run["root"] / "metrics.prom").read_text()
    fam = parse_prom(text)
    stats, m = run["stats"], run["stats"]["metrics"]

    def value(name, **labels):
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name.startswith("gpupipe_document_tokens") else name
        hits = [v for n, lab, v in fam[family]["samples"]
                if n == name and all(lab.get(k) == str(x) for k, x in labels.items())]
        assert len(hits) == 1, (name, labels, hits)
        return hits[0]

    assert value("gpupipe_run_input_records", run="run") == stats["input_records"]
    for i, s in enumerate(stats["stages"]):
        pos = f"{i:02d}"
        assert value("gpupipe_stage_docs_in", stage=s["name"], position=pos) == s["docs_in"]
        if s.get("docs_per_second") is not None:
            assert value("gpupipe_stage_docs_per_second", stage=s["name"], position=pos) == s["docs_per_second"]
        if "partition_seconds_p99" in s:
            assert value("gpupipe_stage_partition_seconds", stage=s["name"], position=pos, quantile="0.99") == \
                s["partition_seconds_p99"]
        assert value("gpupipe_stage_error_rate", stage=s["name"], position=pos) == m["stages"][i]["error_rate"]
    for lang, n in m["tokens_by_language"].items():
        assert value("gpupipe_output_tokens", lang=lang) == n
    for d in m["top_domains"]:
        assert value("gpupipe_domain_documents", domain=d["domain"]) == d["documents"]
    assert fam["gpupipe_document_tokens"]["type"] == "histogram"
    buckets = [(float(lab["le"]), v) for n, lab, v in fam["gpupipe_document_tokens"]["samples"]
               if n.endswith("bucket")]
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)           # cumulative
    assert buckets[-1] == (float("inf"), stats["stages"][-2]["docs_out"])
    assert value("gpupipe_document_tokens_sum") == run["st"]["tokenize"]["extra"]["tokens"]
    day = stats["run_date"]
    assert value("gpupipe_daily_output_documents", date=day) == stats["output_docs"]
    assert value("gpupipe_daily_output_tokens", date=day) == run["st"]["tokenize"]["extra"]["tokens"]


def test_the_run_is_dated_once_for_the_daily_output_volume(run):
    """Seed 002's daily_output_volume: the run's date (UTC) in stats.json, its output under that date; a run that
    resumed every stage output nothing new that day."""
    import datetime

    stats = run["stats"]
    started = datetime.datetime.strptime(stats["started_at"], "%Y-%m-%dT%H:%M:%SZ")
    day = datetime.date.fromisoformat(stats["run_date"])
    assert started.date() <= day <= datetime.datetime.now(datetime.timezone.utc).date()
    assert stats["metrics"]["daily_output_volume"] == {
        stats["run_date"]: {"documents": stats["output_docs"], "tokens": run["st"]["tokenize"]["extra"]["tokens"]}}
    assert stats["retries"] == {"total": 0}
    from gpupipe.report.metrics import daily_output_volume

    resumed = {**stats, "stages": [{**s, "resumed": True} for s in stats["stages"]]}
    assert daily_output_volume(resumed) == {stats["run_date"]: {"documents": 0, "tokens": 0}}


def test_report_shows_histograms_latency_and_dashboard(run):
    html = (run["root"] / "report.html").read_text()
    st = run["st"]
    for table in ("health", "top-domains", "sources", "dedup-rate", "token-stats-language-08",
                  "token-stats-source-08"):
        assert f'data-table="{table}"' in html, table
    for chart in ("tokens-hist-08", "compression-hist-08", "token-count-bins"):
        assert f'data-chart="{chart}"' in html, chart
    throughput = html[html.index('data-table="throughput"'):]
    throughput = throughput[:throughput.index("</table>")]
    assert "partition p50 s" in throughput and "partition p99 s" in throughput
    for name in ("extract", "tokenize"):
        row = re.search(rf'<tr data-stage="{name}">.*?</tr>', throughput).group()
        assert f'data-key="partition_seconds_p99" data-value="{st[name]["partition_seconds_p99"]!r}"' in row
    bins = re.search(r'data-chart="token-count-bins" data-values="([^"]*)"', html).group(1)
    assert json.loads(bins.replace("&quot;", '"')) == run["stats"]["metrics"]["token_count_histogram"]


def test_metrics_of_jsonl_without_urls_or_sources(tmp_path):
    """A JSONL input without urls stores an all-null `url` column (Arrow's null type): the metrics skip domains
    instead of failing, and the report is written."""
    from tests.helpers import write_config

    src = tmp_path / "in.jsonl"
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()
    src.write_text("".join(json.dumps({"text": " ".join(words[i % 11:] + words[:i % 11]) * 8}) + "\n"
                           for i in range(40)))
    cfg = write_config(tmp_path / "c.yaml", input={"path": str(src)}, output=str(tmp_path / "run"),
                       stages=[{"normalize": {}}, {"tokenize": {"vocab_size": 300}}, {"pack": {"seq_len": 64}}])
    assert main(["run", str(cfg)]) == 0
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert "warnings" not in stats and stats["metrics"]["top_domains"] == []
    assert (tmp_path / "run" / "report.html").is_file() and (tmp_path / "run" / "metrics.prom").is_file()
