"""line_filter: seed 002's line rules on boundary lines, CJK, per-rule counts, empty documents, conservation, and
the vectorized stage against a line-by-line Python reference."""

import json
import re
import unicodedata
from collections import Counter

import pandas as pd
import pyarrow as pa
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpupipe.io.parts import part_paths
from gpupipe.stages.base import RunContext
from gpupipe.stages.filters.line_filter import LineFilter, LineFilterConfig, count_words, fewer_words


def _stage(**params) -> LineFilter:
    stage = LineFilter(LineFilterConfig(**params), RunContext())
    stage.setup()
    return stage


def _run(texts, **params):
    df = pd.DataFrame({"doc_index": range(len(texts)), "text": texts})
    return _stage(**params).run_partition(df)


def removed_by(line: str, **params) -> str | None:
    """The rule that removes this one line (None: kept)."""
    kept, rejects, stats = _run([line], **params)
    hits = [k.removeprefix("lines_removed_") for k, v in stats.extra.items() if k.startswith("lines_removed_") and v]
    assert len(hits) <= 1
    return hits[0] if hits else None


@pytest.mark.parametrize("line, rule", [
    # short_lines: fewer than 3 words
    ("two words", "short_lines"), ("three words here", None), ("  two   words  ", "short_lines"),
    ("one", "short_lines"), ("a - b", None),                  # "-" is a token, as in the seed's line.split()
    # CJK: a Han/kana character is a word, CJK punctuation is none
    ("机器学习是人工智能的一个分", None),                          # 12 characters, not "short"
    ("你好", "short_lines"), ("你好。", "short_lines"), ("你好！", "short_lines"), ("机器学", None),
    ("これはペンです", None), ("GPU加速", None),                  # GPU + 2 Han = 3 words
    ("안녕 하세요", "short_lines"),                              # Korean is spaced: 2 words
    # all_uppercase: >= 11 characters and every cased letter upper-case
    ("AB CD EFGH", None), ("AB CD EFGHI", "all_uppercase"), ("AB CD EFGHI 2024!", "all_uppercase"),
    ("NASA AND ESA work", None), ("12345 67890 12345", None),   # no cased letters: not upper-case
    ("机器学习是人工智能的一个分支。", None), ("ÉTÉ À PARIS ICI", "all_uppercase"),
    # the seed's regexes, case-sensitive, nav anchored at the (stripped) line start
    ("Home is where the heart is", "nav_elements"), ("   Copyright 2024 Example Inc.", "nav_elements"),
    ("© 2024 Example Inc.", "nav_elements"), ("Go Home now please", None), ("home is where it is", None),
    ("You can Share on Facebook now", "social_media"), ("Please Subscribe to the channel", "boilerplate"),
    # a line several rules would remove goes to the first
    ("Home", "nav_elements"), ("Tweet", "social_media"), ("© ACME CORPORATION 2024", "nav_elements"),
])
def test_line_rules_on_boundary_lines(line, rule):
    assert removed_by(line) == rule


def test_rule_thresholds_and_switches():
    assert removed_by("three words here", short_lines_min_words=4) == "short_lines"
    assert removed_by("two words", short_lines_min_words=None) is None
    assert removed_by("AB CD EFGH", all_uppercase_min_chars=10) == "all_uppercase"
    assert removed_by("AB CD EFGHI", all_uppercase_min_chars=None) is None
    assert removed_by("home is where it is", ignore_case=True) == "nav_elements"
    assert removed_by("Read more at the link below", patterns={"read_more": r"^Read more"}) == "read_more"
    assert removed_by("Home is where the heart is", patterns={}) is None


def test_config_checks():
    with pytest.raises(ValidationError, match="invalid regex"):
        LineFilterConfig(patterns={"bad": "(unclosed"})
    with pytest.raises(ValidationError, match="snake_case"):
        LineFilterConfig(patterns={"short_lines": "x"})
    with pytest.raises(ValidationError, match="snake_case"):
        LineFilterConfig(patterns={"Bad Name": "x"})
    with pytest.raises(ValidationError):
        LineFilterConfig(short_lines_min_words=0)
    assert list(LineFilterConfig().patterns) == ["nav_elements", "social_media", "boilerplate"]


def test_counts_empty_documents_and_conservation():
    texts = [
        "Home\nThis is a real sentence here.\nShare on Facebook\nAnother real sentence follows.",
        "Menu\nok\nCLICK HERE TO SUBSCRIBE",            # every line goes (the last as upper-case: the seed's
                                                          # patterns are case-sensitive): dropped
        "A good line of text stays.\n\n\nSecond paragraph here is kept.",   # untouched, blank lines and all
        "", None, "\n \n",                                # nothing to keep: dropped
        "Cookie settings for this page\n\nNice paragraph one stays.\n\nTWO\n\nNice paragraph two stays.\n",
    ]
    kept, rejects, stats = _run(texts)
    assert kept["text"].tolist() == [
        "This is a real sentence here.\nAnother real sentence follows.",
        "A good line of text stays.\n\n\nSecond paragraph here is kept.",
        "Nice paragraph one stays.\n\nNice paragraph two stays."]
    assert rejects["doc_index"].tolist() == [1, 3, 4, 5]
    assert set(rejects["reason"]) == {"empty_after_line_filter"}
    assert rejects["text"].iloc[0] == texts[1]               # the reject shows what was removed
    assert stats.removed == {"empty_after_line_filter": 4}
    assert stats.docs_in == stats.docs_out + sum(stats.removed.values())
    assert stats.extra == {"lines_in": 13, "lines_out": 6, "lines_removed_nav_elements": 2,
                           "lines_removed_social_media": 1, "lines_removed_boilerplate": 1,
                           "lines_removed_short_lines": 2, "lines_removed_all_uppercase": 1}


def test_empty_partition_and_object_dtype():
    kept, rejects, stats = _run([])
    assert len(kept) == 0 and stats.extra["lines_in"] == 0
    df = pd.DataFrame({"doc_index": [0], "text": pd.Series(["Tweet this\nA fine line of text."], dtype=object)})
    kept, _, _ = _stage().run_partition(df)
    assert kept["text"].tolist() == ["A fine line of text."] and kept["text"].dtype == object


def test_fewer_words_equals_counting():
    lines = pa.array(["", "a", "a b", "a b c", "a  b\tc", "a,b c", "你好 世界", "你好世界", "x。y。z", "GPU 加速",
                      "a\u3000b\u3000c", "-- -- --", "a\u00a0b c"], pa.large_string())
    for k in (1, 2, 3, 4, 17):
        assert fewer_words(lines, k).tolist() == [n < k for n in count_words(lines).to_pylist()]


# ------------------------------------------------------------------------------------------------------------------
# The stage against a line-by-line reference
# ------------------------------------------------------------------------------------------------------------------

def _is_cjk(ch: str) -> bool:
    return unicodedata.name(ch, "").startswith(("CJK UNIFIED", "HIRAGANA", "KATAKANA"))


def _is_cjk_punct(ch: str) -> bool:
    o = ord(ch)
    return 0x3000 <= o <= 0x303F or 0xFF01 <= o <= 0xFF0F or 0xFF1A <= o <= 0xFF20 or 0xFF5B <= o <= 0xFF65


def ref_words(line: str) -> int:
    n, in_word = 0, False
    for ch in line:
        if _is_cjk(ch):
            n, in_word = n + 1, False
        elif ch.isspace() or _is_cjk_punct(ch):
            in_word = False
        elif not in_word:
            n, in_word = n + 1, True
    return n


def ref_rule(line: str, cfg: LineFilterConfig) -> str | None:
    s = line.strip()
    for name, pattern in cfg.patterns.items():
        if re.search(pattern, s, re.IGNORECASE if cfg.ignore_case else 0):
            return name
    if ref_words(s) < cfg.short_lines_min_words:
        return "short_lines"
    if s.isupper() and len(s) >= cfg.all_uppercase_min_chars:
        return "all_uppercase"
    return None


def ref_filter(text: str, cfg: LineFilterConfig, counts: Counter) -> str | None:
    kept, changed = [], False
    for line in text.split("\n"):
        rule = ref_rule(line, cfg) if line.strip() else None
        counts["lines_in"] += bool(line.strip())
        if rule:
            counts[f"lines_removed_{rule}"] += 1
            changed = True
        else:
            kept.append(line)
            counts["lines_out"] += bool(line.strip())
    if not any(line.strip() for line in kept):
        return None
    if not changed:
        return text
    while not kept[0].strip():
        kept.pop(0)
    while not kept[-1].strip():
        kept.pop()
    out, run = [], []
    for line in kept:
        if not line.strip():
            run.append(line)
            continue
        out.extend([""] if len(run) >= 2 else run)
        out.append(line)
        run = []
    return "\n".join(out)


LINE_PIECES = st.sampled_from(["Home", "home", "About us", "Tweet", "Accept", "the", "cat", "SAT", "ON", "MAT",
                               "NASA", "é", "É", "1984", " ", "  ", "\t", "\u3000", "\xa0", "中", "文", "か", "カ",
                               "。", "，", "-", "©", "!", "x"])
LINES = st.lists(LINE_PIECES, max_size=12).map("".join)
DOCS = st.lists(LINES, max_size=8).map("\n".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(DOCS, min_size=1, max_size=6), st.booleans())
def test_vectorized_stage_equals_reference(texts, ignore_case):
    cfg = LineFilterConfig(ignore_case=ignore_case)
    counts = Counter()
    expected = [ref_filter(t, cfg, counts) for t in texts]
    kept, rejects, stats = _run(texts, ignore_case=ignore_case)
    assert kept["text"].tolist() == [t for t in expected if t is not None]
    assert rejects["doc_index"].tolist() == [i for i, t in enumerate(expected) if t is None]
    assert {k: v for k, v in stats.extra.items() if v} == +counts
    assert stats.extra["lines_in"] == stats.extra["lines_out"] + sum(
        v for k, v in stats.extra.items() if k.startswith("lines_removed_"))


# ------------------------------------------------------------------------------------------------------------------
# Through the pipeline
# ------------------------------------------------------------------------------------------------------------------

@pytest.fixture
def line_stage(monkeypatch):
    """Register the stage for this test (a no-op once gpupipe.stages registers it itself)."""
    from gpupipe.stages import STAGES

    monkeypatch.setitem(STAGES, LineFilter.name, LineFilter)


def test_line_filter_in_pipeline_sums_counts_over_partitions(tmp_path, line_stage):
    from gpupipe.cli import main

    texts = ["Home\nA first real sentence is here.", "Follow us on X\nok", "中文句子在这里很长。\n你好",
             "Plain text with enough words.\nAND A SECOND LINE THAT SHOUTS"] * 3
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": t}, ensure_ascii=False) + "\n"
                           for i, t in enumerate(texts)))
    cfg = {"input": {"path": str(src)}, "output": str(tmp_path / "run"), "device": "cpu",
           "executor": {"kind": "local", "partition_docs": 5}, "stages": [{"line_filter": {}}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp_path / "c.yaml")]) == 0
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    s = stats["stages"][1]
    assert stats["conservation_ok"] and s["removed"] == {"empty_after_line_filter": 3}
    assert s["extra"]["peak_rss_mb_worker"] > 0 and s["extra"]["peak_rss_mb_driver"] > 0
    counters = {k: v for k, v in s["extra"].items() if not k.startswith("peak_") and k != "cpu_s"}   # timings aside
    assert counters == {"lines_in": 24, "lines_out": 9, "lines_removed_nav_elements": 3,
                        "lines_removed_social_media": 3, "lines_removed_boilerplate": 0,
                        "lines_removed_short_lines": 6, "lines_removed_all_uppercase": 3}
    folder = next((tmp_path / "run" / "stages").glob("*-line_filter"))
    kept = pd.concat([pd.read_parquet(p) for p in part_paths(folder)])
    assert kept["text"].tolist()[:3] == ["A first real sentence is here.", "中文句子在这里很长。",
                                         "Plain text with enough words."]
