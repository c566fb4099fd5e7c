"""Main-text extraction with trafilatura, favouring precision, with trafilatura's own fallback extractors.

`deduplicate` stays off: trafilatura's dedup keeps an LRU cache across calls, so re-running the same pages would
return empty text. Dedup is a stage of its own here.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from gpupipe.config import Strict
from gpupipe.stages.base import MapStage


class ExtractConfig(Strict):
    favor_precision: bool = True
    include_tables: bool = True
    include_comments: bool = False
    fallback: bool = True               # trafilatura's readability/jusText fallbacks when its own heuristics fail
    max_html_bytes: int = 5_000_000     # giant pages are counted and skipped, not parsed for minutes
    keep_html: bool = False             # carry the raw HTML on (large) for later inspection


class Extract(MapStage):
    name = "extract"
    Config = ExtractConfig
    text_column = "html"

    def setup(self) -> None:
        import trafilatura

        self._extract = trafilatura.extract

    def _one(self, html: str | None, url: str | None) -> tuple[str | None, str | None]:
        if not html:
            return None, "empty_html"
        if len(html.encode("utf-8", "surrogatepass")) > self.config.max_html_bytes:
            return None, "html_too_large"
        try:
            text = self._extract(html, url=url, favor_precision=self.config.favor_precision,
                                 include_tables=self.config.include_tables,
                                 include_comments=self.config.include_comments,
                                 no_fallback=not self.config.fallback, deduplicate=False)
        except Exception:  # a page trafilatura chokes on is a counted reason, not a failed run
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
