"""Extraction with real trafilatura (the default), real resiliparse and gpupipe's own extractor (`fast`, and `auto`):
the extractors, their options, and counted failures."""

import importlib.util

import pandas as pd
import pytest

from gpupipe.stages.base import RunContext
from gpupipe.stages.text.extract import Extract, ExtractConfig, too_large

PAGE = """<html><head><title>Rivers</title><meta charset="utf-8"></head><body>
<nav><a href="/">Home</a> <a href="/news">News</a> <a href="/about">About us</a></nav>
<div class="cookie-banner">We use cookies to improve your experience. Accept all cookies.</div>
<article><h1>How rivers shape valleys</h1>
<p>Rivers carve valleys over thousands of years as water erodes rock and carries sediment downstream.</p>
<p>In mountain regions the slope is steep, so the water moves quickly and cuts deep V-shaped valleys.</p>
<p>Closer to the sea the land flattens and rivers meander, depositing silt that builds fertile plains.</p>
<table><tr><th>River</th><th>Length km</th></tr><tr><td>Nile</td><td>6650</td></tr>
<tr><td>Amazon</td><td>6400</td></tr></table>
</article><footer>Copyright 2024 Example News. Privacy policy. Terms of use.</footer></body></html>"""

# resiliparse is an optional extra: its cases skip (and say so) where it is not installed.
needs_resiliparse = pytest.mark.skipif(importlib.util.find_spec("resiliparse") is None,
                                       reason="resiliparse not installed (optional extractor)")
EXTRACTORS = ["auto", "fast", "trafilatura", pytest.param("resiliparse", marks=needs_resiliparse)]


def _stage(**params) -> Extract:
    stage = Extract(ExtractConfig(**params), RunContext())
    stage.setup()
    return stage


def _frame(htmls: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"p{i}" for i in range(len(htmls))], "doc_index": range(len(htmls)),
                         "url": ["https://example.com/rivers"] * len(htmls), "html": htmls})


def test_defaults_are_auto_with_seed_002_trafilatura_options():
    """`auto` is the default since #19 (it beats precision mode on the 181 pages and trafilatura's defaults on its own
    990-page evaluation set, held-out halves included); seed 002 §1.2's trafilatura options stay the defaults, and
    drive auto's fallback and `extractor: trafilatura`."""
    cfg = ExtractConfig()
    assert (cfg.extractor, cfg.favor_precision, cfg.include_tables, cfg.include_comments, cfg.fallback) == \
        ("auto", True, True, False, True)
    assert ExtractConfig(extractor="trafilatura").favor_precision


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_main_text_kept_boilerplate_dropped(extractor):
    stage = _stage(extractor=extractor)
    for _ in range(2):  # twice: no state kept between calls (trafilatura's dedup cache stays off)
        kept, rejects, stats = stage.run_partition(_frame([PAGE]))
        text = kept["text"].iloc[0]
        assert "meander" in text and "How rivers shape valleys" in text
        assert "cookies" not in text and "Privacy" not in text and "About us" not in text
        assert "Nile" in text and "6650" in text  # tables kept by default
        assert (stats.docs_in, stats.docs_out) == (1, 1) and "html" not in kept.columns


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_tables_can_be_left_out(extractor):
    text = _stage(extractor=extractor, include_tables=False).run_partition(_frame([PAGE]))[0]["text"].iloc[0]
    assert "meander" in text and "Nile" not in text


@needs_resiliparse
def test_resiliparse_keeps_paragraph_breaks():
    text = _stage(extractor="resiliparse").run_partition(_frame([PAGE]))[0]["text"].iloc[0]
    assert "downstream.\n" in text and "\nIn mountain regions" in text


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_failures_are_counted_reasons(extractor):
    df = _frame([PAGE, "", "<html><body>" + "<div></div>" * 20 + "</body></html>", PAGE.replace("<p>", "<p>" + "x" * 500)])
    kept, rejects, stats = _stage(extractor=extractor, max_html_bytes=len(PAGE.encode()) + 10).run_partition(df)
    assert kept["id"].tolist() == ["p0"]
    assert dict(stats.removed) == {"empty_html": 1, "no_main_text": 1, "html_too_large": 1}
    assert stats.docs_in == stats.docs_out + sum(stats.removed.values())
    assert "_why" not in kept.columns and "_why" not in rejects.columns


def test_extractor_exception_is_a_reason_not_a_crash():
    stage = _stage()

    def boom(html, url):
        raise ValueError("parser exploded")
    stage._extract = boom
    kept, rejects, stats = stage.run_partition(_frame([PAGE]))
    assert len(kept) == 0 and dict(stats.removed) == {"extract_error": 1}


def test_keep_html_carries_the_page():
    kept = _stage(keep_html=True).run_partition(_frame([PAGE]))[0]
    assert kept["html"].iloc[0] == PAGE


def test_too_large_counts_utf8_bytes_not_characters():
    assert not too_large("é" * 10, 20) and too_large("é" * 11, 20)   # 2 bytes each
    assert not too_large("a" * 20, 20) and too_large("a" * 21, 20)
    assert too_large("中" * 7, 20) and not too_large("中" * 6, 20)    # 3 bytes each


def test_unknown_extractor_is_a_config_error():
    with pytest.raises(ValueError):
        ExtractConfig(extractor="boilerpipe")


def test_missing_urls_reach_the_extractor_as_none():
    """Parquet nulls arrive as NaN or None; the extractor gets None (trafilatura raises on a float url)."""
    df = _frame([PAGE] * 3).assign(url=[float("nan"), None, "https://example.com/rivers"])
    kept, _, stats = _stage().run_partition(df)
    assert len(kept) == 3 and dict(stats.removed) == {}
    seen = []
    stage = _stage()
    stage._extract = lambda html, url: seen.append(url) or "text"
    stage.run_partition(df)
    assert seen == [None, None, "https://example.com/rivers"]


def test_extract_errors_counted_per_class_and_logged(caplog):
    stage = _stage(min_content_length=0)   # tiny pages: reach the extractor

    def picky(html, url):
        if "KEY" in html:
            raise KeyError("no such node")
        raise ValueError("parser exploded")
    stage._extract = picky
    df = _frame(["<p>KEY</p>"] + ["<p>x</p>"] * 4)
    with caplog.at_level("WARNING", logger="gpupipe"):
        kept, rejects, stats = stage.run_partition(df)
    assert len(kept) == 0 and dict(stats.removed) == {"extract_error": 5}
    assert stats.extra["extract_error_KeyError"] == 1 and stats.extra["extract_error_ValueError"] == 4
    assert "_error" not in rejects.columns
    messages = [r.getMessage() for r in caplog.records]
    assert "document p0: extract_error KeyError: 'no such node'" in messages[0]
    assert "document p1: extract_error ValueError: parser exploded" in messages[1]
    assert len(messages) == 4 and "2 more extract_error" in messages[3]  # the first 3, then a count


def test_documents_with_text_pass_through():
    """A part read from JSONL (text, no html) is kept as it is; so are text rows beside pages."""
    text_only = pd.DataFrame({"id": ["j0"], "doc_index": [0], "url": [None], "text": ["Already extracted text."]})
    kept, rejects, stats = _stage().run_partition(text_only)
    assert kept["text"].tolist() == ["Already extracted text."] and "html" not in kept.columns
    assert (stats.docs_in, stats.docs_out, stats.bytes_in) == (1, 1, len("Already extracted text."))
    mixed = _frame([PAGE, None]).assign(text=[None, "Kept as is."])
    kept = _stage().run_partition(mixed)[0]
    assert "meander" in kept["text"].iloc[0] and kept["text"].iloc[1] == "Kept as is."


SHORT_ARTICLE = ("<html><head><title>Rivers</title><style>" + "body{margin:0}" * 20 + "</style></head><body>"
                 "<article><h1>Rivers</h1><p>Rivers carve valleys over thousands of years.</p></article>"
                 "</body></html>")


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_seed_002_length_rules_are_defaults_with_named_reasons(extractor):
    """Seed 002 §1.1 WARCConfig.min_content_length = 200 bytes before extraction, §1.2 `len(result) < 100` after:
    both on by default, each counted under its own reason; a document that arrives with text passes through."""
    assert (ExtractConfig().min_content_length, ExtractConfig().min_text_chars) == (200, 100)
    tiny = "<html><body><p>Hi there</p></body></html>"
    assert len(tiny.encode()) < 200 <= len(SHORT_ARTICLE.encode())
    df = _frame([PAGE, tiny, SHORT_ARTICLE, None])
    df.loc[3, "text"] = "a short JSONL text"          # arrives with text: not extracted, not measured
    kept, rejects, stats = _stage(extractor=extractor).run_partition(df)
    assert kept["id"].tolist() == ["p0", "p3"]
    assert dict(stats.removed) == {"content_too_short": 1, "text_too_short": 1}
    assert rejects.set_index("id")["reason"].to_dict() == {"p1": "content_too_short", "p2": "text_too_short"}
    assert stats.docs_in == stats.docs_out + sum(stats.removed.values())
    # 0 turns each rule off: the tiny page is extracted (its text is short but not empty), the short article kept
    kept, _, stats = _stage(extractor=extractor, min_content_length=0, min_text_chars=0).run_partition(df)
    assert {"p0", "p2", "p3"} <= set(kept["id"]) and "content_too_short" not in stats.removed


def test_content_length_counts_utf8_bytes():
    stage = _stage(extractor="fast")
    page = "<html><body><p>" + "中" * 50 + "</p></body></html>"   # 80 characters, 180 bytes
    assert len(page) < 200 and len(page.encode()) < 200
    assert stage.run_partition(_frame([page]))[2].removed == {"content_too_short": 1}
    page = "<html><body><p>" + "中" * 70 + "</p></body></html>"   # 100 characters, 240 bytes: not too short
    assert "content_too_short" not in stage.run_partition(_frame([page]))[2].removed


def test_bad_length_settings_are_refused():
    from pydantic import ValidationError

    for bad in ({"min_content_length": -1}, {"min_text_chars": "many"}):
        with pytest.raises(ValidationError):
            ExtractConfig(**bad)
