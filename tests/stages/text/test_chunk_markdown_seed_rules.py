"""gpupipe/stages/text/chunk_markdown.py against seed 004's rule_filter and chunk ids: too short below 100 effective
characters (MIN_SIZE), worthless titles by substring (参考文献与延伸阅读, "References and further reading"), and the
recipe's md5 chunk ids on request."""

import hashlib
import re

import pandas as pd
import pytest

from gpupipe.config_base import ConfigError
from gpupipe.stages.base import RunContext
from gpupipe.stages.text.chunk_markdown import (ChunkMarkdown, ChunkMarkdownConfig, RuleFilter, chunk_document,
                                                load_chunk_config, rules_of)

BODY = ("SQL injection happens when user input reaches a query unescaped. Parameterised queries keep data and code "
        "apart, and an allow-list of columns covers the rest. ") * 3
ZH_BODY = "目录遍历漏洞是指攻击者通过构造包含点点斜杠的路径读取网站目录之外的文件。防御方法是规范化路径并校验其前缀。" * 3


def seed_effective(text: str) -> int:
    """The recipe's `len(re.sub(r"[\\s#*\\-|\\[\\]()]", "", text))`."""
    return len(re.sub(r"[\s#*\-|\[\]()]", "", text))


def test_too_short_below_the_recipes_100_effective_characters():
    assert ChunkMarkdownConfig().min_effective_chars == 100 == RuleFilter().min_effective_chars
    text = "# Note\n\n" + "word " * 16     # 64 effective characters: kept under the old 50, too short now
    assert 50 <= seed_effective(text) < 100
    assert RuleFilter().reason(text) == "too_short"
    text = "# Note\n\n" + "word " * 26     # 104: kept, as by the recipe
    assert seed_effective(text) >= 100 and RuleFilter().reason(text) is None


@pytest.mark.parametrize("title", ["参考文献与延伸阅读", "References and further reading", "7. 致谢和资助",
                                   "Acknowledgements & funding", "目录"])
def test_worthless_titles_by_their_parts(title):
    rules = RuleFilter()
    assert rules.reason(f"## {title}\n\n{BODY}") == "worthless_section"          # as the chunk's first line
    assert rules.reason(BODY, ("Paper", title)) == "worthless_section"           # as its section's heading
    assert RuleFilter(title_match="exact").reason(f"## {title}\n\n{BODY}") == (
        "worthless_section" if title == "目录" else None)                         # whole titles only: kept before


def test_parts_keep_titles_that_only_contain_a_worthless_word_the_seed_rule_drops_them():
    for title in ("目录遍历漏洞", "API reference guide", "Contents of a TLS handshake"):
        assert RuleFilter().reason(f"## {title}\n\n{ZH_BODY}") is None, title
    seed = RuleFilter(title_match="seed")      # the recipe's `any(k in first_line for k in DROP_TITLES)`
    assert seed.reason(f"## 目录遍历漏洞\n\n{ZH_BODY}") == "worthless_section"
    assert seed.reason(f"## 参考文献与延伸阅读\n\n{ZH_BODY}") == "worthless_section"
    assert seed.reason(f"## references and further reading\n\n{BODY}") is None   # case-sensitive, as written
    # a long first line (prose) is not a title: a part of it is not judged
    assert RuleFilter().reason("We thank the reviewers, and acknowledgements go to the lab. " + BODY) is None


def test_a_references_section_is_chunked_apart_and_dropped_in_the_stage():
    md = f"# Paper\n\n{BODY}\n\n## References and further reading\n\n" + "\n\n".join(
        f"{i}. A. Author. A study of things, part {i}. Journal of Examples, 20{i:02d}." for i in range(12))
    stage = ChunkMarkdown(ChunkMarkdownConfig(), RunContext())
    stage.setup()
    df = pd.DataFrame({"id": ["paper.md"], "doc_index": [0], "text": [md], "source_path": ["docs/paper.md"]})
    kept, rejects, stats = stage.run_partition(df)
    assert kept["text"].str.contains("Parameterised").all() and not kept["text"].str.contains("Journal").any()
    assert dict(stats.removed) == {"worthless_section": 1}


def test_seed_chunk_ids_on_request():
    md = f"# One\n\n{BODY}\n\n# Two\n\n{ZH_BODY}\n\n# Three\n\n{BODY.replace('SQL', 'LDAP')}"
    cfg = ChunkMarkdownConfig(chunk_size=400, min_size=50, chunk_ids="seed")
    doc = chunk_document(md, "reports/2024/paper.md", cfg, rules_of(cfg))
    assert len(doc.records) >= 3
    for i, r in enumerate(doc.records):   # the recipe: hashlib.md5(f"{source}-{i}-{text[:64]}".encode()).hexdigest()[:12]
        assert r["id"] == hashlib.md5(f"paper.md-{i}-{r['text'][:64]}".encode()).hexdigest()[:12]
    default = chunk_document(md, "reports/2024/paper.md", ChunkMarkdownConfig(chunk_size=400, min_size=50),
                             rules_of(cfg))
    assert [len(r["id"]) for r in default.records] == [16] * len(doc.records)   # gpupipe's stays the default


def test_bad_settings_refused():
    for bad in ({"title_match": "fuzzy"}, {"chunk_ids": "md5"}, {"min_effective_chars": -1}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            load_chunk_config(None, bad)
