"""The `quality` stage's rules as seed 001 §2.3.3's Gopher table writes them (issue #35, item 3): the capitalised-word
ratio (< 40%), on by default, pinned at its boundary."""

import pandas as pd
import pytest

from gpupipe.stages.filters.quality import QualityConfig, decide, quality_signals

FAMILIES = ("zh", "gopher_quality", "gopher_repetition", "c4", "fineweb", "seed002")


def judge(text: str, **gopher) -> tuple[str | None, float]:
    """(reason, capitalised-word ratio) of one English document under gopher_quality alone."""
    cfg = QualityConfig.model_validate({f: {"enabled": f == "gopher_quality"} for f in FAMILIES}
                                       | {"gopher_quality": {"enabled": True, **gopher}})
    df = pd.DataFrame({"text": [text], "lang": ["en"]})
    sig = quality_signals(df, cfg)
    why, _ = decide(df.assign(**sig), cfg)
    return why[0], float(sig["q_gopher_capitalized_words_frac"][0])


def _doc(capitalised: int, total: int = 100) -> str:
    """`total` words, the first `capitalised` of them title-cased; stop words enough for the other rules."""
    words = ["the", "and", "of", "to"] + ["word"] * (total - 4)
    return " ".join(w.title() if i < capitalised else w for i, w in enumerate(words[::-1]))


def test_capitalised_word_ratio_boundary():
    assert QualityConfig().gopher_quality.max_capitalized_words_ratio == 0.4   # the seed's default
    assert judge(_doc(40)) == (None, pytest.approx(0.40))
    assert judge(_doc(41)) == ("gopher_capitalized_words", pytest.approx(0.41))
    assert judge(_doc(41), max_capitalized_words_ratio=None)[0] is None          # the rule switched off


def test_capitalised_words_are_tokens_starting_with_an_uppercase_letter():
    # the first token counts; all-caps and non-ASCII capitals count; a capital inside a word does not
    assert judge("Über ÉCOLE iPhone the and of x 123 (Not) word")[1] == pytest.approx(2 / 10)
    assert judge("")[1] != judge("")[1]   # no words: no ratio (NaN), no decision
    news = ("The committee said that it would have to meet again with the members of the board to decide. "
            "Analysts in London expect the decision to be announced next week by Reuters. ") * 3
    assert judge(news)[0] is None
