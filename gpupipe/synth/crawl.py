"""Deterministic synthetic web crawl with ground truth: the project's default input.

`write_synthetic_crawl` writes a real gzip-per-record WARC (warcinfo, requests, HTML pages
wrapped in boilerplate, non-HTML payloads, 404s and redirects) plus a JSONL file that
says, for every record, what a perfect pipeline should conclude about it: its kind
(clean / exact_duplicate / near_duplicate / spam / pii / non-page kinds), language,
main text, duplicate source and inserted PII.

A few clean pages also quote an item of the crawl's own benchmark file (written beside it, see
gpupipe/synth/benchmark.py) verbatim or with a trivial change (case, punctuation, whitespace): truth
field `leaks`. A few others carry one of a handful of long boilerplate paragraphs copied verbatim
across pages: truth field `repeated_paragraphs`. Both are planted with their own RNG after the pages
are made, on clean pages that no duplicate copies, so every other page's text stays as it was.
"""

from __future__ import annotations

import html
import json
import os
import random
import re
import struct
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from io import BytesIO
from pathlib import Path
from typing import NamedTuple

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from gpupipe.synth import text as T
from gpupipe.synth.benchmark import benchmark_records, write_benchmark

KIND_SHARES = {"exact_duplicate": 0.08, "near_duplicate": 0.08, "spam": 0.10, "pii": 0.09}  # rest: clean
LANG_SHARES = {"en": 0.40, "zh": 0.30, "fr": 0.08, "de": 0.08, "es": 0.08, "ru": 0.06}
# The first clean pages of these languages are served in a legacy charset, so readers must honor it.
LEGACY_CHARSETS = (("fr", "ISO-8859-1"), ("fr", "ISO-8859-1"), ("ru", "windows-1251"))
REQUEST_RATE = 0.25  # share of responses preceded by their request record
USER_AGENT = "Mozilla/5.0 (compatible; gpupipe-synth/1.0)"
SECTIONS = ("news", "blog", "article", "story", "posts", "magazine")
LEAK_SHARE = 0.02         # clean pages quoting a benchmark item (at least 3)
SYNDICATED_SHARE = 0.02   # clean pages carrying a copied boilerplate paragraph (at least 4)


@dataclass
class Page:
    kind: str
    lang: str
    title: str
    paragraphs: list[str]
    site: str
    url: str = ""
    duplicate_of: Page | None = None
    pii: list[str] = field(default_factory=list)
    charset: str = "utf-8"
    record_id: str = ""
    leaks: list[dict] = field(default_factory=list)  # [{"benchmark", "item_id"}]
    repeated_paragraphs: list[str] = field(default_factory=list)

    @property
    def main_text(self) -> str:
        return "\n\n".join(self.paragraphs)


@dataclass
class Record:
    record_type: str  # warcinfo | request | response
    kind: str
    date: datetime
    url: str | None = None
    status: int | None = None
    http_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    page: Page | None = None
    concurrent_to: Record | None = None  # a request's response
    record_id: str = ""

    @property
    def content_type(self) -> str | None:
        return dict(self.http_headers).get("Content-Type") if self.record_type == "response" else None


# ---------------------------------------------------------------------------- page content
def _plan_kinds(docs: int, rng: random.Random) -> list[str]:
    """Exact shares of each kind, shuffled; the first page is clean so duplicates have a source."""
    kinds = [kind for kind, share in KIND_SHARES.items() for _ in range(round(docs * share))]
    kinds += ["clean"] * (docs - len(kinds))
    rng.shuffle(kinds)
    first = kinds.index("clean")
    kinds[0], kinds[first] = kinds[first], kinds[0]
    return kinds


def _article_page(kind: str, rng: random.Random) -> Page:
    lang = T.LANGUAGES[rng.choices(list(LANG_SHARES), weights=list(LANG_SHARES.values()))[0]]
    title, paragraphs = T.article(lang, rng)
    page = Page(kind, lang.code, title, paragraphs, rng.choice(lang.sites))
    if kind == "pii":
        for _ in range(rng.randint(1, 2)):
            snippet, found = T.pii_sentence(lang, rng)
            i = rng.randrange(len(paragraphs))
            paragraphs[i] = lang.sep.join((paragraphs[i], snippet))
            page.pii += found
    return page


def _duplicate_page(kind: str, source: Page, rng: random.Random) -> Page:
    """A copy of `source` on another URL: verbatim (exact) or lightly edited (near)."""
    text = source.main_text
    if kind == "near_duplicate":
        text = T.near_duplicate(text, source.lang, rng)
    site = rng.choice(T.LANGUAGES[source.lang].sites)
    return Page(kind, source.lang, source.title, text.split("\n\n"), site, duplicate_of=source)


def _make_pages(docs: int, rng: random.Random) -> list[Page]:
    pages: list[Page] = []
    for index, kind in enumerate(_plan_kinds(docs, rng)):
        if kind in ("exact_duplicate", "near_duplicate"):
            page = _duplicate_page(kind, rng.choice([p for p in pages if p.kind == "clean"]), rng)
        elif kind == "spam":
            lang, title, paragraphs = T.spam_article(rng)
            page = Page(kind, lang, title, paragraphs, rng.choice(T.SPAM_DOMAINS))
        else:
            page = _article_page(kind, rng)
        page.url = f"https://{page.site}/{rng.choice(SECTIONS)}/{rng.randint(2019, 2024)}/{index:05d}.html"
        pages.append(page)
    for lang, charset in LEGACY_CHARSETS:
        candidates = [p for p in pages if p.kind == "clean" and p.lang == lang and p.charset == "utf-8"]
        if candidates:
            candidates[0].charset = charset
    return pages


# ---------------------------------------------------------------------------- planted leaks, boilerplate
def _plant(pages: list[Page], seed: int) -> None:
    """Benchmark leaks and syndicated paragraphs on clean UTF-8 pages that no duplicate copies."""
    rng = random.Random(f"{seed}/plants")
    copied = {id(p.duplicate_of) for p in pages if p.duplicate_of is not None}
    hosts = [p for p in pages if p.kind == "clean" and id(p) not in copied and p.charset == "utf-8"]
    rng.shuffle(hosts)
    _plant_leaks(hosts, max(3, round(len(pages) * LEAK_SHARE)), rng)
    _plant_syndicated([p for p in hosts if not p.leaks], max(4, round(len(pages) * SYNDICATED_SHARE)), rng)


def _leak_text(rec: dict, rng: random.Random) -> str:
    """How a benchmark item shows up on a page: the question, maybe with its choices or solution."""
    if "choices" in rec:
        style = rng.choice(("({letter}) {c}", "{letter}) {c}", "{letter}. {c}"))
        choices = " ".join(style.format(letter="ABCD"[i], c=c) for i, c in enumerate(rec["choices"]))
        return f"{rec['question']} {choices}"
    if rng.random() < 0.5:
        return rec["question"]
    solution = re.sub(r"<<[^<>]*>>", "", rec["answer"])  # solution pages show no calculator notes
    solution = " ".join(line for line in solution.splitlines() if not line.startswith("####"))
    return f"{rec['question']} {solution}"


def _plant_leaks(hosts: list[Page], count: int, rng: random.Random) -> None:
    records = benchmark_records()
    pools = {"en": [r for r in records if r["benchmark"] != "cmath_synth"],
             "zh": [r for r in records if r["benchmark"] == "cmath_synth"]}
    by_lang = {code: [p for p in hosts if p.lang == code] for code in pools}
    n_zh = min(len(by_lang["zh"]), max(1, count // 3))
    for code, n in (("en", count - n_zh), ("zh", n_zh)):
        chosen = rng.sample(pools[code], min(n, len(by_lang[code]), len(pools[code])))
        for variant, (page, rec) in enumerate(zip(by_lang[code], chosen)):
            lead = rng.choice(T.LEAK_LEADINS[code])
            quote = lead + T.leak_variant(_leak_text(rec, rng), variant, code)
            page.paragraphs.insert(rng.randint(0, len(page.paragraphs)), quote)
            page.leaks.append({"benchmark": rec["benchmark"], "item_id": rec["item_id"]})


def _plant_syndicated(hosts: list[Page], count: int, rng: random.Random) -> None:
    """Each paragraph used goes on at least two pages of its language."""
    paragraphs = [(code, text) for code, texts in T.SYNDICATED_PARAGRAPHS.items() for text in texts]
    per_paragraph = max(2, count // len(paragraphs))
    for code, text in paragraphs:
        pages = [p for p in hosts if p.lang == code and not p.repeated_paragraphs][:per_paragraph]
        if len(pages) < 2:
            continue
        for page in pages:
            page.paragraphs.insert(rng.randint(1, len(page.paragraphs)), text)
            page.repeated_paragraphs.append(text)


# ---------------------------------------------------------------------------- HTML
class _Style(NamedTuple):
    """Per-page markup habits; all render to the same text in a browser."""
    rich: bool  # inline tags and &nbsp; inside paragraphs
    ragged: bool  # irregular whitespace and newlines inside paragraphs
    quote: bool  # quotes escaped as entities (l&#x27;équipe)


def _paragraph(text: str, sep: str, rng: random.Random, style: _Style) -> str:
    tokens = [html.escape(tok, quote=style.quote) for tok in (text.split(" ") if sep else text)]
    if style.rich and len(tokens) > 4:
        i = rng.randrange(len(tokens) - 3)
        j = i + (1 if sep else rng.randint(2, 3))
        tag = rng.choice(("b", "em", "a", "strong", "i"))
        open_tag = f'<a href="/tag/{i}">' if tag == "a" else f"<{tag}>"
        tokens[i:j] = [open_tag + sep.join(tokens[i:j]) + f"</{tag}>"]
    if not sep:  # whitespace inside Chinese text would change it
        return f"<p>{''.join(tokens)}</p>"
    gaps = [" "] * (len(tokens) - 1)
    for k in range(len(gaps)):
        if style.ragged and rng.random() < 0.08:
            gaps[k] = rng.choice(("\n        ", "  ", " \n", "\t"))
        elif style.rich and rng.random() < 0.03:
            gaps[k] = "&nbsp;"
    inner = tokens[0] + "".join(gap + tok for gap, tok in zip(gaps, tokens[1:]))
    return f"<p>\n      {inner}\n    </p>" if style.ragged else f"<p>{inner}</p>"


def _cookie_banner(ui: dict[str, str], rng: random.Random) -> str:
    ident, cls = rng.choice((("cookie-banner", "cookie-consent"), ("gdpr-cookie-notice", "consent-popup"),
                             ("cookie-law-info-bar", "cc-window cc-banner")))
    return (f'<div id="{ident}" class="{cls}" role="dialog" aria-label="cookies">\n'
            f"  <p>{html.escape(ui['cookie'])} <a href=\"/privacy\">{html.escape(ui['privacy'])}</a></p>\n"
            f'  <button class="accept">{html.escape(ui["accept"])}</button>'
            f'<button class="reject">{html.escape(ui["reject"])}</button>\n</div>\n')


def _site_header(site: str, lang: T.Language, rng: random.Random) -> str:
    items = "".join(f'<li><a href="/{k}/">{html.escape(name)}</a></li>'
                    for k, name in enumerate(lang.nav[: rng.randint(6, len(lang.nav))]))
    return (f'<header class="site-header">\n  <a class="logo" href="/">{site}</a>\n'
            f'  <nav class="main-nav" role="navigation"><ul>{items}</ul></nav>\n</header>\n')


def _share_buttons(ui: dict[str, str], url: str) -> str:
    share = html.escape(ui["share"])
    facebook, twitter = "https://www.facebook.com/sharer/sharer.php?u=", "https://twitter.com/intent/tweet?url="
    return (f'<div class="share-buttons">\n'
            f'  <a class="share-facebook" href="{facebook}{url}">{share} Facebook</a>\n'
            f'  <a class="share-twitter" href="{twitter}{url}">{share} Twitter</a>\n'
            f'  <a class="share-mail" href="mailto:?subject=article">E-mail</a>\n</div>\n')


def _sidebar(lang: T.Language, rng: random.Random) -> str:
    def links(n: int) -> str:
        return "".join(f'<li><a href="/read/{rng.randint(1000, 9999)}.html">{html.escape(T.headline(lang, rng))}'
                       "</a></li>" for _ in range(n))

    return (f'<aside class="sidebar">\n'
            f'  <section class="widget related-posts"><h3>{html.escape(lang.ui["related"])}</h3>'
            f"<ul>{links(rng.randint(3, 5))}</ul></section>\n"
            f'  <section class="widget popular-posts"><h3>{html.escape(lang.ui["popular"])}</h3>'
            f"<ol>{links(rng.randint(3, 5))}</ol></section>\n</aside>\n")


def _newsletter(ui: dict[str, str]) -> str:
    return (f'<div class="newsletter-signup"><p>{html.escape(ui["newsletter"])}</p>'
            f'<form action="/subscribe" method="post"><input type="email" name="email" placeholder="Email">'
            f'<button type="submit">{html.escape(ui["subscribe"])}</button></form></div>\n')


def _footer(site: str, lang: T.Language) -> str:
    ui = lang.ui
    return (f'<footer class="site-footer">\n  <p>&copy; 2024 {site}. {html.escape(ui["rights"])}</p>\n'
            f'  <ul class="legal"><li><a href="/privacy">{html.escape(ui["privacy"])}</a></li>'
            f'<li><a href="/terms">{html.escape(ui["terms"])}</a></li>'
            f'<li><a href="/contact">{html.escape(lang.nav[-2])}</a></li></ul>\n</footer>\n')


def _charset_meta(charset: str, rng: random.Random) -> str:
    charset = charset.lower()
    if rng.random() < 0.5:
        return f'<meta charset="{charset}">'
    return f'<meta http-equiv="Content-Type" content="text/html; charset={charset}">'


def render_page(page: Page, rng: random.Random) -> str:
    """The page's main text inside a randomly chosen but realistic site layout."""
    lang = T.LANGUAGES[page.lang]
    style = _Style(rich=rng.random() < 0.3, ragged=rng.random() < 0.3, quote=rng.random() < 0.3)
    paragraphs = "\n".join(_paragraph(p, lang.sep, rng, style) for p in page.paragraphs)
    title = html.escape(page.title, quote=style.quote)
    cookie = _cookie_banner(lang.ui, rng) if rng.random() < 0.8 else ""
    cookie_on_top = rng.random() < 0.5
    parts = [
        "<!DOCTYPE html>\n",
        f'<html lang="{page.lang}">\n<head>\n{_charset_meta(page.charset, rng)}\n',
        f"<title>{title} | {page.site}</title>\n",
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        '<link rel="stylesheet" href="/static/site.css">\n',
        "<style>body{font-family:Georgia,serif;margin:0}.sidebar{float:right;width:30%}</style>\n",
        "<script>window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments);}"
        "gtag('js',new Date());gtag('config','G-SYNTH01');</script>\n",
        "</head>\n<body>\n",
        cookie if cookie_on_top else "",
        _site_header(page.site, lang, rng),
        '<main id="content">\n<article class="post">\n',
        f'<h1 class="entry-title">{title}</h1>\n',
        f'<div class="entry-content">\n{paragraphs}\n</div>\n',
        _share_buttons(lang.ui, page.url) if rng.random() < 0.7 else "",
        "</article>\n",
        _sidebar(lang, rng) if rng.random() < 0.7 else "",
        "</main>\n",
        _newsletter(lang.ui) if rng.random() < 0.4 else "",
        _footer(page.site, lang),
        "" if cookie_on_top else cookie,
        '<script src="/static/app.js" defer></script>\n</body>\n</html>\n',
    ]
    return "".join(parts)


# ---------------------------------------------------------------------------- non-page payloads
def _png(rng: random.Random) -> bytes:
    """A small valid RGB PNG of random pixels."""
    w, h = rng.randint(4, 32), rng.randint(4, 32)
    raw = b"".join(b"\x00" + rng.randbytes(3 * w) for _ in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def _pdf(rng: random.Random) -> bytes:
    """A one-page PDF with a correct xref table."""
    stream = b"BT /F1 18 Tf 72 720 Td (Annual report %d) Tj ET" % rng.randint(2015, 2024)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, obj)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _json(rng: random.Random) -> bytes:
    items = [{"id": rng.randint(1, 99999), "title": T.headline(T.EN, rng), "score": rng.randint(0, 500)}
             for _ in range(rng.randint(2, 5))]
    return json.dumps({"status": "ok", "items": items}, sort_keys=True).encode()


def _not_found(url: str) -> bytes:
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>404 Not Found</title></head>\n"
            f"<body><h1>Page not found</h1><p>Sorry, the page {html.escape(url)} does not exist.</p>"
            f'<p><a href="/">Back to the home page</a></p></body></html>\n').encode()


def _moved(location: str) -> bytes:
    return (f"<html><head><title>301 Moved Permanently</title></head><body><h1>Moved Permanently</h1>"
            f'<p>The document has moved <a href="{html.escape(location)}">here</a>.</p></body></html>\n').encode()


class _Extra(NamedTuple):
    """A non-page response: something a reader has to skip."""
    kind: str
    url: str
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


_BLOBS = (("image/png", "static/img/photo-{n:04d}.png", _png), ("application/pdf", "files/report-{n:04d}.pdf", _pdf),
          ("application/json", "api/v1/items?page={n}", _json))


def _extras(docs: int, rng: random.Random) -> list[_Extra]:
    sites = [s for lang in T.LANGUAGES.values() for s in lang.sites]
    out = []
    for n in range(max(3, round(docs * 0.06))):
        content_type, path, make = _BLOBS[n % len(_BLOBS)]
        out.append(_Extra("non_html", f"https://{rng.choice(sites)}/{path.format(n=n)}", 200, content_type, make(rng)))
    for n in range(max(1, round(docs * 0.02))):
        url = f"https://{rng.choice(sites)}/old/page-{n:04d}.html"
        out.append(_Extra("http_error", url, 404, "text/html; charset=utf-8", _not_found(url)))
    for n in range(max(1, round(docs * 0.015))):
        site = rng.choice(sites)
        location = f"https://{site}/news/moved-{n:04d}.html"
        out.append(_Extra("http_error", f"http://{site}/news/{n:04d}", 301, "text/html; charset=iso-8859-1",
                          _moved(location), (("Location", location),)))
    return out


# ---------------------------------------------------------------------------- records
_REASONS = {200: "OK", 301: "Moved Permanently", 404: "Not Found"}


def _response(kind: str, date: datetime, url: str, status: int, content_type: str, body: bytes,
              rng: random.Random, extra_headers: tuple[tuple[str, str], ...] = (), page: Page | None = None) -> Record:
    headers = [("Date", format_datetime(date, usegmt=True)), ("Server", rng.choice(("nginx", "Apache", "cloudflare"))),
               ("Content-Type", content_type), ("Content-Length", str(len(body))), *extra_headers,
               ("Connection", "close")]
    return Record("response", kind, date, url, status, headers, body, page)


def _request(response: Record) -> Record:
    headers = [("Host", response.url.split("/")[2]), ("User-Agent", USER_AGENT),
               ("Accept", "text/html,application/xhtml+xml,*/*;q=0.8"), ("Accept-Encoding", "identity")]
    return Record("request", "request", response.date, response.url, None, headers, concurrent_to=response)


def _page_response(page: Page, date: datetime, rng: random.Random) -> Record:
    body = render_page(page, rng).encode(page.charset, errors="xmlcharrefreplace")
    if page.charset != "utf-8":
        content_type = f"text/html; charset={page.charset}"
    else:  # some servers leave the charset to the <meta> tag
        content_type = rng.choice(("text/html; charset=utf-8", "text/html; charset=UTF-8", "text/html"))
    return _response(page.kind, date, page.url, 200, content_type, body, rng, page=page)


def _build_records(docs: int, seed: int, rng: random.Random) -> list[Record]:
    pages = _make_pages(docs, rng)
    _plant(pages, seed)
    slots: list[Page | _Extra] = list(pages)
    for extra in _extras(docs, rng):  # keeps pages in order, so sources precede duplicates
        slots.insert(rng.randint(1, len(slots)), extra)
    start = datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(days=seed % 366)
    records = [Record("warcinfo", "warcinfo", start)]
    for n, slot in enumerate(slots, 1):
        date = start + timedelta(seconds=7 * n)
        if isinstance(slot, Page):
            response = _page_response(slot, date, rng)
        else:
            response = _response(slot.kind, date, slot.url, slot.status, slot.content_type, slot.body, rng,
                                 slot.headers)
        if rng.random() < REQUEST_RATE:
            records.append(_request(response))
        records.append(response)
    id_rng = random.Random(f"{seed}/record-ids")
    for record in records:
        record.record_id = f"<urn:uuid:{uuid.UUID(int=id_rng.getrandbits(128), version=4)}>"
        if record.page:
            record.page.record_id = record.record_id
    return records


# ---------------------------------------------------------------------------- output
def _write_warc(records: list[Record], fh, docs: int, seed: int) -> None:
    writer = WARCWriter(fh, gzip=True)  # zlib gzip members carry mtime 0: byte-reproducible
    for rec in records:
        warc_headers = {"WARC-Record-ID": rec.record_id, "WARC-Date": rec.date.strftime("%Y-%m-%dT%H:%M:%SZ")}
        if rec.record_type == "warcinfo":
            fields = (f"software: gpupipe.synth\r\nformat: WARC File Format 1.0\r\n"
                      f"description: synthetic crawl, docs={docs} seed={seed}\r\nrobots: classic\r\n").encode()
            warc_headers["WARC-Filename"] = f"synthetic-crawl-seed{seed}.warc.gz"
            warc = writer.create_warc_record("", "warcinfo", payload=BytesIO(fields), length=len(fields),
                                             warc_headers_dict=warc_headers)
        elif rec.record_type == "request":
            warc_headers["WARC-Concurrent-To"] = rec.concurrent_to.record_id
            path = "/" + rec.url.split("/", 3)[3]
            http = StatusAndHeaders(f"GET {path} HTTP/1.1", rec.http_headers, is_http_request=True)
            warc = writer.create_warc_record(rec.url, "request", http_headers=http, warc_headers_dict=warc_headers)
        else:
            status = f"{rec.status} {_REASONS[rec.status]}"
            http = StatusAndHeaders(status, rec.http_headers, protocol="HTTP/1.1")
            warc = writer.create_warc_record(rec.url, "response", payload=BytesIO(rec.body), length=len(rec.body),
                                             http_headers=http, warc_headers_dict=warc_headers)
        writer.write_record(warc)


def _truth(rec: Record) -> dict:
    page = rec.page
    return {
        "record_id": rec.record_id,
        "record_type": rec.record_type,
        "url": rec.url,
        "http_status": rec.status,
        "content_type": rec.content_type,
        "kind": rec.kind,
        "lang": page.lang if page else None,
        "main_text": page.main_text if page else None,
        "duplicate_of": page.duplicate_of.record_id if page and page.duplicate_of else None,
        "pii": list(page.pii) if page else [],
        "leaks": list(page.leaks) if page else [],
        "repeated_paragraphs": list(page.repeated_paragraphs) if page else [],
    }


def write_synthetic_crawl(out_path: str | os.PathLike, docs: int = 400, seed: int = 0) -> dict:
    """Write a real gzip-per-record WARC file at out_path (.warc.gz), a ground-truth JSONL beside it
    (out_path with '.warc.gz' replaced by '.truth.jsonl') and the benchmark whose items some pages
    leak ('.benchmark.jsonl'). Returns a summary dict: {"warc": path, "truth": path, "benchmark": path,
    "records": N_total_warc_records, "pages": N_html_pages, "by_kind": {kind: count},
    "by_lang": {lang: count}, "leaks": N_pages_with_leaks, "syndicated": N_pages_with_a_repeated_paragraph}.
    The same (docs, seed) always gives byte-identical files."""
    warc_path = Path(out_path)
    if not warc_path.name.endswith(".warc.gz"):
        raise ValueError(f"out_path must end with .warc.gz: {warc_path}")
    if docs < 1:
        raise ValueError("docs must be >= 1")
    stem = warc_path.name[: -len(".warc.gz")]
    truth_path = warc_path.with_name(stem + ".truth.jsonl")
    benchmark_path = warc_path.with_name(stem + ".benchmark.jsonl")
    records = _build_records(docs, seed, random.Random(seed))
    warc_path.parent.mkdir(parents=True, exist_ok=True)
    with open(warc_path, "wb") as fh:
        _write_warc(records, fh, docs, seed)
    with open(truth_path, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(_truth(rec), sort_keys=True, ensure_ascii=False) + "\n")
    write_benchmark(benchmark_path)
    pages = [rec.page for rec in records if rec.page]
    return {
        "warc": str(warc_path),
        "truth": str(truth_path),
        "benchmark": str(benchmark_path),
        "records": len(records),
        "pages": len(pages),
        "by_kind": dict(sorted(Counter(rec.kind for rec in records).items())),
        "by_lang": dict(sorted(Counter(page.lang for page in pages).items())),
        "leaks": sum(bool(page.leaks) for page in pages),
        "syndicated": sum(bool(page.repeated_paragraphs) for page in pages),
    }
