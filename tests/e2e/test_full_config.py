"""configs/full.yaml, every station, on the synthetic crawl: planted spam, PII, leaks and syndicated paragraphs
are caught, and the stats say so."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gpupipe.cli import main
from gpupipe.io.parts import part_paths
from gpupipe.run.pipeline import check_conservation
from tests.helpers import ROOT


@pytest.mark.slow
def test_full_config_catches_what_the_crawl_plants(tmp_path, synth_crawl):
    index = tmp_path / "benchmark.index.parquet"
    assert main(["decontam-index", "--out", str(index), synth_crawl["benchmark"]]) == 0
    cfg = yaml.safe_load((ROOT / "configs" / "full.yaml").read_text())
    cfg["input"]["path"] = synth_crawl["warc"]
    cfg["output"] = str(tmp_path / "run")
    for stage in cfg["stages"]:
        if "decontaminate" in stage:
            stage["decontaminate"]["index"] = str(index)
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp_path / "full.yaml")]) == 0

    run = tmp_path / "run"
    stats = json.loads((run / "stats.json").read_text())
    assert stats["conservation_ok"] and check_conservation(stats["stages"]) == []
    by_name = {s["name"]: s for s in stats["stages"]}
    truth = {t["record_id"]: t for t in map(json.loads, open(synth_crawl["truth"], encoding="utf-8"))}
    curated = Path(stats["curated_dir"])
    final = pd.concat([pd.read_parquet(p, columns=["id", "text"]) for p in part_paths(curated)])
    texts = dict(zip(final["id"], final["text"]))

    spam = [i for i, t in truth.items() if t["kind"] == "spam"]
    assert sum(i in texts for i in spam) <= len(spam) // 10, "spam should not reach the curated set"
    for i, text in texts.items():
        assert not any(p in text for p in truth[i]["pii"]), f"PII left in {i}"
    assert by_name["pii"]["extra"]["docs_with_pii"] > 0
    for paragraph in {p for t in truth.values() for p in t.get("repeated_paragraphs", [])}:
        assert sum(paragraph in text for text in texts.values()) <= 1
    entered = set(pd.concat([pd.read_parquet(p, columns=["id"])
                             for p in part_paths(next((run / "stages").glob("*-substring_dedup")))])["id"])
    leaked = {i for i, t in truth.items() if t.get("leaks")} & entered
    assert leaked, "some pages with planted benchmark leaks should reach decontamination"
    assert by_name["decontaminate"]["extra"]["docs_with_leaks"] >= len(leaked)
    assert (run / "shards" / "megatron" / "data.idx").is_file()
    assert main(["verify", str(run / "shards")]) == 0
