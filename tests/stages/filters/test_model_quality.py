"""Model-based quality: a fastText classifier the tests train, and a KenLM perplexity filter on a hand-written ARPA."""

import argparse
import ctypes
import gzip
import importlib.util
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from gpupipe.stages.base import RunContext
from gpupipe.stages.filters.model_quality import (
    M_PERTURB, PerplexityConfig, PerplexityFilter, QualityClassifier, QualityClassifierConfig, add_train_quality_parser,
    fasttext_texts, lm_normalize, load_fasttext, perplexity_histogram, read_texts, score_histogram, train_quality_classifier)

needs_kenlm = pytest.mark.skipif(importlib.util.find_spec("kenlm") is None,
                                 reason="kenlm not installed (pip install kenlm)")

# ----------------------------------------------------------------------------- generated training data

_NOUNS = ("river", "library", "teacher", "garden", "city", "scientist", "village", "museum", "engine", "forest",
          "student", "bridge", "market", "harbor", "mountain", "painter", "council", "orchard", "theory", "school")
_ADJS = ("old", "quiet", "busy", "famous", "small", "ancient", "modern", "careful", "bright", "local")
_VERBS = ("describes", "visits", "protects", "explains", "supports", "follows", "improves", "studies", "builds")
_LINKS = ("However,", "In addition,", "For example,", "Over time,", "As a result,", "Later,", "In many cases,")
_SPAM = ("buy", "cheap", "free", "casino", "viagra", "discount", "download", "click", "best", "price", "win",
         "bonus", "loans", "crypto", "deal", "now", "online", "sale", "followers", "replica")
_NAV = ("Home", "Login", "Register", "Contact", "About", "Cart", "Sitemap", "Privacy", "FAQ", "Next")


def good_doc(rng: random.Random) -> str:
    def sentence() -> str:
        s = (f"the {rng.choice(_ADJS)} {rng.choice(_NOUNS)} {rng.choice(_VERBS)} the {rng.choice(_NOUNS)} "
             f"near the {rng.choice(_ADJS)} {rng.choice(_NOUNS)}.")
        return f"{rng.choice(_LINKS)} {s}" if rng.random() < 0.4 else s[0].upper() + s[1:]
    return "\n\n".join(" ".join(sentence() for _ in range(rng.randint(3, 6))) for _ in range(rng.randint(1, 3)))


def bad_doc(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:  # keyword stuffing
        return " ".join(rng.choice(_SPAM).upper() if rng.random() < 0.3 else rng.choice(_SPAM)
                        for _ in range(rng.randint(15, 40)))
    if kind < 0.7:  # link lists
        return "\n".join(f"http://{rng.choice(_SPAM)}-{rng.randint(1, 999)}.com/{rng.choice(_SPAM)}"
                         f"?id={rng.randint(1, 9999)}" for _ in range(rng.randint(5, 15)))
    return " | ".join(rng.choice(_NAV) for _ in range(rng.randint(8, 20)))  # navigation bars


def docs(make, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [make(rng) for _ in range(n)]


@pytest.fixture(scope="module")
def training_files(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("quality-train")
    pos, neg = d / "good.jsonl.gz", d / "bad.txt"
    with gzip.open(pos, "wt", encoding="utf-8") as f:
        for i, t in enumerate(docs(good_doc, 200, seed=1)):
            f.write(json.dumps({"id": f"g{i}", "content": t}) + "\n")
    # plain text: one document per line (link lists folded onto one line)
    neg.write_text("\n".join(t.replace("\n", " ") for t in docs(bad_doc, 200, seed=2)) + "\n", encoding="utf-8")
    return {"positive": str(pos), "negative": str(neg), "dir": d}


SMALL = {"bucket": 20_000, "dim": 16, "epochs": 10}  # a small model: fast to train and to save


@pytest.fixture(scope="module")
def trained(training_files) -> dict:
    out = str(training_files["dir"] / "quality.bin")
    info = train_quality_classifier(training_files["positive"], training_files["negative"], out,
                                    text_field="content", seed=0, **SMALL)
    return {"model": out, "info": info}


def classifier(model: str, **cfg) -> QualityClassifier:
    stage = QualityClassifier(QualityClassifierConfig(model=model, **cfg), RunContext())
    stage.setup()
    return stage


def frame(texts: list[str], **cols) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))], "text": texts, **cols})


# ----------------------------------------------------------------------------- fastText: text preparation, input files

def test_fasttext_texts_fold_whitespace_lower_case_and_truncate():
    assert fasttext_texts(["Hello\nWORLD\u00a0 a\u2028b\tc  ", None]) == ["hello world a b c", ""]
    assert fasttext_texts(["Élan Vital"], max_chars=4) == ["élan"]


def test_read_texts_jsonl_plain_and_gzip(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\nnot json\n{"text": ""}\n{"text": "two"}\n')
    assert read_texts(tmp_path / "a.jsonl") == (["one", "two"], 2)
    (tmp_path / "b.txt").write_text("first doc\n\n  \nsecond doc\r\n")
    assert read_texts(tmp_path / "b.txt") == (["first doc", "second doc"], 0)
    with gzip.open(tmp_path / "c.txt.gz", "wt") as f:
        f.write("zipped\n")
    assert read_texts(tmp_path / "c.txt.gz") == (["zipped"], 0)


# ----------------------------------------------------------------------------- fastText: training

def test_training_validates_well_and_writes_sidecar(trained):
    info = trained["info"]
    v = info["validation"]
    assert v["docs"] == 40 and v["f1"] > 0.9 and v["precision"] > 0.9 and v["recall"] > 0.9
    side = json.loads(open(trained["model"] + ".json").read())
    assert side["counts"]["positive"] == {"records": 200, "used": 200, "skipped": 0}
    assert side["counts"]["train"] == 360 and side["counts"]["valid"] == 40
    assert side["params"]["thread"] == 1 and side["params"]["wordNgrams"] == 2 and side["params"]["seed"] == 0
    assert side["labels"] == {"positive": "__label__hq", "negative": "__label__lq"}


def test_training_is_deterministic_with_one_thread(training_files, trained, tmp_path):
    again = train_quality_classifier(training_files["positive"], training_files["negative"], str(tmp_path / "m.bin"),
                                     text_field="content", seed=0, **SMALL)
    assert again["sha256"] == trained["info"]["sha256"]


def test_training_survives_a_dirty_heap(training_files, trained, tmp_path):
    """fastText 0.9.3 trains from uninitialized memory; the trainer zero-fills it (zero_filled_allocations)."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        pytest.skip("needs glibc's mallopt")
    mallopt(M_PERTURB, 1)  # malloc now hands out 0xFE bytes (huge floats), as a busy heap might
    try:
        again = train_quality_classifier(training_files["positive"], training_files["negative"],
                                         str(tmp_path / "m.bin"), text_field="content", seed=0, **SMALL)
    finally:
        mallopt(M_PERTURB, 0)
    assert again["sha256"] == trained["info"]["sha256"]


def test_training_refuses_an_empty_class(training_files, tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="no negative documents"):
        train_quality_classifier(training_files["positive"], str(tmp_path / "empty.txt"), str(tmp_path / "m.bin"),
                                 text_field="content", **SMALL)


def test_cli_handler(training_files, tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="gpupipe")
    add_train_quality_parser(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "cli.bin"
    args = parser.parse_args(["train-quality", "--positive", training_files["positive"], "--negative",
                              training_files["negative"], "--out", str(out), "--text-field", "content",
                              "--epochs", "10", "--dim", "16", "--bucket", "20000", "--valid-fraction", "0.2",
                              "--seed", "3"])
    assert args.fn(args) == 0
    printed = capsys.readouterr().out
    assert "validation (80 held-out documents)" in printed and "F1" in printed
    side = json.loads((tmp_path / "cli.bin.json").read_text())
    assert side["params"]["seed"] == 3 and side["params"]["valid_fraction"] == 0.2 and out.exists()

    bad = parser.parse_args(["train-quality", "--positive", str(tmp_path / "missing.txt"), "--negative",
                             training_files["negative"], "--out", str(tmp_path / "x.bin")])
    assert bad.fn(bad) == 2
    assert "error:" in capsys.readouterr().err


# ----------------------------------------------------------------------------- fastText: the stage

def test_stage_keeps_held_out_positives_and_drops_negatives(trained):
    good, bad = docs(good_doc, 50, seed=11), docs(bad_doc, 50, seed=12)
    stage = classifier(trained["model"])
    kept, rejects, stats = stage.run_partition(frame(good + bad))
    assert set(kept["text"]) == set(good)
    assert set(rejects["text"]) == set(bad) and set(rejects["reason"]) == {"low_quality_score"}
    assert stats.removed == {"low_quality_score": 50} and stats.docs_out == 50
    assert kept["quality_score"].between(0.5, 1.0).all() and rejects["quality_score"].between(0.0, 0.5).all()
    # the histogram covers every document, kept and removed
    assert sum(v for k, v in stats.extra.items() if k.startswith("score_bin_")) == 100
    assert stats.extra["score_bin_0.9"] > 0 and stats.extra["score_bin_0.0"] > 0


def test_stage_threshold_is_inclusive(trained):
    df = frame(docs(bad_doc, 1, seed=13))
    score = float(classifier(trained["model"]).transform(df)["quality_score"].iloc[0])
    assert 0.0 <= score < 0.5
    kept, _, _ = classifier(trained["model"], min_score=score).run_partition(df)
    assert len(kept) == 1                                            # at the threshold: kept
    _, rejects, _ = classifier(trained["model"], min_score=score + 0.0001).run_partition(df)
    assert list(rejects["reason"]) == ["low_quality_score"]          # just above: dropped


def test_stage_empty_partition_and_bad_models(trained, tmp_path):
    kept, rejects, stats = classifier(trained["model"]).run_partition(frame([]))
    assert len(kept) == 0 and stats.docs_in == 0 and stats.extra["score_bin_0.5"] == 0
    with pytest.raises(ValueError, match="no label __label__good"):
        classifier(trained["model"], label="good")
    with pytest.raises(ValidationError, match="file not found"):  # refused when the config is read
        classifier(str(tmp_path / "missing.bin"))
    with pytest.raises(FileNotFoundError, match="train-quality"):  # and if it goes missing after that
        load_fasttext(str(tmp_path / "missing.bin"), "hq")
    with pytest.raises(ValidationError):
        QualityClassifierConfig(model="m.bin", min_score=1.5)
    with pytest.raises(ValidationError):
        QualityClassifierConfig(model="m.bin", threshold=0.5)


def run_through_worker(stage, df, tmp_path, monkeypatch) -> tuple[dict, pd.DataFrame]:
    """The pipeline's path: the stage rebuilt from its spec in a worker, setup once, a Parquet part in and out."""
    from gpupipe.io.parts import read_part, write_part
    from gpupipe.stages import STAGES
    from gpupipe.run.tasks import map_partition_task
    from tests.helpers import stage_dir

    monkeypatch.setitem(STAGES, stage.name, type(stage))  # whether or not the registry lists it yet
    write_part(df, tmp_path / "in" / "part-00000.parquet")
    stats = map_partition_task(stage.spec(), tmp_path / "in" / "part-00000.parquet", stage_dir(tmp_path / "out"))
    return stats, read_part(tmp_path / "out" / "part-00000.parquet")


def test_classifier_through_the_worker_path(trained, tmp_path, monkeypatch):
    good, bad = docs(good_doc, 5, seed=21), docs(bad_doc, 5, seed=22)
    stage = QualityClassifier(QualityClassifierConfig(model=trained["model"]), RunContext())
    stats, out = run_through_worker(stage, frame(good + bad), tmp_path, monkeypatch)
    assert stats["docs_in"] == 10 and stats["removed"] == {"low_quality_score": 5}
    assert sorted(out["text"]) == sorted(good) and "quality_score" in out.columns
    assert sum(v for k, v in stats["extra"].items() if k.startswith("score_bin_")) == 10


def test_score_histogram_bins():
    h = score_histogram(np.array([0.0, 0.05, 0.1, 0.55, 0.99, 1.0]))
    assert h["score_bin_0.0"] == 2 and h["score_bin_0.1"] == 1 and h["score_bin_0.5"] == 1
    assert h["score_bin_0.9"] == 2 and len(h) == 10


# ----------------------------------------------------------------------------- KenLM perplexity

# A hand-written bigram model. log10 P(w | v) is the bigram's value when listed, else backoff(v) + log10 P(w).
ARPA = """\\data\\
ngram 1=5
ngram 2=3

\\1-grams:
-1.0\t<unk>\t0
-99\t<s>\t-0.30103
-0.5\t</s>\t0
-0.5\tthe\t-0.2
-0.8\tcat\t-0.1

\\2-grams:
-0.2\t<s> the
-0.3\tthe cat
-0.1\tcat </s>

\\end\\
"""
# Sentence scores (log10, with <s> and </s>), by hand from the table above:
LOG10 = {
    "the cat": -0.2 - 0.3 - 0.1,                                  # all three bigrams listed
    "cat the": (-0.30103 - 0.8) + (-0.1 - 0.5) + (-0.2 - 0.5),    # every step backs off
    "the dog cat": -0.2 + (-0.2 - 1.0) + (0 - 0.8) + -0.1,        # dog is <unk> (backoff 0)
    "cat": (-0.30103 - 0.8) + -0.1,
    "the": -0.2 + (-0.2 - 0.5),
}


def pp(*lines: str) -> float:
    """CCNet document perplexity by hand: 10^(-Σ log10 p / Σ (words + 1))."""
    return 10 ** (-sum(LOG10[line] for line in lines) / sum(len(line.split()) + 1 for line in lines))


@pytest.fixture
def arpa(tmp_path) -> str:
    path = tmp_path / "tiny.arpa"
    path.write_text(ARPA)
    return str(path)


def perplexity_stage(**cfg) -> PerplexityFilter:
    stage = PerplexityFilter(PerplexityConfig(**cfg), RunContext())
    stage.setup()
    return stage


def test_lm_normalize_is_ccnets():
    assert lm_normalize("  The  CAT\t") == "the cat"
    assert lm_normalize("Café 1999，“ok”…") == 'cafe 0000,"ok"...'
    assert lm_normalize("a\x00b\x7fc — d") == "a b c - d"


@needs_kenlm
def test_perplexity_matches_hand_computation(arpa):
    texts = ["The cat\nCat the", "The cat\n\n  \nthe CAT", "the dog cat", "\n \n", "Cat"]
    out = perplexity_stage(model=arpa).transform(frame(texts))
    got = out["perplexity"].to_numpy()
    assert got[0] == pytest.approx(pp("the cat", "cat the"), abs=0.006)   # 3.16
    assert got[1] == pytest.approx(pp("the cat", "the cat"), abs=0.006)   # blank lines are not sentences: 1.58
    assert got[2] == pytest.approx(pp("the dog cat"), abs=0.006)          # 3.76
    assert math.isnan(got[3])                                           # nothing to score
    assert got[4] == pytest.approx(pp("cat"), abs=0.006)


@needs_kenlm
def test_absolute_bounds_at_the_boundary(arpa):
    df = frame(["The cat\nCat the", "\n"])
    value = float(perplexity_stage(model=arpa).transform(df)["perplexity"].iloc[0])

    def decide(**bounds):
        _, rejects, stats = perplexity_stage(model=arpa, **bounds).run_partition(df)
        return dict(zip(rejects["id"], rejects["reason"])), stats

    assert decide(max_perplexity=value)[0] == {}                               # equal: kept
    assert decide(max_perplexity=value - 0.01)[0] == {"d0": "perplexity_too_high"}
    assert decide(min_perplexity=value)[0] == {}
    assert decide(min_perplexity=value + 0.01)[0] == {"d0": "perplexity_too_low"}
    _, stats = decide(min_perplexity=value + 0.01)
    assert stats.extra["perplexity_unscored"] == 1 and stats.extra["perplexity_bin_1e0"] == 1  # unscored: kept


@needs_kenlm
def test_percentile_cutoffs_from_a_reference_sample(arpa, tmp_path):
    sample = ["the cat", "cat the", "the dog cat", "cat", "the", "The cat\nthe", "cat the\ncat"]
    ref = tmp_path / "reference.jsonl"
    ref.write_text("".join(json.dumps({"body": t}) + "\n" for t in sample))
    by_hand = [pp(*t.lower().split("\n")) for t in sample]
    lo, hi = np.percentile(by_hand, 5), np.percentile(by_hand, 95)

    stage = perplexity_stage(model=arpa, reference=str(ref), reference_text_field="body",
                             low_percentile=5, high_percentile=95)
    assert stage.min_perplexity == pytest.approx(lo, abs=0.006)
    assert stage.max_perplexity == pytest.approx(hi, abs=0.006)

    # "the cat" (1.58) is the least perplexing sample, below the 5th percentile; "cat the" (6.32) the most.
    _, rejects, stats = stage.run_partition(frame(["the cat", "cat the", "the dog cat"]))
    assert dict(zip(rejects["text"], rejects["reason"])) == {"the cat": "perplexity_too_low",
                                                              "cat the": "perplexity_too_high"}
    assert stats.docs_out == 1

    one_sided = perplexity_stage(model=arpa, reference=str(ref), reference_text_field="body", high_percentile=50)
    assert one_sided.min_perplexity == -math.inf and one_sided.max_perplexity == pytest.approx(
        np.percentile(by_hand, 50), abs=0.006)


@needs_kenlm
def test_apply_to_scores_only_the_named_languages(arpa):
    df = frame(["cat the", "cat the"], lang=["en", "zh"])
    kept, rejects, _ = perplexity_stage(model=arpa, max_perplexity=2.0, apply_to=["en"]).run_partition(df)
    assert list(rejects["lang"]) == ["en"] and list(kept["lang"]) == ["zh"] and math.isnan(kept["perplexity"][0])


@needs_kenlm
def test_perplexity_through_the_worker_path(arpa, tmp_path, monkeypatch):
    stage = PerplexityFilter(PerplexityConfig(model=arpa, max_perplexity=3.0), RunContext())
    stats, out = run_through_worker(stage, frame(["the cat", "cat the"]), tmp_path, monkeypatch)
    assert stats["removed"] == {"perplexity_too_high": 1} and list(out["text"]) == ["the cat"]


def test_perplexity_config_rules(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the model and reference named below exist (FileRef fields must)
    Path("lm.arpa").write_text("\\data\\\n")
    Path("r.jsonl").write_text('{"text": "a"}\n')
    for bad in ({"min_perplexity": 10, "low_percentile": 5, "reference": "r.jsonl"},
                {"max_perplexity": 10, "high_percentile": 95, "reference": "r.jsonl"},
                {"low_percentile": 5},                               # percentiles need a reference sample
                {"reference": "r.jsonl", "bucket_percentiles": None},  # a reference without percentiles
                {"keep_buckets": ["head"]},                          # buckets without cut points
                {"bucket_cutoffs": {"en": [90, 10]}},                # head's cut point above tail's
                {"bucket_percentiles": [60, 30], "reference": "r.jsonl"},
                {"keep_buckets": ["top"], "bucket_cutoffs": {"default": [1, 2]}},
                {"low_percentile": 90, "high_percentile": 10, "reference": "r.jsonl"},
                {"high_percentile": 101, "reference": "r.jsonl"}):
        with pytest.raises(ValidationError):
            PerplexityConfig(model="lm.arpa", **bad)
    assert PerplexityConfig(model="lm.arpa", low_percentile=5, high_percentile=95, reference="r.jsonl")
    assert PerplexityConfig(model="lm.arpa", reference="r.jsonl").buckets_from() == "reference"   # buckets alone


def test_missing_kenlm_fails_at_setup_with_the_package_name(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "kenlm", None)  # import kenlm now raises ImportError
    (tmp_path / "lm.arpa").write_text("\\data\\\n")  # exists; never read, since kenlm cannot be imported
    stage = PerplexityFilter(PerplexityConfig(model=str(tmp_path / "lm.arpa")), RunContext())
    with pytest.raises(RuntimeError, match="pip install kenlm"):
        stage.setup()


def test_perplexity_histogram():
    h = perplexity_histogram(np.array([1.5, 9.99, 10.0, 250.0, np.nan]))
    assert h == {"perplexity_bin_1e0": 2, "perplexity_bin_1e1": 1, "perplexity_bin_1e2": 1, "perplexity_unscored": 1}


@needs_kenlm
def test_ccnet_buckets_from_reference_percentiles(arpa, tmp_path):
    """Seed 001 §2.3.4: CCNet's head / middle / tail by perplexity; the cut points are CCNet's PerplexityBucket
    defaults, the 30th and 60th percentiles, of the reference sample."""
    assert PerplexityConfig.model_fields["bucket_percentiles"].default == (30.0, 60.0)
    sample = ["the cat", "cat the", "the dog cat", "cat", "the", "The cat\nthe", "cat the\ncat"]
    ref = tmp_path / "reference.jsonl"
    ref.write_text("".join(json.dumps({"text": t}) + "\n" for t in sample))
    by_hand = [pp(*t.lower().split("\n")) for t in sample]
    head, tail = np.percentile(by_hand, 30), np.percentile(by_hand, 60)
    stage = perplexity_stage(model=arpa, reference=str(ref))
    assert stage.bucket_cuts["default"] == pytest.approx((head, tail), abs=0.006)
    texts = ["the cat", "cat the", "the dog cat", "cat", "\n"]
    kept, rejects, stats = stage.run_partition(frame(texts))
    want = ["all" if t == "\n" else "head" if pp(t) < head else "middle" if pp(t) < tail else "tail"
            for t in texts]
    assert kept["perplexity_bucket"].tolist() == want and len(rejects) == 0   # labels only, nothing dropped
    assert {"head", "tail", "all"} <= set(want)
    assert stats.extra["perplexity_bucket_head"] == want.count("head")


@needs_kenlm
def test_bucket_cutoffs_per_language_and_keep_buckets(arpa):
    """Absolute cut points per language (CCNet's cutoff.csv), `default` for others; keep_buckets: [head, middle]
    (the seed: high-quality training uses head + middle) drops tail with its own reason."""
    texts = ["the cat", "cat the", "the dog cat", "cat the"]   # 1.58, 6.32, 3.76, 6.32
    df = frame(texts, lang=["en", "en", "en", "zh"])
    cuts = {"en": [2.0, 5.0], "default": [7.0, 8.0]}
    kept, rejects, stats = perplexity_stage(model=arpa, bucket_cutoffs=cuts).run_partition(df)
    assert kept["perplexity_bucket"].tolist() == ["head", "tail", "middle", "head"] and len(rejects) == 0
    kept, rejects, stats = perplexity_stage(model=arpa, bucket_cutoffs=cuts,
                                            keep_buckets=["head", "middle"]).run_partition(df)
    assert kept["text"].tolist() == ["the cat", "the dog cat", "cat the"]
    assert dict(stats.removed) == {"perplexity_tail": 1}
    assert stats.docs_in == stats.docs_out + sum(stats.removed.values())
    no_cuts = perplexity_stage(model=arpa).run_partition(df)[0]
    assert set(no_cuts["perplexity_bucket"]) == {"all"}


@needs_kenlm
def test_bucket_percentiles_per_language_of_the_reference(arpa, tmp_path):
    """CCNet's cut points are per language: a reference whose records carry `lang` gives each language with
    BUCKET_MIN_DOCS documents its own pair, and `default` (all documents) for the others."""
    from gpupipe.stages.filters.model_quality import BUCKET_MIN_DOCS

    en = ["the cat", "the cat\nthe", "the", "cat"] * 3            # low perplexities
    zh = ["cat the", "the dog cat", "cat the\ncat"] * 4            # higher ones
    ref = tmp_path / "ref.jsonl"
    ref.write_text("".join(json.dumps({"text": t, "lang": lang}) + "\n"
                           for lang, texts in (("en", en), ("zh", zh)) for t in texts)
                   + json.dumps({"text": "the cat", "lang": "fr"}) + "\n")
    assert len(en) >= BUCKET_MIN_DOCS and len(zh) >= BUCKET_MIN_DOCS
    stage = perplexity_stage(model=arpa, reference=str(ref))
    by_hand = lambda texts: tuple(np.percentile([pp(*t.lower().split("\n")) for t in texts], q) for q in (30, 60))  # noqa: E731
    assert stage.bucket_cuts["en"] == pytest.approx(by_hand(en), abs=0.006)
    assert stage.bucket_cuts["zh"] == pytest.approx(by_hand(zh), abs=0.006)
    assert stage.bucket_cuts["default"] == pytest.approx(by_hand(en + zh + ["the cat"]), abs=0.006)
    assert "fr" not in stage.bucket_cuts                          # one document: the default pair applies
    kept = stage.run_partition(frame(["cat the", "cat the"], lang=["en", "zh"]))[0]
    assert kept["perplexity_bucket"].tolist() == ["tail", "middle" if pp("cat the") < by_hand(zh)[1] else "tail"]
