"""Seed 002's `datapipe_config.yaml` template (DataPipe v2.0, its appendix) → a gpupipe run config.

`gpupipe config convert FILE` prints the translation with a comment per template key (what it became, or why it is
ignored); `gpupipe run FILE` runs a template through the same `from_template`. A template is a mapping with a
top-level `pipeline` key or a `stages` mapping (gpupipe's `stages` is a list). Every template key is either mapped or
named as ignored; a key the template does not have is refused (a typo would otherwise vanish). Models the template
names by a short name are looked up as files (beside the template, then as given): one that cannot be found leaves
its stage out, with a note saying how to provide the file.

Template key → gpupipe:
  pipeline.name / version               output `runs/<name>` / ignored (descriptive)
  stages.extraction.tool                extract.extractor (trafilatura, resiliparse)
  stages.extraction.min_content_length  extract.min_content_length (bytes of HTML before extraction)
  stages.language_detection.model       langid.model (fasttext-lid-176 = the shipped lid.176.ftz)
  stages.language_detection.languages   langid.keep + langid.min_score per language
  stages.deduplication.url_dedup        url_dedup
  stages.deduplication.minhash          fuzzy_dedup (num_perm, threshold)
  stages.deduplication.suffix_array     substring_dedup (min_length, UTF-8 bytes)
  stages.quality_filter.perplexity      perplexity (model; range = low/high_percentile, which need a `reference`)
  stages.quality_filter.classifier      classifier (model: a Hugging Face folder; threshold = min_score)
  stages.output.format / compression    Parquet parts, zstd: what every stage writes (not configurable)
  stages.output.tokenizer               null: no tokenize stage; else tokenize.tokenizer
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from gpupipe.config_base import ConfigError, read_yaml_file

# The run config's own top-level keys: a template may carry them (e.g. `input` added by `gpupipe run --input`).
RUN_KEYS = ("input", "output", "executor", "storage", "device", "seed", "allow_empty", "keep_intermediate")
LANGID_MODELS = {"fasttext-lid-176", "lid.176", "lid.176.bin", "lid.176.ftz", "lid-176"}  # the shipped model
EXTRACTORS = {"trafilatura", "resiliparse"}


def is_template(raw: Any) -> bool:
    """Whether a loaded YAML mapping is seed 002's template rather than a gpupipe config."""
    return isinstance(raw, dict) and ("pipeline" in raw or isinstance(raw.get("stages"), dict))


class _Reader:
    """Walks the template: takes keys (remembering them), names the ones left over as errors."""

    def __init__(self, where: str, base: Path | None):
        self.where, self.base = where, base
        self.notes: list[str] = []     # "key: what it became / why it is ignored", in template order

    def section(self, node: Any, key: str) -> dict:
        if node is None:
            return {}
        if not isinstance(node, dict):
            raise ConfigError(f"{self.where}: key '{key}': expected a mapping, got {node!r}")
        return dict(node)

    def done(self, node: dict, key: str, known: tuple[str, ...]) -> None:
        if node:
            raise ConfigError(f"{self.where}: key '{key}.{next(iter(node))}': not a key of seed 002's template "
                              f"(known here: {', '.join(known)})")

    def note(self, key: str, text: str) -> None:
        self.notes.append(f"{key}: {text}")

    def find(self, name: Any) -> str | None:
        """A model named in the template, as a file or folder: beside the template, then as given."""
        if not isinstance(name, str) or not name:
            return None
        for p in ([self.base / name] if self.base else []) + [Path(name)]:
            if p.exists():
                return str(p)
        return None


def from_template(raw: dict, where: str = "<template>", base: Path | None = None) -> tuple[dict, list[str]]:
    """(the gpupipe config dict, notes): every template key mapped or named as ignored, in template order."""
    r = _Reader(where, base)
    raw = dict(raw)
    out: dict[str, Any] = {k: raw.pop(k) for k in RUN_KEYS if k in raw}
    pipeline = r.section(raw.pop("pipeline", None), "pipeline")
    name = pipeline.pop("name", None)
    if name is not None:
        if "output" in out:
            r.note("pipeline.name", f"'{name}': ignored, `output` is given")
        else:
            out["output"] = f"runs/{name}"
            r.note("pipeline.name", f"'{name}': the run directory, output: runs/{name}")
    if "version" in pipeline:
        r.note("pipeline.version", f"{pipeline.pop('version')!r}: ignored (descriptive; the run's config.resolved.yaml "
                                   "and stats.json record what ran)")
    r.done(pipeline, "pipeline", ("name", "version"))
    stages = r.section(raw.pop("stages", None), "stages")
    r.done(raw, "", ("pipeline", "stages", *RUN_KEYS))
    items: list[dict] = []
    for key, fn in (("extraction", _extraction), ("language_detection", _language_detection),
                    ("deduplication", _deduplication), ("quality_filter", _quality_filter), ("output", _output)):
        if key in stages:
            items += fn(r, r.section(stages.pop(key), f"stages.{key}"), f"stages.{key}")
    r.done(stages, "stages", ("extraction", "language_detection", "deduplication", "quality_filter", "output"))
    out["stages"] = items
    return out, r.notes


def _extraction(r: _Reader, s: dict, at: str) -> list[dict]:
    params: dict[str, Any] = {}
    if "tool" in s:
        tool = s.pop("tool")
        if tool not in EXTRACTORS:
            raise ConfigError(f"{r.where}: key '{at}.tool': {tool!r} is not an extractor gpupipe has "
                              f"({', '.join(sorted(EXTRACTORS))})")
        params["extractor"] = tool
        r.note(f"{at}.tool", f"{tool} → extract.extractor: {tool}")
    if "min_content_length" in s:
        n = s.pop("min_content_length")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ConfigError(f"{r.where}: key '{at}.min_content_length': {n!r} is not a byte count (an integer >= 0)")
        params["min_content_length"] = n
        r.note(f"{at}.min_content_length", f"{n} → extract.min_content_length: {n} (bytes of HTML before extraction)")
    r.done(s, at, ("tool", "min_content_length"))
    return [{"extract": params}]


def _language_detection(r: _Reader, s: dict, at: str) -> list[dict]:
    params: dict[str, Any] = {}
    if "model" in s:
        model = s.pop("model")
        found = r.find(model)
        if found:
            params["model"] = found
            r.note(f"{at}.model", f"{model} → langid.model: {found}")
        elif model in LANGID_MODELS:
            r.note(f"{at}.model", f"{model}: the shipped fastText lid.176.ftz (langid's default model)")
        else:
            raise ConfigError(f"{r.where}: key '{at}.model': {model!r} is not a file; give the path of a supervised "
                              "fastText language model, or fasttext-lid-176 for the shipped lid.176.ftz")
    languages = r.section(s.pop("languages", None), f"{at}.languages")
    if languages:
        scores = {}
        for lang, spec in languages.items():
            spec = r.section(spec, f"{at}.languages.{lang}")
            if "min_confidence" in spec:
                scores[lang] = spec.pop("min_confidence")
            r.done(spec, f"{at}.languages.{lang}", ("min_confidence",))
        params["keep"] = list(languages)
        if scores:
            params["min_score"] = scores
        r.note(f"{at}.languages", f"→ langid.keep: {list(languages)}, min_score: {scores} (other languages dropped)")
    r.done(s, at, ("model", "languages"))
    return [{"langid": params}]


def _deduplication(r: _Reader, s: dict, at: str) -> list[dict]:
    items: list[dict] = []
    if "url_dedup" in s:
        on = s.pop("url_dedup")
        r.note(f"{at}.url_dedup", "true → url_dedup" if on else "false: no url_dedup stage")
        items += [{"url_dedup": {}}] if on else []
    for key, stage, fields in (("minhash", "fuzzy_dedup", ("num_perm", "threshold")),
                               ("suffix_array", "substring_dedup", ("min_length",))):
        if key not in s:
            continue
        spec = r.section(s.pop(key), f"{at}.{key}")
        enabled = spec.pop("enabled", True)
        params = {f: spec.pop(f) for f in fields if f in spec}
        r.done(spec, f"{at}.{key}", ("enabled", *fields))
        if enabled:
            items.append({stage: params})
            r.note(f"{at}.{key}", f"→ {stage}: {params}")
        else:
            r.note(f"{at}.{key}", f"enabled: false: no {stage} stage")
    r.done(s, at, ("url_dedup", "minhash", "suffix_array"))
    return items


def _quality_filter(r: _Reader, s: dict, at: str) -> list[dict]:
    items: list[dict] = []
    if "perplexity" in s:
        spec = r.section(s.pop("perplexity"), f"{at}.perplexity")
        model, span = spec.pop("model", None), spec.pop("range", None)
        r.done(spec, f"{at}.perplexity", ("model", "range"))
        params: dict[str, Any] = {}
        if span is not None:
            if not (isinstance(span, list) and len(span) == 2):
                raise ConfigError(f"{r.where}: key '{at}.perplexity.range': expected [low, high] percentiles, "
                                  f"got {span!r}")
            params.update(low_percentile=span[0], high_percentile=span[1])
        found = r.find(model)
        if found:
            items.append({"perplexity": {"model": found, **params}})
            r.note(f"{at}.perplexity", f"→ perplexity: model {found}, percentiles {span} (percentiles need "
                                       "`reference:`, a sample of the corpus: add it, or the stage refuses)")
        else:
            r.note(f"{at}.perplexity", f"left out: the model {model!r} is not a file. Provide a KenLM model (.arpa or "
                                       "KenLM binary, e.g. CCNet's Wikipedia model for the language) and add "
                                       f"`- perplexity: {{model: PATH, low_percentile: {params.get('low_percentile', 5)}"
                                       f", high_percentile: {params.get('high_percentile', 95)}, reference: "
                                       "SAMPLE.jsonl}` (a few thousand documents of the corpus fix the percentiles)")
    if "classifier" in s:
        spec = r.section(s.pop("classifier"), f"{at}.classifier")
        model, threshold = spec.pop("model", None), spec.pop("threshold", None)
        r.done(spec, f"{at}.classifier", ("model", "threshold"))
        params = {} if threshold is None else {"min_score": threshold}
        found = r.find(model)
        if found:
            items.append({"classifier": {"model": found, **params}})
            r.note(f"{at}.classifier", f"→ classifier: model {found}, min_score {threshold}")
        else:
            r.note(f"{at}.classifier", f"left out: the model {model!r} is not a folder. Provide a Hugging Face "
                                       "sequence-classification folder (config.json, weights, tokenizer; e.g. a "
                                       "fine-tuned deberta-v3-small) and add `- classifier: {model: FOLDER, "
                                       f"min_score: {threshold}}}`, or a fastText model from `gpupipe "
                                       f"train-quality` as `- quality_classifier: {{model: FILE, min_score: {threshold}}}`")
    r.done(s, at, ("perplexity", "classifier"))
    return items


def _output(r: _Reader, s: dict, at: str) -> list[dict]:
    items: list[dict] = []
    if "format" in s:
        fmt = s.pop("format")
        if fmt == "jsonl":
            r.note(f"{at}.format", "jsonl: stages write Parquet parts; `gpupipe export RUN --format jsonl --out FILE` "
                                   "writes the curated documents as seed 002's JSON Lines")
        elif fmt != "parquet":
            raise ConfigError(f"{r.where}: key '{at}.format': {fmt!r}: gpupipe's stages write Parquet parts "
                              "(`gpupipe export --format jsonl` writes JSON Lines)")
        else:
            r.note(f"{at}.format", "parquet: every stage's parts are Parquet")
    if "compression" in s:
        comp = s.pop("compression")
        r.note(f"{at}.compression", f"{comp}: ignored, parts are always zstd-compressed (io/parts.py)"
               if comp != "zstd" else "zstd: what every part is compressed with (io/parts.py)")
    if "tokenizer" in s:
        tok = s.pop("tokenizer")
        if tok is None:
            r.note(f"{at}.tokenizer", "null: no tokenize stage (curated text is the output)")
        elif tok in ("cl100k_base", "o200k_base"):   # a tiktoken encoding (gpupipe/tokens/tiktoken_bpe.py)
            items.append({"tokenize": {"tokenizer": tok}})
            r.note(f"{at}.tokenizer", f"→ tokenize: tokenizer {tok} (tiktoken's; its BPE file from tiktoken_file or "
                                      "TIKTOKEN_CACHE_DIR, never downloaded)")
        else:
            found = r.find(tok)
            if found:
                items.append({"tokenize": {"tokenizer": found}})
                r.note(f"{at}.tokenizer", f"→ tokenize: tokenizer {found}")
            else:
                r.note(f"{at}.tokenizer", f"left out: {tok!r} is not a file; give a tokenizer.json path, or add "
                                          "`- tokenize: {vocab_size: N}` to train one")
    r.done(s, at, ("format", "compression", "tokenizer"))
    return items


def render(cfg: dict, notes: list[str], source: str) -> str:
    """The gpupipe YAML, preceded by one comment line per template key."""
    head = [f"# gpupipe config translated from seed 002's template {source}", "# (gpupipe config convert)"]
    head += [f"#   {n}" for n in notes]
    if "input" not in cfg:
        head.append("#   input: the template names none: give `--input FILES` to gpupipe run, or edit input.path")
        cfg = {"input": {"path": "CHANGE_ME.warc.gz"}, **cfg}
    return "\n".join(head) + "\n" + yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True)


def convert_main(path: str) -> str:
    """`gpupipe config convert FILE`: the translated YAML text."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    raw = read_yaml_file(p)   # as `gpupipe run` reads it: UTF-8/16/32, duplicate keys and alias bombs refused
    if not is_template(raw):
        raise ConfigError(f"{p}: not seed 002's template (no `pipeline` key and `stages` is not a mapping); "
                          "it already looks like a gpupipe config")
    cfg, notes = from_template(raw, str(p), p.parent)
    return render(cfg, notes, str(p))


def add_config_parser(subparsers) -> argparse.ArgumentParser:
    """Add `config convert FILE` to gpupipe's subcommands (its handler is set as `fn`)."""
    p = subparsers.add_parser("config", help="config tools: `config convert FILE` translates seed 002's template")
    sub = p.add_subparsers(dest="config_command", required=True)
    c = sub.add_parser("convert", help="print the gpupipe config seed 002's datapipe_config.yaml maps to",
                       description="Print the gpupipe YAML that a DataPipe v2.0 `datapipe_config.yaml` (seed 002's "
                                   "template) maps to, a comment per template key: what it became, or why it is "
                                   "ignored. `gpupipe run FILE` runs the template through the same translation.")
    c.add_argument("file", help="the template (YAML)")
    c.set_defaults(fn=cmd_config_convert)
    return p


def cmd_config_convert(args: argparse.Namespace) -> int:
    try:
        text = convert_main(args.file)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


__all__ = ["add_config_parser", "convert_main", "from_template", "is_template", "render"]
