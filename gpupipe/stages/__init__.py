"""The stage registry: stable snake_case names → stage classes, and config validation of the `stages` list."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from gpupipe.config_base import ConfigError, did_you_mean, format_error
from gpupipe.stages.base import MapStage, RunContext, Stage
from gpupipe.stages.read import ReadStage
from gpupipe.stages.text.chunk_markdown import ChunkMarkdown
from gpupipe.stages.filters.classifier import Classifier
from gpupipe.stages.filters.decontam import Decontaminate
from gpupipe.stages.dedup.exact import ExactDedup
from gpupipe.stages.dedup.fuzzy import FuzzyDedup
from gpupipe.stages.dedup.semantic import SemanticDedup
from gpupipe.stages.dedup.simhash import SimHashDedup
from gpupipe.stages.dedup.substring import SubstringDedup
from gpupipe.stages.filters.doc_filter import DocFilter
from gpupipe.stages.text.extract import Extract
from gpupipe.stages.filters.langid import LangId
from gpupipe.stages.text.normalize import Normalize
from gpupipe.stages.tokens.pack import Pack, PackConfig
from gpupipe.stages.text.pii import PiiRedactor
from gpupipe.stages.filters.quality import QualityFilter
from gpupipe.stages.filters.line_filter import LineFilter
from gpupipe.stages.tokens.mixture import Mixture
from gpupipe.stages.filters.model_quality import PerplexityFilter, QualityClassifier
from gpupipe.stages.filters.url_filter import UrlDedup, UrlFilter
from gpupipe.stages.filters.keyword_filter import NsfwFilter
from gpupipe.stages.tokens.tokenize import Tokenize, TokenizeConfig

STAGES: dict[str, type[Stage]] = {cls.name: cls for cls in (
    Extract, ChunkMarkdown, Normalize, LangId, UrlFilter, NsfwFilter, LineFilter, DocFilter, QualityFilter, QualityClassifier,
    PerplexityFilter, Classifier, PiiRedactor, UrlDedup, ExactDedup, FuzzyDedup, SimHashDedup, SemanticDedup,
    SubstringDedup, Decontaminate, Tokenize, Mixture, Pack)}

# Which stage must come right before another (they read its output files).
REQUIRES_BEFORE = {"pack": ("tokenize", "mixture"), "mixture": ("tokenize",)}


def build_stage_configs(items: list[Any], where: str) -> list[dict[str, Any]]:
    """Validate `stages:` items; returns them with every parameter filled in (the resolved config)."""
    out: list[dict[str, Any]] = []
    tokenize: tuple[int, TokenizeConfig] | None = None   # the last tokenize stage: (index, config)
    for i, item in enumerate(items):
        if not isinstance(item, dict) or len(item) != 1:
            raise ConfigError(f"{where}: key 'stages.{i}': each stage is a one-key mapping like "
                              f"'- langid: {{keep: [en]}}', got {item!r}")
        (name, params), = item.items()
        if name not in STAGES:
            hint = did_you_mean(name, STAGES) or f" (known: {', '.join(sorted(STAGES))})"
            raise ConfigError(f"{where}: key 'stages.{i}': unknown stage '{name}'{hint}")
        try:
            cfg = STAGES[name].Config.model_validate(params or {})
        except ValidationError as e:
            raise ConfigError(format_error(e, where, prefix=f"stages.{i}.{name}.")) from None
        prev = next(iter(out[-1])) if out else None
        if name in REQUIRES_BEFORE and prev not in REQUIRES_BEFORE[name]:
            raise ConfigError(f"{where}: key 'stages.{i}': stage '{name}' must come right after "
                              + " or ".join(f"'{s}'" for s in REQUIRES_BEFORE[name]))
        if prev == "pack":
            raise ConfigError(f"{where}: key 'stages.{i}': no stage can follow 'pack'")
        _check_columns(name, i, [next(iter(o)) for o in out], where)
        if name == "tokenize":
            tokenize = (i, cfg)
        if name == "pack" and tokenize is not None:
            _check_pack_tokens(cfg, i, *tokenize, where)
        if name == "pack" and cfg.mode == "bestfit" and prev == "mixture" and out[-1]["mixture"].get("phases"):
            raise ConfigError(f"{where}: key 'stages.{i}.pack.mode': a mixture with phases packs with mode: stream "
                              f"(the default; best-fit packing has no phase boundaries)")
        out.append({name: cfg.model_dump(mode="json")})
    return out


def _check_columns(name: str, i: int, before: list[str], where: str) -> None:
    """A stage reads only columns the input or an earlier stage makes (its `inputs()`, their `outputs()`)."""
    made = set(ReadStage.outputs()).union(*(STAGES[b].outputs() for b in before))
    for column in STAGES[name].inputs():
        makers = [n for n, cls in STAGES.items() if column in cls.outputs()]
        if column not in made and makers:
            raise ConfigError(f"{where}: key 'stages.{i}': stage '{name}' reads column '{column}', which no "
                              f"earlier stage makes: put " + " or ".join(f"'{m}'" for m in makers) + " before it")


def _check_pack_tokens(pack: PackConfig, i: int, j: int, tokenize: TokenizeConfig, where: str) -> None:
    """Pack's EOS (and bestfit's pad) token must be in the vocabulary the tokenize stage trains or loads; pack
    would otherwise fail only after tokenization has run."""
    for key in ("eos_token", "pad_token") if pack.mode == "bestfit" else ("eos_token",):
        token = getattr(pack, key)
        if not tokenize.has_token(token):
            fix = (f"the tokenizer {tokenize.tokenizer} lacks it" if tokenize.tokenizer else
                   f"add it to 'stages.{j}.tokenize.special_tokens' {tokenize.special_tokens}")
            raise ConfigError(f"{where}: key 'stages.{i}.pack.{key}': {token!r} is not in the vocabulary of "
                              f"the tokenize stage (stages.{j}): {fix}")


def build_stage(item: dict[str, Any], ctx: RunContext) -> Stage:
    (name, params), = item.items()
    cls = STAGES[name]
    return cls(cls.Config.model_validate(params), ctx)


__all__ = ["STAGES", "Stage", "MapStage", "RunContext", "build_stage", "build_stage_configs"]
