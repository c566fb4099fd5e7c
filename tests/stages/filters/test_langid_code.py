"""langid's `code` label (#34): seed 002's threshold keys (`other` = `default`, `code`), the code detector switched on
by naming `code` (or detect_code), on real source files and docs of the installed packages, with the real lid.176."""

import numpy as np
import pytest
from pydantic import ValidationError

from gpupipe.stages.filters.langid import CODE_MIN_SCORE, LangIdConfig
from tests.helpers import doc_frame, langid_with
from tests.helpers.installed_text import cjk_paragraphs, installed_samples

SEED_002 = {"zh": 0.65, "en": 0.80, "code": 0.50, "other": 0.85}


@pytest.fixture(scope="module")
def texts():
    """Real held-out code files and English docs (.md/.rst, METADATA, licences) of site-packages, 40 of each."""
    samples = [s for s in installed_samples() if s.held_out and s.kind != "docstring"]
    code = [s.text for s in samples if s.label == 1][:40]
    prose = [s.text for s in samples if s.label == 0][:40]
    assert len(code) == len(prose) == 40
    return code, prose


def test_seed_keys_other_is_default_and_code_switches_detection_on():
    cfg = LangIdConfig(min_score=SEED_002)
    assert cfg.min_score == {"zh": 0.65, "en": 0.80, "code": 0.50, "default": 0.85} and cfg.code_on()
    assert LangIdConfig(keep=["zh", "en", "code"]).code_on()
    assert not LangIdConfig().code_on() and not LangIdConfig(keep=["en"]).code_on()
    assert LangIdConfig(detect_code=True).code_on() and not LangIdConfig(min_score=0.5).code_on()
    with pytest.raises(ValidationError, match="`other` or `default`"):
        LangIdConfig(min_score={"en": 0.8, "other": 0.85, "default": 0.9})
    with pytest.raises(ValidationError, match="detect_code is false"):
        LangIdConfig(keep=["en", "code"], detect_code=False)
    with pytest.raises(ValidationError, match="'cdoe'"):     # a misspelt key is still refused
        LangIdConfig(min_score={"cdoe": 0.5})


@pytest.mark.parametrize("level", ["document", "paragraph"])
def test_code_files_are_code_and_docs_are_not(model_stage, texts, level):
    code, prose = texts
    zh = cjk_paragraphs("zh")[:3]
    stage = langid_with(model_stage, min_score=SEED_002, level=level)
    kept, rejects, stats = stage.run_partition(doc_frame(code + prose + zh))
    assert stats.docs_in == stats.docs_out + sum(stats.removed.values())
    out = kept.set_index("id").reindex([f"d{i}" for i in range(len(code) + len(prose) + len(zh))])
    is_code = (out["lang"] == "code").to_numpy()
    assert is_code[:40].mean() >= 0.95 and is_code[40:80].mean() <= 0.05
    assert not is_code[80:].any() and set(out["lang"].iloc[80:].dropna()) <= {"zh"}
    called = out[out["lang"] == "code"]
    assert (called["lang_rule"] == "code").all() and (called["lang_script"] == "").all()
    assert (called["lang_raw"] != "code").all() and called["lang_raw"].notna().all()   # fastText's own label
    assert (called["lang_score"] >= CODE_MIN_SCORE).all()
    assert stats.extra["kept_lang_code"] == len(called) and stats.extra["lang_rule_code"] == len(called)


def test_detection_is_off_unless_code_is_named(model_stage, texts):
    code, _ = texts
    kept, _, _ = langid_with(model_stage, min_score={"en": 0.0, "default": 0.0}).run_partition(doc_frame(code))
    assert "code" not in set(kept["lang"]) and (kept["lang"] == kept["lang_raw"]).any()


def test_code_threshold_applies_to_the_detectors_score(model_stage, texts):
    """`code: s` drops code documents whose P(code) is under s (lang_low_score), as any language's threshold."""
    code, _ = texts
    scored = langid_with(model_stage, detect_code=True, min_score=0.0).transform(doc_frame(code))
    p = scored.loc[scored["lang"] == "code", "lang_score"].to_numpy()
    cut = float(np.median(p))
    kept, rejects, stats = langid_with(model_stage, min_score={"code": cut, "default": 0.0}).run_partition(
        doc_frame(code))
    assert (kept.loc[kept["lang"] == "code", "lang_score"] >= cut).all()
    assert stats.removed.get("lang_low_score", 0) == int((p < cut).sum()) > 0
