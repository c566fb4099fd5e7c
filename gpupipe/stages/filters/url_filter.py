"""URL stages: `url_filter` (blacklist + domain tiers) and `url_dedup` (one document per
normalized URL, the first in input order).

Both judge the normalized URL. `normalize_url` is the reference, one URL at a time; `normalize_url_array` does the
same on a column with Arrow kernels, and a property test holds them equal. Two per-character mappings have no Arrow
kernel: %-escapes (re-case, decode) and IDNA. They run in Python, but only on the paths/queries holding a '%' and
the non-ASCII hosts, a minority of a crawl.

Normalization: trim; lower-case scheme and host; drop default ports (http 80, https 443, ...) and leading zeros of a
port; drop the fragment; host: strip trailing dots, IDNA-encode, drop a leading "www." when two labels or more
follow ("www.com" stays); path and query: upper-case %-escapes and decode those of unreserved characters
(A-Z a-z 0-9 - . _ ~); strip trailing slashes of the path; query: drop empty and tracking parameters (utm_*, fbclid,
gclid; configurable globs, case-insensitive), sort the rest by (key, parameter). A string that is not
`scheme://authority...` is only trimmed.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator

from gpupipe.config_base import Strict
from gpupipe.stages.base import Applied, MapStage
from gpupipe.stages.dedup.global_stage import BUCKET_COLUMN, GlobalStage, all_but_first

# The user's spec's blacklist (adult, spam, login/signup, legal pages, non-HTML files), as given. They are crude
# (r"register" also hits ".../wiki/Cash_register"); tune per run.
SEED_BLACKLIST = [
    r"\.xxx$", r"\.porn$",
    r"buy.*cheap", r"viagra",
    r"login|signup|register",
    r"terms-of-service|privacy-policy",
    r"\.pdf$|\.doc$|\.ppt$",
]
SEED_DOMAIN_TIERS = {
    "tier1": ["wikipedia.org", "arxiv.org", "github.com"],
    "tier2": ["medium.com", "stackoverflow.com", "zhihu.com"],
    "tier3": ["*.edu", "*.gov", "*.ac.*"],
}
TRACKING_PARAMS = ["utm_*", "fbclid", "gclid"]
NO_TIER = "none"

DEFAULT_PORTS = {"http": "80", "https": "443", "ftp": "21", "ws": "80", "wss": "443"}
_TRIM = " \t\r\n\f\v"
# scheme://[userinfo@]host[:port][/path][?query][#fragment]; the same pattern in Python re (fullmatch) and Arrow's
# RE2 (between ^ and $).
_URL = (r"(?s)(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?:(?P<userinfo>[^/?#@]*)@)?"
        r"(?P<host>\[[^\]/?#]*\]|[^/?#:@]*)(?::(?P<port>[0-9]*))?(?P<path>/[^?#]*)?(?:\?(?P<query>[^#]*))?(?:#.*)?")
_URL_RE = re.compile(_URL)
_WWW = r"^www\.([^.]+\.)"           # "www.example.com" → "example.com", but "www.com" stays
_ESCAPE_RE = re.compile(r"%[0-9A-Fa-f]{2}")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


# ------------------------------------------------------------------------------------------------------------------
# The reference, one URL at a time
# ------------------------------------------------------------------------------------------------------------------

def params_regex(globs: list[str]) -> str | None:
    """Parameter-name globs ("utm_*", "?" and "*" wildcards) as one unanchored regex (None: no globs). Python
    fullmatches it, Arrow gets it between ^ and $ (Python's $ would also match before a final newline)."""
    alts = [re.escape(g).replace(r"\*", "(?s:.*)").replace(r"\?", "(?s:.)") for g in globs]
    return "|".join(f"(?:{a})" for a in alts) or None


def _params_re(globs: list[str]) -> re.Pattern | None:
    regex = params_regex(globs)
    return re.compile(regex, re.IGNORECASE) if regex else None


def _canonical_host(host: str) -> str:
    host = host.lower().rstrip(".")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:  # not a valid IDN (a label too long, ...): keep it lower-cased
            pass
    return re.sub(_WWW, r"\1", host)


def _canonical_escapes(s: str) -> str:
    def one(m: re.Match) -> str:
        ch = chr(int(m.group()[1:], 16))
        return ch if ch in _UNRESERVED else m.group().upper()
    return _ESCAPE_RE.sub(one, s)


def _canonical_query(query: str, drop: re.Pattern | None) -> str:
    params = [p for p in query.split("&") if p and not (drop and drop.fullmatch(p.split("=", 1)[0]))]
    return "&".join(sorted(params, key=lambda p: (p.split("=", 1)[0], p)))


def _normalize_parts(url: str, drop: re.Pattern | None) -> tuple[str, str]:
    """(normalized URL, its host); host "" when the URL does not parse."""
    url = url.strip(_TRIM)
    m = _URL_RE.fullmatch(url)
    if not m:
        return url, ""
    scheme = m["scheme"].lower()
    host = _canonical_host(m["host"])
    port = re.sub(r"^0+(?=[0-9])", "", m["port"] or "")
    if port == DEFAULT_PORTS.get(scheme):
        port = ""
    path = _canonical_escapes(m["path"] or "").rstrip("/")
    query = _canonical_query(_canonical_escapes(m["query"] or ""), drop)
    return (f"{scheme}://" + (f"{m['userinfo']}@" if m["userinfo"] else "") + host + (f":{port}" if port else "")
            + path + (f"?{query}" if query else "")), host


def normalize_url(url: str, drop_params: list[str] = TRACKING_PARAMS) -> str:
    """The canonical form of one URL (see the module docstring)."""
    return _normalize_parts(url, _params_re(drop_params))[0]


# ------------------------------------------------------------------------------------------------------------------
# The column version
# ------------------------------------------------------------------------------------------------------------------

def _as_string_array(values) -> pa.Array:
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values, from_pandas=True)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr.cast(pa.large_string()) if not pa.types.is_large_string(arr.type) else arr


def _query_array(query: pa.Array, drop_regex: str | None) -> pa.Array:
    """Drop empty and tracking parameters, sort the rest by (key, parameter): on all parameters of all rows at once."""
    lists = pc.split_pattern(query, "&")
    flat, parent = pc.list_flatten(lists), pc.list_parent_indices(lists)
    key = pc.list_element(pc.split_pattern(flat, "=", max_splits=1), 0)
    keep = pc.greater(pc.binary_length(flat), 0)
    if drop_regex:
        keep = pc.and_(keep, pc.invert(pc.match_substring_regex(key, f"^(?:{drop_regex})$", ignore_case=True)))
    params = pa.table({"parent": parent, "key": key, "param": flat}).filter(keep)
    params = params.sort_by([("parent", "ascending"), ("key", "ascending"), ("param", "ascending")])
    counts = np.bincount(params["parent"].to_numpy(), minlength=len(query))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, params["param"].combine_chunks()),
                            pa.scalar("&", pa.large_string()))
    return joined


def _ls(s: str | None) -> pa.Scalar:
    return pa.scalar(s, pa.large_string())


def _prefixed(prefix: str, arr: pa.Array, suffix: str = "") -> pa.Array:
    """prefix + arr + suffix where arr is non-empty, else ""."""
    joined = pc.binary_join_element_wise(_ls(prefix), arr, _ls(suffix), _ls(""))
    return pc.if_else(pc.equal(pc.binary_length(arr), 0), _ls(""), joined)


def _map_rows(out: pa.Array, source: pa.Array, mask: pa.Array, fn) -> pa.Array:
    """`out` with the rows where `mask` is set replaced by fn(source row): Python, for the rare rows needing it."""
    rows = np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))
    if not len(rows):
        return out
    where = np.zeros(len(out), dtype=bool)
    where[rows] = True
    return pc.replace_with_mask(out, pa.array(where), pa.array([fn(v) for v in source.take(rows).to_pylist()],
                                                               out.type))


def normalize_url_parts(urls, drop_params: list[str] = TRACKING_PARAMS) -> tuple[pa.Array, pa.Array]:
    """(normalized URLs, hosts) of a column; nulls stay null (host null too)."""
    raw = pc.utf8_trim(_as_string_array(urls), _TRIM)
    m = pc.extract_regex(raw, f"^{_URL}$")
    parsed = pc.fill_null(pc.is_valid(m), False)
    field = {name: pc.fill_null(pc.struct_field(m, name), _ls(""))
             for name in ("scheme", "userinfo", "host", "port", "path", "query")}
    scheme = pc.utf8_lower(field["scheme"])
    host = pc.replace_substring_regex(pc.replace_substring_regex(pc.utf8_lower(field["host"]), r"\.+$", ""),
                                      _WWW, r"\1")
    host = _map_rows(host, field["host"], pc.invert(pc.string_is_ascii(field["host"])), _canonical_host)  # IDNA
    port = pc.replace_substring_regex(field["port"], r"^0+([0-9])", r"\1")
    default = pa.array(np.zeros(len(raw), dtype=bool))
    for name, number in DEFAULT_PORTS.items():
        default = pc.or_(default, pc.and_(pc.equal(scheme, name), pc.equal(port, number)))
    port = pc.if_else(default, _ls(""), port)
    path, query = ([_map_rows(field[k], field[k], pc.match_substring(field[k], "%"), _canonical_escapes)
                   for k in ("path", "query")])
    path = pc.replace_substring_regex(path, r"/+$", "")
    query = _query_array(query, params_regex(drop_params))
    out = pc.binary_join_element_wise(scheme, _ls("://"), _prefixed("", field["userinfo"], "@"), host,
                                      _prefixed(":", port), path, _prefixed("?", query), _ls(""))
    out, host = pc.if_else(parsed, out, raw), pc.if_else(parsed, host, _ls(""))
    valid = pc.is_valid(raw)
    return pc.if_else(valid, out, _ls(None)), pc.if_else(valid, host, _ls(None))


def normalize_url_array(urls, drop_params: list[str] = TRACKING_PARAMS) -> pa.Array:
    """`normalize_url` on a column (Arrow array, pandas Series or list); nulls stay null."""
    return normalize_url_parts(urls, drop_params)[0]


def _url_column(df: pd.DataFrame) -> pa.Array:
    """The `url` column with "" as null (no URL); all null when the frame has none."""
    if "url" not in df.columns:
        return pa.nulls(len(df), pa.large_string())
    arr = _as_string_array(df["url"])
    return pc.if_else(pc.equal(pc.utf8_trim(arr, _TRIM), ""), _ls(None), arr)


# ------------------------------------------------------------------------------------------------------------------
# Domain tiers
# ------------------------------------------------------------------------------------------------------------------

_DOMAIN_PATTERN = re.compile(r"^[a-z0-9_*-]+(\.[a-z0-9_*-]+)*$")


def domain_regex(pattern: str) -> str:
    """A domain pattern → an anchored regex on a host. "wikipedia.org" matches it and its subdomains; a label "*"
    stands for one or more labels ("*.edu" matches mit.edu and cs.mit.edu, "*.ac.*" matches ox.ac.uk); a "*" inside
    a label for any characters of that label."""
    labels = []
    for label in pattern.split("."):
        labels.append(r"[^.]+(?:\.[^.]+)*" if label == "*" else re.escape(label).replace(r"\*", "[^.]*"))
    return r"^(?:[^.]+\.)*" + r"\.".join(labels) + "$"


def domain_tiers(hosts: pa.Array, tiers: dict[str, list[str]]) -> np.ndarray:
    """Per host, the first tier (in config order) with a matching pattern, else "none"."""
    out = np.full(len(hosts), NO_TIER, dtype=object)
    open_ = np.ones(len(hosts), dtype=bool)
    hosts = pc.fill_null(hosts, _ls(""))
    for tier, patterns in tiers.items():
        if not patterns:
            continue
        regex = "|".join(f"(?:{domain_regex(p)})" for p in patterns)
        hit = pc.match_substring_regex(hosts, regex).to_numpy(zero_copy_only=False) & open_
        out[hit] = tier
        open_ &= ~hit
    return out


# ------------------------------------------------------------------------------------------------------------------
# Stages
# ------------------------------------------------------------------------------------------------------------------

def check_re2(pattern: str) -> str:
    """Fail at config time, naming the key, when Arrow's RE2 cannot compile a pattern."""
    try:
        pc.match_substring_regex(pa.array([""]), pattern)
    except pa.ArrowInvalid as e:
        raise ValueError(f"invalid regex {pattern!r}: {e}") from None
    return pattern


class UrlNormConfig(Strict):
    drop_query_params: list[str] = Field(default_factory=lambda: list(TRACKING_PARAMS),
                                         description="query parameter names to drop (globs, case-insensitive)")


class UrlFilterConfig(UrlNormConfig):
    blacklist: list[str] = Field(default_factory=lambda: list(SEED_BLACKLIST),
                                 description="regexes searched in the normalized URL, case-insensitively")
    domain_tiers: dict[str, list[str]] = Field(default_factory=lambda: {k: list(v) for k, v in
                                                                        SEED_DOMAIN_TIERS.items()})

    @field_validator("blacklist")
    @classmethod
    def _compiles(cls, v: list[str]) -> list[str]:
        return [check_re2(p) for p in v]

    @field_validator("domain_tiers")
    @classmethod
    def _domains(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        out = {}
        for tier, patterns in v.items():
            if tier == NO_TIER or not re.fullmatch(r"[A-Za-z0-9_]+", tier):
                raise ValueError(f"tier name {tier!r}: letters, digits and '_' only, and not {NO_TIER!r}")
            out[tier] = [p.lower() for p in patterns]
            bad = [p for p in out[tier] if not _DOMAIN_PATTERN.match(p)]
            if bad:
                raise ValueError(f"tier {tier!r}: bad domain pattern(s) {bad} (labels of a-z 0-9 - _ *, "
                                 "non-ASCII domains in punycode)")
        return out


class UrlFilter(MapStage):
    """Drops blacklisted URLs (reason `url_blacklist`) and adds `domain_tier`; documents without a URL are kept."""

    name = "url_filter"
    Config = UrlFilterConfig

    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        """`domain_tier` added; blacklisted URLs dropped (computed together: nothing is kept on the stage)."""
        norm, host = normalize_url_parts(_url_column(df), self.config.drop_query_params)
        if self.config.blacklist:
            regex = "|".join(f"(?:{p})" for p in self.config.blacklist)
            hit = pc.match_substring_regex(norm, regex, ignore_case=True)
            blacklisted = pc.fill_null(hit, False).to_numpy(zero_copy_only=False)
        else:
            blacklisted = np.zeros(len(df), dtype=bool)
        df = df.assign(domain_tier=pd.Series(domain_tiers(host, self.config.domain_tiers), index=df.index,
                                             dtype=object))
        return Applied(df, pd.Series(np.where(blacklisted, "url_blacklist", None), index=df.index, dtype=object))

    def extra_stats(self, df_out: pd.DataFrame) -> Counter:
        c = Counter({"no_url": int(pc.sum(pc.is_null(_url_column(df_out))).as_py() or 0)})
        c.update({f"domain_tier_{t}": int(n) for t, n in df_out["domain_tier"].value_counts().items()})
        return c


class UrlDedupConfig(UrlNormConfig):
    pass


class UrlDedup(GlobalStage):
    """One document per normalized URL: the first in input order (smallest `doc_index`) stays, whatever the
    partitioning. Keys are the `text_hash` (128 bits) of the normalized URL; documents without a URL have no key, so
    they are never URL duplicates. The user's spec's Bloom filter would also drop ~0.1% of unique pages (false
    positives) and keep whichever copy a worker saw first; exact keys through the exchange do neither."""

    name = "url_dedup"
    Config = UrlDedupConfig

    def key_columns(self) -> list[str]:
        return ["doc_index", "url"]   # a part without urls: doc_index alone, every document without a key

    def keys(self, df: pd.DataFrame) -> pd.DataFrame:
        from gpupipe.kernels.text_hash import text_hash

        norm = normalize_url_array(_url_column(df), self.config.drop_query_params)
        has = pc.is_valid(norm).to_numpy(zero_copy_only=False)
        h = text_hash(norm.filter(has), device=self.ctx.device)
        return pd.DataFrame({"h0": h[:, 0], "h1": h[:, 1], "doc_index": df["doc_index"].to_numpy()[has],
                             BUCKET_COLUMN: h[:, 0]})

    def resolve(self, keys: pd.DataFrame) -> tuple[pd.DataFrame, Counter]:
        return all_but_first(keys, "duplicate_url", "duplicate_url_groups")

    def extra_stats(self, df_out: pd.DataFrame) -> Counter:
        # Documents without a URL are never removed here, so counting them among the kept counts them all.
        return Counter({"no_url": int(pc.sum(pc.is_null(_url_column(df_out))).as_py() or 0)})
