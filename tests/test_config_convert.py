"""Seed 002's `datapipe_config.yaml` template: `gpupipe config convert` prints the gpupipe config it maps to (every
key mapped or named as ignored), and `gpupipe run` accepts the template as written through the same translation."""

import json
import logging

import pytest
import yaml

from gpupipe.cli import main
from gpupipe.config import load_config, validate_config
from gpupipe.config_base import ConfigError
from gpupipe.config_convert import from_template, is_template

# Seed 002's appendix, as written (blank lines with trailing spaces and the Chinese comment included).
TEMPLATE = """# datapipe_config.yaml
pipeline:
  name: "datapipe-v2.0"
  version: "2.0.0"
  
stages:
  extraction:
    tool: trafilatura
    min_content_length: 200
    
  language_detection:
    model: fasttext-lid-176
    languages:
      zh: {min_confidence: 0.65}
      en: {min_confidence: 0.80}
      
  deduplication:
    url_dedup: true
    minhash:
      enabled: true
      num_perm: 128
      threshold: 0.8
    suffix_array:
      enabled: true
      min_length: 200
      
  quality_filter:
    perplexity:
      model: kenlm-wiki
      range: [5, 95]  # percentile
    classifier:
      model: deberta-v3-small-quality
      threshold: 0.5
      
  output:
    format: parquet
    compression: zstd
    tokenizer: null  # 可选预 tokenize
"""

EXPECTED_STAGES = [{"extract": {"extractor": "trafilatura", "min_content_length": 200}},
                   {"langid": {"keep": ["zh", "en"], "min_score": {"zh": 0.65, "en": 0.8}}},
                   {"url_dedup": {}}, {"fuzzy_dedup": {"num_perm": 128, "threshold": 0.8}},
                   {"substring_dedup": {"min_length": 200}}]


def _leaves(node, prefix=""):
    """Dotted paths of the template's keys down to the level the notes speak of (a stage's own keys)."""
    for k, v in node.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and path.count(".") < 2 and k not in ("languages", "minhash", "suffix_array",
                                                                      "perplexity", "classifier"):
            yield from _leaves(v, path + ".")
        else:
            yield path


@pytest.fixture
def template(tmp_path):
    path = tmp_path / "datapipe_config.yaml"
    path.write_text(TEMPLATE, encoding="utf-8")
    return path


def test_convert_prints_the_mapped_config_and_a_note_per_key(template, capsys):
    assert main(["config", "convert", str(template)]) == 0
    text = capsys.readouterr().out
    cfg = yaml.safe_load(text)
    assert cfg["stages"] == EXPECTED_STAGES and cfg["output"] == "runs/datapipe-v2.0"
    notes = [line[4:] for line in text.splitlines() if line.startswith("#   ")]
    keys = list(_leaves(yaml.safe_load(TEMPLATE)))
    assert len(keys) == 14
    for key in keys:   # every template key is named, mapped or ignored with its reason
        assert any(n.startswith(key + ":") for n in notes), key
    said = dict(n.split(": ", 1) for n in notes)
    assert "fuzzy_dedup" in said["stages.deduplication.minhash"]
    assert "substring_dedup" in said["stages.deduplication.suffix_array"]
    assert "extract.min_content_length: 200" in said["stages.extraction.min_content_length"]
    for key, model in (("perplexity", "kenlm-wiki"), ("classifier", "deberta-v3-small-quality")):
        assert said[f"stages.quality_filter.{key}"].startswith(f"left out: the model '{model}' is not a")
        assert "Provide" in said[f"stages.quality_filter.{key}"]
    # what it prints is a config gpupipe accepts once the input is named
    cfg["input"] = {"path": str(template)}
    cfg["output"] = str(template.parent / "out")
    assert [next(iter(s)) for s in validate_config(cfg, "printed").stages] == [next(iter(s)) for s in EXPECTED_STAGES]


def test_a_model_found_beside_the_template_keeps_its_stage(tmp_path):
    (tmp_path / "kenlm-wiki").write_text("not read here")
    (tmp_path / "deberta-v3-small-quality").mkdir()
    cfg, notes = from_template(yaml.safe_load(TEMPLATE), "t.yaml", tmp_path)
    assert cfg["stages"][-2:] == [
        {"perplexity": {"model": str(tmp_path / "kenlm-wiki"), "low_percentile": 5, "high_percentile": 95}},
        {"classifier": {"model": str(tmp_path / "deberta-v3-small-quality"), "min_score": 0.5}}]


def test_run_accepts_the_template_as_written(template, synth_crawl, tmp_path, caplog):
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="gpupipe"):
        cfg = load_config(template, {"input.path": [synth_crawl["warc"]], "output": str(out),
                                     "executor.workers": 1, "device": "cpu"})
    assert [next(iter(s)) for s in cfg.stages] == [next(iter(s)) for s in EXPECTED_STAGES]
    assert any("kenlm-wiki" in r.getMessage() for r in caplog.records)
    assert main(["run", str(template), "--input", synth_crawl["warc"], "--output", str(out), "--device", "cpu",
                 "--workers", "1"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert [s["name"] for s in stats["stages"]][1:] == [next(iter(s)) for s in EXPECTED_STAGES]
    assert stats["stages"][-1]["docs_out"] > 0


def test_template_mistakes_are_refused_before_any_work(template, tmp_path, capsys):
    assert is_template(yaml.safe_load(TEMPLATE)) and not is_template({"stages": [], "input": {}})
    with pytest.raises(ConfigError, match="names no input"):
        load_config(template)
    bad = yaml.safe_load(TEMPLATE)
    bad["stages"]["deduplication"]["minhash"]["thresold"] = 0.7
    with pytest.raises(ConfigError, match=r"stages\.deduplication\.minhash\.thresold.*not a key"):
        from_template(bad, "t.yaml")
    bad = yaml.safe_load(TEMPLATE)
    bad["stages"]["extraction"]["tool"] = "boilerpipe"
    with pytest.raises(ConfigError, match="boilerpipe"):
        from_template(bad, "t.yaml")
    assert main(["config", "convert", str(tmp_path / "missing.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_convert_reads_the_file_as_run_does(tmp_path):
    """Duplicate keys are refused by `config convert` as by `gpupipe run` (one YAML reader for both)."""
    import pytest

    from gpupipe.config_base import ConfigError
    from gpupipe.config_convert import convert_main

    f = tmp_path / "t.yaml"
    f.write_text("pipeline: {}\npipeline: {}\nstages: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="pipeline"):
        convert_main(str(f))


def test_jsonl_output_and_a_tiktoken_tokenizer_map_to_export_and_tokenize():
    raw = yaml.safe_load(TEMPLATE)
    raw["stages"]["output"].update(format="jsonl", tokenizer="cl100k_base")
    cfg, notes = from_template(raw, "t.yaml")
    assert cfg["stages"][-1] == {"tokenize": {"tokenizer": "cl100k_base"}}
    assert any("gpupipe export RUN --format jsonl" in n for n in notes)
    raw["stages"]["output"]["format"] = "csv"
    with pytest.raises(ConfigError, match="export --format jsonl"):
        from_template(raw, "t.yaml")
