"""Main-text extraction: `auto` (the default: gpupipe's own block scorer on selectolax's Lexbor DOM,
gpupipe/extract/fast.py, with trafilatura for the few pages where it kept little: about 5x trafilatura's pages/s,
F1 above trafilatura's precision mode on the news benchmark and above its defaults on trafilatura's own evaluation set
of every page kind, held-out halves included), trafilatura (precision mode, with its own fallback extractors: the
user's spec), `fast` (the block scorer alone) or resiliparse (a C++ extractor, about 13x faster, a few points of F1
lower).
`profiling/bench_extract.py` measures all.

Every page runs under a time bound (`extract_timeout` seconds, gpupipe/extract/timeout.py): a page past it is
stopped and dropped as `extract_timeout`; the partition goes on. The stage's extra stats carry `extract_ms` (time in
the extractor, summed: pages/s = docs / extract_ms), `peak_extract_page_ms` (the slowest page) and, for `auto`,
`extract_fallback` (pages sent to trafilatura); the slowest pages of a partition are logged with their ids.

`deduplicate` stays off: trafilatura's dedup keeps an LRU cache across calls, so re-running the same pages would
return empty text. Dedup is a stage of its own here. Partitions run in parallel through the executor; within a
partition, extraction is one library call per page (neither library has a batch API).

Documents that already have text (from JSONL or Parquet inputs read in the same run as WARCs or HTML folders) pass
through unchanged. A page the extractor raises on is dropped as `extract_error`, counted per exception class in
`extra.extract_error_<Class>`, and its first few cases per partition are logged with the document id and message.
Seed 002's length rules are on by default: a page under `min_content_length` (200) bytes of HTML is
`content_too_short` (not parsed), an extraction under `min_text_chars` (100) characters is `text_too_short`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Callable, Literal

import pandas as pd

from pydantic import Field

from gpupipe.config_base import Strict
from gpupipe.extract.timeout import PageTimeout, time_limit
from gpupipe.stages.base import Applied, MapStage, text_bytes

log = logging.getLogger("gpupipe")

LOGGED_ERRORS = 3  # extract_error examples logged per partition; the per-class counts cover the rest
LOGGED_SLOWEST = 3  # slowest pages logged per partition
# `auto`: pages where the fast extractor kept fewer characters than this (of a page with more text than this) go to
# trafilatura: a safety net for pages whose structure the block scorer misreads. On the even-indexed (tune) half of
# the 181 benchmark pages no cheap signal (kept length, kept share of the page) picked pages where trafilatura does
# better (docs/design.md), so the net is kept small and cheap: no page of that half falls back at 200 (at 1000, 10 %
# do, for -0.0003 F1); the prose share below is the signal that did pick such pages, on a larger set.
AUTO_FALLBACK_CHARS = 200
# ... and pages where the kept blocks hold under this share of the page's prose (the summed values of the blocks that
# read as prose): the text is spread over sections the container did not take (a landing page, a recipe, a
# service page). Chosen on the tune half of trafilatura's evaluation set (990 pages, bench_extract.py
# --trafilatura-eval): 1.6 % more of its pages fall back, F1 +0.0026 there; 2 pages of each half of the 181 do.
AUTO_PROSE_SHARE = 0.5
# auto's fallback runs trafilatura with its default balance of precision and recall, not favor_precision: the pages
# it gets are those fast read as thin or spread (listings, collections, landing pages), where precision mode keeps
# the least. On the choose half of WCXB's dev split (bench_extract.py --wcxb, #33) collection F1 0.633 -> 0.663,
# service 0.800 -> 0.804, all 0.8174 -> 0.8206; the tune half of the 181 news pages unchanged (0.9786).
AUTO_FALLBACK_PRECISION = False


class ExtractConfig(Strict):
    # `auto` (gpupipe/extract/fast.py, trafilatura on the pages where it kept little) is the default since #19: on
    # the 181 scrapinghub pages it has F1 0.972 against precision mode's 0.964 at 5.2x its pages/s (held-out half
    # 0.964 against 0.953), and on trafilatura's own 990-page evaluation set of every page kind 0.930 against
    # trafilatura's defaults' 0.921 (held-out half 0.926 against 0.922) at 5.6x (bench_extract.py, docs/design.md).
    # `extractor: trafilatura` with favor_precision, tables kept and comments dropped is the user's spec's setting;
    # these options also drive auto's fallback, favor_precision aside (AUTO_FALLBACK_PRECISION). Since #33 auto keeps
    # listings' items too: on WCXB's held-out half 0.826 against trafilatura's defaults' 0.787 at 5.2x, 181 pages 0.965.
    extractor: Literal["trafilatura", "resiliparse", "fast", "auto"] = "auto"
    favor_precision: bool = True        # trafilatura only (auto's fallback balances, AUTO_FALLBACK_PRECISION)
    include_tables: bool = True         # resiliparse: false skips <table> elements
    include_comments: bool = False      # readers' comments after the main text (every extractor)
    fallback: bool = True               # trafilatura's readability/jusText fallbacks when its own heuristics fail
    # giant pages are counted and skipped, not parsed for minutes: trafilatura's own cap (its MAX_FILE_SIZE, 20 MB), so
    # that auto extracts every page trafilatura's defaults do (#33: a 5.3 MB shop page of WCXB's dev split, mostly
    # inline scripts, was skipped at 5 MB; fast takes 14 ms on it; the per-page time bound covers slow ones)
    max_html_bytes: int = 20_000_000
    keep_html: bool = False             # carry the raw HTML on (large) for later inspection
    extract_timeout: float = 30.0       # seconds per page; a page past it is stopped and counted; 0 = no limit
    # Seed 002's two length rules (#35), on by default as the seed writes them: WARCConfig.min_content_length = 200
    # bytes (a page whose HTML, as UTF-8, is shorter is `content_too_short`, not parsed) and extract_content's
    # `len(result) < 100` (an extraction under 100 characters is `text_too_short`). Only pages the stage extracts are
    # measured: documents that arrive with text (JSONL, Parquet) pass through whatever their length. 0 turns a rule off.
    min_content_length: int = Field(200, ge=0)   # bytes of HTML
    min_text_chars: int = Field(100, ge=0)       # characters of extracted text (Python len, as the seed's)


# resiliparse options chosen on the benchmark: block formatting kept (paragraph and line breaks feed the line
# filters and paragraph-level language ID); image alt texts, bylines/dates and list bullets dropped, since they are
# not article text (alt texts alone cost 0.02 F1).
RESILIPARSE_OPTIONS = dict(main_content=True, preserve_formatting=True, alt_texts=False, post_meta=False,
                           list_bullets=False, links=False, form_fields=False, noscript=False)


def trafilatura_extractor(cfg: ExtractConfig) -> Callable[[str, str | None], str | None]:
    import trafilatura

    def extract(html: str, url: str | None) -> str | None:
        return trafilatura.extract(html, url=url, favor_precision=cfg.favor_precision,
                                   include_tables=cfg.include_tables, include_comments=cfg.include_comments,
                                   no_fallback=not cfg.fallback, deduplicate=False)
    return extract


def resiliparse_extractor(cfg: ExtractConfig) -> Callable[[str, str | None], str | None]:
    try:
        from resiliparse.extract.html2text import extract_plain_text
    except ImportError as e:
        raise ImportError("extract: `extractor: resiliparse` needs the resiliparse package "
                          "(pip install 'resiliparse>=2.0')") from e
    opts = dict(RESILIPARSE_OPTIONS, comments=cfg.include_comments,
                skip_elements=None if cfg.include_tables else ["table"])

    def extract(html: str, url: str | None) -> str | None:
        return extract_plain_text(html, **opts)
    return extract


def fast_extractor(cfg: ExtractConfig) -> Callable[[str, str | None], str | None]:
    from gpupipe.extract.fast import extract_text

    def extract(html: str, url: str | None) -> str | None:
        return extract_text(html, tables=cfg.include_tables, comments=cfg.include_comments).text
    return extract


class _Auto:
    """fast first; trafilatura (the configured options, favor_precision aside: AUTO_FALLBACK_PRECISION), on the page
    as fast cleaned it, where fast kept under AUTO_FALLBACK_CHARS characters of a page that has more text than that,
    or under AUTO_PROSE_SHARE of the page's prose. A page whose text (less scripts, menus, footers, hidden parts) is
    that short anyway, such as an error page, a redirect or a script-only shell, common in a crawl, is left to fast:
    trafilatura cannot find more there, and would cost its full time per page. Text that came from trafilatura is returned as `Fallback` (a str), so
    the stage counts fallbacks without state on the extractor."""

    def __init__(self, cfg: ExtractConfig) -> None:
        from gpupipe.extract.fast import extract_text, said_once

        self._fast, self._once = extract_text, said_once
        self._slow = trafilatura_extractor(cfg.model_copy(update={"favor_precision": AUTO_FALLBACK_PRECISION}))
        self._tables, self._comments = cfg.include_tables, cfg.include_comments

    def __call__(self, html: str, url: str | None) -> str | None:
        result = self._fast(html, tables=self._tables, comments=self._comments)
        if result.page_chars < AUTO_FALLBACK_CHARS or (result.content_chars >= AUTO_FALLBACK_CHARS
                                                       and result.prose_kept >= AUTO_PROSE_SHARE * result.prose):
            return result.text
        # trafilatura reads the page as fast cleaned it: same F1 on the tune half, a third less time (design.md)
        text = self._slow(result.cleaned_html() or html, url) or result.text or ""
        # a product's page says each line once, as fast's text of it does (#33: its repeats are per screen size and
        # variant; WCXB's choose half, product +0.001)
        return Fallback(self._once(text) if result.product else text)


class Fallback(str):
    """Text `_Auto` got from trafilatura after fast (counted as extract_fallback)."""


EXTRACTORS = {"trafilatura": trafilatura_extractor, "resiliparse": resiliparse_extractor, "fast": fast_extractor,
              "auto": _Auto}


def too_large(html: str, max_bytes: int) -> bool:
    # A character is 1 to 4 UTF-8 bytes: encode only when the character count leaves the answer open.
    if len(html) * 4 <= max_bytes:
        return False
    if html.isascii():   # one byte each (a fast C scan, no copy)
        return len(html) > max_bytes
    return len(html) > max_bytes or len(html.encode("utf-8", "surrogatepass")) > max_bytes


def _shorter_than(html: str, min_bytes: int) -> bool:
    """UTF-8 length of the page under min_bytes (encoded only when the character count leaves it open)."""
    if len(html) >= min_bytes:
        return False
    return len(html.encode("utf-8", "surrogatepass")) < min_bytes


def _str_or_none(value) -> str | None:
    """A string cell as is; a missing one (None, or NaN: pandas reads null strings as NaN) as None."""
    return value if isinstance(value, str) else None


class Extract(MapStage):
    name = "extract"
    Config = ExtractConfig
    text_column = "html"

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        return ("html",)

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        return ("text",)

    def setup(self) -> None:
        self._extract = EXTRACTORS[self.config.extractor](self.config)

    def _one(self, html: str | None, url: str | None) -> tuple[str | None, str | None, Exception | None, float | None]:
        """(text, why it goes, the exception of an extract_error, seconds the extractor took: None where it did not
        run)."""
        if not html:
            return None, "empty_html", None, None
        if too_large(html, self.config.max_html_bytes):
            return None, "html_too_large", None, None
        if self.config.min_content_length and _shorter_than(html, self.config.min_content_length):
            return None, "content_too_short", None, None
        t0 = time.perf_counter()
        try:
            with time_limit(self.config.extract_timeout):
                text = self._extract(html, url)
        except PageTimeout:   # stopped: the page is dropped, the partition goes on
            return None, "extract_timeout", None, time.perf_counter() - t0
        except Exception as e:  # a page the extractor chokes on is a counted reason, not a failed run
            return None, "extract_error", e, time.perf_counter() - t0
        # the extractor's text as it came (a Fallback is counted), even where it goes
        why = None if text and text.strip() else "no_main_text"
        if why is None and len(text) < self.config.min_text_chars:
            why = "text_too_short"
        return text, why, None, time.perf_counter() - t0

    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        """text per row (extracted from `html`; a document that has text and no HTML passes through), why a row
        goes, and the stage's counters: extract_ms, the slowest page, fallbacks, errors per exception class."""
        if "html" not in df.columns:
            df = df.assign(html=None)
        htmls, texts, ids = _cells(df, "html"), _cells(df, "text"), _cells(df, "id")
        results, timing = [], []   # timing: (seconds, id) of each page the extractor ran on
        for html, url, text, doc_id in zip(htmls, _cells(df, "url"), texts, ids):
            if keeps_text(text, html):
                results.append((text, None, None))
                continue
            out, why, err, seconds = self._one(html, url)
            results.append((out, why, err))
            if seconds is not None:
                timing.append((seconds, doc_id))
        _log_errors(ids, [err for _, _, err in results])
        extra = Counter(f"extract_error_{type(err).__name__}" for _, _, err in results if err is not None)
        if timing:
            extra["extract_ms"] += round(sum(s for s, _ in timing) * 1000)
            slowest = sorted(timing, key=lambda x: x[0], reverse=True)[:LOGGED_SLOWEST]
            extra["peak_extract_page_ms"] = round(slowest[0][0] * 1000)
            log.info("extract: %d pages, %.1f pages/s; slowest: %s", len(timing),
                     len(timing) / max(sum(s for s, _ in timing), 1e-9),
                     ", ".join(f"{i} {s * 1000:.0f} ms" for s, i in slowest))
        if isinstance(self._extract, _Auto):
            extra["extract_fallback"] += sum(isinstance(t, Fallback) for t, _, _ in results)
        # bytes_in counts the HTML; documents that pass through bring their text
        passed = [keeps_text(t, h) for t, h in zip(texts, htmls)]
        bytes_in = text_bytes(df["html"]) + (text_bytes(df.loc[passed, "text"]) if any(passed) else 0)
        df = df.assign(text=[str(t) if t and w is None else "" for t, w, _ in results])
        why = pd.Series([w for _, w, _ in results], index=df.index, dtype=object)
        if not self.config.keep_html:
            df = df.drop(columns=["html"])
        return Applied(df, why, extra, bytes_in=bytes_in)


def keeps_text(text: str | None, html: str | None) -> bool:
    """A document that already has text and no HTML (from a JSONL/Parquet input) is not extracted."""
    return bool(text and text.strip()) and not html


def _cells(df: pd.DataFrame, column: str) -> list[str | None]:
    """A column's cells as str or None; a missing column is all None."""
    if column not in df.columns:
        return [None] * len(df)
    return [_str_or_none(v) for v in df[column]]


def _log_errors(ids: list[str | None], errors: list[Exception | None]) -> None:
    failed = [(i, e) for i, e in zip(ids, errors) if e is not None]
    for doc_id, err in failed[:LOGGED_ERRORS]:
        log.warning("extract: document %s: extract_error %s: %s", doc_id, type(err).__name__, str(err)[:300])
    if len(failed) > LOGGED_ERRORS:
        log.warning("extract: %d more extract_error(s) in this partition (counted per exception class in the "
                    "stage's extra stats)", len(failed) - LOGGED_ERRORS)
