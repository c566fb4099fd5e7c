"""HTML bytes → the text a browser shows: WHATWG encoding sniffing, then detection where declarations fail.

Order (https://html.spec.whatwg.org/#determining-the-character-encoding), each step taken only if its encoding
*fits* (the bytes decode strictly; "source" is what `Decoded.source` and the read stage's `charset_source` say):

  1. a BOM (UTF-8, UTF-16LE/BE) wins over everything, even HTTP                                    bom
  2. the transport-layer charset (HTTP Content-Type)                                               http
  3. the <meta> prescan of the first 1024 bytes (`charset=`, or `http-equiv=content-type` + `content=...charset=`),
     else a <meta> later in the first 64 KB (browsers switch to it when they parse it)             meta
  4. detection: valid UTF-8, else the detector's answer (uchardet via resiliparse when installed, else
     charset-normalizer; for a CJK answer that does not fit, the first other CJK encoding that does), else,
     nothing being declared, windows-1252 (WHATWG's default: it reads any bytes)                   detected
                                                                                    (windows-1252: fallback)
     A single-byte reading here that is mojibake of CJK bytes (see below) gives way to the CJK reading.
  5. the candidate (declared, detected, UTF-8) needing the fewest U+FFFD, if those replace at most
     `max_replaced` of the page's bytes (a truncated or slightly damaged page)                     fallback
  6. else DecodeError (the read stage's `decode_error`).

Labels go through the WHATWG label table (gb2312 and gbk read as gb18030, iso-8859-1 as windows-1252, x-sjis as
Shift_JIS = cp932, ...); a label outside it is ignored, as browsers do. A single-byte decode reads any bytes, so
`mojibake_suspect` flags Latin-looking runs (ÖÐÎÄ, Ã©) in bytes that also read as UTF-8 or CJK text: a declared
charset is kept (browsers follow it) and the page flagged; a detected one gives way (step 4).
"""
from __future__ import annotations

import codecs
import contextlib
import contextvars
import functools
import re
import threading
from typing import NamedTuple

from gpupipe.kernels.script_class import CJK_TEXT_CORE, regex_class

SOURCES = ("bom", "http", "meta", "detected", "fallback")
DEFAULT_MAX_REPLACED = 0.01
# The share of a page's bytes that step 5 may replace; the read stage sets it from `input.max_replaced_share`.
MAX_REPLACED: contextvars.ContextVar[float] = contextvars.ContextVar("max_replaced", default=DEFAULT_MAX_REPLACED)
PRESCAN = 1024
LATE_META = 64 << 10

# The WHATWG Encoding Standard's labels (https://encoding.spec.whatwg.org/#names-and-labels) by the Python codec
# that decodes them. "replacement" (iso-2022-kr, hz-gb-2312, ...) maps to None: its text is unreadable, detect.
_LABELS_BY_CODEC = {
    "utf-8": "unicode-1-1-utf-8 unicode11utf8 unicode20utf8 utf-8 utf8 x-unicode20utf8",
    "cp866": "866 cp866 csibm866 ibm866",
    "iso8859-2": "csisolatin2 iso-8859-2 iso-ir-101 iso8859-2 iso88592 iso_8859-2 iso_8859-2:1987 l2 latin2",
    "iso8859-3": "csisolatin3 iso-8859-3 iso-ir-109 iso8859-3 iso88593 iso_8859-3 iso_8859-3:1988 l3 latin3",
    "iso8859-4": "csisolatin4 iso-8859-4 iso-ir-110 iso8859-4 iso88594 iso_8859-4 iso_8859-4:1988 l4 latin4",
    "iso8859-5": "csisolatincyrillic cyrillic iso-8859-5 iso-ir-144 iso8859-5 iso88595 iso_8859-5 iso_8859-5:1988",
    "iso8859-6": "arabic asmo-708 csiso88596e csiso88596i csisolatinarabic ecma-114 iso-8859-6 iso-8859-6-e "
                 "iso-8859-6-i iso-ir-127 iso8859-6 iso88596 iso_8859-6 iso_8859-6:1987",
    "iso8859-7": "csisolatingreek ecma-118 elot_928 greek greek8 iso-8859-7 iso-ir-126 iso8859-7 iso88597 "
                 "iso_8859-7 iso_8859-7:1987 sun_eu_greek",
    "iso8859-8": "csiso88598e csisolatinhebrew hebrew iso-8859-8 iso-8859-8-e iso-ir-138 iso8859-8 iso88598 "
                 "iso_8859-8 iso_8859-8:1988 visual csiso88598i iso-8859-8-i logical",
    "iso8859-10": "csisolatin6 iso-8859-10 iso-ir-157 iso8859-10 iso885910 l6 latin6",
    "iso8859-13": "iso-8859-13 iso8859-13 iso885913",
    "iso8859-14": "iso-8859-14 iso8859-14 iso885914",
    "iso8859-15": "csisolatin9 iso-8859-15 iso8859-15 iso885915 iso_8859-15 l9",
    "iso8859-16": "iso-8859-16",
    "koi8-r": "cskoi8r koi koi8 koi8-r koi8_r",
    "koi8-u": "koi8-ru koi8-u",
    "mac-roman": "csmacintosh mac macintosh x-mac-roman",
    "cp874": "dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874",
    "cp1250": "cp1250 windows-1250 x-cp1250",
    "cp1251": "cp1251 windows-1251 x-cp1251",
    # x-user-defined (bytes 0x80-0xFF → U+F780-U+F7FF) is read as windows-1252, as the <meta> prescan does.
    "cp1252": "ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 iso-ir-100 iso8859-1 iso88591 "
              "iso_8859-1 iso_8859-1:1987 l1 latin1 us-ascii windows-1252 x-cp1252 x-user-defined",
    "cp1253": "cp1253 windows-1253 x-cp1253",
    "cp1254": "cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 iso_8859-9:1989 l5 latin5 "
              "windows-1254 x-cp1254",
    "cp1255": "cp1255 windows-1255 x-cp1255",
    "cp1256": "cp1256 windows-1256 x-cp1256",
    "cp1257": "cp1257 windows-1257 x-cp1257",
    "cp1258": "cp1258 windows-1258 x-cp1258",
    "mac-cyrillic": "x-mac-cyrillic x-mac-ukrainian",
    # GBK's WHATWG decoder is the gb18030 decoder: pages labelled gb2312 use GBK/GB18030 characters freely.
    "gb18030": "chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk iso-ir-58 x-gbk gb18030",
    "big5hkscs": "big5 big5-hkscs cn-big5 csbig5 x-x-big5",
    "euc_jp": "cseucpkdfmtjapanese euc-jp x-euc-jp",
    "iso2022_jp": "csiso2022jp iso-2022-jp",
    "cp932": "csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis",
    "cp949": "cseuckr csksc56011987 euc-kr iso-ir-149 korean ks_c_5601-1987 ks_c_5601-1989 ksc5601 ksc_5601 "
             "windows-949",
    "utf-16-be": "unicodefffe utf-16be",
    "utf-16-le": "csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le",
    None: "csiso2022kr hz-gb-2312 iso-2022-cn iso-2022-cn-ext iso-2022-kr replacement",
}
WHATWG_LABELS = {label: codec for codec, labels in _LABELS_BY_CODEC.items() for label in labels.split()}
_WEB_CODECS = frozenset(c for c in _LABELS_BY_CODEC if c)
_MULTIBYTE = frozenset({"utf-8", "gb18030", "big5hkscs", "euc_jp", "iso2022_jp", "cp932", "cp949",
                        "utf-16-be", "utf-16-le"})
# Python names detectors answer with that are no WHATWG label, for a web encoding they stand for.
_DETECTOR_NAMES = {"utf_8": "utf-8", "euc_kr": "cp949", "euc_jis_2004": "euc_jp", "euc_jisx0213": "euc_jp",
                   "shift_jis_2004": "cp932", "shift_jisx0213": "cp932", "johab": "cp949"}
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


class DecodeError(ValueError):
    """HTML bytes fit no candidate encoding, even allowing `max_replaced` of them to become U+FFFD."""


class Decoded(NamedTuple):
    text: str
    charset: str  # the Python codec used
    source: str  # one of SOURCES
    suspect: str | None = None  # mojibake_suspect: the encoding the bytes look like instead


def web_codec(label: str | bytes | None) -> str | None:
    """Python codec for a WHATWG encoding label (ASCII case and surrounding whitespace ignored), else None."""
    if isinstance(label, bytes):
        label = label.decode("latin-1")
    return WHATWG_LABELS.get(label.strip("\t\n\f\r \"'").lower()) if label else None


_HTTP_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([A-Za-z0-9_:.\-]+)""", re.I)


def charset_from_content_type(value: str | None) -> str | None:
    m = _HTTP_CHARSET.search(value or "")
    return m.group(1) if m else None


# ----------------------------------------------------------------------------- decoding


def decode_html(body: bytes, declared: str | None = None, max_replaced: float | None = None) -> Decoded:
    """Decode HTML bytes as the module docstring says; `declared` is the transport (HTTP) charset label."""
    limit = MAX_REPLACED.get() if max_replaced is None else max_replaced
    for bom, name in _BOMS:
        if body.startswith(bom):  # a BOM is certain: its encoding, with U+FFFD where the bytes are broken
            text, bad = _lenient(body[len(bom):], name)
            if bad > limit * len(body):
                raise DecodeError(f"bytes not valid in {name} (BOM): {bad} of {len(body)} bytes unreadable")
            return Decoded(text, name, "bom")
    declared_codecs = []  # declared, and the bytes do not fit them
    for source in ("http", "meta"):
        codec = web_codec(declared) if source == "http" else prescan(body)  # no prescan when HTTP's fits
        if codec:
            if (text := _strict(body, codec)) is not None:
                return _checked(body, Decoded(text, codec, source))
            declared_codecs.append(codec)
    if (text := _strict(body, "utf-8")) is not None:
        return Decoded(text, "utf-8", "detected")
    guess = detect(body)
    # Detectors confuse the CJK encodings with each other (Chinese text quoting kana read as EUC-JP): when the
    # answer is one that does not fit, its first sibling that does is the better reading.
    tries = [(c, "detected") for c in [guess] + [c for c in _CJK_CODECS if c != guess] * (guess in _CJK_CODECS)]
    if not guess and not declared_codecs:
        tries.append(("cp1252", "fallback"))  # WHATWG's default: reads any bytes
    for codec, source in tries:
        if codec and (text := _strict(body, codec)) is not None:
            if cjk := mojibake_suspect(body, text, codec):  # short CJK pages a detector reads as windows-1252
                return Decoded(_strict(body, cjk), cjk, "detected")
            if not (source == "fallback" and _latin_runs(text)):  # windows-1252 mojibake (mixed bytes): step 5
                return Decoded(text, codec, source)
    # Nothing fits: the candidate needing the fewest U+FFFD, if few enough.
    tried = list(dict.fromkeys(declared_codecs + [guess, "utf-8"]))
    (text, bad), codec = min(((_lenient(body, c), c) for c in tried if c), key=lambda r: r[0][1])
    if bad > limit * len(body):
        raise DecodeError(f"bytes fit none of {'/'.join(c for c in tried if c)}: even {codec} leaves {bad} of "
                          f"{len(body)} bytes unreadable (limit {limit:g} of the page)")
    return _checked(body, Decoded(text, codec, "fallback"))


def _whatwg_bytes(e: UnicodeDecodeError):
    # Bytes WHATWG decodes and Python does not: windows-125x/874 map the bytes Microsoft left undefined (0x81,
    # 0x8D, ...) to C1 controls; GBK pages (Windows cp936) write € as the single byte 0x80.
    b = e.object[e.start]
    if e.encoding == "gb18030" and b == 0x80:
        return "\u20ac", e.start + 1
    if e.encoding != "gb18030" and 0x80 <= b <= 0x9F:
        return chr(b), e.start + 1
    raise e


_counter = threading.local()


def _count_replaced(e: UnicodeDecodeError):
    _counter.bad += e.end - e.start
    return "\ufffd", e.end


codecs.register_error("gpupipe.whatwg", _whatwg_bytes)
codecs.register_error("gpupipe.count", _count_replaced)


def _errors(codec: str) -> str:
    return "gpupipe.whatwg" if codec.startswith("cp12") or codec in ("cp874", "gb18030") else "strict"


def _strict(body: bytes, codec: str) -> str | None:
    try:
        return body.decode(codec, _errors(codec))
    except UnicodeDecodeError:
        return None


def _lenient(body: bytes, codec: str) -> tuple[str, int]:
    """(text with U+FFFD for unreadable bytes, how many bytes were unreadable)."""
    _counter.bad = 0
    text = body.decode(codec, "gpupipe.count")
    return text, _counter.bad


# ----------------------------------------------------------------------------- <meta> prescan

# One attribute of a tag, as the prescan's "get an attribute" reads it; a quoted value may hold '>'.
_ATTR = re.compile(rb"""[\t\n\f\r /]*([^\t\n\f\r />][^\t\n\f\r /=>]*)(?:[\t\n\f\r ]*=[\t\n\f\r ]*"""
                   rb"""("[^"]*"|'[^']*'|[^\t\n\f\r >]*))?""")
_CONTENT_CHARSET = re.compile(rb"""charset[\t\n\f\r ]*=[\t\n\f\r ]*(?:"([^"]*)"|'([^']*)'|([^\t\n\f\r ;"']+))""",
                              re.I)
_META_TAG = re.compile(rb"<meta[\t\n\f\r /]", re.I)
_TAG_START = re.compile(rb"<(!--|meta[\t\n\f\r /]|/?[A-Za-z]|[!/?])", re.I)


def prescan(body: bytes) -> str | None:
    """Python codec of the first usable <meta> declaration in the first 1024 bytes (WHATWG prescan), else None.

    A <meta> further on also counts, up to 64 KB: browsers change to it when the parser reaches it (HTML's
    "change the encoding"); 2 of the 52 real WARC pages we have declare their charset after byte 1024."""
    codec = _prescan(body[:PRESCAN])
    if codec is None and len(body) > PRESCAN:  # later <meta> tags only, without walking every tag: cheaper
        head = body[:LATE_META]
        for m in _META_TAG.finditer(head, PRESCAN - 64):
            if codec := _meta_codec(_attributes(head, m.end() - 1)[0]):
                break
    return codec


def _prescan(head: bytes) -> str | None:
    pos = 0
    while (m := _TAG_START.search(head, pos)) is not None:
        kind = m.group(1).lower()
        if kind == b"!--":
            end = head.find(b"-->", m.start() + 2)
            pos = len(head) if end < 0 else end + 3
        elif kind.startswith(b"meta"):
            attrs, pos = _attributes(head, m.end() - 1)
            codec = _meta_codec(attrs)
            if codec:
                return codec
        elif kind[-1:].isalpha():  # another tag: skip its attributes (a '>' inside quotes does not end it)
            _, pos = _attributes(head, m.end())
        else:  # <!doctype, </, <?: up to the next '>'
            end = head.find(b">", m.end())
            pos = len(head) if end < 0 else end + 1
    return None


def _attributes(head: bytes, pos: int) -> tuple[list[tuple[bytes, bytes]], int]:
    """The attributes of the tag at `pos` (after its name) and the position after its '>'."""
    attrs = []
    while pos < len(head) and head[pos:pos + 1] != b">":
        m = _ATTR.match(head, pos)
        if not m or m.end() == pos:
            pos += 1
            continue
        value = m.group(2) or b""
        if len(value) >= 2 and value[:1] in (b'"', b"'") and value[-1:] == value[:1]:
            value = value[1:-1]
        attrs.append((m.group(1).lower(), value))
        pos = m.end()
    return attrs, pos + 1


def _meta_codec(attrs: list[tuple[bytes, bytes]]) -> str | None:
    seen, got_pragma, need_pragma, charset = set(), False, None, None
    for name, value in attrs:
        if name in seen:
            continue
        seen.add(name)
        if name == b"http-equiv":
            got_pragma = got_pragma or value.strip().lower() == b"content-type"
        elif name == b"content" and charset is None:
            m = _CONTENT_CHARSET.search(value)
            if m:
                charset, need_pragma = next(g for g in m.groups() if g is not None), True
        elif name == b"charset":
            charset, need_pragma = value, False
    if need_pragma is None or (need_pragma and not got_pragma):
        return None
    codec = web_codec(charset)
    return "utf-8" if codec and codec.startswith("utf-16") else codec  # bytes read as ASCII cannot be UTF-16


# ----------------------------------------------------------------------------- detection


@functools.lru_cache(maxsize=1)
def detector():
    """(name, function bytes → encoding label or None): uchardet when resiliparse is installed, else
    charset-normalizer (a base dependency). uchardet was the more accurate and the faster on real pages
    (docs/design.md, "Charset detection")."""
    try:
        from resiliparse.parse.encoding import detect_encoding
    except ImportError:
        from charset_normalizer import from_bytes

        def normalizer(body: bytes) -> str | None:
            best = from_bytes(body).best()
            return best.encoding if best else None
        return "charset-normalizer", normalizer
    return "uchardet", lambda body: detect_encoding(body, html5_compatible=False)


def detect(body: bytes) -> str | None:
    """The web encoding the detector reads `body` as (a Python codec), or None when it has no usable answer."""
    label = detector()[1](body)
    if not label:
        return None
    label = label.lower()
    codec = WHATWG_LABELS.get(label) or WHATWG_LABELS.get(label.replace("_", "-")) or _DETECTOR_NAMES.get(label)
    if codec is None:
        try:
            codec = codecs.lookup(label).name
        except LookupError:
            return None
    return codec if codec in _WEB_CODECS else None  # cp865, mac_iceland, ...: not served on the web


# ----------------------------------------------------------------------------- mojibake check

_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# What bytes 0x80-0xFF become in windows-1252 and its Latin siblings; two or more in a row are rare in Latin
# text ("café", "Übersicht"; NBSP runs are left out) and the norm when UTF-8 or a CJK encoding is read as one of them ("Ã©", "ÖÐÎÄ").
_LATIN_RUN = re.compile(r"[\u0080-\u009f\u00a1-\u024f\u02c6\u02dc\u2013-\u203a\u20ac\u2122]{2,}")
_CJK = re.compile(regex_class(CJK_TEXT_CORE, "python"))   # what CJK pages are made of (kernels/script_class.py)
_CJK_CODECS = ("gb18030", "big5hkscs", "cp932", "euc_jp", "cp949")
MOJIBAKE_MIN_RUN_CHARS = 8


def mojibake_suspect(body: bytes, text: str, codec: str) -> str | None:
    """The encoding `body` more likely is, when `text` (its single-byte decoding) reads as mojibake, else None.

    Suspect: at least half of the non-ASCII characters (and 8 or more) stand in runs of Latin-1-like characters,
    and the bytes also decode strictly as UTF-8, or as a CJK encoding whose non-ASCII text is 90 % CJK."""
    if codec in _MULTIBYTE or not _latin_runs(text):
        return None  # a strict multi-byte decode validates itself
    if _strict(body, "utf-8") is not None:
        return "utf-8"
    for cjk in _CJK_CODECS:
        other = _strict(body, cjk)
        if other is not None:
            non_ascii = "".join(_NON_ASCII.findall(other))
            if len(_CJK.findall(non_ascii)) >= 0.9 * len(non_ascii):
                return cjk
    return None


def _latin_runs(text: str) -> bool:
    runs = sum(len(r) for r in _LATIN_RUN.findall(text))
    return runs >= MOJIBAKE_MIN_RUN_CHARS and 2 * runs >= sum(len(r) for r in _NON_ASCII.findall(text))


def _checked(body: bytes, d: Decoded) -> Decoded:
    suspect = mojibake_suspect(body, d.text, d.charset)
    return d._replace(suspect=suspect) if suspect else d


@contextlib.contextmanager
def replaced_limit(share: float):
    """Within the block, decode_html allows `share` of a page's bytes to be replaced (input.max_replaced_share)."""
    token = MAX_REPLACED.set(share)
    try:
        yield
    finally:
        MAX_REPLACED.reset(token)
