"""Every registered station (and the read stage), built with a small real config on real inputs of 4 partitions,
through the interleave check (tests/helpers/interleave.py): its worker tasks two at a time on two threads, taking
turns, on one cached instance, give the same files and stats as the stage run alone. A station registered in
`gpupipe.stages.STAGES` without a case here fails, so a new one is checked from the day it is registered."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpupipe.io import parts as io_parts
from gpupipe.stages import STAGES
from gpupipe.stages.base import Applied, RunContext
from gpupipe.stages.phases import APPLY, Phase, PhasedStage
from tests.helpers import near_copy_texts
from tests.helpers.interleave import assert_no_partition_state, check_interleaved, write_parts

PARTS = 4

# ----------------------------------------------------------------------------- inputs

NOUNS = ("river", "library", "teacher", "garden", "city", "scientist", "village", "museum", "engine", "forest",
         "student", "bridge", "market", "harbor", "mountain", "painter", "council", "orchard", "theory", "school",
         "farmer", "doctor", "island", "valley", "station", "castle", "lake", "factory", "poet", "sailor")
ADJS = ("old", "quiet", "busy", "famous", "small", "ancient", "modern", "careful", "bright", "local", "northern",
        "narrow", "gentle", "wealthy", "distant")
VERBS = ("describes", "visits", "protects", "explains", "supports", "follows", "improves", "studies", "builds",
         "remembers", "crosses", "watches")
LINKS = ("However,", "In addition,", "For example,", "Over time,", "As a result,", "Later,", "In many cases,")
ZH = ("今天的天气非常好，我们一起去公园散步。", "这座城市有很多历史悠久的博物馆和图书馆。", "老师认真地给学生们讲解数学题。",
      "河流从山上流下来，穿过美丽的村庄。", "科学家们正在研究新的能源技术。", "市场上的水果又新鲜又便宜。",
      "他每天早上都会读一个小时的书。", "这个小镇以传统的手工艺品而闻名。", "孩子们在操场上开心地玩耍。",
      "经济的发展改变了人们的生活方式。", "医生建议大家多运动、少熬夜。", "古老的桥梁见证了这座城市的变迁。")
GSM_QUESTION = ("Tara has 12 red apples and buys 7 green apples at the farm market on Sunday. She gives half of all "
                "her apples to her cousin. How many apples does Tara keep for herself?")
BOILERPLATE = ("Subscribe to our newsletter to receive the latest stories from the valley every week, read our "
               "editorial guidelines before you write to the editors, and remember that every article on this "
               "site is reviewed by two members of the council before it is published online.")
SPAM = ("buy", "cheap", "free", "casino", "discount", "download", "click", "best", "price", "win", "bonus", "deal")


def sentence(rng: random.Random) -> str:
    s = (f"the {rng.choice(ADJS)} {rng.choice(NOUNS)} {rng.choice(VERBS)} the {rng.choice(NOUNS)} near the "
         f"{rng.choice(ADJS)} {rng.choice(NOUNS)}.")
    return f"{rng.choice(LINKS)} {s}" if rng.random() < 0.4 else s[0].upper() + s[1:]


def en_article(rng: random.Random, paragraphs: int = 3) -> str:
    return "\n\n".join(" ".join(sentence(rng) for _ in range(rng.randint(4, 7))) for _ in range(paragraphs))


def zh_article(rng: random.Random) -> str:
    return "\n\n".join("".join(rng.choice(ZH) for _ in range(rng.randint(4, 8))) for _ in range(3))


def near_copy(text: str) -> str:
    words = text.split(" ")
    words[len(words) // 2] = "changed"
    return " ".join(words)


def web_corpus() -> pd.DataFrame:
    """English and Chinese pages with urls, language and source: near and exact copies, url duplicates, a shared
    boilerplate paragraph, blacklisted urls, junk, PII, a benchmark leak, boilerplate lines."""
    rng = random.Random(29)
    rows = []

    def add(text, url, lang="en", source="web"):
        rows.append({"url": url, "text": text, "lang": lang, "source": source})

    en = [en_article(rng) for _ in range(16)]
    zh = [zh_article(rng) for _ in range(8)]
    for i, t in enumerate(en):
        wiki = i % 4 == 0
        url = f"https://en.wikipedia.org/wiki/Page_{i}" if wiki else f"https://news.example.com/story/{i}"
        if i % 5 == 1:
            t += "\n\nCOPYRIGHT ALL RIGHTS RESERVED BY EXAMPLE NEWS\nShare\nClick here"
        add(t, url, source="wiki" if wiki else "web")
    for i, t in enumerate(zh):
        add(t, f"https://www.zhihu.com/question/{i}", lang="zh")
    for i in (0, 3, 6, 9, 12, 15):
        add(near_copy(en[i]), f"https://mirror.example.net/copy/{i}")
    add(en[2], "https://copies.example.org/2")
    add(en[5], "https://copies.example.org/5")
    add(zh[1], "https://copies.example.org/zh1", lang="zh")
    add(en_article(rng), "https://news.example.com/story/5?utm_source=feed")      # url duplicates
    add(en_article(rng), "https://News.Example.com/story/6#top")
    add(en_article(rng), "https://news.example.com/login?next=/story")          # blacklisted
    add(en_article(rng), "https://files.example.com/report.pdf")
    add("Home | Login | Register | Contact | About", "https://junk.example.com/1")
    add("ok", "https://junk.example.com/2")
    add(" ".join(rng.choice(SPAM) for _ in range(40)), "https://junk.example.com/3")
    add(en_article(rng, 1) + " Write to jane.doe@example.com or call +1 415-555-0134 before Friday.",
        "https://people.example.com/jane")
    add(zh_article(rng) + "邮箱：li.wei@163.com，电话：13812345678。", "https://people.example.com/li", lang="zh")
    for i in range(3):
        add(en_article(rng, 2) + "\n\n" + BOILERPLATE, f"https://valley.example.com/{i}")
    add(en_article(rng, 1) + " " + GSM_QUESTION + " " + en_article(rng, 1), "https://forum.example.com/leak")
    add(GSM_QUESTION.upper(), "https://forum.example.com/leak2")
    add(en_article(rng), None)                                                   # no url
    df = pd.DataFrame(rows)
    df.insert(0, "doc_index", np.arange(len(df), dtype=np.int64))
    df.insert(0, "id", [f"d{i}" for i in range(len(df))])
    return df


def html_page(rng: random.Random, i: int) -> str:
    paras = "".join(f"<p>{' '.join(sentence(rng) for _ in range(rng.randint(2, 4)))}</p>\n" for _ in range(4))
    return (f"<html><head><title>Story {i}</title><meta charset=\"utf-8\"></head><body>\n"
            "<nav><a href=\"/\">Home</a> <a href=\"/news\">News</a> <a href=\"/about\">About us</a></nav>\n"
            f"<article><h1>The {rng.choice(NOUNS)} of story {i}</h1>\n{paras}"
            "<table><tr><th>Town</th><th>People</th></tr><tr><td>Ash</td><td>1200</td></tr></table></article>\n"
            "<footer>Copyright 2024 Example News. Privacy policy. Terms of use.</footer></body></html>")


def html_frame() -> pd.DataFrame:
    rng = random.Random(3)
    pages = [html_page(rng, i) for i in range(14)]
    pages += ["<html><body><nav>Home</nav></body></html>", "not html at all", ""]   # nothing to extract
    pages.append(f"<html><body>{'<div>' * 5}{ZH[0] * 20}{'</div>' * 5}</body></html>")
    return pd.DataFrame({"id": [f"p{i}" for i in range(len(pages))], "doc_index": np.arange(len(pages)),
                         "url": [f"https://news.example.com/p/{i}" for i in range(len(pages))], "html": pages})


def markdown_frame() -> pd.DataFrame:
    rng = random.Random(4)
    docs = []
    for i in range(12):
        sections = [f"## Part {k}\n\n" + "\n\n".join(" ".join(sentence(rng) for _ in range(rng.randint(3, 9)))
                                                     for _ in range(rng.randint(1, 4))) for k in range(3)]
        code = "```python\nfor i in range(3):\n    print(i)\n```"
        refs = "## References\n\n1. A book. 2. A paper."
        docs.append(f"# Notes {i}\n\n" + "\n\n".join(sections) + f"\n\n{code}\n\n{refs}")
    docs += ["", "# Title only", "## 参考文献\n\n" + "".join(ZH) * 3]
    return pd.DataFrame({"id": [f"m{i}" for i in range(len(docs))], "doc_index": np.arange(len(docs)),
                         "text": docs})


def words_frame() -> pd.DataFrame:
    """Documents of random words w0..w2999 (the tiny encoder's vocabulary): near copies, and two exact copies."""
    texts = near_copy_texts(32, seed=11)
    texts += [texts[1], texts[20]]
    return pd.DataFrame({"id": [f"w{i}" for i in range(len(texts))], "doc_index": np.arange(len(texts)),
                         "text": texts})


def split(df: pd.DataFrame) -> list[pd.DataFrame]:
    """PARTS partitions, round robin: copies land in other partitions than their originals."""
    return [df.iloc[k::PARTS] for k in range(PARTS)]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("interleave-data")
    return {"root": root,
            "web": write_parts(root / "web", split(web_corpus())),
            "html": write_parts(root / "html", split(html_frame())),
            "markdown": write_parts(root / "markdown", split(markdown_frame())),
            "words": write_parts(root / "words", split(words_frame()))}


# ----------------------------------------------------------------------------- models, index, earlier stages

ENCODER_WORDS = [f"w{i}" for i in range(3000)]


@pytest.fixture(scope="module")
def classifier_model(tmp_path_factory) -> Path:
    """test_classifier's tiny BERT: random weights, a WordPiece vocabulary of the words' documents."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from gpupipe.models.tiny import make_encoder

    return make_encoder(tmp_path_factory.mktemp("classifier") / "model", words=ENCODER_WORDS, max_positions=128,
                        seed=3)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    """test_semantic's bag-of-words BERT: no transformer layers, zero position and type embeddings (near copies
    embed close together), random weights."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from tests.helpers import bag_of_words_encoder

    return bag_of_words_encoder(tmp_path_factory.mktemp("encoder") / "model", ENCODER_WORDS, max_positions=256)


@pytest.fixture(scope="module")
def fasttext_model(tmp_path_factory) -> str:
    """A tiny fastText quality classifier trained here: articles (positive) against spam and link lists."""
    from gpupipe.stages.filters.model_quality import train_quality_classifier

    d = tmp_path_factory.mktemp("quality")
    rng = random.Random(5)
    (d / "good.jsonl").write_text("".join(json.dumps({"text": en_article(rng, 2)}) + "\n" for _ in range(120)))
    bad = [" ".join(rng.choice(SPAM) for _ in range(rng.randint(15, 40))) if k % 2 else
           " ".join(f"http://{rng.choice(SPAM)}-{rng.randint(1, 999)}.com/{rng.choice(SPAM)}" for _ in range(8))
           for k in range(120)]
    (d / "bad.txt").write_text("\n".join(bad) + "\n")
    out = str(d / "quality.bin")
    train_quality_classifier(str(d / "good.jsonl"), str(d / "bad.txt"), out, seed=0, bucket=20_000, dim=16,
                             epochs=10)
    return out


# A hand-written bigram model over a few of the corpus' words (log10 probabilities; unlisted words are <unk>).
ARPA = """\\data\\
ngram 1=9
ngram 2=4

\\1-grams:
-1.5\t<unk>\t0
-99\t<s>\t-0.30103
-0.7\t</s>\t0
-0.6\tthe\t-0.2
-1.2\tnear\t-0.1
-1.3\triver\t-0.1
-1.3\tcity\t-0.1
-1.1\tof\t-0.1
-1.4\tin\t-0.1

\\2-grams:
-0.3\t<s> the
-0.5\tthe river
-0.5\tthe city
-0.4\tnear the

\\end\\
"""


@pytest.fixture(scope="module")
def arpa(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("kenlm") / "tiny.arpa"
    path.write_text(ARPA)
    return str(path)


@pytest.fixture(scope="module")
def decontam_index(tmp_path_factory) -> str:
    from gpupipe.stages.filters.decontam import decontam_index_main

    d = tmp_path_factory.mktemp("decontam")
    gsm = d / "test.jsonl"
    gsm.write_text(json.dumps({"question": GSM_QUESTION, "answer": "#### 10"}) + "\n")
    assert decontam_index_main(["--out", str(d / "index.parquet"), f"gsm8k={gsm}"]) == 0
    return str(d / "index.parquet")


TOKENIZE = {"vocab_size": 300, "min_frequency": 0}
MIXTURE = {"sources": {"web": {"weight": 0.6, "epochs": 1.5}, "wiki": {"weight": 0.4, "epochs": 2.0}}}


def _build(name: str, params: dict, ctx: RunContext | None = None):
    cls = STAGES[name]
    return cls(cls.Config.model_validate(params), ctx or RunContext())


@pytest.fixture(scope="module")
def tokenized(data) -> Path:
    """The web corpus through tokenize (its parts and tokenizer.json): mixture's input."""
    from tests.helpers import run_stage

    out = data["root"] / "stages" / "01-tokenize"
    run_stage(_build("tokenize", TOKENIZE), data["web"], out)
    return out


@pytest.fixture(scope="module")
def mixed(tokenized) -> Path:
    """tokenize's output through mixture (parts with `copies`, the ledger, the tokenizer): pack's input."""
    from tests.helpers import run_stage

    out = tokenized.parent / "02-mixture"
    run_stage(_build("mixture", MIXTURE), sorted(tokenized.glob("part-*.parquet")), out, prev=tokenized)
    return out


# ----------------------------------------------------------------------------- the cases


def removed(res) -> int:
    return sum(res["alone"]["removed"].values())


def check(stage, inputs, tmp, monkeypatch, allowed=(), **kw) -> dict:
    """check_interleaved, then no per-partition state on the shared instance (`allowed`: its loaded resources)."""
    res = check_interleaved(stage, inputs, tmp, monkeypatch, **kw)
    if res["instance"] is not None:
        assert_no_partition_state(res["instance"], allowed=("config", "ctx", *allowed))
    assert res["alone"]["docs_in"] > 0
    return res


def case_extract(data, request, tmp, mp):
    res = check(_build("extract", {}), data["html"], tmp, mp, allowed=("_extract",))
    assert res["alone"]["docs_out"] >= 14 and removed(res) >= 1


def case_chunk_markdown(data, request, tmp, mp):
    res = check(_build("chunk_markdown", {"chunk_size": 400, "min_size": 60}), data["markdown"], tmp, mp,
                allowed=("_rules", "_judge"))
    assert res["alone"]["extra"]["docs_added"] > 0 and removed(res) > 0


def case_normalize(data, request, tmp, mp):
    check(_build("normalize", {"fix_mojibake": True}), data["web"], tmp, mp)


def case_langid(data, request, tmp, mp):
    """Both forms: the one-pass map station and `min_score: fineweb2` (a score phase, then APPLY)."""
    one = check(_build("langid", {"keep": ["en", "zh"], "min_score": 0.5}), data["web"], tmp / "one", mp,
                allowed=("_model",))
    two = check(_build("langid", {"min_score": "fineweb2"}), data["web"], tmp / "two", mp, allowed=("_model",))
    assert removed(one) > 0 and removed(two) > 0


def case_url_filter(data, request, tmp, mp):
    res = check(_build("url_filter", {}), data["web"], tmp, mp)
    assert res["alone"]["removed"].get("url_blacklist") == 2


def case_nsfw_filter(data, request, tmp, mp):
    res = check(_build("nsfw_filter", {"extra_words": ["click here"], "min_hits": 1, "min_ratio": 0}), data["web"],
                tmp, mp, allowed=("_pattern",))
    assert 0 < removed(res) < res["alone"]["docs_in"]


def case_line_filter(data, request, tmp, mp):
    res = check(_build("line_filter", {}), data["web"], tmp, mp, allowed=("_rules",))
    assert res["alone"]["bytes_out"] < res["alone"]["bytes_in"]


def case_doc_filter(data, request, tmp, mp):
    assert removed(check(_build("doc_filter", {}), data["web"], tmp, mp)) > 0


def case_quality(data, request, tmp, mp):
    assert removed(check(_build("quality", {}), data["web"], tmp, mp)) > 0


def case_quality_classifier(data, request, tmp, mp):
    model = request.getfixturevalue("fasttext_model")
    res = check(_build("quality_classifier", {"model": model, "min_score": 0.5}), data["web"], tmp, mp,
                allowed=("_model",))
    assert removed(res) > 0


def case_perplexity(data, request, tmp, mp):
    if importlib.util.find_spec("kenlm") is None:
        pytest.skip("kenlm not installed (pip install kenlm)")
    model = request.getfixturevalue("arpa")
    res = check(_build("perplexity", {"model": model, "max_perplexity": 18.0}), data["web"], tmp, mp,
                allowed=("_model", "min_perplexity", "max_perplexity", "bucket_cuts"))
    assert 0 < removed(res) < res["alone"]["docs_in"]


def case_classifier(data, request, tmp, mp):
    """min_score at the median score (a random model's scores are all near 0.5): half the documents go."""
    from tests.helpers import set_up

    model = request.getfixturevalue("classifier_model")
    params = {"model": str(model), "max_length": 48}
    kept, _, _ = set_up(_build("classifier", params)).run_partition(words_frame())
    params["min_score"] = float(kept["model_score"].median())
    res = check(_build("classifier", params), data["words"], tmp, mp, allowed=("_encoder", "_labels", "_label"))
    assert 0 < removed(res) < res["alone"]["docs_in"]


def case_pii(data, request, tmp, mp):
    res = check(_build("pii", {}), data["web"], tmp, mp)
    assert res["alone"]["extra"]["docs_with_pii"] == 2


def case_url_dedup(data, request, tmp, mp):
    res = check(_build("url_dedup", {}, RunContext(shuffle_buckets=3)), data["web"], tmp, mp)
    assert res["alone"]["removed"] == {"duplicate_url": 2}


def case_exact_dedup(data, request, tmp, mp):
    res = check(_build("exact_dedup", {}, RunContext(shuffle_buckets=3)), data["web"], tmp, mp)
    assert res["alone"]["removed"] == {"exact_duplicate": 3}
    para = check(_build("exact_dedup", {"level": "paragraph"}, RunContext(shuffle_buckets=3)), data["web"],
                 tmp / "paragraph", mp)
    assert para["alone"]["extra"]["paragraphs_removed"] > 0 and para["alone"]["bytes_out"] < para["alone"]["bytes_in"]


def case_fuzzy_dedup(data, request, tmp, mp):
    """The defaults, and the bands in two rounds of exchange (a route phase)."""
    for params in ({}, {"band_groups": 2}):
        res = check(_build("fuzzy_dedup", params, RunContext(shuffle_buckets=3)), data["web"],
                    tmp / str(len(params)), mp)
        assert res["alone"]["removed"].get("near_duplicate", 0) >= 6


def case_simhash_dedup(data, request, tmp, mp):
    res = check(_build("simhash_dedup", {}, RunContext(shuffle_buckets=3)), data["web"], tmp, mp)
    assert res["alone"]["removed"].get("near_duplicate", 0) >= 3


def case_semantic_dedup(data, request, tmp, mp):
    model = request.getfixturevalue("encoder")
    stage = _build("semantic_dedup", {"model": str(model), "threshold": 0.85, "max_length": 256, "n_clusters": 2},
                   RunContext(shuffle_buckets=3, seed=7))
    res = check(stage, data["words"], tmp, mp, allowed=("_lock", "_encoder"))
    assert removed(res) >= 16


def case_substring_dedup(data, request, tmp, mp):
    """One group of partitions, and groups of a few KB (the cross-group phases)."""
    for group_bytes in (2**28, 6000):
        res = check(_build("substring_dedup", {"group_bytes": group_bytes}, RunContext(shuffle_buckets=3)),
                    data["web"], tmp / str(group_bytes), mp)
        assert res["alone"]["extra"]["docs_modified"] > 0


def case_decontaminate(data, request, tmp, mp):
    index = request.getfixturevalue("decontam_index")
    res = check(_build("decontaminate", {"index": index, "policy": "cut"}), data["web"], tmp, mp,
                allowed=("index",))
    assert res["alone"]["extra"]["docs_with_leaks"] == 2


def case_tokenize(data, request, tmp, mp):
    res = check(_build("tokenize", TOKENIZE), data["web"], tmp, mp, allowed=("_tok",))
    assert "tokenizer.json" in res["other_files"]


def case_mixture(data, request, tmp, mp):
    prev = request.getfixturevalue("tokenized")
    res = check(_build("mixture", MIXTURE), sorted(prev.glob("part-*.parquet")), tmp, mp, prev=prev)
    assert "mixture.json" in res["other_files"] and removed(res) > 0


def case_pack(data, request, tmp, mp):
    """Pack is one driver phase (no worker task to pair): the check asserts so, and compares its shards."""
    prev = request.getfixturevalue("mixed")
    res = check(_build("pack", {"seq_len": 32, "megatron": True, "blocks_per_shard": 8}),
                sorted(prev.glob("part-*.parquet")), tmp, mp, prev=prev, paired=False)
    assert any(k.startswith("shards/shard-") for k in res["other_files"])


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


@pytest.mark.parametrize("name", sorted(STAGES))
def test_stage_interleaved_on_one_instance(name, data, request, tmp_path, monkeypatch):
    if name not in CASES:
        pytest.fail(f"station '{name}' is registered in gpupipe.stages.STAGES but has no case in {__file__}: add "
                    f"case_{name}(data, request, tmp, monkeypatch), building it on real inputs of {PARTS} partitions")
    CASES[name](data, request, tmp_path, monkeypatch)


def test_read_stage_interleaved_on_one_instance(tmp_path, monkeypatch):
    """The read stage (built by the engine, not registered): one task per input file, several files."""
    from gpupipe.stages.read import InputConfig, ReadStage

    rng = random.Random(6)
    files = []
    for f in range(5):
        path = tmp_path / "in" / f"f{f}.jsonl"
        path.parent.mkdir(exist_ok=True)
        lines = [json.dumps({"id": f"f{f}-{i}", "text": en_article(rng, 1), "url": f"https://e.com/{f}/{i}"})
                 for i in range(7)]
        lines.insert(3, "{not json")
        path.write_text("\n".join(lines) + "\n")
        files.append(str(path))
    stage = ReadStage.of(InputConfig(path=files), RunContext(), (3, 1 << 20))
    res = check(stage, [], tmp_path, monkeypatch, allowed=("resolved", "partitioning"))
    assert res["alone"]["docs_out"] == 35 and removed(res) == 5 and res["pairs"] == 2
    assert len([k for k in res["files"] if k.startswith("part-")]) == 15


# ----------------------------------------------------------------------------- the check catches a phase task's state

def _count_rows(stage, task):
    # kept on the stage across a gated call (an exchange put): the other thread's turn comes between
    stage.rows = io_parts.read_part(task.item)
    task.exchange.put("seen", task.index, pd.DataFrame({"seen": [True]}))
    task.exchange.put("rows", task.index, pd.DataFrame({"n": [len(stage.rows)]}))


def _rows_of(stage, task):
    return int(task.exchange.get("rows", task.index)["n"].iloc[0])


class _StatefulPhases(PhasedStage):
    name = "_stateful_phases"

    def phases(self):
        return [Phase("count", _count_rows), Phase("apply", _rows_of, over=APPLY)]

    def apply_partition(self, df, info=None):
        return Applied(df.assign(rows=info))


def test_the_check_catches_state_kept_in_a_phase_task(tmp_path, monkeypatch):
    inputs = write_parts(tmp_path / "in", [pd.DataFrame({"id": [f"d{i}" for i in range(n)], "doc_index": range(n),
                                                         "text": ["x"] * n}) for n in (1, 2, 3, 4)])
    with pytest.raises(AssertionError, match="rows"):
        check_interleaved(_StatefulPhases(_StatefulPhases.Config(), RunContext()), inputs, tmp_path, monkeypatch)
