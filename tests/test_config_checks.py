"""Range and consistency checks at config time (issue #14 items 9 and 11): a bad value, a missing file, an output
path that is a file, a misspelt stage or key stop `gpupipe run` with exit 2 and a message naming the file and the
key, before any work (no run directory is made), instead of a traceback after upstream stages have run."""

from pathlib import Path

import pytest
import yaml

from gpupipe.cli import main
from gpupipe.config_base import ConfigError, did_you_mean
from gpupipe.config import load_config, validate_config
from gpupipe.stages.filters.langid import default_model_path, model_languages
from gpupipe.stages.filters.model_quality import zero_filled_allocations
from gpupipe.tokens.tokenizer import save_tokenizer, train_byte_level_bpe

ROOT = Path(__file__).resolve().parent.parent
TEXT = "The quick brown fox jumps over the lazy dog near the quiet river bank. " * 3


@pytest.fixture
def src(tmp_path) -> str:
    p = tmp_path / "in.jsonl"
    p.write_text("".join(f'{{"text": "{TEXT} {i}"}}\n' for i in range(5)))
    return str(p)


def config(tmp_path, src, stages, **top) -> dict:
    return {"input": {"path": src}, "output": str(tmp_path / "run"), "stages": stages, **top}


class Stderr(str):
    """What the CLI printed: it wraps long lines (at spaces, or inside long words), so `in` ignores whitespace."""

    def __contains__(self, needle: str) -> bool:
        return "".join(needle.split()) in "".join(self.split())


def rejected(tmp_path, cfg: dict, capsys, output_exists: bool = False) -> Stderr:
    """Runs `gpupipe run` on cfg written to a file; asserts exit 2, the file named and no work done (no run
    directory made, unless the test made the output path itself); returns what it printed on stderr."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert main(["run", str(path)]) == 2
    err = Stderr(capsys.readouterr().err)
    assert f"{path}: " in err
    assert not (Path(cfg["output"]) / "stages").exists(), "no work may start on a bad config"
    assert output_exists or not Path(cfg["output"]).exists(), "no work may start on a bad config"
    return err


TOKENIZE_PACK = [{"tokenize": {"vocab_size": 300}}, {"pack": {"seq_len": 16, "blocks_per_shard": 4}}]


def _with(stages: list[dict], i: int, name: str, **params) -> list[dict]:
    out = [dict(s) for s in stages]
    out[i] = {name: {**out[i][name], **params}}
    return out


@pytest.mark.parametrize("stages, needle", [
    # pack and tokenize
    (_with(TOKENIZE_PACK, 1, "pack", seq_len=1),
     "key 'stages.1.pack.seq_len': Input should be greater than or equal to 2 (got 1)"),
    (_with(TOKENIZE_PACK, 1, "pack", blocks_per_shard=0),
     "key 'stages.1.pack.blocks_per_shard': Input should be greater than or equal to 1 (got 0)"),
    (_with(TOKENIZE_PACK, 0, "tokenize", vocab_size=256),
     "key 'stages.0.tokenize.vocab_size': vocab_size 256 is below the 256 byte tokens + 1 special tokens = 257"),
    (_with(TOKENIZE_PACK, 0, "tokenize", vocab_size=257, special_tokens=["<|endoftext|>", "<|pad|>"]),
     "key 'stages.0.tokenize.vocab_size': vocab_size 257 is below the 256 byte tokens + 2 special tokens = 258"),
    (_with(TOKENIZE_PACK, 0, "tokenize", special_tokens=["<|pad|>"]),
     "key 'stages.0.tokenize.eos_token': '<|endoftext|>' is not one of special_tokens ['<|pad|>']"),
    (_with(TOKENIZE_PACK, 0, "tokenize", special_tokens=["<|endoftext|>", "<|endoftext|>"]),
     "key 'stages.0.tokenize.special_tokens': special tokens must be distinct"),
    (_with(TOKENIZE_PACK, 1, "pack", mode="bestfit"),
     "key 'stages.1.pack.pad_token': '<|pad|>' is not in the vocabulary of the tokenize stage (stages.0): "
     "add it to 'stages.0.tokenize.special_tokens'"),
    (_with(TOKENIZE_PACK, 1, "pack", eos_token="</s>"),
     "key 'stages.1.pack.eos_token': '</s>' is not in the vocabulary of the tokenize stage (stages.0)"),
    (_with(TOKENIZE_PACK, 1, "pack", mode="bestfit", pad_token="<|endoftext|>"),
     "key 'stages.1.pack.pad_token': bestfit pads with a token of its own, not EOS"),
    # fuzzy dedup
    ([{"fuzzy_dedup": {"num_perm": 0}}],
     "key 'stages.0.fuzzy_dedup.num_perm': Input should be greater than or equal to 1 (got 0)"),
    ([{"fuzzy_dedup": {"num_perm": 1 << 17, "bands": 10, "rows": 10}}],
     "key 'stages.0.fuzzy_dedup.num_perm': Input should be less than or equal to 65536"),
    ([{"fuzzy_dedup": {"num_perm": 8192}}],   # the bands × rows search alone would take GBs, per worker
     "key 'stages.0.fuzzy_dedup.num_perm': num_perm 8192 > 4096 needs bands and rows"),
    ([{"fuzzy_dedup": {"num_perm": 64, "bands": 9, "rows": 8}}],
     "key 'stages.0.fuzzy_dedup.bands': bands × rows = 9 × 8 = 72 exceeds num_perm 64"),
    ([{"fuzzy_dedup": {"bands": 9}}], "key 'stages.0.fuzzy_dedup.rows': give bands and rows together"),
    ([{"fuzzy_dedup": {"threshold": 1.2}}],
     "key 'stages.0.fuzzy_dedup.threshold': Input should be less than or equal to 1 (got 1.2)"),
    ([{"fuzzy_dedup": {"threshold": 0}}], "key 'stages.0.fuzzy_dedup.threshold': Input should be greater than 0"),
    ([{"fuzzy_dedup": {"fp_weight": 0, "fn_weight": 0}}],
     "key 'stages.0.fuzzy_dedup.fp_weight': fp_weight and fn_weight cannot both be 0"),
    ([{"fuzzy_dedup": {"word_k": 0}}], "key 'stages.0.fuzzy_dedup.word_k'"),
    # min ≤ max pairs and fractions
    ([{"doc_filter": {"min_words": 500, "max_words": 100}}],
     "key 'stages.0.doc_filter.min_words': min_words (500) must not exceed max_words (100)"),
    ([{"doc_filter": {"min_mean_word_length": 12}}],
     "key 'stages.0.doc_filter.min_mean_word_length': min_mean_word_length (12.0) must not exceed "
     "max_mean_word_length (10.0)"),
    ([{"doc_filter": {"cjk_fraction_skip_mean": 1.5}}],
     "key 'stages.0.doc_filter.cjk_fraction_skip_mean': Input should be less than or equal to 1 (got 1.5)"),
    ([{"quality": {"gopher_quality": {"min_words": 200, "max_words": 100}}}],
     "key 'stages.0.quality.gopher_quality.min_words': min_words (200) must not exceed max_words (100)"),
    ([{"quality": {"seed002": {"min_avg_word_length": 30}}}],
     "key 'stages.0.quality.seed002.min_avg_word_length': min_avg_word_length (30.0) must not exceed "
     "max_avg_word_length (20)"),
    ([{"quality": {"zh": {"max_chars": 50}}}],
     "key 'stages.0.quality.zh.min_chars': min_chars (100) must not exceed max_chars (50)"),
    ([{"quality": {"gopher_quality": {"min_alpha_words_ratio": 80}}}],
     "key 'stages.0.quality.gopher_quality.min_alpha_words_ratio': Input should be less than or equal to 1"),
    ([{"quality": {"gopher_repetition": {"dup_ngrams": {5: 1.5}}}}],
     "key 'stages.0.quality.gopher_repetition.dup_ngrams.5': Input should be less than or equal to 1 (got 1.5)"),
    ([{"quality": {"fineweb": {"char_duplicates_ratio": -0.1}}}],
     "key 'stages.0.quality.fineweb.char_duplicates_ratio': Input should be greater than or equal to 0"),
    ([{"quality": {"cjk_fraction": 2}}], "key 'stages.0.quality.cjk_fraction': Input should be less than or equal"),
    # language thresholds and codes
    ([{"langid": {"min_score": 1.5}}],
     "key 'stages.0.langid.min_score': Input should be less than or equal to 1 (got 1.5)"),
    ([{"langid": {"min_score": {"en": 0.8, "zh": -0.2}}}],
     "key 'stages.0.langid.min_score.zh': Input should be greater than or equal to 0 (got -0.2)"),
    ([{"langid": {"level": "paragraph", "paragraph_min_score": 1.1}}],
     "key 'stages.0.langid.paragraph_min_score': Input should be less than or equal to 1 (got 1.1)"),
    ([{"langid": {"keep": ["en", "eng", "zh-cn"]}}],
     "key 'stages.0.langid.keep': language code(s) the model lid.176.ftz does not know: 'eng' (did you mean "
     "'en'?), 'zh-cn'"),
    ([{"langid": {"min_score": {"en": 0.8, "englsh": 0.9, "default": 0.5}}}],
     "key 'stages.0.langid.min_score': language code(s) the model lid.176.ftz does not know: 'englsh'"),
    ([{"langid": {"keep": []}}], "key 'stages.0.langid.keep': an empty list keeps no document"),
    # other stages
    ([{"perplexity": {"model": "README.md", "min_perplexity": 900, "max_perplexity": 100}}],
     "key 'stages.0.perplexity.min_perplexity': min_perplexity (900.0) must not exceed max_perplexity (100.0)"),
    ([{"chunk_markdown": {"judge": {"temperature": 5}}}],
     "key 'stages.0.chunk_markdown.judge.temperature': Input should be less than or equal to 2 (got 5)"),
    ([{"chunk_markdown": {"judge": {"backoff_base_s": 60}}}],
     "key 'stages.0.chunk_markdown.judge.backoff_base_s': backoff_base_s (60.0) must not exceed backoff_max_s"),
])
def test_out_of_range_and_inconsistent_values(tmp_path, src, capsys, stages, needle):
    assert needle in rejected(tmp_path, config(tmp_path, src, stages), capsys)


def test_negative_seed(tmp_path, src, capsys):
    err = rejected(tmp_path, config(tmp_path, src, [{"normalize": {}}], seed=-1), capsys)
    assert "key 'seed': Input should be greater than or equal to 0 (got -1)" in err


@pytest.mark.parametrize("stage, key", [
    ({"tokenize": {"tokenizer": "tok.json"}}, "tokenize.tokenizer"),
    ({"decontaminate": {"index": "bench.index.parquet"}}, "decontaminate.index"),
    ({"langid": {"model": "lid.bin"}}, "langid.model"),
    ({"quality_classifier": {"model": "hq.bin"}}, "quality_classifier.model"),
    ({"perplexity": {"model": "en.arpa", "max_perplexity": 1000}}, "perplexity.model"),
])
def test_missing_referenced_file(tmp_path, src, capsys, stage, key):
    (name, params), = stage.items()
    missing = next(v for k, v in params.items() if k in ("tokenizer", "index", "model"))
    stages = [{"normalize": {}}, stage] + ([{"pack": {}}] if name == "tokenize" else [])
    err = rejected(tmp_path, config(tmp_path, src, stages), capsys)
    assert f"key 'stages.1.{key}': file not found: {missing}" in err


def test_missing_perplexity_reference(tmp_path, src, capsys):
    stage = {"perplexity": {"model": "README.md", "high_percentile": 95, "reference": "sample.jsonl"}}
    err = rejected(tmp_path, config(tmp_path, src, [stage]), capsys)
    assert "key 'stages.0.perplexity.reference': file not found: sample.jsonl" in err


def test_output_that_is_a_file(tmp_path, src, capsys):
    output = tmp_path / "run"
    output.write_text("not a folder")
    err = rejected(tmp_path, config(tmp_path, src, [{"normalize": {}}]), capsys, output_exists=True)
    assert f"key 'output': the run directory {output} is a file, not a folder" in err
    assert output.read_text() == "not a folder"


def test_output_inside_a_file(tmp_path, src, capsys):
    blocker = tmp_path / "runs"
    blocker.write_text("")
    cfg = config(tmp_path, src, [{"normalize": {}}], output=str(blocker / "default"))
    err = rejected(tmp_path, cfg, capsys)
    assert f"key 'output': the run directory {blocker / 'default'} is inside {blocker}, which is a file" in err


@pytest.mark.parametrize("mutate, needle", [
    (lambda c: c["stages"].insert(1, {"fuzy_dedup": {}}),
     "key 'stages.1': unknown stage 'fuzy_dedup' (did you mean 'fuzzy_dedup'?)"),
    (lambda c: c["stages"][0].update(normalize={"from": "NFC"}),
     "unknown key 'stages.0.normalize.from' (did you mean 'form'?)"),
    (lambda c: c["stages"].append({"doc_filter": {"min_word": 50}}),
     "unknown key 'stages.1.doc_filter.min_word' (did you mean 'min_words'?)"),
    (lambda c: c["stages"].append({"quality": {"c4": {"min_words_per_lin": 3}}}),
     "unknown key 'stages.1.quality.c4.min_words_per_lin' (did you mean 'min_words_per_line'?)"),
    (lambda c: c["stages"].append({"quality": {"gopher_qualty": {}}}),
     "unknown key 'stages.1.quality.gopher_qualty' (did you mean 'gopher_quality'?)"),
    (lambda c: c.update(ouput="runs/x"), "unknown key 'ouput' (did you mean 'output'?)"),
    (lambda c: c.update(executor={"worker": 4}), "unknown key 'executor.worker' (did you mean 'workers'?)"),
    (lambda c: c.update(executor={"gpu": {"rmm_pool": "60GB"}}),
     "unknown key 'executor.gpu.rmm_pool' (did you mean 'rmm_pool_size'?)"),
    (lambda c: c["input"].update(text_feild="body"), "unknown key 'input.text_feild' (did you mean 'text_field'?)"),
])
def test_did_you_mean(tmp_path, src, capsys, mutate, needle):
    cfg = config(tmp_path, src, [{"normalize": {}}])
    mutate(cfg)
    assert needle in rejected(tmp_path, cfg, capsys)


def test_mixture_source_key_suggestion(tmp_path, src, capsys):
    stages = [{"tokenize": {"vocab_size": 300}},
              {"mixture": {"sources": {"web": {"weight": 1.0, "epoch": 2}}}}, {"pack": {}}]
    err = rejected(tmp_path, config(tmp_path, src, stages), capsys)
    assert "unknown key 'stages.1.mixture.sources.web.epoch' (did you mean 'epochs'?)" in err


def test_no_suggestion_when_nothing_is_close(tmp_path, src, capsys):
    cfg = config(tmp_path, src, [{"frobnicate": {}}, {"normalize": {"zzz": 1}}])
    err = rejected(tmp_path, cfg, capsys)
    assert "unknown stage 'frobnicate' (known: " in err and "did you mean" not in err
    assert did_you_mean("zzz", ["form", "keep_paragraphs"]) == ""
    assert did_you_mean("zn", ["zh", "mzn", "ar"], n=3, cutoff=0.5) == " (did you mean 'mzn' or 'zh'?)"


def test_value_of_none_of_a_unions_types_is_one_line(tmp_path, src, capsys):
    err = rejected(tmp_path, config(tmp_path, src, [{"langid": {"min_score": "high"}}]), capsys)
    assert err.count("stages.0.langid.min_score") == 1
    assert "key 'stages.0.langid.min_score': Input should be a valid number" in err
    assert "or Input should be a valid dictionary; or Input should be 'fineweb2' (got 'high')" in err
    assert "constrained-float" not in err


def test_bounds_themselves_are_accepted(tmp_path, src):
    stages = [{"langid": {"keep": ["en", "zh"], "min_score": {"en": 1.0, "zh": 0.0, "default": 0.5}}},
              {"doc_filter": {"min_words": 10, "max_words": 10, "cjk_fraction_skip_mean": 1.0}},
              {"quality": {"gopher_quality": {"min_words": None, "max_words": 5, "max_bullet_lines_ratio": 1.0},
                           "fineweb": {"new_line_ratio": 3.0}}},
              {"fuzzy_dedup": {"threshold": 1.0, "num_perm": 120, "bands": 12, "rows": 10}},
              {"fuzzy_dedup": {"num_perm": 8192, "bands": 512, "rows": 16}},
              {"tokenize": {"vocab_size": 258, "special_tokens": ["<|endoftext|>", "<|pad|>"]}},
              {"pack": {"seq_len": 2, "blocks_per_shard": 1, "mode": "bestfit"}}]
    cfg = validate_config(config(tmp_path, src, stages), "ok.yaml")
    assert cfg.stages[3]["fuzzy_dedup"]["bands"] == 12 and cfg.stages[4]["fuzzy_dedup"]["num_perm"] == 8192
    assert not (tmp_path / "run").exists()


def test_shipped_configs_validate(tmp_path, src):
    index = tmp_path / "benchmark.index.parquet"
    index.write_bytes(b"stand-in: only its existence is checked at config time")
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        raw["input"]["path"] = src
        raw["output"] = str(tmp_path / "run")
        for stage in raw["stages"]:
            if "decontaminate" in stage:
                stage["decontaminate"]["index"] = str(index)
        validate_config(raw, str(path))


def test_language_codes_come_from_the_model(tmp_path, src, capsys):
    """lid.176's 176 codes; a custom LID model's own labels replace them."""
    codes = model_languages(default_model_path())
    assert len(codes) == 176 and {"en", "zh", "fr", "de", "es", "ru", "ja", "ko", "yue", "wuu"} <= codes
    import fasttext

    train = tmp_path / "train.txt"
    train.write_text("".join(f"__label__{lab} {word} {word} {i}\n" for i in range(20)
                             for lab, word in (("aa", "alpha"), ("bb", "beta"))))
    model = tmp_path / "two.bin"
    with zero_filled_allocations():  # fastText reads uninitialised memory otherwise (model_quality.py)
        ft = fasttext.train_supervised(input=str(train), epoch=1, dim=4, minCount=1, thread=1, bucket=1000,
                                       loss="softmax", verbose=0)
    ft.save_model(str(model))
    assert model_languages(str(model)) == {"aa", "bb"}
    validate_config(config(tmp_path, src, [{"langid": {"model": str(model), "keep": ["aa"]}}]), "ok.yaml")
    err = rejected(tmp_path, config(tmp_path, src, [{"langid": {"model": str(model), "keep": ["aa", "en"]}}]),
                   capsys)
    assert "key 'stages.0.langid.keep': language code(s) the model two.bin does not know: 'en'" in err


def test_a_langid_model_that_is_not_fasttext(tmp_path, src, capsys):
    bogus = tmp_path / "lid.bin"
    bogus.write_text("not a model")
    err = rejected(tmp_path, config(tmp_path, src, [{"langid": {"model": str(bogus), "keep": ["en"]}}]), capsys)
    assert f"key 'stages.0.langid.model': not a fastText model: {bogus}" in err


def test_tokens_checked_against_a_given_tokenizer(tmp_path, src, capsys):
    tok = tmp_path / "tok.json"
    save_tokenizer(train_byte_level_bpe([TEXT] * 4, 300, ["<|endoftext|>"]), tok)
    ok = [{"tokenize": {"tokenizer": str(tok)}}, {"pack": {"seq_len": 16}}]
    validate_config(config(tmp_path, src, ok), "ok.yaml")

    stages = [{"tokenize": {"tokenizer": str(tok)}}, {"pack": {"seq_len": 16, "mode": "bestfit"}}]
    err = rejected(tmp_path, config(tmp_path, src, stages), capsys)
    assert (f"key 'stages.1.pack.pad_token': '<|pad|>' is not in the vocabulary of the tokenize stage (stages.0): "
            f"the tokenizer {tok} lacks it") in err

    stages = [{"tokenize": {"tokenizer": str(tok), "eos_token": "</s>"}}, {"pack": {"eos_token": "</s>"}}]
    err = rejected(tmp_path, config(tmp_path, src, stages), capsys)
    assert f"key 'stages.0.tokenize.eos_token': '</s>' is not in the vocabulary of {tok}" in err

    tok.write_text("{not json")
    err = rejected(tmp_path, config(tmp_path, src, ok), capsys)
    assert "key 'stages.0.tokenize.tokenizer': not a valid tokenizers JSON file" in err


def test_load_config_raises_config_error(tmp_path, src):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, src, [{"fuzzy_dedup": {"threshold": 2}}])))
    with pytest.raises(ConfigError, match=r"bad\.yaml: key 'stages\.0\.fuzzy_dedup\.threshold'"):
        load_config(path)
