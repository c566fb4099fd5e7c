"""Main-text extraction: trafilatura (default, favouring precision, with its own fallback extractors) or
resiliparse (a C++ extractor, about 10x faster, a few points of F1 lower; `profiling/bench_extract.py` measures both).

`deduplicate` stays off: trafilatura's dedup keeps an LRU cache across calls, so re-running the same pages would
return empty text. Dedup is a stage of its own here. Partitions run in parallel through the executor; within a
partition, extraction is one library call per page (neither library has a batch API).

Documents that already have text (from JSONL or Parquet inputs read in the same run as WARCs or HTML folders) pass
through unchanged. A page the extractor raises on is dropped as `extract_error`, counted per exception class in
`extra.extract_error_<Class>`, and its first few cases per partition are logged with the document id and message.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Callable, Literal

import pandas as pd

from gpupipe.config import Strict
from gpupipe.stages.base import MapStage, text_bytes

log = logging.getLogger("gpupipe")

LOGGED_ERRORS = 3  # extract_error examples logged per partition; the per-class counts cover the rest


class ExtractConfig(Strict):
    # trafilatura, seed 002 §1.2's options. On the scrapinghub article-extraction benchmark (181 pages) precision
    # mode is the better choice, not just the seed's: F1 0.964 against 0.953 for trafilatura's defaults and 0.960
    # with favor_precision off (bench_extract.py), so the seed's settings are also the defaults here.
    extractor: Literal["trafilatura", "resiliparse"] = "trafilatura"
    favor_precision: bool = True        # trafilatura only
    include_tables: bool = True         # resiliparse: false skips <table> elements
    include_comments: bool = False      # resiliparse: its `comments` option
    fallback: bool = True               # trafilatura's readability/jusText fallbacks when its own heuristics fail
    max_html_bytes: int = 5_000_000     # giant pages are counted and skipped, not parsed for minutes
    keep_html: bool = False             # carry the raw HTML on (large) for later inspection


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


EXTRACTORS = {"trafilatura": trafilatura_extractor, "resiliparse": resiliparse_extractor}


def too_large(html: str, max_bytes: int) -> bool:
    # A character is 1 to 4 UTF-8 bytes: encode only when the character count leaves the answer open.
    if len(html) * 4 <= max_bytes:
        return False
    return len(html) > max_bytes or len(html.encode("utf-8", "surrogatepass")) > max_bytes


def _str_or_none(value) -> str | None:
    """A string cell as is; a missing one (None, or NaN: pandas reads null strings as NaN) as None."""
    return value if isinstance(value, str) else None


class Extract(MapStage):
    name = "extract"
    Config = ExtractConfig
    text_column = "html"

    def setup(self) -> None:
        self._extract = EXTRACTORS[self.config.extractor](self.config)

    def _one(self, html: str | None, url: str | None) -> tuple[str | None, str | None, Exception | None]:
        if not html:
            return None, "empty_html", None
        if too_large(html, self.config.max_html_bytes):
            return None, "html_too_large", None
        try:
            text = self._extract(html, url)
        except Exception as e:  # a page the extractor chokes on is a counted reason, not a failed run
            return None, "extract_error", e
        return (text, None, None) if text and text.strip() else (None, "no_main_text", None)

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        """text and _why per row, plus `_error`: the exception class of an extract_error."""
        htmls, texts = _cells(df, "html"), _cells(df, "text")
        results = [(text, None, None) if keeps_text(text, html) else self._one(html, url)
                   for html, url, text in zip(htmls, _cells(df, "url"), texts)]
        _log_errors(_cells(df, "id"), [err for _, _, err in results])
        df = df.assign(text=[t or "" for t, _, _ in results], _why=[w for _, w, _ in results],
                       _error=[type(e).__name__ if e is not None else None for _, _, e in results])
        return df if self.config.keep_html or "html" not in df.columns else df.drop(columns=["html"])

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        return df["_why"]

    def run_partition(self, df):
        passed = [keeps_text(t, h) for t, h in zip(_cells(df, "text"), _cells(df, "html"))]
        kept, rejects, stats = super().run_partition(df if "html" in df.columns else df.assign(html=None))
        if any(passed):  # bytes_in counts the HTML; documents that pass through bring their text
            stats.bytes_in += text_bytes(df.loc[passed, "text"])
        stats.extra.update(Counter(f"extract_error_{cls}" for cls in rejects["_error"].dropna()))
        return kept.drop(columns=["_why", "_error"]), rejects.drop(columns=["_why", "_error"]), stats


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
