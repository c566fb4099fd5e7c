"""PII redaction (e-mail, phone, Chinese resident ID, IP and card numbers replaced by placeholders), with
validation so that ordinary numbers survive.

The user's spec (`redact_pii`) replaces every match of six bare regexes; they also hit years, prices, order numbers
and version strings (`\\d{17}[\\dXx]` is any 18-digit run, `\\+?1?\\d{10,11}` any 10-11 digit run). Here each type
is a regex that finds a candidate plus a check that decides whether it really is one: a Luhn checksum for cards;
province, calendar date and ISO 7064 MOD 11-2 check digit for Chinese resident IDs; a digit count for phone numbers;
`ipaddress` for IPv6. Those checks are arithmetic the regex engine cannot do, so they run in Python, but only on
candidate documents: one Arrow (RE2) pass over the whole column finds the documents where some type *could* match
(each type's `prefilter` is a superset of its regex), and per type another pass over just those, so most text never
reaches Python's `re`.

Types keep the spec's names (`phone_us` covers North-American and any `+country` number) plus `ipv6` and `ssn`
(seed 001 §2.3.5: US Social Security Numbers, AAA-GG-SSSS with dashes, area not 000/666/9xx, group not 00, serial
not 0000; a bare 9-digit run is any number). Placeholders: [EMAIL_REDACTED], [PHONE_REDACTED], [ID_REDACTED],
[CARD_REDACTED], [IP_REDACTED], [SSN_REDACTED]; `placeholder_names: seed` gives seed 002's `[{TYPE}_REDACTED]`
spelling ([PHONE_CN_REDACTED], [ID_CARD_CN_REDACTED], [CREDIT_CARD_REDACTED], [IP_ADDRESS_REDACTED] for both IP
types, ...); `placeholders:` overrides either per type.

Overlaps: types run one after another in the fixed order of PII_TYPES, each on the text the earlier ones left, so
an earlier type wins any overlap. The order is most specific first, and longer before shorter: e-mail (its local
part may hold a phone number), IPv6, IPv4, the 18-character resident ID, 13-19 digit cards, then phones. A
placeholder holds no digit, '@', ':' or '.', so no later type can match inside it. The order in the config's `types`
list does not matter.

Known limits: Chinese landlines (029-83938886) are not a type; dotted prices such as "1.8.8.8" are valid IPv4
addresses and get redacted; an 11-digit number starting 1[3-9] (an order number) reads as a mobile number.

Counts per type are columns `pii_<type>` (signals as columns: `drop_if_more_than` can be re-tuned from them);
`extra_stats` sums them over the documents kept, as `redacted_<type>`, plus `docs_with_pii`.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from dataclasses import dataclass
from datetime import date
from typing import Callable, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator

from gpupipe.config_base import Strict
from gpupipe.stages.base import MapStage

PiiTypeName = Literal["email", "ipv6", "ip_address", "id_card_cn", "credit_card", "ssn", "phone_us", "phone_cn"]

# ---------------------------------------------------------------------------- boundaries
# ASCII only, written out: Python's \w also matches Han characters, and "电话13812345678" must still match.
_L = r"(?<![A-Za-z0-9_])"           # not glued to a word on the left
_R = r"(?![A-Za-z0-9_])"            # ... nor on the right
_NUM_L = r"(?<!\d[.,\-])"           # not the tail of a longer number: "3.14", "1,234", "2023-1234..."
_NUM_R = r"(?![.,\-]\d)"            # not the head of one


def _compile(pattern: str) -> re.Pattern:
    # re.ASCII: \d is [0-9] (int() of a match is safe; full-width digits are NFKC normalization's business).
    return re.compile(pattern, re.ASCII | re.VERBOSE)


# ---------------------------------------------------------------------------- patterns
_EMAIL = _compile(r"""
    (?<![A-Za-z0-9._%+\-])
    [A-Za-z0-9_%+\-]+ (?:\.[A-Za-z0-9_%+\-]+)*              # dot-atom local part (no leading/trailing/double dot)
    @ (?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+  # dotted domain labels
    [A-Za-z]{2,63}                                          # a TLD of letters
    (?![A-Za-z0-9\-])
""")

_IPV4_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"        # 0-255, no leading zero
_IPV4 = _compile(rf"""
    (?<![A-Za-z0-9_.]) {_IPV4_OCTET} (?:\.{_IPV4_OCTET}){{3}} (?![A-Za-z0-9_]) (?!\.\d)
""")

_IPV6 = _compile(r"""
    (?<![A-Za-z0-9_:.])
    (?:[0-9A-Fa-f]{0,4}:){2,7} (?:[0-9A-Fa-f]{1,4} | \d{1,3}(?:\.\d{1,3}){3})?   # hex groups, optional v4 tail
    (?![A-Za-z0-9_:]) (?!\.\d)
""")

_CN_ID = _compile(rf"""
    {_L}{_NUM_L} (?P<region>\d{{6}}) (?P<birth>\d{{8}}) \d{{3}} [\dXx] {_R}{_NUM_R}
""")

# Contiguous, or grouped with one separator used throughout: 4-4-4-4(-1..3), 4-4-4-1..3, Amex 4-6-5, Diners 4-6-4.
_CARD = _compile(rf"""
    {_L}{_NUM_L}
    (?: \d{{13,19}}
      | \d{{4}} (?P<s>[ \-]) \d{{4}} (?P=s) \d{{4}} (?P=s) \d{{1,4}} (?:(?P=s)\d{{1,3}})?
      | \d{{4}} (?P<t>[ \-]) \d{{6}} (?P=t) \d{{4,5}} )
    {_R}{_NUM_R}
""")

# US Social Security Number: 3-2-4 digits joined by dashes (the printed form); ssn_valid rules out unassigned areas.
_SSN = _compile(rf"""
    {_L}{_NUM_L} \d{{3}} - \d{{2}} - \d{{4}} {_R}{_NUM_R}
""")

# International: "+" country code, then groups each after one separator ("(0)" / "(415)" may stand alone), or
# "+" and 8-15 digits in one run. North American: (415) 555-0134, 415-555-0134, 415.555.0134, 1-800-555-0134;
# area code and exchange start with 2-9 (NANP). Bare space-separated digit groups are not phones (tables, lists).
_PHONE_US = _compile(rf"""
    (?: (?<![A-Za-z0-9_+])
        \+ (?: [1-9]\d{{0,2}} (?: [ .\-]\d{{1,10}} | [ .\-]?\(\d{{1,4}}\)[ .\-]?\d{{1,10}} ){{1,6}}
             | [1-9]\d{{7,14}} )
      | (?<![A-Za-z0-9_+.\-])
        (?:1[ .\-])? (?: \([2-9]\d\d\)[ .\-]? | [2-9]\d\d[.\-] ) [2-9]\d\d[.\-]\d{{4}} )
    {_R}{_NUM_R}
""")

# Mobile 1[3-9]x xxxx xxxx, optionally +86 / 0086, contiguous or in 3-4-4 groups; never inside a longer digit run.
_PHONE_CN = _compile(rf"""
    (?<![A-Za-z0-9_+]){_NUM_L}
    (?:(?:\+|00)86[ \-]?)? 1[3-9]\d (?: \d{{8}} | [ \-]\d{{4}}[ \-]\d{{4}} )
    {_R}{_NUM_R}
""")


# ---------------------------------------------------------------------------- validation
_CN_PROVINCES = frozenset({11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46,
                           50, 51, 52, 53, 54, 61, 62, 63, 64, 65, 71, 81, 82})
_CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)   # 2^(17-i) mod 11
_CN_ID_CHECK = "10X98765432"                                          # indexed by the weighted sum mod 11


def cn_id_valid(s: str) -> bool:
    """An 18-character resident ID: province code, real birth date 1900..today, ISO 7064 MOD 11-2 check digit."""
    if len(s) != 18 or not s[:17].isdigit() or int(s[:2]) not in _CN_PROVINCES:
        return False
    try:
        born = date(int(s[6:10]), int(s[10:12]), int(s[12:14]))
    except ValueError:
        return False
    if not date(1900, 1, 1) <= born <= date.today():
        return False
    total = sum(int(d) * w for d, w in zip(s[:17], _CN_ID_WEIGHTS))
    return _CN_ID_CHECK[total % 11] == s[17].upper()


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def card_valid(s: str) -> bool:
    """13-19 digits, Luhn-valid, and a payment-card industry digit (3-6: Amex/JCB/Diners, Visa, Mastercard,
    Discover/UnionPay; 2 only as Mastercard's 16-digit 2221-2720 range). Rules out millisecond timestamps (1...),
    date-times like 20131030132228 (Wayback URLs) and runs of one digit."""
    digits = s.replace(" ", "").replace("-", "")
    if digits[0] == "2" and not (len(digits) == 16 and 2221 <= int(digits[:4]) <= 2720):
        return False
    return (13 <= len(digits) <= 19 and digits[0] in "23456" and len(set(digits)) > 1
            and luhn_valid(digits))


def ssn_valid(s: str) -> bool:
    """Never issued: area 000, 666 or 900-999; group 00; serial 0000 (SSA's rules)."""
    area, group, serial = s.split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def phone_valid(s: str) -> bool:
    """E.164 allows at most 15 digits; fewer than 8 with a country code is a score or a short code, not a phone."""
    if not s.startswith("+"):
        return True   # NANP shape, fully checked by the regex
    n = sum(ch.isdigit() for ch in s)
    return 8 <= n <= 15


def ipv6_valid(s: str) -> bool:
    """A real address with some substance: "1::2" (a Python slice) and "::1" (loopback) stay."""
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    groups = [g for g in s.split(":") if g]
    return any(ch.isdigit() for ch in s) and (len(groups) >= 3 or max(map(len, groups), default=0) >= 3)


# ---------------------------------------------------------------------------- the types, in processing order
@dataclass(frozen=True)
class PiiType:
    name: str
    placeholder: str
    prefilter: str                      # RE2 for Arrow: every document the regex can match, matches this
    pattern: re.Pattern
    valid: Callable[[str], bool] | None = None   # None: the regex alone decides


PII_TYPES: tuple[PiiType, ...] = (
    PiiType("email", "[EMAIL_REDACTED]", r"[A-Za-z0-9_%+\-]@[A-Za-z0-9]", _EMAIL),
    PiiType("ipv6", "[IP_REDACTED]", r":[0-9A-Fa-f]{0,4}:", _IPV6, ipv6_valid),
    PiiType("ip_address", "[IP_REDACTED]", r"\d\.\d{1,3}\.\d{1,3}\.\d", _IPV4),
    PiiType("id_card_cn", "[ID_REDACTED]", r"\d{17}[\dXx]", _CN_ID, cn_id_valid),
    PiiType("credit_card", "[CARD_REDACTED]", r"\d{4}[ \-]?\d{4}", _CARD, card_valid),
    PiiType("ssn", "[SSN_REDACTED]", r"\d{3}-\d{2}-\d{4}", _SSN, ssn_valid),
    PiiType("phone_us", "[PHONE_REDACTED]", r"\+\d|\d{3}[.\-]\d{4}", _PHONE_US, phone_valid),
    PiiType("phone_cn", "[PHONE_REDACTED]", r"1[3-9]\d[ \-]?\d{4}", _PHONE_CN),
)
PII_BY_NAME = {t.name: t for t in PII_TYPES}
# seed 002's redact_pii: f"[{pii_type.upper()}_REDACTED]"; IPv6, not a seed type, is an IP address there too
SEED_PLACEHOLDERS = {t.name: f"[{t.name.upper()}_REDACTED]" for t in PII_TYPES} | {"ipv6": "[IP_ADDRESS_REDACTED]"}


def redact_one(text: str, kind: PiiType, placeholder: str | None = None) -> tuple[str, int]:
    """Replace every valid match of one type; returns the text and how many were replaced."""
    n = 0
    placeholder = placeholder or kind.placeholder

    def replace(m: re.Match) -> str:
        nonlocal n
        if kind.valid is None or kind.valid(m.group(0)):
            n += 1
            return placeholder
        return m.group(0)

    return kind.pattern.sub(replace, text), n


def redact_text(text: str, types: list[str] | None = None,
                placeholders: dict[str, str] | None = None) -> tuple[str, Counter]:
    """The reference, one string at a time: every enabled type in PII_TYPES order (not the order of `types`)."""
    enabled = set(PII_BY_NAME if types is None else types)
    counts: Counter = Counter()
    for kind in PII_TYPES:
        if kind.name in enabled:
            text, counts[kind.name] = redact_one(text, kind, (placeholders or {}).get(kind.name))
    return text, counts


def _matches(arr: pa.Array, pattern: str) -> np.ndarray:
    return pc.match_substring_regex(arr, pattern).fill_null(False).to_numpy(zero_copy_only=False)


# ---------------------------------------------------------------------------- the stage
class PiiConfig(Strict):
    types: list[PiiTypeName] = Field(default_factory=lambda: [t.name for t in PII_TYPES],
                                     description="types to redact; they always run in the fixed order of PII_TYPES")
    placeholders: dict[PiiTypeName, str] = Field(default_factory=dict, description="per-type placeholder overrides")
    # gpupipe's short placeholders ([PHONE_REDACTED]) or seed 002's ([PHONE_CN_REDACTED], [ID_CARD_CN_REDACTED], ...)
    placeholder_names: Literal["gpupipe", "seed"] = "gpupipe"
    drop_if_more_than: int | None = Field(default=None, ge=0,
                                          description="drop a document with more PII hits than this (pii_excess)")

    @field_validator("placeholders")
    @classmethod
    def _inert(cls, v: dict[str, str]) -> dict[str, str]:
        # A later type must not match inside an earlier type's placeholder.
        bad = [p for p in v.values() if re.search(r"[0-9@:.]", p)]
        if bad:
            raise ValueError(f"placeholders must hold no digit, '@', ':' or '.': {bad}")
        return v


class PiiRedactor(MapStage):
    name = "pii"
    Config = PiiConfig

    @property
    def _types(self) -> list[PiiType]:
        return [t for t in PII_TYPES if t.name in self.config.types]

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        types = self._types
        counts = {t.name: np.zeros(len(df), dtype=np.int32) for t in types}
        texts = df["text"].to_numpy(dtype=object, copy=True)
        arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True).fill_null("")
        rows = np.arange(len(df))
        if types and len(df):
            # One pass over everything; then per type only over the rows some type could match.
            rows = rows[_matches(arr, "|".join(f"(?:{t.prefilter})" for t in types))]
            arr = arr.take(pa.array(rows, type=pa.int64()))
        hits = {t.name: rows[_matches(arr, t.prefilter)] for t in types} if len(rows) else {}
        for t in types:                               # type-major: PII_TYPES order within each document
            for i in hits.get(t.name, ()):
                texts[i], counts[t.name][i] = redact_one(texts[i], t, self._placeholder(t.name))
        out = df.assign(text=pd.Series(texts, index=df.index, dtype=df["text"].dtype))
        return out.assign(**{f"pii_{name}": c for name, c in counts.items()})

    def _placeholder(self, name: str) -> str | None:
        """The configured override, else seed 002's name with `placeholder_names: seed`, else the type's own."""
        seed = SEED_PLACEHOLDERS[name] if self.config.placeholder_names == "seed" else None
        return self.config.placeholders.get(name) or seed

    def _total(self, df: pd.DataFrame) -> np.ndarray:
        cols = [f"pii_{t.name}" for t in self._types]
        return df[cols].to_numpy().sum(axis=1) if cols else np.zeros(len(df), dtype=np.int64)

    def reasons(self, df: pd.DataFrame) -> pd.Series | None:
        limit = self.config.drop_if_more_than
        if limit is None:
            return None
        return pd.Series(np.where(self._total(df) > limit, "pii_excess", None), index=df.index, dtype=object)

    def extra_stats(self, df_out: pd.DataFrame) -> Counter:
        stats = Counter({f"redacted_{t.name}": int(df_out[f"pii_{t.name}"].sum()) for t in self._types})
        stats["docs_with_pii"] = int((self._total(df_out) > 0).sum())
        return stats


__all__ = ["PII_TYPES", "PiiConfig", "PiiRedactor", "PiiType", "SEED_PLACEHOLDERS", "card_valid", "cn_id_valid",
           "ipv6_valid", "luhn_valid", "phone_valid", "redact_text", "ssn_valid"]
