"""The synthetic crawl is real input: check it with the real parsers, extractor and
language identifier that the pipeline relies on."""

import json
import random
import re
import zlib
from collections import Counter
from pathlib import Path

import pytest

from gpupipe.synth import write_synthetic_crawl
from gpupipe.synth.text import LANGUAGES

ARTICLE_KINDS = ("clean", "pii", "exact_duplicate", "near_duplicate")


def _norm(s: str) -> str:
    return " ".join(s.split())


def _decode(content_type: str | None, body: bytes) -> str:
    m = re.search(r"charset=([\w-]+)", content_type or "")
    return body.decode(m.group(1) if m else "utf-8")


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    """One docs=400 crawl read back with warcio: (summary, truth lines,
    [(record type, record id, HTTP content type, payload)] in file order)."""
    from warcio.archiveiterator import ArchiveIterator

    summary = write_synthetic_crawl(tmp_path_factory.mktemp("crawl") / "crawl.warc.gz", docs=400, seed=0)
    with open(summary["truth"], encoding="utf-8") as fh:
        truth = [json.loads(line) for line in fh]
    records = []
    with open(summary["warc"], "rb") as fh:
        for rec in ArchiveIterator(fh):
            content_type = rec.http_headers.get_header("Content-Type") if rec.http_headers else None
            records.append((rec.rec_type, rec.rec_headers.get_header("WARC-Record-ID"), content_type,
                            rec.content_stream().read()))
    return summary, truth, records


def test_deterministic(tmp_path):
    a = write_synthetic_crawl(tmp_path / "a" / "x.warc.gz", docs=60, seed=3)
    b = write_synthetic_crawl(tmp_path / "b" / "y.warc.gz", docs=60, seed=3)
    c = write_synthetic_crawl(tmp_path / "c" / "x.warc.gz", docs=60, seed=4)
    def read(path: str) -> bytes:
        return Path(path).read_bytes()

    assert read(a["warc"]) == read(b["warc"]) and read(a["truth"]) == read(b["truth"])
    assert read(a["benchmark"]) == read(b["benchmark"]) and a["benchmark"].endswith("x.benchmark.jsonl")
    assert read(a["warc"]) != read(c["warc"]) and read(a["truth"]) != read(c["truth"])
    assert a["truth"].endswith("x.truth.jsonl") and a["pages"] == 60


def test_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        write_synthetic_crawl(tmp_path / "x.warc", docs=10)
    with pytest.raises(ValueError):
        write_synthetic_crawl(tmp_path / "x.warc.gz", docs=0)


def test_parsers_agree_with_summary_and_truth(crawl):
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    summary, truth, records = crawl
    assert summary["records"] == len(truth) == len(records)
    assert [(t["record_type"], t["record_id"]) for t in truth] == [(r[0], r[1]) for r in records]
    assert records[0][0] == "warcinfo"
    assert summary["pages"] == 400 == sum(t["lang"] is not None for t in truth)
    assert sum(summary["by_kind"].values()) == summary["records"]
    assert sum(summary["by_lang"].values()) == summary["pages"]

    with open(summary["warc"], "rb") as fh:
        fast = list(ArchiveIterator(fh, verify_digests=True))  # also checks every block/payload digest
    assert len(fast) == summary["records"]
    assert [r.record_id for r in fast] == [t["record_id"] for t in truth]
    assert [str(r.record_type) for r in fast] == [t["record_type"] for t in truth]
    responses = sum(t["record_type"] == "response" for t in truth)
    assert sum(r.record_type == WarcRecordType.response for r in fast) == responses


def test_one_gzip_member_per_record(crawl):
    summary, truth, _ = crawl
    data, members = Path(summary["warc"]).read_bytes(), 0
    while data:
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)
        d.decompress(data)
        assert d.eof
        data, members = d.unused_data, members + 1
    assert members == len(truth)


def test_kind_and_language_mix(crawl):
    summary, truth, _ = crawl
    pages = [t for t in truth if t["lang"]]
    kinds = Counter(t["kind"] for t in pages)
    assert set(kinds) == {"clean", "exact_duplicate", "near_duplicate", "spam", "pii"}
    shares = {"clean": 0.65, "exact_duplicate": 0.08, "near_duplicate": 0.08, "spam": 0.10, "pii": 0.09}
    for kind, share in shares.items():
        assert abs(kinds[kind] / len(pages) - share) < 0.02, kind
    langs = Counter(t["lang"] for t in pages)
    assert abs(langs["en"] / len(pages) - 0.45) < 0.08  # 40% articles + most spam
    assert abs(langs["zh"] / len(pages) - 0.30) < 0.07
    assert all(langs[code] >= 10 for code in ("fr", "de", "es", "ru"))

    others = Counter((t["kind"], t["http_status"], (t["content_type"] or "").split(";")[0]) for t in truth
                     if t["lang"] is None)
    assert others[("warcinfo", None, "")] == 1 and others[("request", None, "")] > 0
    for content_type in ("image/png", "application/pdf", "application/json"):
        assert others[("non_html", 200, content_type)] > 0
    assert others[("http_error", 404, "text/html")] > 0 and others[("http_error", 301, "text/html")] > 0
    assert summary["by_kind"] == dict(sorted(Counter(t["kind"] for t in truth).items()))


def test_payloads_are_what_they_claim(crawl):
    _, truth, records = crawl
    magic = {"image/png": b"\x89PNG\r\n\x1a\n", "application/pdf": b"%PDF-", "application/json": b"{"}
    for t, (_, _, content_type, body) in zip(truth, records):
        if t["kind"] == "non_html":
            assert body.startswith(magic[t["content_type"]])
        if t["record_type"] == "response":
            assert content_type == t["content_type"]


def test_legacy_charsets_must_be_honored(crawl):
    import trafilatura

    _, truth, records = crawl
    legacy = [(t, r) for t, r in zip(truth, records) if t["lang"] and "utf-8" not in t["content_type"].lower()
              and "charset=" in t["content_type"]]
    assert {t["lang"] for t, _ in legacy} >= {"fr", "ru"}
    for t, (_, _, content_type, body) in legacy:
        with pytest.raises(UnicodeDecodeError):
            body.decode("utf-8")
        text = _decode(content_type, body)
        assert t["content_type"].split("=")[1].lower() in text  # the <meta> agrees with the header
        assert _norm(t["main_text"]) in _norm(trafilatura.extract(text, favor_precision=True))


def test_exact_duplicates(crawl):
    _, truth, records = crawl
    position = {t["record_id"]: i for i, t in enumerate(truth)}
    dups = [t for t in truth if t["kind"] == "exact_duplicate"]
    assert dups
    for t in dups:
        source = truth[position[t["duplicate_of"]]]
        assert position[t["duplicate_of"]] < position[t["record_id"]]
        assert source["kind"] == "clean" and t["main_text"] == source["main_text"]
        assert t["url"] != source["url"]
        assert records[position[t["record_id"]]][3] != records[position[source["record_id"]]][3]
    assert all(t["duplicate_of"] is None for t in truth if t["kind"] not in ("exact_duplicate", "near_duplicate"))


def _shingles(text: str, lang: str, n: int = 5) -> set:
    tokens = list(text.replace("\n", "")) if lang == "zh" else text.split()
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def test_near_duplicates_are_small_edits(crawl):
    _, truth, _ = crawl
    by_id = {t["record_id"]: t for t in truth}
    near = [t for t in truth if t["kind"] == "near_duplicate"]
    assert near
    for t in near:
        source = by_id[t["duplicate_of"]]
        assert source["kind"] == "clean" and source["lang"] == t["lang"]
        a, b = _shingles(t["main_text"], t["lang"]), _shingles(source["main_text"], t["lang"])
        assert 0.6 <= len(a & b) / len(a | b) <= 0.99
        assert t["main_text"].count("\n\n") == source["main_text"].count("\n\n")


def test_pii(crawl):
    _, truth, _ = crawl
    pii_pages = [t for t in truth if t["kind"] == "pii"]
    assert pii_pages
    for t in pii_pages:
        assert len(t["pii"]) >= 2
        assert all(item in t["main_text"] for item in t["pii"])
        assert any("@" in item for item in t["pii"]) and any(re.fullmatch(r"[+\d][\d \-]{8,}", i) for i in t["pii"])
    assert any(re.fullmatch(r"1[3-9]\d{9}", item) for t in pii_pages for item in t["pii"])  # Chinese mobiles
    clean = [t for t in truth if t["kind"] in ("clean", "exact_duplicate", "near_duplicate")]
    assert all(not t["pii"] and "@" not in t["main_text"] for t in clean)


def test_trafilatura_keeps_main_text_and_drops_boilerplate(crawl):
    import trafilatura

    _, truth, records = crawl
    articles = [(t, r) for t, r in zip(truth, records) if t["kind"] in ARTICLE_KINDS]
    sample = random.Random(1).sample(articles, 30)
    assert sum(b"cookie" in body for _, (_, _, _, body) in sample) >= 15  # banners were there to be dropped
    for t, (_, _, content_type, body) in sample:
        html = _decode(content_type, body)
        out = trafilatura.extract(html, favor_precision=True) or ""
        lang = LANGUAGES[t["lang"]]
        if lang.sep:
            words, got = t["main_text"].split(), set(out.split())
            assert sum(w in got for w in words) / len(words) >= 0.9, t["url"]
        else:
            paragraphs = t["main_text"].split("\n\n")
            assert sum(p in out for p in paragraphs) / len(paragraphs) >= 0.9, t["url"]
        for key in ("cookie", "accept", "related", "popular", "rights", "privacy", "newsletter"):
            assert lang.ui[key] not in out, (key, t["url"])
        assert f"{lang.ui['share']} Facebook" not in out


def test_exact_duplicates_extract_identically(crawl):
    import trafilatura

    _, truth, records = crawl
    position = {t["record_id"]: i for i, t in enumerate(truth)}

    def extract(i: int) -> str:
        return _norm(trafilatura.extract(_decode(records[i][2], records[i][3]), favor_precision=True) or "")

    dups = [t for t in truth if t["kind"] == "exact_duplicate"][:10]
    for t in dups:
        assert extract(position[t["record_id"]]) == extract(position[t["duplicate_of"]])


def test_fasttext_identifies_languages(crawl):
    fasttext = pytest.importorskip("fasttext", reason="the [fasttext] extra (in [dev])")
    from gpupipe.stages.filters.langid import default_model_path

    _, truth, _ = crawl
    model = fasttext.load_model(default_model_path())
    articles = [t for t in truth if t["kind"] in ARTICLE_KINDS]
    labels, scores = model.predict([t["main_text"].replace("\n", " ") for t in articles])
    correct = sum(label[0] == f"__label__{t['lang']}" and score[0] >= 0.8
                  for t, label, score in zip(articles, labels, scores))
    assert correct / len(articles) >= 0.97


def test_planted_benchmark_leaks(crawl):
    summary, truth, _ = crawl
    with open(summary["benchmark"], encoding="utf-8") as fh:
        items = {(r["benchmark"], r["item_id"]): r for r in map(json.loads, fh)}
    assert {b for b, _ in items} == {"gsm8k_synth", "mmlu_synth", "cmath_synth"} and len(items) >= 60
    assert all(isinstance(t["leaks"], list) and isinstance(t["repeated_paragraphs"], list) for t in truth)
    leaking = [t for t in truth if t["leaks"]]
    assert len(leaking) == summary["leaks"] >= 6 and {t["lang"] for t in leaking} == {"en", "zh"}
    for t in leaking:
        assert t["kind"] == "clean" and not t["repeated_paragraphs"]
        for leak in t["leaks"]:
            question = items[(leak["benchmark"], leak["item_id"])]["question"]
            # present up to case, punctuation and whitespace
            squash = lambda s: re.sub(r"[\W_]+", "", s.lower())  # noqa: E731
            assert squash(question) in squash(t["main_text"]), (leak, t["main_text"])
    assert all(not t["leaks"] for t in truth if t["kind"] != "clean")


def test_planted_repeated_paragraphs(crawl):
    summary, truth, _ = crawl
    hosts = [t for t in truth if t["repeated_paragraphs"]]
    assert len(hosts) == summary["syndicated"] and 0.01 <= len(hosts) / summary["pages"] <= 0.03
    copies = Counter(p for t in hosts for p in t["repeated_paragraphs"])
    assert len(copies) >= 2 and all(n >= 2 for n in copies.values())
    for t in hosts:
        assert t["kind"] == "clean"
        for p in t["repeated_paragraphs"]:
            assert len(p.encode()) >= 400 and p in t["main_text"].split("\n\n")
