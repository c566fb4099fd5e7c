"""The `classifier` stage and `gpupipe train-classifier` with real transformer models made here: a tiny BERT from a
transformers config with seeded random weights and a WordPiece tokenizer written by the test (no download)."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from gpupipe.cli import main  # noqa: E402
from gpupipe.models.encoder import Encoder, length_batches  # noqa: E402
from gpupipe.models.tiny import make_encoder  # noqa: E402
from gpupipe.stages.base import RunContext  # noqa: E402
from gpupipe.stages.filters.classifier import Classifier, ClassifierConfig  # noqa: E402

WORDS = [f"w{i}" for i in range(400)] + "the cat sat on a mat and ran far away".split()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_encoder(tmp_path_factory.mktemp("tiny") / "model", words=WORDS, max_positions=128, seed=3)


@pytest.fixture(scope="module")
def texts():
    rng = np.random.default_rng(1)
    docs = [" ".join(rng.choice(WORDS, rng.integers(1, 160))) for _ in range(60)]
    long = " ".join(rng.choice(WORDS, 200_000))                                  # ~1.3 MB: a prefix is tokenized
    spaces = "the cat " + " " * 30_000 + " ".join(rng.choice(WORDS, 300))     # the cut falls in a space run
    return docs + ["", "   ", long, spaces, "ÀÉÎ 猫 \x00 ok"]


def stage(model_dir, **kw):
    kw.setdefault("max_length", 64)
    s = Classifier(ClassifierConfig(model=str(model_dir), **kw), RunContext())
    s.setup()
    return s


def frame(texts, **cols):
    return pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))], "doc_index": np.arange(len(texts)),
                         "text": texts, **cols})


def direct(model_dir, texts, max_length, label=1):
    """What a user would write: tokenizer(text, truncation=True, max_length=...) and a forward pass, one by one."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    out = []
    with torch.inference_mode():
        for t in texts:
            logits = model(**tok(t, truncation=True, max_length=max_length, return_tensors="pt")).logits
            out.append(torch.softmax(logits.double(), -1)[0, label].item())
    return np.array(out)


def test_scores_match_a_direct_forward_pass(model_dir, texts):
    s = stage(model_dir, max_length=64)
    applied = s.apply_partition(frame(texts))
    got = applied.df["model_score"].to_numpy()
    np.testing.assert_allclose(got, direct(model_dir, texts, 64), atol=1e-5)
    assert applied.reasons is None                       # min_score null: annotate only
    ids, truncated = s._encoder.encode(texts)
    assert max(map(len, ids)) == 64 and applied.extra["docs_truncated"] == int(truncated.sum()) > 0
    assert applied.extra["model_tokens"] == sum(map(len, ids))
    assert sum(v for k, v in applied.extra.items() if k.startswith("score_bin_")) == len(texts)


def test_independent_of_batch_size_and_order(model_dir, texts):
    df = frame(texts)
    ref = stage(model_dir, max_length=64, batch_size=1).apply_partition(df).df["model_score"].to_numpy()
    for kw in ({"batch_size": 64}, {"batch_size": 7}, {"batch_tokens": 150}):
        got = stage(model_dir, max_length=64, **kw).apply_partition(df).df["model_score"].to_numpy()
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6, err_msg=str(kw))
    perm = np.random.default_rng(0).permutation(len(df))
    shuffled = stage(model_dir, max_length=64, batch_size=5).apply_partition(df.iloc[perm].reset_index(drop=True))
    np.testing.assert_allclose(shuffled.df["model_score"].to_numpy(), ref[perm], atol=1e-6)
    assert list(shuffled.df["id"]) == list(df["id"].iloc[perm])   # rows come back in input order


def test_length_batches():
    lengths = [3, 9, 1, 9, 4]
    assert [b.tolist() for b in length_batches(lengths, 2)] == [[1, 3], [4, 0], [2]]
    assert [b.tolist() for b in length_batches(lengths, 99, batch_tokens=18)] == [[1, 3], [4, 0, 2]]
    assert [b.tolist() for b in length_batches([50], 99, batch_tokens=10)] == [[0]]  # one doc at least


def test_head_tail_truncation(model_dir, texts):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    enc = Encoder(str(model_dir), max_length=32, truncation="head_tail")
    ids, truncated = enc.encode(texts)
    for t, got, cut in zip(texts, ids, truncated):
        full = tok(t, add_special_tokens=False)["input_ids"] if len(t) < 100_000 else None
        if full is None:
            continue
        want = full if len(full) <= 30 else full[:15] + full[-15:]
        assert got == [tok.cls_token_id] + want + [tok.sep_token_id]
        assert cut == (len(full) > 30)
    # the 1.3 MB document: its head and tail come from pieces, and equal those of the whole tokenization
    long = texts[-3]
    whole = tok(long, add_special_tokens=False)["input_ids"]
    assert ids[-3][1:-1] == whole[:15] + whole[-15:]


def test_apply_to_min_score_and_reasons(model_dir, texts):
    df = frame(texts, lang=["en" if i % 3 else "zh" for i in range(len(texts))])
    ref = stage(model_dir, max_length=64).apply_partition(df).df["model_score"].to_numpy()
    cut = float(np.median(ref))
    applied = stage(model_dir, max_length=64, apply_to=["en"], min_score=cut, column="edu").apply_partition(df)
    score = applied.df["edu"].to_numpy()
    en = (df["lang"] == "en").to_numpy()
    assert np.isnan(score[~en]).all() and applied.reasons[~en].isna().all()   # other languages pass unscored
    np.testing.assert_allclose(score[en], ref[en], atol=1e-6)
    why = applied.reasons[en]
    assert (why.notna() == (score[en] < cut)).all() and set(why.dropna()) == {"low_edu"}
    assert applied.extra["docs_unscored"] == int((~en).sum())
    with pytest.raises(ValueError, match="needs a `lang` column"):
        stage(model_dir, apply_to=["en"], max_length=64).apply_partition(frame(["x"]))


def test_argmax_label_names_and_regression(model_dir, tmp_path, texts):
    df = frame(texts[:10])
    arg = stage(model_dir, score="argmax", max_length=64).apply_partition(df).df
    p1 = direct(model_dir, texts[:10], 64)
    np.testing.assert_allclose(arg["model_score"], np.maximum(p1, 1 - p1), atol=1e-5)
    assert list(arg["model_score_label"]) == ["LABEL_1" if p > 0.5 else "LABEL_0" for p in p1]
    by_name = stage(model_dir, label="LABEL_0", max_length=64).apply_partition(df).df["model_score"]
    np.testing.assert_allclose(by_name, 1 - p1, atol=1e-5)
    with pytest.raises(ValueError, match="no label 'nope'"):
        stage(model_dir, label="nope")

    reg = make_encoder(tmp_path / "reg", words=WORDS, num_labels=1, problem_type="regression", max_positions=128)
    got = stage(reg, score="regression", min_score=0.0, max_length=64).apply_partition(df)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    tok, model = AutoTokenizer.from_pretrained(reg), AutoModelForSequenceClassification.from_pretrained(reg).eval()
    with torch.inference_mode():
        raw = [model(**tok(t, truncation=True, max_length=64, return_tensors="pt")).logits[0, 0].item()
               for t in texts[:10]]
    np.testing.assert_allclose(got.df["model_score"], raw, atol=1e-5)   # the raw output, FineWeb-Edu style
    assert any(k.startswith("score_bin_") for k in got.extra)
    with pytest.raises(ValueError, match="one-output model"):
        stage(model_dir, score="regression")
    with pytest.raises(ValueError, match="two labels or more"):
        stage(reg, score="label")


def test_config_checks(model_dir):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="in \\[0, 1\\]"):
        ClassifierConfig(model=str(model_dir), min_score=3)
    ClassifierConfig(model=str(model_dir), score="regression", min_score=3)   # FineWeb-Edu's threshold
    with pytest.raises(ValidationError, match="taken"):
        ClassifierConfig(model=str(model_dir), column="text")
    with pytest.raises(ValidationError, match="file not found"):
        ClassifierConfig(model="./no/such/model")
    assert ClassifierConfig(model="HuggingFaceFW/fineweb-edu-classifier").model.root.startswith("Hugging")
    with pytest.raises(ValueError, match="exceeds the model's 128 positions"):
        stage(model_dir, max_length=512)


def test_no_partition_state_on_two_threads(model_dir, tmp_path, monkeypatch):
    from tests.helpers.interleave import assert_no_partition_state, check_interleaved, write_parts

    rng = np.random.default_rng(5)
    df = frame([" ".join(rng.choice(WORDS, rng.integers(1, 80))) for _ in range(24)])
    inputs = write_parts(tmp_path / "in", [df.iloc[k::4] for k in range(4)])
    s = Classifier(ClassifierConfig(model=str(model_dir), max_length=48, min_score=0.5), RunContext())
    res = check_interleaved(s, inputs, tmp_path, monkeypatch)
    assert res["alone"]["docs_in"] == 24
    assert_no_partition_state(res["instance"], allowed=("config", "ctx", "_encoder", "_labels", "_label"))


def test_run_and_report(model_dir, tmp_path, texts):
    from gpupipe.report.html import Run, stage_signals, thresholds

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": f"d{i}", "url": f"https://ex.org/{i}", "text": t}) + "\n" for i, t in enumerate(texts[:40])))
    cut = round(float(np.median(direct(model_dir, texts[:40], 64))), 6)   # a random model: scores near 0.5
    cfg = {"input": {"path": str(data)}, "output": str(tmp_path / "run"), "device": "cpu",
           "executor": {"kind": "local", "partition_docs": 15},
           "stages": [{"classifier": {"model": str(model_dir), "max_length": 64, "min_score": cut}}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp_path / "c.yaml")]) == 0
    stats = json.loads((tmp_path / "run" / "stages" / "01-classifier" / "stats.json").read_text())
    assert stats["docs_in"] == 40 and stats["extra"]["docs_scored"] == 40
    assert 0 < stats["docs_out"] < 40 and stats["docs_out"] + stats["removed"]["low_model_score"] == 40
    run = Run.load(tmp_path / "run")
    assert thresholds("classifier", run.stage_config(1), "model_score") == [("min_score", cut)]
    sigs, _ = stage_signals(run, 1)
    assert [s.column for s in sigs] == ["model_score"] and sigs[0].thresholds == [("min_score", cut)]
    assert any(k.startswith("score_bin_") for k in stats["extra"]) and "01-classifier" in (tmp_path / "run" / "report.html").read_text()


def _separable(n, rng):
    good, bad = WORDS[:150], WORDS[150:300]
    rows = []
    for i in range(n):
        label = i % 2
        rows.append({"text": " ".join(rng.choice(good if label else bad, rng.integers(5, 30))), "label": label})
    return rows


def test_train_classifier_on_a_separable_task(model_dir, tmp_path, capsys):
    rng = np.random.default_rng(2)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _separable(240, rng)) + "not json\n")
    out = tmp_path / "trained"
    args = ["train-classifier", "--model", str(model_dir), "--data", str(data), "--out", str(out), "--epochs", "4",
            "--lr", "2e-3", "--max-length", "48", "--valid-fraction", "0.25", "--seed", "0"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "precision" in printed and "recall" in printed
    info = json.loads((out / "train_info.json").read_text())
    assert info["validation"]["accuracy"] >= 0.9, info
    assert info["counts"] == {"examples": 240, "skipped": 1, "train": 180, "valid": 60, "truncated": 0}
    # the stage loads what was written, and separates held-out examples
    test = _separable(40, np.random.default_rng(9))
    got = stage(out, max_length=48).apply_partition(frame([r["text"] for r in test])).df["model_score"]
    assert np.mean((got.to_numpy() >= 0.5) == np.array([r["label"] == 1 for r in test])) >= 0.9
    # seeded: the same data and seed give the same model
    out2 = tmp_path / "again"
    assert main(args[:6] + [str(out2)] + args[7:]) == 0
    assert json.loads((out2 / "train_info.json").read_text())["train_loss"] == info["train_loss"]


def test_train_classifier_regression(model_dir, tmp_path):
    from gpupipe.models.train import train_classifier

    rng = np.random.default_rng(4)
    rows = [{"text": " ".join(rng.choice(WORDS[:50], 10)), "score": float(i % 4)} for i in range(40)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = train_classifier(str(model_dir), tmp_path / "r.jsonl", tmp_path / "reg", epochs=1, lr=1e-3,
                            max_length=32)
    assert info["task"] == "regression" and math.isfinite(info["validation"]["mse"])
    stage(tmp_path / "reg", score="regression", max_length=32)   # loads as a one-output model
    (tmp_path / "mixed.jsonl").write_text('{"text": "a", "label": 1}\n{"text": "b", "score": 2}\n')
    assert main(["train-classifier", "--model", str(model_dir), "--data", str(tmp_path / "mixed.jsonl"),
                 "--out", str(tmp_path / "x")]) == 2


def test_no_model_skips_the_stage_and_says_why(tmp_path):
    """model: null: the stage declares itself skipped (the run prints it, stats.json and the report show it:
    tests/e2e/test_readme_recipes.py) and passes documents unscored, loading no model (no torch needed)."""
    s = Classifier(ClassifierConfig(model=None, min_score=0.5), RunContext())
    assert "no model given" in s.skipped() and "make tiny-model" in s.skipped()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert Classifier(ClassifierConfig(model=str(tmp_path / "model")), RunContext()).skipped() is None
    s.setup()
    applied = s.apply_partition(frame(["a", "b"]))
    assert applied.reasons is None and "model_score" not in applied.df.columns
    assert applied.extra["docs_unscored"] == 2
