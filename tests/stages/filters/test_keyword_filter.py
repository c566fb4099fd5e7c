"""gpupipe/stages/filters/keyword_filter.py: seed 001's NSFW keyword filter with the shipped en + zh list."""

import pandas as pd
import pytest

from gpupipe.data import path as data_path
from gpupipe.stages.base import RunContext
from gpupipe.stages.filters.keyword_filter import NsfwFilter, NsfwFilterConfig, keyword_regex, read_keywords

PROSE = ("The committee met on Tuesday to review the budget for the new library, the road repairs and the school "
         "lunch programme, and agreed to publish its report before the end of the month. ")


def _stage(**cfg) -> NsfwFilter:
    stage = NsfwFilter(NsfwFilterConfig(**cfg), RunContext())
    stage.setup()
    return stage


def _frame(texts):
    return pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))], "doc_index": range(len(texts)), "text": texts})


def test_shipped_list_is_package_data_with_english_and_chinese_terms():
    terms = read_keywords(data_path("nsfw_keywords.txt"))
    assert "porn" in terms and "色情" in terms and not any(t.startswith("#") for t in terms)
    assert 20 <= len(terms) <= 200        # modest: a curated list, not a dump
    assert NsfwFilterConfig().words_file is None and (NsfwFilterConfig().min_hits, NsfwFilterConfig().min_ratio) == \
        (3, 0.005)


def test_spam_goes_a_mention_stays_and_every_document_is_counted():
    spam_en = "Free porn videos, HD PORN, live sex cams and hentai. Best porn site. " * 3
    spam_zh = "免费色情视频，成人网站大全，裸聊约炮，黄色网站入口。" * 3
    mention = PROSE * 4 + "The council also voted to block porn sites on library computers. " + PROSE * 4
    news_zh = "警方通报了一起利用色情网站实施诈骗的案件，提醒市民提高警惕。" + "市政府今天发布了新的交通规划和公园建设方案。" * 10
    words_inside = "The pornographer chapter of the history of pornhubs? No: Portugal, pornographic? " + PROSE
    kept, rejects, stats = _stage().run_partition(_frame([spam_en, spam_zh, mention, news_zh, words_inside, ""]))
    assert sorted(rejects["id"]) == ["d0", "d1"]
    assert dict(stats.removed) == {"nsfw_keywords": 2}
    assert stats.docs_in == stats.docs_out + sum(stats.removed.values())
    hits = dict(zip(kept["id"], kept["nsfw_hits"]))
    assert hits["d2"] == 1 and hits["d3"] == 1 and hits["d5"] == 0
    assert hits["d4"] == 1          # whole words only: "pornographer" and "pornhubs" are not terms; "pornographic" is
    assert stats.extra["docs_with_nsfw_hits"] == 5


def test_c4_rule_words_file_and_extra_words(tmp_path):
    mention = PROSE + "It was a porn site."
    assert _stage(min_hits=1, min_ratio=0).run_partition(_frame([mention]))[2].removed == {"nsfw_keywords": 1}
    own = tmp_path / "words.txt"
    own.write_text("# mine\nbudget  # a comment\n")
    kept, _, stats = _stage(words_file=str(own), extra_words=["road repairs"], min_hits=2, min_ratio=0) \
        .run_partition(_frame([PROSE, "A porn site."]))
    assert kept["id"].tolist() == ["d1"] and stats.removed == {"nsfw_keywords": 1}


def test_longer_terms_count_once():
    import re
    pattern = keyword_regex(["sex video", "sex videos", "porn"])
    assert pattern.index("sex\\s+videos") < pattern.index("sex\\s+video\\b")
    assert re.findall(pattern.replace("\\b", r"\b"), "sex videos and porn", re.I) == ["sex videos", "porn"]


def test_bad_config_refused_before_any_work(tmp_path):
    from gpupipe.config_base import ConfigError
    from gpupipe.stages import build_stage_configs

    for bad, key in (({"min_hits": 0}, "min_hits"), ({"min_ratio": 2}, "min_ratio"),
                     ({"words_file": str(tmp_path / "missing.txt")}, "words_file"), ({"extra_words": [" "]}, "extra_words")):
        with pytest.raises(ConfigError, match=key):
            build_stage_configs([{"nsfw_filter": bad}], "x.yaml")
