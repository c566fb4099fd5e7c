"""Per-document stages on real components: trafilatura, fastText lid.176, Arrow regex kernels."""

import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupipe.stages.base import RunContext
from gpupipe.stages.filters.doc_filter import DocFilter, word_signals
from gpupipe.stages.text.extract import Extract
from gpupipe.stages.filters.langid import LangId
from gpupipe.stages.text.normalize import Normalize, normalize_array, normalize_text

PIECES = st.sampled_from(["a", "B", " ", "\n", "\r", "\r\n", "\t", "\x07", "\x85", "\u3000", "\xa0", "\u2028",
                          "é", "e\u0301", "中", "\x1f", "\x0b", "\x0c", "😀", "\ufeff"])


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=40), st.booleans())
def test_vectorized_normalize_equals_reference(pieces, keep_paragraphs):
    text = "".join(pieces)
    got = normalize_array(pa.array([text], pa.large_string()), keep_paragraphs=keep_paragraphs)[0].as_py()
    assert got == normalize_text(text, keep_paragraphs=keep_paragraphs)


def test_normalize_rules():
    assert normalize_text("Hello world!\n\nThis is doc A.") == normalize_text("Hello world!\nThis is doc A.")
    assert normalize_text("a\tb\x00c  d\r\ne\u3000f") == "a bc d\ne f"
    assert normalize_text("cafe\u0301") == "café"  # NFC
    assert normalize_text("p1 l1\n\n\n p2  ", keep_paragraphs=True) == "p1 l1\n\np2"


def _stage(cls, **params):
    stage = cls(cls.Config(**params), RunContext())
    stage.setup()
    return stage


def test_normalize_stage_drops_empty_documents():
    df = pd.DataFrame({"id": ["a", "b"], "doc_index": [0, 1], "text": ["  x \n", " \x07\n\t "]})
    kept, rejects, stats = _stage(Normalize).run_partition(df)
    assert kept["text"].tolist() == ["x"] and rejects["reason"].tolist() == ["empty_text"]
    assert (stats.docs_in, stats.docs_out, dict(stats.removed)) == (2, 1, {"empty_text": 1})


def test_langid_real_model_with_thresholds():
    texts = ["The quick brown fox jumps over the lazy dog near the river bank every morning.",
             "数据工程是大模型预训练中非常重要的一个环节，需要仔细处理网页文本。",
             "Le chat dort sur le canapé pendant que les enfants jouent dans le jardin.",
             "ok"]
    df = pd.DataFrame({"id": list("abcd"), "doc_index": range(4), "text": texts})
    stage = _stage(LangId, keep=["en", "zh"], min_score={"en": 0.8, "zh": 0.65, "default": 0.99})
    kept, rejects, stats = stage.run_partition(df)
    assert kept["lang"].tolist() == ["en", "zh"] and (kept["lang_score"] > 0.8).all()
    assert dict(stats.removed)["lang_not_kept"] >= 1
    assert stats.docs_in == stats.docs_out + sum(stats.removed.values())


def test_doc_filter_is_cjk_aware():
    sig = word_signals(pd.Series(["Hello world, this is it.", "你好世界 ok", ""]))
    assert sig["q_word_count"].tolist() == [5, 5, 0]
    df = pd.DataFrame({"id": ["en", "zh", "short", "long"], "doc_index": range(4),
                       "text": ["word " * 60, "中" * 60, "two words", "x" * 15 + " " + "yyyyyyyyyyyyyyy " * 60]})
    kept, rejects, stats = _stage(DocFilter, min_words=50).run_partition(df)
    assert kept["id"].tolist() == ["en", "zh"]
    assert dict(stats.removed) == {"too_few_words": 1, "mean_word_length": 1}


PAGE = """<html><head><title>Rivers</title><meta charset="utf-8"></head><body>
<nav><a href="/">Home</a> <a href="/news">News</a> <a href="/about">About us</a></nav>
<div class="cookie-banner">We use cookies to improve your experience. Accept all cookies.</div>
<article><h1>How rivers shape valleys</h1>
<p>Rivers carve valleys over thousands of years as water erodes rock and carries sediment downstream.</p>
<p>In mountain regions the slope is steep, so the water moves quickly and cuts deep V-shaped valleys.</p>
<p>Closer to the sea the land flattens and rivers meander, depositing silt that builds fertile plains.</p>
</article><footer>Copyright 2024 Example News. Privacy policy. Terms of use.</footer></body></html>"""


def test_extract_keeps_main_text_drops_boilerplate_and_counts_failures():
    df = pd.DataFrame({"id": ["page", "empty", "junk"], "doc_index": range(3), "url": [None] * 3,
                       "html": [PAGE, "", "<html><body>" + "<div></div>" * 20 + "</body></html>"]})
    stage = _stage(Extract)
    for _ in range(2):  # twice: no state kept between calls (trafilatura's dedup cache stays off)
        kept, rejects, stats = stage.run_partition(df)
        assert kept["id"].tolist() == ["page"]
        text = kept["text"].iloc[0]
        assert "meander" in text and "cookies" not in text and "Privacy" not in text
        assert dict(stats.removed) == {"empty_html": 1, "no_main_text": 1}
        assert "html" not in kept.columns
