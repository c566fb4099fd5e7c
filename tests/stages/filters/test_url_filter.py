"""URL normalization, the url_filter stage (blacklist + domain tiers) and url_dedup (through the real pipeline)."""

import json

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpupipe.io.parts import part_paths
from gpupipe.stages.base import RunContext
from gpupipe.stages.filters.url_filter import (TRACKING_PARAMS, UrlDedup, UrlFilter, UrlFilterConfig, _normalize_parts,
                                       _params_re, domain_regex, domain_tiers, normalize_url, normalize_url_array,
                                       normalize_url_parts)
from tests.helpers import run_config


@pytest.mark.parametrize("url, expected", [
    # tracking parameters go, the rest are sorted by key
    ("http://a.com/p?utm_source=x&b=2&UTM_Medium=y&a=1&fbclid=z&gclid=w", "http://a.com/p?a=1&b=2"),
    ("http://a.com/p?utm_source=x", "http://a.com/p"),
    ("http://a.com/p?b=1&&a=2&", "http://a.com/p?a=2&b=1"),
    ("http://a.com/p?a=2&a=1&a", "http://a.com/p?a&a=1&a=2"),
    ("http://a.com/p?a-b=1&a=2", "http://a.com/p?a=2&a-b=1"),   # by key first: "a" < "a-b"
    # case: scheme and host lower, path and query kept
    ("HTTP://Example.COM/Some/Path?Q=X", "http://example.com/Some/Path?Q=X"),
    # ports
    ("http://a.com:80/x", "http://a.com/x"), ("https://a.com:443/x", "https://a.com/x"),
    ("http://a.com:443/x", "http://a.com:443/x"), ("http://a.com:8080/", "http://a.com:8080"),
    ("http://a.com:0080/x", "http://a.com/x"), ("http://a.com:/x", "http://a.com/x"),
    # fragments
    ("http://a.com/x#section-2", "http://a.com/x"), ("http://a.com/x?a=1#f?b=2", "http://a.com/x?a=1"),
    # www.
    ("http://www.example.com/", "http://example.com"), ("http://WWW.example.co.uk", "http://example.co.uk"),
    ("http://www.com/", "http://www.com"), ("http://www2.example.com/", "http://www2.example.com"),
    # trailing slashes, trailing dot of the host
    ("http://a.com/x/", "http://a.com/x"), ("http://a.com/x//", "http://a.com/x"), ("http://a.com/", "http://a.com"),
    ("http://a.com./x", "http://a.com/x"),
    # percent escapes: unreserved decoded, the rest upper-cased
    ("http://a.com/%7Euser/%41%62%2d%5f", "http://a.com/~user/Ab-_"),
    ("http://a.com/a%2fb%c3%a9?q=%3d%41", "http://a.com/a%2Fb%C3%A9?q=%3DA"),
    ("http://a.com/x%2F", "http://a.com/x%2F"),   # an escaped slash is not a trailing slash
    # IDNA
    ("https://Bücher.de/x", "https://xn--bcher-kva.de/x"), ("https://xn--bcher-kva.de/x", "https://xn--bcher-kva.de/x"),
    ("http://www.例え.jp/", "http://xn--r8jz45g.jp"),
    # whitespace around, userinfo, IPv6
    ("  http://a.com/x \n", "http://a.com/x"), ("http://u:p@A.com:80/", "http://u:p@a.com"),
    ("http://[::1]:80/x", "http://[::1]/x"),
    # not scheme://...: only trimmed
    ("example.com/x/", "example.com/x/"), ("mailto:a@b.c", "mailto:a@b.c"), ("", ""),
])
def test_normalize_url(url, expected):
    assert normalize_url(url) == expected
    assert normalize_url_array([url]).to_pylist() == [expected]


def test_normalize_url_variants_meet():
    variants = ["https://www.Example.com:443/a/b/?utm_campaign=x&y=2&x=1#top", "https://example.com/a/b?x=1&y=2",
                "https://EXAMPLE.com/a/%62?y=2&fbclid=abc&x=1"]
    assert len({normalize_url(u) for u in variants}) == 1


def test_normalize_url_drop_params_configurable():
    assert normalize_url("http://a.com/?ref=x&utm_source=y", drop_params=["ref"]) == "http://a.com?utm_source=y"
    assert normalize_url("http://a.com/?ref=x&s=1", drop_params=[]) == "http://a.com?ref=x&s=1"
    assert normalize_url_array(["http://a.com/?ref=x&s=1"], drop_params=[]).to_pylist() == ["http://a.com?ref=x&s=1"]


def test_normalize_url_array_nulls_and_types():
    got = normalize_url_array(pd.Series(["HTTP://A.com/", None, "x"], dtype=object))
    assert got.to_pylist() == ["http://a.com", None, "x"]
    assert normalize_url_array(pa.array([None, None])).to_pylist() == [None, None]
    assert normalize_url_array([]).to_pylist() == []


URL_PIECES = st.sampled_from(["a", "B", "Ü", "例", ".", "/", "//", "?", "&", "=", "#", ":", "@", "%", "%41", "%7e",
                              "%2F", "%c3%a9", "%zz", "80", ":80", ":443", "www.", "WWW.", "utm_x=1", "UTM_Y",
                              "gclid", "fbclid=2", " ", "\n", "-", "~", "[::1]", "xn--", "0"])
SCHEMES = st.sampled_from(["http://", "HTTPS://", "ftp://", "ws://", "mailto:", "", "h t://"])


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(SCHEMES, st.lists(URL_PIECES, max_size=25).map("".join)).map("".join), max_size=8))
def test_vectorized_normalize_url_equals_reference(urls):
    """The column version (Arrow kernels, reference only for rare rows) agrees with the reference, row by row."""
    got, hosts = normalize_url_parts(urls)
    expected = [_normalize_parts(u, _params_re(TRACKING_PARAMS)) for u in urls]
    assert got.to_pylist() == [e[0] for e in expected] == [normalize_url(u) for u in urls]
    assert hosts.to_pylist() == [e[1] for e in expected]


@pytest.mark.parametrize("host, tier", [
    ("wikipedia.org", "tier1"), ("en.wikipedia.org", "tier1"), ("notwikipedia.org", "none"),
    ("wikipedia.org.evil.com", "none"), ("github.com", "tier1"), ("gist.github.com", "tier1"),
    ("zhihu.com", "tier2"), ("zhuanlan.zhihu.com", "tier2"),
    ("mit.edu", "tier3"), ("cs.mit.edu", "tier3"), ("edu", "none"), ("edu.cn", "none"),
    ("whitehouse.gov", "tier3"), ("ox.ac.uk", "tier3"), ("www.cs.ox.ac.uk", "tier3"), ("ac.uk", "none"),
    ("ox.ac", "none"), ("example.com", "none"), ("", "none"),
])
def test_seed_domain_tiers(host, tier):
    assert domain_tiers(pa.array([host]), UrlFilterConfig().domain_tiers).tolist() == [tier]


def test_domain_patterns_and_tier_order():
    assert domain_regex("*.edu") == r"^(?:[^.]+\.)*[^.]+(?:\.[^.]+)*\.edu$"
    tiers = {"gold": ["wiki*.org", "a.example.com"], "silver": ["example.com", "*.ac.*"]}
    hosts = pa.array(["wikimedia.org", "wiki.org", "xwiki.org", "a.example.com", "b.a.example.com",
                      "example.com", "b.example.com", "cam.ac.uk", None])
    assert domain_tiers(hosts, tiers).tolist() == ["gold", "gold", "none", "gold", "gold", "silver", "silver",
                                                   "silver", "none"]


def test_url_filter_config_checks():
    with pytest.raises(ValidationError, match="invalid regex"):
        UrlFilterConfig(blacklist=["(unclosed"])
    with pytest.raises(ValidationError, match="bad domain pattern"):
        UrlFilterConfig(domain_tiers={"tier1": ["exa mple.com"]})
    with pytest.raises(ValidationError, match="not 'none'"):
        UrlFilterConfig(domain_tiers={"none": ["a.com"]})
    with pytest.raises(ValidationError):
        UrlFilterConfig(blacklist_typo=[])
    assert UrlFilterConfig(domain_tiers={"t": ["Example.COM"]}).domain_tiers == {"t": ["example.com"]}


def _stage(cls, **params):
    stage = cls(cls.Config(**params), RunContext())
    stage.setup()
    return stage


def test_url_filter_blacklist_tiers_and_missing_urls():
    df = pd.DataFrame({"doc_index": range(10), "text": [f"t{i}" for i in range(10)], "url": [
        "https://en.wikipedia.org/wiki/Cat",             # tier1
        "http://example.com/LOGIN",                       # blacklist, case-insensitive
        "http://x.com/paper.PDF?utm_source=feed",         # blacklist: .pdf$ on the normalized URL
        "http://x.com/paper.pdf#page=2",                  # blacklist: the fragment is gone
        "http://x.com/paper.pdf?download=1",              # kept: the seed's .pdf$ needs the end of the URL
        "http://www.cs.mit.edu/~a",                        # tier3
        None, "",                                          # no URL: kept
        "https://cheap.example.com/buy-now-cheap",        # blacklist: buy.*cheap
        "https://stackoverflow.com/q/1"]})                # tier2
    kept, rejects, stats = _stage(UrlFilter).run_partition(df)
    assert rejects["doc_index"].tolist() == [1, 2, 3, 8]
    assert set(rejects["reason"]) == {"url_blacklist"}
    assert kept["doc_index"].tolist() == [0, 4, 5, 6, 7, 9]
    assert kept["domain_tier"].tolist() == ["tier1", "none", "tier3", "none", "none", "tier2"]
    assert kept["url"].iloc[0] == "https://en.wikipedia.org/wiki/Cat"   # the URL itself is not rewritten
    assert stats.docs_in == stats.docs_out + sum(stats.removed.values())
    assert stats.extra == {"no_url": 2, "domain_tier_tier1": 1, "domain_tier_tier2": 1, "domain_tier_tier3": 1,
                           "domain_tier_none": 3}


def test_url_filter_custom_config_and_no_url_column():
    stage = _stage(UrlFilter, blacklist=[r"/tag/"], domain_tiers={"news": ["bbc.co.uk"]})
    df = pd.DataFrame({"doc_index": [0, 1, 2], "text": ["a", "b", "c"],
                       "url": ["https://www.bbc.co.uk/news/1", "https://blog.com/TAG/x", "https://login.com"]})
    kept, rejects, _ = stage.run_partition(df)
    assert kept["domain_tier"].tolist() == ["news", "none"] and rejects["doc_index"].tolist() == [1]
    kept, rejects, stats = stage.run_partition(pd.DataFrame({"doc_index": [0], "text": ["a"]}))
    assert len(kept) == 1 and stats.extra["no_url"] == 1 and kept["domain_tier"].tolist() == ["none"]
    kept, rejects, stats = stage.run_partition(df.iloc[:0])
    assert len(kept) == 0 and stats.docs_in == 0


def test_url_dedup_keys_skip_missing_urls():
    stage = _stage(UrlDedup)
    df = pd.DataFrame({"doc_index": [5, 6, 7, 8], "text": list("abcd"),
                       "url": ["http://A.com/", None, "http://a.com?utm_source=x", ""]})
    keys = stage.keys(df)
    assert keys["doc_index"].tolist() == [5, 7]
    assert keys["h0"].nunique() == 1 and keys["h1"].nunique() == 1
    assert len(stage.keys(df.assign(url=None))) == 0 and len(stage.keys(df.drop(columns="url"))) == 0


# ------------------------------------------------------------------------------------------------------------------
# Through the pipeline
# ------------------------------------------------------------------------------------------------------------------

@pytest.fixture
def url_stages(monkeypatch):
    """Register the stages for this test (a no-op once gpupipe.stages registers them itself)."""
    from gpupipe.stages import STAGES
    from gpupipe.stages.filters.line_filter import LineFilter

    for cls in (UrlFilter, UrlDedup, LineFilter):
        monkeypatch.setitem(STAGES, cls.name, cls)


def _url_corpus() -> list[dict]:
    hosts = ["https://www.Example.com", "https://example.com:443", "http://example.com", "https://news.org"]
    paths = ["/a", "/a/", "/b", "/a?utm_source=x", "/a#frag", "/b?y=2&x=1", "/b?x=1&y=2&gclid=3", "/login", "/c"]
    records = []
    for i in range(60):
        url = None if i % 11 == 0 else hosts[(i * 7) % 4] + paths[(i * 5) % 9]
        records.append({"id": f"doc-{i}", "text": f"document {i}", **({"url": url} if url else {})})
    return records


@pytest.mark.parametrize("partition_docs", [1, 3, 7])
def test_url_dedup_first_occurrence_wins_whatever_the_partitioning(tmp_path, url_stages, partition_docs):
    records = _url_corpus()
    src = tmp_path / "urls.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    run = run_config(tmp_path, f"p{partition_docs}", src, [{"url_filter": {}}, {"url_dedup": {}}],
                     partition_docs=partition_docs, workers=1)
    kept = pd.concat([pd.read_parquet(p) for p in part_paths(next((run / "stages").glob("*-url_dedup")))])

    expected, seen, blacklisted = [], set(), 0
    for r in records:
        url = r.get("url")
        if url and "login" in url:
            blacklisted += 1
            continue
        key = normalize_url(url) if url else None
        if key is None or key not in seen:
            seen.add(key)
            expected.append(r["id"])
    assert kept["id"].tolist() == expected
    stats = json.loads((run / "stats.json").read_text())
    assert stats["conservation_ok"]
    f, d = stats["stages"][1], stats["stages"][2]
    assert f["removed"] == {"url_blacklist": blacklisted}
    assert d["removed"] == {"duplicate_url": len(records) - blacklisted - len(expected)}
    assert d["extra"]["no_url"] == f["extra"]["no_url"] == sum(1 for r in records if "url" not in r)
    assert d["extra"]["duplicate_url_groups"] > 0
    assert set(kept["domain_tier"]) == {"none"}
