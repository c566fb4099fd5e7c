"""Language ID as seed 002 writes it (issue #35, item 3): its per-language thresholds (zh 0.65, en 0.80, other
0.85) are the stage's defaults, and its reading of a document's first 500 characters is one setting away."""

from gpupipe.stages.filters.langid import LangIdConfig
from tests.helpers import doc_frame, langid_with

EN = ("Rivers carve valleys over thousands of years as water erodes rock and carries sediment downstream. "
      "In mountain regions the slope is steep, so the water moves quickly and cuts deep V-shaped valleys. ")
FR = "Le chat dort sur le canapé pendant que les enfants jouent dans le jardin derrière la maison. "
ZH = "数据工程是大模型预训练中非常重要的一个环节，需要仔细处理网页文本，去除广告和导航栏等噪声内容。"


def test_default_thresholds_are_the_seeds():
    assert LangIdConfig().min_score == {"zh": 0.65, "en": 0.80, "default": 0.85}


def test_default_thresholds_decide(model_stage):
    stage = langid_with(model_stage)
    scored = stage.run_partition(doc_frame([EN, ZH]))[0]
    assert scored["lang"].tolist() == ["en", "zh"]
    t = stage.thresholds(scored.assign(lang=["en", "zh"]))
    assert t.tolist() == [0.80, 0.65]
    assert stage.thresholds(scored.assign(lang=["fr", "de"])).tolist() == [0.85, 0.85]


def test_head_sample_reads_the_first_characters_only(model_stage):
    # 500 characters of English, then a long French body: the seed's text[:500] reads English; the spread sample
    # (head, middle, tail) reads mostly French. (Latin script both: the script rules, which read the whole text,
    # would file a mostly Chinese document under zh whatever was sampled.)
    doc = (EN * 3)[:500] + FR * 40
    head = langid_with(model_stage, max_chars=500, sample="head").run_partition(doc_frame([doc]))
    spread = langid_with(model_stage, max_chars=500).run_partition(doc_frame([doc]))
    assert head[0]["lang"].tolist() == ["en"] and spread[0]["lang"].tolist() == ["fr"]
