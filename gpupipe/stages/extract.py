"""Main-text extraction: trafilatura (default, favouring precision, with its own fallback extractors) or
resiliparse (a C++ extractor, about 10x faster, a few points of F1 lower; `profiling/bench_extract.py` measures both).

`deduplicate` stays off: trafilatura's dedup keeps an LRU cache across calls, so re-running the same pages would
return empty text. Dedup is a stage of its own here. Partitions run in parallel through the executor; within a
partition, extraction is one library call per page (neither library has a batch API).
"""

from __future__ import annotations

from typing import Callable, Literal

import pandas as pd

from gpupipe.config import Strict
from gpupipe.stages.base import MapStage


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


class Extract(MapStage):
    name = "extract"
    Config = ExtractConfig
    text_column = "html"

    def setup(self) -> None:
        self._extract = EXTRACTORS[self.config.extractor](self.config)

    def _one(self, html: str | None, url: str | None) -> tuple[str | None, str | None]:
        if not html:
            return None, "empty_html"
        if too_large(html, self.config.max_html_bytes):
            return None, "html_too_large"
        try:
            text = self._extract(html, url)
        except Exception:  # a page the extractor chokes on is a counted reason, not a failed run
            return None, "extract_error"
        return (text, None) if text and text.strip() else (None, "no_main_text")

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        urls = df["url"] if "url" in df.columns else pd.Series([None] * len(df), index=df.index)
        results = [self._one(h, u) for h, u in zip(df["html"], urls)]
        df = df.assign(text=[t or "" for t, _ in results], _why=[w for _, w in results])
        return df if self.config.keep_html else df.drop(columns=["html"])

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        return df["_why"]

    def run_partition(self, df):
        kept, rejects, stats = super().run_partition(df)
        return kept.drop(columns=["_why"]), rejects.drop(columns=["_why"]), stats
