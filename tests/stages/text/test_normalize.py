"""Normalization extras: ftfy mojibake repair on real mojibake (prefiltered), NFKC, paragraph breaks."""

import importlib.util

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupipe.stages.base import RunContext
from gpupipe.stages.text.normalize import (MOJIBAKE_HINT, Normalize, NormalizeConfig, fix_mojibake_array,
                                      normalize_array, normalize_text)

# ftfy is optional: the mojibake tests skip (and say so) where it is not installed.
needs_ftfy = pytest.mark.skipif(importlib.util.find_spec("ftfy") is None,
                                reason="ftfy not installed (optional mojibake repair)")

# UTF-8 text decoded as cp1252 (the usual mojibake) or as Latin-1 (C1 controls instead of cp1252's punctuation).
MOJIBAKE = [
    ("Ã©tÃ©", "été"),
    ("â€™", "’"),
    ("Itâ€™s a cafÃ© for the summer â€” open daily.", "It’s a café for the summer — open daily."),
    ("Itâ\x80\x99s", "It’s"),
    ("ä¸\xadæ–‡ç½‘é¡µ", "中文网页"),
]
CLEAN = ["L'été est chaud, n'est-ce pas ?", "It’s “quoted” — fine.", "数据工程是大模型预训练的环节。", "Straße, naïve, Ångström"]


@needs_ftfy
@pytest.mark.parametrize("bad, good", MOJIBAKE)
def test_ftfy_repairs_real_mojibake(bad, good):
    assert normalize_text(bad, fix_mojibake=True) == good
    assert normalize_array(pa.array([bad], pa.large_string()), fix_mojibake=True)[0].as_py() == good


def test_mojibake_repair_is_off_by_default():
    assert normalize_text("Ã©tÃ©") == "Ã©tÃ©"
    assert NormalizeConfig().fix_mojibake is False


@needs_ftfy
def test_prefilter_flags_mojibake_and_passes_clean_text_untouched(monkeypatch):
    import ftfy

    arr = pa.array(CLEAN + [bad for bad, _ in MOJIBAKE], pa.large_string())
    flagged = pc.match_substring_regex(arr, MOJIBAKE_HINT).to_pylist()
    assert flagged == [False] * len(CLEAN) + [True] * len(MOJIBAKE)
    seen = []
    real = ftfy.fix_encoding
    monkeypatch.setattr(ftfy, "fix_encoding", lambda t: seen.append(t) or real(t))
    out = fix_mojibake_array(arr).to_pylist()
    assert seen == [bad for bad, _ in MOJIBAKE]         # ftfy ran on the flagged documents only
    assert out == CLEAN + [good for _, good in MOJIBAKE]


@needs_ftfy
def test_stage_repairs_mojibake_with_nulls_and_empties():
    df = pd.DataFrame({"id": list("abcd"), "doc_index": range(4),
                       "text": ["cafÃ©  au lait", None, "  ", "plain text"]})
    stage = Normalize(NormalizeConfig(fix_mojibake=True), RunContext())
    stage.setup()
    kept, rejects, stats = stage.run_partition(df)
    assert kept["text"].tolist() == ["café au lait", "plain text"]
    assert dict(stats.removed) == {"empty_text": 2}


PIECES = st.sampled_from(["a", " ", "\n", "\r\n", "\t", "\x85", "\x80", "\x99", "é", "Ã", "©", "â", "€", "™",
                          "ä", "¸", "\xad", "中", "’", "e\u0301"])


@needs_ftfy
@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=30), st.booleans())
def test_vectorized_equals_reference_with_mojibake_repair(pieces, keep_paragraphs):
    text = "".join(pieces)
    got = normalize_array(pa.array([text], pa.large_string()), keep_paragraphs=keep_paragraphs,
                          fix_mojibake=True)[0].as_py()
    assert got == normalize_text(text, keep_paragraphs=keep_paragraphs, fix_mojibake=True)


def test_nfkc_is_optional():
    assert normalize_text("ﬁne ２０２４") == "ﬁne ２０２４"
    assert normalize_text("ﬁne ２０２４", form="NFKC") == "fine 2024"
    assert normalize_array(pa.array(["ﬁne ２０２４"], pa.large_string()), form="NFKC")[0].as_py() == "fine 2024"


def test_paragraph_breaks_kept_lines_folded():
    text = "Title\r\n\r\n\r\n  First  line\x07 of para\nsecond line\n \n\tNext para  "
    assert normalize_text(text, keep_paragraphs=True) == "Title\n\nFirst line of para\nsecond line\n\nNext para"
    assert normalize_text(text) == "Title\nFirst line of para\nsecond line\nNext para"
