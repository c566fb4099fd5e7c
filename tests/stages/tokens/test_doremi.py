"""DoReMi (#34): Group DRO weights from a tiny proxy model on tokenized parts; a noise group's weight falls; the
update rule against a reference written here; the weights file runs as a mixture config."""

import json

import numpy as np
import pytest
import yaml

from gpupipe.cli import main
from gpupipe.tokens.tokenizer import EOS_TOKEN
from tests.helpers import run_config

torch = pytest.importorskip("torch")


def chain_text(rng, words: list[str], succ: np.ndarray, n: int) -> str:
    """A walk along a fixed successor table: every next word is determined by the last (a learnable group)."""
    i = int(rng.integers(len(words)))
    out = []
    for _ in range(n):
        out.append(words[i])
        i = int(succ[i])
    return " ".join(out)


def reference_alphas(excess: list[list[float]], eta: float, c: float) -> np.ndarray:
    """DoReMi's Algorithm 1, step 2, written out: α_t ∝ α_{t-1} exp(η λ_t), then (1 - c) α_t + c / k."""
    k = len(excess[0])
    alpha, out = [1.0 / k] * k, []
    for lam in excess:
        raw = [a * np.exp(eta * l) for a, l in zip(alpha, lam)]
        alpha = [(1 - c) * r / sum(raw) + c / k for r in raw]
        out.append(alpha)
    return np.array(out)


def test_doremi_lowers_the_noise_group_and_its_weights_run(tmp_path):
    rng = np.random.default_rng(0)
    web, wiki = [f"web{i}" for i in range(60)], [f"wiki{i}" for i in range(60)]
    succ_web, succ_wiki = rng.permutation(60), rng.permutation(60)
    greek = list("αβγδεζηθικλμνξοπρστυφχψω")
    rows = []
    for i in range(450):
        group = ("web", "wiki", "noise")[i % 3]
        if group == "web":
            text = chain_text(rng, web, succ_web, 60)
        elif group == "wiki":
            text = chain_text(rng, wiki, succ_wiki, 60)
        else:
            text = "".join(rng.choice(greek, size=200))
        rows.append({"id": f"d{i}", "source": group, "text": text})
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tokenize = {"tokenize": {"vocab_size": 700, "min_frequency": 0, "special_tokens": [EOS_TOKEN]}}
    run = run_config(tmp_path, "tok", src, [tokenize], workers=1)

    from gpupipe.doremi import DoremiConfig, run as doremi

    out, cfg = tmp_path / "doremi.yaml", DoremiConfig(seq_len=32, steps=200)
    result = doremi(run / "stages" / "01-tokenize", out, cfg)
    print("DoReMi weights", result.weights, "reference loss", result.reference_loss)
    assert result.groups == ["noise", "web", "wiki"]
    assert result.weights["noise"] < 1 / 3 - 0.05, result.weights
    assert result.reference_loss["noise"] > 2 * max(result.reference_loss["web"], result.reference_loss["wiki"])
    # the update rule, replayed from the excess losses the run saw
    want = reference_alphas(result.excess, cfg.eta, cfg.smoothing)
    assert np.allclose(np.array(result.alphas), want, rtol=1e-9, atol=1e-12)
    assert [result.weights[g] for g in result.groups] == pytest.approx(want.mean(axis=0).tolist(), abs=1e-6)

    written = yaml.safe_load(out.read_text(encoding="utf-8"))["mixture"]
    assert {g: s["weight"] for g, s in written["sources"].items()} == result.weights
    assert written["total_tokens"] == result.total_tokens
    short = tmp_path / "short.yaml"   # the command line: the same function behind `gpupipe doremi`
    assert main(["doremi", str(run / "stages" / "01-tokenize"), "--out", str(short), "--steps", "3"]) == 0
    assert set(yaml.safe_load(short.read_text(encoding="utf-8"))["mixture"]["sources"]) == set(result.groups)
    run2 = run_config(tmp_path, "mixed", src, [tokenize, {"mixture": written}, {"pack": {"seq_len": 64}}],
                      workers=1)
    ledger = json.loads((run2 / "shards" / "manifest.json").read_text())["mixture"]
    total = sum(result.weights.values())
    for g, r in ledger["sources"].items():
        assert r["target_share"] == pytest.approx(result.weights[g] / total, abs=1e-6)
        assert abs(r["share"] - r["target_share"]) * 100 <= 0.5
    assert main(["verify", str(run2 / "shards")]) == 0
