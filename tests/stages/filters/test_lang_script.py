"""The langid stage's script-aware correction, with the real lid.176 model and real Unicode / OpenCC data: the
script counting kernel, the script rules, case folding, Chinese varieties (merge, Hans/Hant), short texts,
per-length thresholds, FineWeb2's per-language thresholds (two passes, through `gpupipe run`), paragraph level."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from gpupipe.kernels.script_share import script_counts
from gpupipe.stages.filters import lang_script as ls
from gpupipe.stages.base import RunContext
from gpupipe.stages.filters.langid import LangId, LangIdConfig, LangIdTwoPass, fineweb2_threshold
from tests.helpers import doc_frame, langid_with, run_config, write_jsonl

ZH_HANS = "今天天气很好，我们去公园散步吧。公园里有很多人在跑步，还有小朋友在放风筝。"
ZH_HANT = "這家餐廳的服務態度很好，環境也不錯。臺灣的夜市非常熱鬧，小吃種類繁多。"
CLASSICAL = "天下皆知美之為美，斯惡已；皆知善之為善，斯不善已。"            # lid.176: ja
YUE = "我哋今日去咗飲茶，啲點心好好食，你有冇興趣一齊去？佢話聽日唔使返工。"     # lid.176: yue
JA = "東京都の天気は晴れです。明日は雨が降るでしょう。私は毎朝コーヒーを飲んでから会社に行きます。"
KO = "오늘 날씨가 정말 좋네요. 공원에 산책하러 갈까요? 저녁에는 친구들과 같이 밥을 먹을 거예요."
ZH_SHORT_JA = "价格实惠，性价比高"                                    # lid.176: ja
ZH_SHORT_EN = "房间很干净"                                           # lid.176: en
# An earnings table in the style of a 1980s newswire (company invented): lid.176 says es, on lowercase en
CAPS = "PACIFIC TIMBER CO 1ST QTR NET\nShr 20 cts vs 28 cts\nNet 393,371 vs 555,989\nRevs 3,669,602 vs 3,498,780"
EN = ("Rivers carve valleys over thousands of years as water erodes rock and carries sediment downstream. "
      "In mountain regions the slope is steep, so the water moves quickly and cuts deep V-shaped valleys.")


def _counts(texts) -> np.ndarray:
    return ls.count_scripts(pa.array(texts, pa.large_string()))


# -- the script table, the kernel ---------------------------------------------------------------------------------

def test_script_classes_of_real_characters():
    table = ls.script_table()
    expect = {"说": ls.HANS, "發": ls.HANT, "中": ls.HAN, "干": ls.HAN, "の": ls.KANA, "ア": ls.KANA, "ｱ": ls.KANA,
              "한": ls.HANGUL, "a": ls.LATIN, "é": ls.LATIN, "Ｚ": ls.LATIN, "я": ls.CYRILLIC, "α": ls.OTHER,
              "ก": ls.OTHER, "、": ls.NONE, "・": ls.NONE, "1": ls.NONE, " ": ls.NONE, "😀": ls.NONE}
    assert {c: int(table[ord(c)]) for c in expect} == expect
    simplified, traditional = ls.opencc_only_sets()
    assert len(simplified) > 2000 and len(traditional) > 2000 and not simplified & traditional
    assert "干" not in simplified | traditional       # 干 → 干 幹 乾: a simplified form of itself, so shared


def test_kernel_counts_code_points_per_class_and_skips_class_0_and_malformed_bytes():
    texts = ["这是中文", "日本語のテキスト。", "", "ab 한국! Zürich"]
    counts = _counts(texts)
    # 这 is simplified-only, 語 traditional-only in OpenCC's tables; 是中文日本 are shared; 。 ! and spaces: class 0
    assert counts.tolist() == [[0, 3, 1, 0, 0, 0, 0, 0, 0], [0, 2, 0, 1, 5, 0, 0, 0, 0], [0] * 9,
                               [0, 0, 0, 0, 0, 2, 8, 0, 0]]
    data = np.frombuffer("中".encode() + b"\xff\xe4" + "a".encode(), np.uint8)   # a stray byte, a cut sequence
    got = script_counts(data, np.array([0, len(data)], np.int64), ls.script_table(), ls.N_CLASSES)
    assert got.tolist() == [[0, 1, 0, 0, 0, 0, 1, 0, 0]]
    bad = ls.script_table().copy()
    bad[ord("1")] = ls.OTHER                                           # two classes of ASCII characters
    with pytest.raises(ValueError, match="ASCII"):
        script_counts(data, np.array([0, len(data)], np.int64), bad, ls.N_CLASSES)
    sliced = pa.array(["xx", "中文", "yy"], pa.large_string()).slice(1, 1)           # offsets not from 0
    assert ls.count_scripts(sliced)[0, ls.HAN] == 2


def test_script_language_of_real_sentences():
    quoting = "《卡美拉》（原名：ガメラ大怪獣空中決戦）是1995年上映的日本怪兽电影，讲述巨大的乌龟怪兽保护人类的故事。"
    texts = [ZH_HANS, ZH_HANT, JA, KO, EN, "这个iPhone很好用，推荐购买", quoting, "Apple Watch Series 9 智能手表"]
    lang, share = ls.script_language(_counts(texts))
    assert lang.tolist() == [ls.ZH, ls.ZH, ls.JA, ls.KO, ls.OTHER_SCRIPT, ls.ZH, ls.ZH_OR_JA, ls.OTHER_SCRIPT]
    assert share[0] == 1.0 and share[4] == 0.0 and 0.5 <= share[5] < 1
    assert ls.han_variant(_counts([ZH_HANS, ZH_HANT, "中文"])).tolist() == ["Hans", "Hant", "Hani"]


# -- the stage ----------------------------------------------------------------------------------------------------

def test_script_rules_correct_fasttext_and_keep_it_where_the_script_agrees(model_stage):
    texts = [CLASSICAL, ZH_SHORT_JA, ZH_SHORT_EN, JA, KO, ZH_HANS, EN, YUE]
    scored = langid_with(model_stage, min_chars=0).transform(doc_frame(texts))
    assert scored["lang_raw"].tolist() == ["ja", "ja", "en", "ja", "ko", "zh", "en", "yue"]
    assert scored["lang"].tolist() == ["zh", "zh", "zh", "ja", "ko", "zh", "en", "zh"]
    assert scored["lang_rule"].tolist() == ["no_kana", "no_kana", "han", "", "", "", "", "merge"]
    assert scored["lang_script"].tolist() == ["Hant", "Hans", "Hans", "", "", "Hans", "", "Hant"]
    # a corrected label's score is its script's share of the letters; an agreeing one keeps fastText's
    assert scored["lang_score"].iloc[0] == 1.0 and 0.9 < scored["lang_score"].iloc[3] < 1.0001
    off = langid_with(model_stage, min_chars=0, script_rules=False, merge={}).transform(doc_frame(texts))
    assert off["lang"].tolist() == off["lang_raw"].tolist() == scored["lang_raw"].tolist()
    assert set(off["lang_rule"]) == {""} and set(off["lang_script"]) == {""}


def test_hangul_is_korean_and_kana_is_japanese_whatever_fasttext_says():
    # fastText's labels given, the script decides: the rule only, on real text
    names = ["ja", "zh", "ko", "en", "wuu"]          # the labels of the five texts below
    family = ls.label_families(names)
    script, _ = ls.script_language(_counts([KO, JA, ZH_HANS, ZH_HANS, ZH_HANS]))
    assert [ls.RULES[r] for r in ls.script_rules(family, script)] == ["hangul", "kana", "no_hangul", "han", ""]


def test_casefold_retry_when_unsure(model_stage):
    scored = langid_with(model_stage).transform(doc_frame([CAPS, EN]))
    assert scored["lang_raw"].tolist() == ["es", "en"] and scored["lang"].tolist() == ["en", "en"]
    assert scored["lang_rule"].tolist() == ["casefold", ""]
    assert langid_with(model_stage, casefold_below=0).transform(doc_frame([CAPS]))["lang"].tolist() == ["es"]


def test_merge_of_chinese_varieties_is_configurable(model_stage):
    texts = [YUE, ZH_HANT]
    assert langid_with(model_stage).transform(doc_frame(texts))["lang"].tolist() == ["zh", "zh"]
    unmerged = langid_with(model_stage, merge={}).transform(doc_frame(texts))
    assert unmerged["lang"].tolist() == ["yue", "zh"] and unmerged["lang_script"].tolist() == ["Hant", "Hant"]
    kept, rejects, stats = langid_with(model_stage, merge={}, keep=["zh"]).run_partition(doc_frame(texts))
    assert kept["id"].tolist() == ["d1"] and dict(stats.removed) == {"lang_not_kept": 1}


def test_rule_counts_cover_every_document_kept_or_not(model_stage):
    stage = langid_with(model_stage, min_chars=0, keep=["ja"])
    kept, rejects, stats = stage.run_partition(doc_frame([CLASSICAL, ZH_SHORT_EN, JA, YUE]))
    assert kept["lang"].tolist() == ["ja"] and stats.docs_in == stats.docs_out + sum(stats.removed.values())
    assert {k: v for k, v in stats.extra.items() if k.startswith("lang_rule_")} == {
        "lang_rule_no_kana": 1, "lang_rule_han": 1, "lang_rule_merge": 1}


def test_min_score_by_length_caps_the_threshold_of_short_documents(model_stage):
    texts = ["宝贝收到了", ZH_HANS + ZH_HANS]               # 5 and 76 characters
    scored = langid_with(model_stage, min_chars=0).transform(doc_frame(texts))
    short_score = scored["lang_score"].iloc[0]
    assert short_score < 0.9 and scored["lang_rule"].iloc[0] == ""    # fastText said zh: its score stands
    strict = dict(min_chars=0, min_score=0.9)
    _, _, stats = langid_with(model_stage, **strict).run_partition(doc_frame(texts))
    assert stats.removed["lang_low_score"] >= 1
    kept, _, _ = langid_with(model_stage, **strict, min_score_by_length={10: short_score}).run_partition(doc_frame(texts))
    assert "d0" in kept["id"].tolist()                     # under 10 characters: at most its own score asked
    over = langid_with(model_stage, **strict, min_score_by_length={5: short_score})    # 5 is not under 5
    assert "d0" not in over.run_partition(doc_frame(texts))[0]["id"].tolist()


@pytest.mark.parametrize("level", ["document", "paragraph"])
def test_japanese_and_chinese_pages_at_both_levels(model_stage, level):
    ja_page = "\n".join([JA, "会社概要", JA.replace("東京", "大阪"), "お問い合わせ"])
    zh_page = "\n".join([CLASSICAL * 2, ZH_HANT, "Data Engineering for Large Language Models: A Practical Guide"])
    scored = langid_with(model_stage, level=level).transform(doc_frame([ja_page, zh_page, KO + "\n" + KO]))
    assert scored["lang"].tolist() == ["ja", "zh", "ko"]
    assert scored["lang_script"].tolist() == ["", "Hant", ""]
    if level == "paragraph":
        # fastText: the classical paragraph pl, the English title en (the most characters), the other zh; the
        # script rule files the classical one under zh, which then has the most
        assert scored["lang_raw"].iloc[1] == "en" and scored["lang_rule"].iloc[1] == "han"
        assert list(json.loads(scored["lang_mix"].iloc[1])) == ["zh", "en"]


def test_bad_configs_are_refused_before_any_work():
    with pytest.raises(ValueError, match="merge.*'wu'"):
        LangIdConfig(merge={"zh": ["wu"]})
    with pytest.raises(ValueError, match="merged into one other only"):
        LangIdConfig(merge={"zh": ["wuu"], "yue": ["wuu"]})
    with pytest.raises(ValueError, match="at least 1 character"):
        LangIdConfig(min_score_by_length={0: 0.5})
    with pytest.raises(ValueError):
        LangIdConfig(min_score="fineweb")
    with pytest.raises(ValueError):
        LangIdConfig(min_score_by_length={30: 1.5})
    assert LangIdConfig(merge={"zh": ["wuu", "yue"]}, keep=["zh"]).merge == {"zh": ["wuu", "yue"]}


# -- min_score: fineweb2 ------------------------------------------------------------------------------------------

def test_fineweb2_threshold_formula():
    s = np.array([0.5, 0.7, 0.9])
    assert fineweb2_threshold(s, np.ones(3)) == round(0.7 - np.std(s), 4)
    assert fineweb2_threshold(np.array([0.5, 0.7, 0.9]), np.array([1, 1, 3])) == round(
        0.9 - np.std([0.5, 0.7, 0.9, 0.9, 0.9]), 4)
    flat = np.array([0.41, 0.62, 0.62, 0.75, 0.8, 0.97])                  # an even count: the two middle ones
    v, c = np.unique(flat, return_counts=True)
    assert fineweb2_threshold(v, c) == round(np.median(flat) - np.std(flat), 4)
    assert fineweb2_threshold(np.array([1.0]), np.array([7])) == 0.9       # clamped to [0.3, 0.9]
    assert fineweb2_threshold(np.array([0.1, 0.2]), np.array([1, 1])) == 0.3


def test_fineweb2_runs_as_two_passes_and_reports_its_thresholds(tmp_path, model_stage):
    assert isinstance(LangId(LangIdConfig(min_score="fineweb2"), RunContext()), LangIdTwoPass)
    assert type(LangId(LangIdConfig(), RunContext())) is LangId
    en = [EN, EN.replace("Rivers", "Glaciers"), CAPS, "The meeting is on Monday at ten in the main hall of the school.",
          "Please send the report to the office before the end of the week, thank you."]
    zh = [ZH_HANS, ZH_HANT, "我们明天去学校看看新的图书馆和操场", YUE, CLASSICAL,
          "质量不错，物流也很快，下次还会再来购买。"]
    texts = [t for pair in zip(en * 3, zh * 3) for t in pair] + [JA, KO]
    src = write_jsonl(tmp_path / "in.jsonl", texts)
    run = run_config(tmp_path, "fw2", src, [{"langid": {"min_score": "fineweb2"}}], partition_docs=5)
    stage = json.loads((run / "stats.json").read_text())["stages"][1]
    assert stage["name"] == "langid" and stage["partitions"] == 7
    scored = langid_with(model_stage).transform(doc_frame(texts))
    expect = {}
    for lang, s in scored.groupby("lang")["lang_score"]:
        v, c = np.unique(s.to_numpy(), return_counts=True)
        expect[lang] = fineweb2_threshold(v, c)
    assert {k.removeprefix("min_score_"): v for k, v in stage["extra"].items() if k.startswith("min_score_")} == expect
    low = int((scored["lang_score"].to_numpy() < scored["lang"].map(expect).to_numpy()).sum())
    assert low > 0 and stage["removed"] == {"lang_low_score": low}
    assert stage["docs_in"] == len(texts) == stage["docs_out"] + low
    rules = scored["lang_rule"].astype(str)
    assert {k: v for k, v in stage["extra"].items() if k.startswith("lang_rule_")} == {
        f"lang_rule_{k}": v for k, v in rules[rules != ""].value_counts().items()}
    kept = pd.concat([pd.read_parquet(p) for p in sorted((run / "stages").glob("*langid/part-*.parquet"))])
    assert {"lang_raw", "lang_rule", "lang_script"} <= set(kept.columns) and len(kept) == stage["docs_out"]
    assert "min_score_zh" in (run / "report.html").read_text(encoding="utf-8")   # the report's extra counters


@pytest.mark.parametrize("min_score", [0.65, "fineweb2"])
def test_no_partition_state_on_two_threads(tmp_path, monkeypatch, min_score):
    """Both forms of the stage, their partitions interleaved on one cached instance: the same files and stats."""
    from gpupipe.stages.filters import langid as langid_module
    from gpupipe.run.tasks import fusable
    from tests.helpers.interleave import assert_no_partition_state, check_interleaved, write_parts

    texts = [EN, CAPS, ZH_HANS, ZH_HANT, CLASSICAL, YUE, JA, KO, ZH_SHORT_JA, ZH_SHORT_EN, "ok", "好评"] * 2
    inputs = write_parts(tmp_path / "in", [doc_frame(texts).iloc[k::4] for k in range(4)])
    s = LangId(LangIdConfig(min_score=min_score), RunContext())
    assert fusable(s) == (min_score != "fineweb2")       # the one-pass stage still fuses with its neighbours
    res = check_interleaved(s, inputs, tmp_path, monkeypatch, gate=[(langid_module, "count_scripts")])
    rules = {k: v for k, v in res["alone"]["extra"].items() if k.startswith("lang_rule_")}
    assert res["alone"]["docs_in"] == len(texts) and rules == {
        "lang_rule_short_script": 8, "lang_rule_merge": 2, "lang_rule_casefold": 2}
    assert_no_partition_state(res["instance"], allowed=("config", "ctx", "_model"))
