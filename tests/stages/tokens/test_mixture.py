"""Mixture: per-source weights and epochs in tokens, whole documents, a ledger that matches the config."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import gpupipe.stages as stages_pkg
from gpupipe.cli import main
from gpupipe.config import load_config
from gpupipe.io.parts import part_paths
from gpupipe.run.pipeline import check_conservation
from gpupipe.stages.tokens.mixture import Mixture, MixtureConfig, MixtureError, plan_copies
from gpupipe.tokens.bestfit import PAD_TOKEN, unpack_documents
from gpupipe.tokens.megatron import read_megatron
from gpupipe.tokens.tokenizer import EOS_TOKEN
from tests.helpers import ROOT

LLAMA1 = {"commoncrawl": (0.67, 1.10), "c4": (0.15, 1.06), "github": (0.045, 0.64), "wikipedia": (0.045, 2.45),
          "books": (0.045, 2.23), "arxiv": (0.025, 1.06), "stackexchange": (0.02, 1.03)}


@pytest.fixture
def registered(monkeypatch):
    """Until the lead registers the stage: `mixture` known, and allowed between tokenize and pack."""
    monkeypatch.setitem(stages_pkg.STAGES, "mixture", Mixture)
    monkeypatch.setattr(stages_pkg, "REQUIRES_BEFORE", {"mixture": "tokenize"})


def synthetic(sizes: dict[str, int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Token counts (with EOS) and sources of a shuffled multi-source corpus."""
    rng = np.random.default_rng(seed)
    sources = np.array([s for s, n in sizes.items() for _ in range(n)], dtype=object)
    order = rng.permutation(sources.size)
    return rng.integers(2, 400, size=sources.size)[order], sources[order]


def cfg(sources: dict, **kw) -> MixtureConfig:
    return MixtureConfig.model_validate({"sources": {k: {"weight": w, "epochs": e} for k, (w, e) in sources.items()},
                                         **kw})


def assert_ledger_matches(ledger: dict, config: MixtureConfig):
    """Every source within one document of its target tokens, hence of its share and epochs."""
    total = sum(s.weight for s in config.sources.values())
    for name, row in ledger["sources"].items():
        assert abs(row["tokens"] - row["target_tokens"]) <= row["max_document_tokens"], (name, row)
        assert row["target_share"] == pytest.approx(config.sources[name].weight / total)
        assert row["target_tokens"] == pytest.approx(row["target_share"] * ledger["target_total_tokens"])
        assert row["epochs"] == pytest.approx(row["tokens"] / row["available_tokens"], abs=1e-6)
        if config.sources[name].epochs is not None:
            assert row["target_epochs"] <= config.sources[name].epochs + 1e-9


def test_llama1_table_as_large_as_the_tightest_source_allows():
    sizes = {"commoncrawl": 3000, "c4": 700, "github": 300, "wikipedia": 90, "books": 100, "arxiv": 120,
             "stackexchange": 100}
    tokens, sources = synthetic(sizes)
    config = cfg(LLAMA1)
    copies, ledger = plan_copies(tokens, sources, config, seed=0)
    assert_ledger_matches(ledger, config)
    bound = ledger["limited_by"]
    assert ledger["sources"][bound]["target_epochs"] == pytest.approx(LLAMA1[bound][1])
    assert all(r["target_epochs"] <= LLAMA1[n][1] + 1e-9 for n, r in ledger["sources"].items())
    assert ledger["total_tokens"] == int((tokens * copies).sum())
    assert ledger["documents"] == int(copies.sum()) and ledger["passes"] == int(copies.max())


def test_whole_epochs_then_a_seeded_subset():
    tokens, sources = synthetic({"wiki": 200, "web": 1000})
    total = int(2.45 * tokens[sources == "wiki"].sum() / 0.3)  # wiki at exactly 2.45 epochs
    config = cfg({"wiki": (0.3, 2.45), "web": (0.7, None)}, total_tokens=total)
    copies, ledger = plan_copies(tokens, sources, config, seed=1)
    wiki = copies[sources == "wiki"]
    assert set(np.unique(wiki)) <= {2, 3} and (wiki == 3).any() and (wiki == 2).any()
    assert ledger["sources"]["wiki"]["full_epochs"] == 2
    assert_ledger_matches(ledger, config)


def test_down_sampling_picks_whole_documents():
    tokens, sources = synthetic({"a": 500, "b": 500})
    config = cfg({"a": (0.5, 0.3), "b": (0.5, 1.0)})
    copies, ledger = plan_copies(tokens, sources, config, seed=0)
    assert ledger["limited_by"] == "a" and set(np.unique(copies)) <= {0, 1}
    assert_ledger_matches(ledger, config)


def test_seeded_and_deterministic():
    tokens, sources = synthetic({"a": 300, "b": 300})
    config = cfg({"a": (0.5, 1.5), "b": (0.5, 1.0)})
    one, _ = plan_copies(tokens, sources, config, seed=3)
    again, _ = plan_copies(tokens, sources, config, seed=3)
    other, _ = plan_copies(tokens, sources, config, seed=4)
    assert np.array_equal(one, again) and not np.array_equal(one, other)


def test_total_beyond_an_epoch_limit_is_an_error():
    tokens, sources = synthetic({"a": 100, "b": 100})
    with pytest.raises(MixtureError, match="epochs of group 'a'"):
        plan_copies(tokens, sources, cfg({"a": (0.5, 1.0), "b": (0.5, None)}, total_tokens=10**9), seed=0)


def test_unlisted_and_missing_sources():
    tokens, sources = synthetic({"a": 100, "b": 100, "stray": 10})
    with pytest.raises(MixtureError, match="stray"):
        plan_copies(tokens, sources, cfg({"a": (0.5, 1.0), "b": (0.5, 1.0)}), seed=0)
    copies, ledger = plan_copies(tokens, sources, cfg({"a": (0.5, 1.0), "b": (0.5, 1.0)}, unlisted="drop"), seed=0)
    assert not copies[sources == "stray"].any()
    assert ledger["unlisted_sources_dropped_tokens"] == {"stray": int(tokens[sources == "stray"].sum())}
    with pytest.raises(MixtureError, match="no documents for group"):
        plan_copies(tokens, sources, cfg({"a": (0.5, 1.0), "nothing": (0.5, 1.0)}, unlisted="drop"), seed=0)


def test_config_needs_a_bound():
    with pytest.raises(ValueError, match="epochs"):
        cfg({"a": (1.0, None)})
    with pytest.raises(ValueError):
        MixtureConfig.model_validate({"sources": {"a": {"weight": 0}}})


# -- through the pipeline ----------------------------------------------------------------------------


def write_sources(path: Path, sizes: dict[str, int], seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    words = "the a data pipeline token model web book code wiki science answer question 数据 模型".split()
    rows = [(s, i) for s, n in sizes.items() for i in range(n)]
    with open(path, "w", encoding="utf-8") as f:
        for k in rng.permutation(len(rows)):
            s, i = rows[k]
            text = f"{s} {i} " + " ".join(rng.choice(words, size=int(rng.integers(3, 80))))
            f.write(json.dumps({"id": f"{s}-{i}", "source": s, "text": text}, ensure_ascii=False) + "\n")
    return path


def run(tmp_path: Path, mixture: dict, pack: dict, special=(EOS_TOKEN,)) -> Path:
    src = write_sources(tmp_path / "mix.jsonl", {"web": 120, "wiki": 30, "code": 40, "books": 10})
    config = {"input": {"path": str(src)}, "output": str(tmp_path / "run"), "device": "cpu", "seed": 5,
              "executor": {"kind": "local", "partition_docs": 37},
              "stages": [{"tokenize": {"vocab_size": 400, "min_frequency": 0, "special_tokens": list(special)}},
                         {"mixture": mixture}, {"pack": pack}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    assert main(["run", str(tmp_path / "c.yaml")]) == 0
    return tmp_path / "run"


MIX = {"sources": {"web": {"weight": 0.6, "epochs": 1.0}, "wiki": {"weight": 0.2, "epochs": 2.5},
                   "code": {"weight": 0.15, "epochs": 1.0}, "books": {"weight": 0.05, "epochs": 3.0}}}


def test_pipeline_ledger_matches_config(tmp_path, registered):
    out = run(tmp_path, MIX, {"seq_len": 64, "blocks_per_shard": 8, "megatron": True})
    manifest = json.loads((out / "shards" / "manifest.json").read_text())
    ledger = manifest["mixture"]
    assert ledger == json.loads((out / "stages" / "02-mixture" / "mixture.json").read_text())
    assert_ledger_matches(ledger, MixtureConfig.model_validate(MIX))
    assert manifest["tokens_per_source"] == {k: r["tokens"] for k, r in ledger["sources"].items()}
    assert manifest["documents_packed"] == ledger["documents"] == manifest["megatron"]["documents"]
    stats = json.loads((out / "stats.json").read_text())
    assert check_conservation(stats["stages"]) == [] and stats["conservation_ok"]
    mix = stats["stages"][2]
    assert mix["removed"].get("mixture_downsampled", 0) == mix["docs_in"] - mix["docs_out"]
    assert mix["extra"]["tokens_wiki"] == ledger["sources"]["wiki"]["tokens"]
    assert main(["verify", str(out / "shards")]) == 0


def test_pipeline_repeats_come_in_passes_of_input_order(tmp_path, registered):
    out = run(tmp_path, MIX, {"seq_len": 64, "megatron": True})
    parts = part_paths(out / "stages" / "02-mixture")
    table = pa.concat_tables([pq.read_table(p, columns=["tokens", "copies"]) for p in parts])
    docs, copies = table.column("tokens").to_pylist(), table.column("copies").to_pylist()
    expected = [d for p in range(1, max(copies) + 1) for d, c in zip(docs, copies) if c >= p]
    _, seqs = read_megatron(out / "shards" / "megatron" / "data")
    assert [s[:-1].tolist() for s in seqs] == expected
    ledger = json.loads((out / "stages" / "02-mixture" / "mixture.json").read_text())
    assert max(copies) == ledger["passes"] >= 2  # wiki and books are up-sampled


def test_pipeline_mixture_with_bestfit(tmp_path, registered):
    out = run(tmp_path, MIX, {"seq_len": 64, "mode": "bestfit", "bestfit_window": 32},
              special=(EOS_TOKEN, PAD_TOKEN))
    m = json.loads((out / "shards" / "manifest.json").read_text())
    stream = np.concatenate([np.fromfile(out / "shards" / s["file"], dtype="<u2") for s in m["shards"]])
    assert len(unpack_documents(stream, m["eos_id"], m["pad_id"])) == m["mixture"]["documents"]
    assert m["tokens_per_source"] == {k: r["tokens"] for k, r in m["mixture"]["sources"].items()}
    assert main(["verify", str(out / "shards")]) == 0


def test_mixture_before_tokenize_fails_clearly(tmp_path, registered, monkeypatch, capsys):
    monkeypatch.setattr(stages_pkg, "REQUIRES_BEFORE", {})  # let the plan through to see the stage's own check
    monkeypatch.setattr(stages_pkg, "_check_columns", lambda *a: None)
    src = write_sources(tmp_path / "mix.jsonl", {"web": 5})
    config = {"input": {"path": str(src)}, "output": str(tmp_path / "r"), "device": "cpu",
              "stages": [{"normalize": {}}, {"mixture": {"sources": {"web": {"weight": 1}}}}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    try:   # the CLI either raises the error or prints it as one line with a failing exit code
        rc, message = main(["run", str(tmp_path / "c.yaml")]), capsys.readouterr().err
    except MixtureError as e:
        rc, message = 1, str(e)
    assert rc != 0 and "must come right after 'tokenize'" in message


def test_llama1_example_config_validates(tmp_path, registered):
    src = write_sources(tmp_path / "any.jsonl", {"web": 1})
    config = load_config(ROOT / "configs" / "llama1_mixture.yaml", overrides={"input.path": [str(src)]})
    (mixture,) = [s["mixture"] for s in config.stages if "mixture" in s]
    table = {name: (s["weight"], s["epochs"]) for name, s in mixture["sources"].items()}
    assert table == LLAMA1
    assert sum(w for w, _ in table.values()) == pytest.approx(1.0)
    names = [next(iter(s)) for s in config.stages]
    assert names[names.index("mixture") - 1] == "tokenize" and names[-1] == "pack"
