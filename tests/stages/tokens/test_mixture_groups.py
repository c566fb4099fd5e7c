"""Mixture groups by any column, `other`, weights as shares or epochs, planned vs achieved shares, phases (#34)."""

import numpy as np
import pytest
from pydantic import ValidationError

from gpupipe.stages.tokens.mixture import (MixtureConfig, MixtureError, OTHER, plan_copies, resolve_groups,
                                           share_table)


def corpus(sizes: dict, seed: int = 0, lo: int = 2, hi: int = 400):
    """Token counts (with EOS) and `by` values of a shuffled corpus; None values are null cells."""
    rng = np.random.default_rng(seed)
    values = np.array([v for v, n in sizes.items() for _ in range(n)], dtype=object)
    order = rng.permutation(values.size)
    return rng.integers(lo, hi, size=values.size)[order], values[order]


def mix(**kw) -> MixtureConfig:
    return MixtureConfig.model_validate(kw)


def test_groups_by_lang_with_other_land_within_half_a_point():
    """Seed 002's language targets (zh 0.25, en 0.55, code 0.15, other 0.05) over a lang column: every value no
    group names (fr, de, ru, null) is `other`; each achieved share within 0.5 points of its plan, no notes."""
    tokens, langs = corpus({"en": 3000, "zh": 1500, "code": 900, "fr": 200, "de": 150, "ru": 100, None: 30})
    cfg = mix(by="lang", sources={"zh": {"weight": 0.25, "epochs": 3}, "en": {"weight": 0.55, "epochs": 3},
                                  "code": {"weight": 0.15, "epochs": 3}, "other": {"weight": 0.05, "epochs": 3}})
    groups = resolve_groups(langs, cfg)
    assert set(groups[np.isin(langs, ["fr", "de", "ru", None])]) == {OTHER}
    assert set(groups[langs == "zh"]) == {"zh"}
    copies, ledger = plan_copies(tokens, groups, cfg, seed=7)
    assert ledger["by"] == "lang" and ledger["notes"] == []
    for g, r in ledger["sources"].items():
        assert abs(r["share"] - r["target_share"]) * 100 <= 0.5, (g, r)
        assert r["tokens"] == int((tokens * copies)[groups == g].sum())
        assert r["target_share"] == pytest.approx(cfg.sources[g].weight)
    assert ledger["total_tokens"] == int((tokens * copies).sum())


def test_null_values_are_the_none_group_and_unlisted_values_are_refused_or_dropped():
    tokens, tiers = corpus({"tier1": 50, "tier2": 80, None: 200})
    cfg = mix(by="domain_tier", sources={"tier1": {"weight": 0.5, "epochs": 4}, "none": {"weight": 0.5}})
    with pytest.raises(MixtureError, match=r"domain_tier values not in the config: \['tier2'\]"):
        plan_copies(tokens, resolve_groups(tiers, cfg), cfg, seed=0)
    cfg = cfg.model_copy(update={"unlisted": "drop"})
    groups = resolve_groups(tiers, cfg)
    assert set(groups[tiers == None]) == {"none"}  # noqa: E711 (an object array of None)
    copies, ledger = plan_copies(tokens, groups, cfg, seed=0)
    assert not copies[groups == "tier2"].any()
    assert ledger["unlisted_sources_dropped_tokens"] == {"tier2": int(tokens[groups == "tier2"].sum())}


def test_weights_as_epochs():
    """A group without a weight gets exactly its epochs (to half a document); the weighted ones share the rest."""
    tokens, src = corpus({"web": 2000, "wiki": 200, "books": 100})
    cfg = mix(sources={"web": {"weight": 3, "epochs": 1}, "wiki": {"weight": 1, "epochs": 2},
                       "books": {"epochs": 2.5}})
    copies, ledger = plan_copies(tokens, src, cfg, seed=1)
    books = ledger["sources"]["books"]
    assert books["target_tokens"] == pytest.approx(2.5 * books["available_tokens"])
    assert abs(books["tokens"] - books["target_tokens"]) <= books["max_document_tokens"]
    assert set(np.unique(copies[src == "books"])) == {2, 3}
    web, wiki = ledger["sources"]["web"], ledger["sources"]["wiki"]
    assert web["target_tokens"] == pytest.approx(3 * wiki["target_tokens"])
    assert ledger["limited_by"] in ("web", "wiki")
    assert ledger["target_total_tokens"] == pytest.approx(web["target_tokens"] + wiki["target_tokens"]
                                                          + books["target_tokens"])
    with pytest.raises(ValidationError, match="weight"):
        mix(sources={"a": {"weight": None, "epochs": None}})
    with pytest.raises(ValidationError, match="at least one weighted group"):
        mix(sources={"a": {"epochs": 2}}, total_tokens=100)


def test_too_few_tokens_says_how_many_epochs_it_would_need():
    tokens, src = corpus({"web": 500, "books": 20})
    cfg = mix(sources={"web": {"weight": 0.5, "epochs": None}, "books": {"weight": 0.5, "epochs": 2}},
              total_tokens=int(tokens.sum()))
    need = 0.5 * tokens.sum() / tokens[src == "books"].sum()
    with pytest.raises(MixtureError, match=rf"needs? {need:.3f} epochs of group 'books'.*too few tokens"):
        plan_copies(tokens, src, cfg, seed=0)


def test_a_group_of_large_documents_gets_a_note_when_it_misses_its_share():
    """Whole documents only: a group whose documents are large against its target misses by more than 0.5
    points, and the ledger says so and why."""
    rng = np.random.default_rng(3)
    tokens = np.concatenate([rng.integers(2, 50, size=400), [5000, 5200, 4900]])
    src = np.array(["web"] * 400 + ["big"] * 3, dtype=object)
    cfg = mix(sources={"web": {"weight": 0.9, "epochs": None}, "big": {"weight": 0.1, "epochs": None}},
              total_tokens=int(tokens[:400].sum() / 0.9 * 0.97))
    _, ledger = plan_copies(tokens, src, cfg, seed=0)
    off = {g for g, r in ledger["sources"].items() if abs(r["share_error_pp"]) > 0.5}
    assert off and len(ledger["notes"]) == len(off)
    assert all("too large for its target" in n for n in ledger["notes"])


ISSUE_PHASES = {"by": "source", "total_tokens": 400000, "phases": [
    {"name": "general", "share": 0.8, "sources": {"web": {"weight": 0.9, "epochs": None},
                                                  "books": {"weight": 0.1, "epochs": None}}},
    {"name": "anneal", "share": 0.2, "sources": {"books": {"weight": 1.0, "epochs": None}}}]}


def test_phases_as_the_issue_writes_them():
    tokens, src = corpus({"web": 1500, "books": 100})
    cfg = MixtureConfig.model_validate(ISSUE_PHASES)
    copies, ledger = plan_copies(tokens, src, cfg, seed=2)
    assert copies.shape == (tokens.size, 2)
    assert not copies[src == "web", 1].any()               # web is not in the anneal phase
    general, anneal = ledger["phases"]
    assert general["target_tokens"] == pytest.approx(320000) and anneal["target_tokens"] == pytest.approx(80000)
    for p in ledger["phases"]:
        assert abs(p["tokens"] - p["target_tokens"]) <= 400
        for g, r in p["sources"].items():
            assert abs(r["share"] - r["target_share"]) * 100 <= 0.5
    assert general["sources"]["web"]["target_share"] == pytest.approx(0.9)
    for g, r in ledger["sources"].items():   # over all phases, what pack must find in the stream
        assert r["tokens"] == int((tokens[:, None] * copies)[src == g].sum())
    table = share_table(ledger)
    assert [(r["phase"], r["group"]) for r in table] == [("general", "books"), ("general", "web"),
                                                          ("anneal", "books")]


def test_phases_with_total_null_take_the_largest_total_every_phase_allows():
    tokens, src = corpus({"web": 1000, "books": 100})
    cfg = mix(phases=[{"name": "a", "share": 0.5, "sources": {"web": {"weight": 1, "epochs": 1}}},
                      {"name": "b", "share": 0.5, "sources": {"books": {"weight": 1, "epochs": 2}}}])
    copies, ledger = plan_copies(tokens, src, cfg, seed=0)
    books = tokens[src == "books"].sum()
    assert ledger["limited_by"] == "phase b"
    assert ledger["target_total_tokens"] == pytest.approx(2 * 2 * books)
    assert ledger["phases"][1]["sources"]["books"]["target_epochs"] == pytest.approx(2)


@pytest.mark.parametrize("bad, match", [
    ({"phases": [{"name": "a", "share": 0.5, "sources": {"w": {"weight": 1}}}], "total_tokens": 10}, "sum to 0.5"),
    ({"phases": [{"name": "a", "share": 1, "sources": {"w": {"epochs": 1}}}]}, "needs a weight"),
    ({"sources": {"w": {"weight": 1}}, "phases": [{"name": "a", "share": 1, "sources": {"w": {"weight": 1}}}]},
     "not both"),
    ({"phases": [{"name": "a", "share": 0.5, "sources": {"w": {"weight": 1}}},
                 {"name": "a", "share": 0.5, "sources": {"w": {"weight": 1}}}], "total_tokens": 10}, "unique"),
    ({"sources": {"w": {"weight": 1}}, "phase": []}, "phase"),
])
def test_bad_phase_configs_are_refused(bad, match):
    with pytest.raises(ValidationError, match=match):
        MixtureConfig.model_validate(bad)
