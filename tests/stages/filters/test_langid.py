"""Language ID with the real lid.176 model: thresholds, short documents, mixed-language documents at document and
paragraph level, one batched predict call."""

import json

import numpy as np
import pytest

from gpupipe.stages.filters.langid import LangId, LangIdConfig, aggregate_paragraphs, spread_sample
from tests.helpers import doc_frame, langid_with

EN = ("Rivers carve valleys over thousands of years as water erodes rock and carries sediment downstream. "
      "In mountain regions the slope is steep, so the water moves quickly and cuts deep V-shaped valleys.")
EN_PARAS = [
    "Rivers carve valleys over thousands of years as water erodes rock and carries sediment downstream.",
    "In mountain regions the slope is steep, so the water moves quickly and cuts deep V-shaped valleys.",
    "Closer to the sea the land flattens and rivers meander, depositing silt that builds fertile plains.",
]
ZH_PARAS = [
    "数据工程是大模型预训练中非常重要的一个环节，需要仔细处理网页文本，去除广告和导航栏等噪声内容。",
    "语言识别通常使用快速文本分类模型，对每个段落分别预测，再按字符数加权汇总成整篇文档的语言。",
    "短文本的置信度普遍偏低，因此需要先做长度过滤，或者为短文本设置更宽松的阈值以免误删。",
]
ZH_LINE = "这是一个很长的中文段落，用来测试文档级别的语言识别是否只看开头的几行文字。"
FR = "Le chat dort sur le canapé pendant que les enfants jouent dans le jardin derrière la maison."


def _run(stage: LangId, texts):
    kept, rejects, stats = stage.run_partition(doc_frame(texts))
    assert stats.docs_in == stats.docs_out + sum(stats.removed.values())
    return kept, rejects, stats


@pytest.mark.parametrize("level", ["document", "paragraph"])
def test_per_language_thresholds_pinned_at_the_score(model_stage, level):
    texts = ["\n".join(EN_PARAS), "\n".join(ZH_PARAS), FR]
    scored = langid_with(model_stage, level=level).transform(doc_frame(texts))
    assert scored["lang"].tolist() == ["en", "zh", "fr"]
    en, zh, fr = scored["lang_score"].tolist()
    at = {"en": en, "zh": zh, "default": fr}                     # each exactly at its document's score: kept
    kept, _, _ = _run(langid_with(model_stage, level=level, min_score=at), texts)
    assert kept["lang"].tolist() == ["en", "zh", "fr"]
    over = {"en": en + 1e-4, "zh": zh + 1e-4, "default": fr + 1e-4}   # just over: all three dropped
    kept, rejects, stats = _run(langid_with(model_stage, level=level, min_score=over), texts)
    assert len(kept) == 0 and dict(stats.removed) == {"lang_low_score": 3}


def test_seed_002_thresholds_and_keep_list(model_stage):
    stage = langid_with(model_stage, keep=["en", "zh"], min_score={"zh": 0.65, "en": 0.80, "default": 0.85})
    kept, rejects, stats = _run(stage, [EN, "\n".join(ZH_PARAS), FR])
    assert kept["lang"].tolist() == ["en", "zh"]
    assert rejects["reason"].tolist() == ["lang_not_kept"] and rejects["lang"].tolist() == ["fr"]


def test_short_documents_are_undetermined_at_the_min_chars_boundary(model_stage):
    just_under, at_limit = "The river runs to the sea now", "The river runs to the sea now."
    assert (len(just_under), len(at_limit)) == (29, 30)
    stage = langid_with(model_stage, min_chars=30)
    scored = stage.transform(doc_frame([just_under, at_limit, "  ", "好", "ok 好评"]))
    # too short for fastText; a short text in Han (no kana) is Chinese by its script alone (the script rules)
    assert scored["lang"].tolist() == ["und", "en", "und", "zh", "zh"]
    assert scored["lang_rule"].tolist() == ["", "", "", "short_script", "short_script"]
    assert scored["lang_raw"].tolist() == ["und", "en", "und", "und", "und"]
    assert scored["lang_score"].tolist()[0] == 0.0 and scored["lang_score"].tolist()[3] == 1.0
    scored = langid_with(model_stage, min_chars=30, script_rules=False).transform(doc_frame(["好"]))
    assert scored["lang"].tolist() == ["und"]                     # without them, as before
    kept, rejects, stats = _run(stage, [just_under, at_limit, "  "])
    assert kept["id"].tolist() == ["d1"] and dict(stats.removed) == {"lang_too_short": 2}


def test_short_documents_can_be_kept_and_the_floor_turned_off(model_stage):
    kept, _, stats = _run(langid_with(model_stage, keep=["en"], min_score=0.9, keep_short=True), ["ok", EN])
    assert kept["lang"].tolist() == ["und", "en"] and not stats.removed
    scored = langid_with(model_stage, min_chars=0).transform(doc_frame(["ok", ""]))
    assert scored["lang"].iloc[0] != "und" and scored["lang"].iloc[1] == "und"


@pytest.mark.parametrize("level", ["document", "paragraph"])
def test_english_document_with_a_chinese_first_line(model_stage, level):
    text = ZH_PARAS[0] + "\n" + "\n".join(EN_PARAS * 2)
    scored = langid_with(model_stage, level=level).transform(doc_frame([text]))
    assert scored["lang"].iloc[0] == "en"
    if level == "paragraph":
        mix = json.loads(scored["lang_mix"].iloc[0])
        assert list(mix) == ["en", "zh"] and mix["en"] > 0.75 and abs(sum(mix.values()) - 1) < 1e-2
        assert scored["lang_score"].iloc[0] > 0.8


@pytest.mark.parametrize("level", ["document", "paragraph"])
def test_chinese_document_with_an_english_title(model_stage, level):
    text = "Data Engineering for Large Language Models: A Practical Guide\n" + "\n".join(ZH_PARAS)
    scored = langid_with(model_stage, level=level).transform(doc_frame([text]))
    assert scored["lang"].iloc[0] == "zh" and scored["lang_score"].iloc[0] > 0.65
    if level == "paragraph":
        assert list(json.loads(scored["lang_mix"].iloc[0])) == ["zh", "en"]


def test_document_level_samples_head_middle_and_tail_not_the_prefix(model_stage):
    text = "\n".join([EN] * 10) + "\n" + "".join([ZH_LINE] * 220)   # 2,000 English chars, then 8,000 Chinese
    prefix = text[:600].replace("\n", " ")
    assert model_stage._model.predict([prefix], k=1)[0][0][0] == "__label__en"   # the old prefix misfiles it
    scored = langid_with(model_stage, max_chars=600).transform(doc_frame([text]))
    assert scored["lang"].iloc[0] == "zh"


def test_spread_sample():
    assert spread_sample("abc", 10) == "abc"
    assert spread_sample("aaaaBBBBcccc", 6) == "aa BB cc"


def test_paragraph_level_predicts_short_line_documents_whole(model_stage):
    lines = "\n".join(["苹果很好吃", "香蕉很甜的", "橘子有点酸", "葡萄是紫色", "西瓜很大个", "草莓红红的", "梨子很脆的"])
    scored = langid_with(model_stage, level="paragraph", min_chars=20).transform(doc_frame([lines]))
    assert scored["lang"].iloc[0] == "zh" and json.loads(scored["lang_mix"].iloc[0]) == {"zh": 1.0}


def test_aggregation_votes_by_characters_among_confident_paragraphs():
    doc = np.array([0, 0, 0, 1, 1])
    lang = np.array(["en", "zh", "fr", "de", "fr"], dtype=object)
    score = np.array([0.9, 0.6, 0.3, 0.2, 0.4])
    chars = np.array([100, 50, 400, 10, 30])
    agg = aggregate_paragraphs(doc, lang, score, chars, min_score=0.5)
    # doc 0: the 400-char French paragraph is not confident, so it does not vote; English has the most characters
    assert agg.loc[0, "lang"] == "en" and agg.loc[0, "lang_score"] == pytest.approx(0.9)
    assert json.loads(agg.loc[0, "lang_mix"]) == {"en": 0.667, "zh": 0.333}
    # doc 1: nothing confident, so every paragraph votes; the score stays low for the thresholds to catch
    assert agg.loc[1, "lang"] == "fr" and agg.loc[1, "lang_score"] == pytest.approx(0.4)


def test_one_kernel_call_per_partition(model_stage):
    """One predict call per partition, plus one for the unsure texts predicted again case-folded."""
    calls = []

    class Spy:
        def predict_buffers(self, data, offsets, **kw):
            calls.append((len(offsets) - 1, kw))
            return model_stage._model.predict_buffers(data, offsets, **kw)

        def get_labels(self):
            return model_stage._model.get_labels()

    caps = "PACIFIC TIMBER CO 1ST QTR NET\nShr 20 cts vs 28 cts\nNet 393,371 vs 555,989\nRevs 3,669,602 vs 3,498,780"
    for level in ("document", "paragraph"):
        for casefold_below, retried in ((0.0, []), (0.5, [1])):
            calls.clear()
            stage = langid_with(model_stage, level=level, casefold_below=casefold_below, paragraph_min_chars=200)
            stage._model = Spy()
            fruit = "\n".join(["苹果", "香蕉", "橘子", "葡萄", "西瓜", "草莓", "桃子", "梨子", "李子", "杏子", "枣子"])
            scored = stage.transform(doc_frame(["\n".join(EN_PARAS), "\n".join(ZH_PARAS), "ok", fruit, caps]))
            # newlines are folded to spaces and long texts sampled in the kernel, as spread_sample(...).replace does
            kw = {"max_chars": 10_000, "newline_is_space": True}
            assert calls == [(4, kw)] + [(n, kw) for n in retried]
            assert scored["lang"].iloc[4] == ("en" if retried else "es")


def test_empty_partition(model_stage):
    for level in ("document", "paragraph"):
        kept, rejects, stats = _run(langid_with(model_stage, level=level), [])
        assert len(kept) == 0 and stats.docs_in == 0


def test_bad_level_is_a_config_error():
    with pytest.raises(ValueError):
        LangIdConfig(level="sentence")
