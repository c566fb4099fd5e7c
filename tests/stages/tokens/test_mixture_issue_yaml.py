"""The phases block of issue #34 (Parts, item 3), copied as text into a config file, runs as written through
`gpupipe run` (no `mode` key: pack's default stream packing); best-fit packing of phases is refused when the
config loads, before any work."""

import textwrap

import pytest
import yaml

from gpupipe.cli import main
from gpupipe.config import load_config
from gpupipe.config_base import ConfigError
from gpupipe.tokens.manifest import read_manifest
from gpupipe.tokens.verify import verify_shards

from .test_mixture_phases_run import write_corpus

ISSUE_BLOCK = """\
- mixture:
    by: source                 # the grouping column: source (default), lang, domain_tier, any column
    total_tokens: 400000
    phases:
      - {name: general, share: 0.8, sources: {web: {weight: 0.9, epochs: null}, books: {weight: 0.1, epochs: null}}}
      - {name: anneal,  share: 0.2, sources: {books: {weight: 1.0, epochs: null}}}
"""


def config_text(tmp, pack: str) -> str:
    head = (f"input: {{path: {tmp / 'in.jsonl'}}}\noutput: {tmp / 'run'}\ndevice: cpu\nstages:\n"
            f"  - tokenize: {{vocab_size: 400, min_frequency: 0, special_tokens: ['<|endoftext|>', '<pad>']}}\n")
    return head + textwrap.indent(ISSUE_BLOCK, "  ") + f"  - pack: {pack}\n"


def test_the_issues_phases_block_runs_as_written(tmp_path):
    write_corpus(tmp_path / "in.jsonl")
    path = tmp_path / "issue.yaml"
    path.write_text(config_text(tmp_path, "{seq_len: 256}"), encoding="utf-8")
    assert yaml.safe_load(path.read_text())["stages"][1] == yaml.safe_load(ISSUE_BLOCK)[0]
    assert main(["run", str(path)]) == 0
    shards = tmp_path / "run" / "shards"
    assert verify_shards(shards) == []
    m = read_manifest(shards)
    assert [p["name"] for p in m["phases"]] == ["general", "anneal"]
    assert set(m["phases"][1]["tokens_by_group"]) == {"books"}
    assert m["phases"][0]["stream_tokens"] / m["stream_tokens"] == pytest.approx(0.8, abs=0.005)


def test_best_fit_packing_of_phases_is_refused_before_any_work(tmp_path):
    path = tmp_path / "bestfit.yaml"
    path.write_text(config_text(tmp_path, "{seq_len: 256, mode: bestfit, pad_token: '<pad>'}"))
    with pytest.raises(ConfigError, match=r"stages\.2\.pack\.mode.*phases packs with mode: stream"):
        load_config(path)
    assert not (tmp_path / "run").exists()
