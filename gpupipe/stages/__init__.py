"""The stage registry: stable snake_case names → stage classes, and config validation of the `stages` list."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from gpupipe.stages.base import MapStage, RunContext, Stage
from gpupipe.stages.chunk_markdown import ChunkMarkdown
from gpupipe.stages.decontam import Decontaminate
from gpupipe.stages.dedup_exact import ExactDedup
from gpupipe.stages.dedup_fuzzy import FuzzyDedup
from gpupipe.stages.dedup_substring import SubstringDedup
from gpupipe.stages.doc_filter import DocFilter
from gpupipe.stages.extract import Extract
from gpupipe.stages.langid import LangId
from gpupipe.stages.normalize import Normalize
from gpupipe.stages.pack import Pack
from gpupipe.stages.pii import PiiRedactor
from gpupipe.stages.quality import QualityFilter
from gpupipe.stages.line_filter import LineFilter
from gpupipe.stages.mixture import Mixture
from gpupipe.stages.model_quality import PerplexityFilter, QualityClassifier
from gpupipe.stages.url_filter import UrlDedup, UrlFilter
from gpupipe.stages.tokenize import Tokenize

STAGES: dict[str, type[Stage]] = {cls.name: cls for cls in
                                  (Extract, ChunkMarkdown, Normalize, LangId, UrlFilter, LineFilter, DocFilter, QualityFilter, QualityClassifier,
                                            PerplexityFilter, PiiRedactor,
                                            UrlDedup, ExactDedup, FuzzyDedup, SubstringDedup, Decontaminate, Tokenize,
                                            Mixture, Pack)}

# Which stage must come right before another (they read its output files).
REQUIRES_BEFORE = {"pack": ("tokenize", "mixture"), "mixture": ("tokenize",)}


def build_stage_configs(items: list[Any], where: str) -> list[dict[str, Any]]:
    """Validate `stages:` items; returns them with every parameter filled in (the resolved config)."""
    from gpupipe.config import ConfigError, _format_error

    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or len(item) != 1:
            raise ConfigError(f"{where}: key 'stages.{i}': each stage is a one-key mapping like "
                              f"'- langid: {{keep: [en]}}', got {item!r}")
        (name, params), = item.items()
        if name not in STAGES:
            raise ConfigError(f"{where}: key 'stages.{i}': unknown stage '{name}' "
                              f"(known: {', '.join(sorted(STAGES))})")
        try:
            cfg = STAGES[name].Config.model_validate(params or {})
        except ValidationError as e:
            raise ConfigError(_format_error(e, where, prefix=f"stages.{i}.{name}.")) from None
        prev = next(iter(out[-1])) if out else None
        if name in REQUIRES_BEFORE and prev not in REQUIRES_BEFORE[name]:
            raise ConfigError(f"{where}: key 'stages.{i}': stage '{name}' must come right after "
                              + " or ".join(f"'{s}'" for s in REQUIRES_BEFORE[name]))
        if prev == "pack":
            raise ConfigError(f"{where}: key 'stages.{i}': no stage can follow 'pack'")
        out.append({name: cfg.model_dump(mode="json")})
    return out


def build_stage(item: dict[str, Any], ctx: RunContext) -> Stage:
    (name, params), = item.items()
    cls = STAGES[name]
    return cls(cls.Config.model_validate(params), ctx)


__all__ = ["STAGES", "Stage", "MapStage", "RunContext", "build_stage", "build_stage_configs"]
