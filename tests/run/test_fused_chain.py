"""Consecutive map stages run fused (one task per partition, one read and one write): each still has its own
stats, rejects and audit sample; resume is per chain; keep_intermediate keeps every stage's parts; the results
are the same bytes either way, on both executors."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from gpupipe.cli import main
from gpupipe.io.parts import part_paths
from gpupipe.report.audit import draw_sample
from gpupipe.run.rundir import kept_parts

STAGES = [{"extract": {}}, {"normalize": {}}, {"langid": {"keep": ["en", "zh", "fr", "de", "es", "ru"]}},
          {"doc_filter": {"min_words": 30}}, {"exact_dedup": {}}, {"tokenize": {"vocab_size": 400}},
          {"pack": {"seq_len": 64}}]


def run(tmp: Path, name: str, crawl: dict, stages=STAGES, **top) -> tuple[Path, dict]:
    cfg = {"input": {"path": crawl["warc"]}, "output": str(tmp / name), "device": "cpu",
           "executor": {"partition_docs": 30}, "stages": stages, **top}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp / f"{name}.yaml")]) == 0
    return tmp / name, json.loads((tmp / name / "stats.json").read_text())


def ids(paths: list[Path]) -> list[str]:
    return sorted(i for p in paths for i in pq.read_table(p, columns=["id"])["id"].to_pylist())


@pytest.fixture(scope="module")
def both(tmp_path_factory, synth_crawl):
    tmp = tmp_path_factory.mktemp("fused")
    return run(tmp, "fused", synth_crawl), run(tmp, "kept", synth_crawl, keep_intermediate=True)


def test_fused_chain_writes_parts_once_and_counts_every_stage(both):
    (fused, stats), (kept, kstats) = both
    by = {s["name"]: s for s in stats["stages"]}
    for name in ("extract", "normalize", "langid"):  # inside the chain: rejects and stats, no parts
        folder = next(fused.glob(f"stages/*-{name}"))
        assert not part_paths(folder) and by[name]["parts_kept"] is False
    assert part_paths(next(fused.glob("stages/*-doc_filter"))) and by["doc_filter"]["parts_kept"] is True
    assert by["langid"]["removed"] and list(next(fused.glob("stages/*-langid")).glob("rejects/part-*.parquet"))
    assert stats["conservation_ok"]
    # The same counts, stage by stage, as when every stage keeps its parts; the same shards.
    strip = ("seconds", "docs_per_second", "key", "parts_kept", "resumed", "partitions", "partition_seconds_p50",
             "partition_seconds_p99")

    def counts(s: dict) -> dict:
        # extra's peaks and timings (peak_*, *_ms, *_s) vary from run to run; its counts must not
        return {k: ({c: n for c, n in v.items() if not (c.startswith("peak_") or c.endswith(("_ms", "_s")))}
                    if k == "extra" else v)
                for k, v in s.items() if k not in strip}
    assert [counts(s) for s in stats["stages"]] == [counts(s) for s in kstats["stages"]]
    assert (fused / "shards" / "shard-00000.bin").read_bytes() == (kept / "shards" / "shard-00000.bin").read_bytes()
    for name in ("normalize", "langid", "doc_filter"):
        assert part_paths(next(kept.glob(f"stages/*-{name}")))


def test_a_fused_stage_kept_documents_are_found_downstream(both):
    (fused, _), (kept, _) = both
    for name in ("extract", "normalize", "langid"):
        f_folder, k_folder = next(fused.glob(f"stages/*-{name}")), next(kept.glob(f"stages/*-{name}"))
        assert ids(kept_parts(f_folder)) == ids(part_paths(k_folder))
        sample, info = draw_sample(f_folder, size=40, seed=3)
        k_sample, k_info = draw_sample(k_folder, size=40, seed=3)
        assert info == k_info and info["kept_sampled"] > 0
        assert sorted(s["id"] for s in sample) == sorted(s["id"] for s in k_sample)


def test_report_draws_a_fused_stage_signals(both):
    (fused, _), _ = both
    html = (fused / "report.html").read_text(encoding="utf-8")
    assert "lang_score" in html


def test_resume_is_per_chain(tmp_path, synth_crawl):
    out, _ = run(tmp_path, "r", synth_crawl)
    changed = [dict(s) for s in STAGES]
    changed[3] = {"doc_filter": {"min_words": 40}}
    cfg = yaml.safe_load((tmp_path / "r.yaml").read_text())
    cfg["stages"] = changed
    (tmp_path / "r2.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp_path / "r2.yaml")]) == 0
    stats = json.loads((out / "stats.json").read_text())
    # doc_filter changed; extract, normalize and langid were fused with it and kept no parts: they run again.
    assert [s["resumed"] for s in stats["stages"]] == [True] + [False] * 7
    assert stats["conservation_ok"]


@pytest.mark.slow
def test_fused_chain_on_dask_gives_the_same_shards(tmp_path, synth_crawl, both):
    (fused, _), _ = both
    out, _ = run(tmp_path, "dask", synth_crawl, executor={"kind": "dask", "workers": 2, "partition_docs": 17})
    assert (out / "shards" / "shard-00000.bin").read_bytes() == (fused / "shards" / "shard-00000.bin").read_bytes()
