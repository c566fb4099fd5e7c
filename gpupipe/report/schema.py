"""The schema of the run's machine-readable stats, for dashboards: RUN/stats.json and RUN/stages/NN-name/stats.json.

`RUN_STATS_SCHEMA` and `STAGE_STATS_SCHEMA` are JSON Schema (draft 2020-12) documents; docs/stats_schema.md says the
same in prose, field by field. `validate_stats` checks a run's stats.json against the schema and also checks what a
schema cannot say: the conservation invariant (docs_in = docs_out + removed, stage by stage and for the run).
A small validator for the keywords used here is built in, so no jsonschema package is needed at run time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_COUNT = {"type": "integer", "minimum": 0}
_HASH = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

STAGE_STATS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "gpupipe/stage-stats/1",
    "title": "gpupipe stage stats (RUN/stages/NN-name/stats.json, and each entry of RUN/stats.json `stages`)",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "docs_in", "docs_out", "removed", "bytes_in", "bytes_out", "seconds", "docs_per_second",
                 "extra", "key", "partitions", "resumed"],
    "properties": {
        "name": {"type": "string", "description": "stable stage name (read, extract, langid, ...)"},
        "docs_in": {**_COUNT, "description": "documents (or input records, for read) the stage received"},
        "docs_out": {**_COUNT, "description": "documents the stage kept (its Parquet parts)"},
        "removed": {"type": "object", "additionalProperties": _COUNT,
                    "description": "documents removed, by reason; sorted by reason; {} when none"},
        "bytes_in": {**_COUNT, "description": "UTF-8 bytes of the text received (read: input file bytes)"},
        "bytes_out": {**_COUNT, "description": "UTF-8 bytes of the text kept (read: HTML bytes of its parts)"},
        "seconds": {"type": "number", "minimum": 0, "description": "wall time of the stage, all partitions"},
        "docs_per_second": {"type": ["number", "null"], "minimum": 0,
                            "description": "docs_in / seconds; null when seconds is 0"},
        "extra": {"type": "object", "additionalProperties": {"type": "number"},
                  "description": "stage-specific counters (summed over partitions); see docs/stats_schema.md"},
        "key": {**_HASH, "description": "hash of input fingerprint, partitioning, seed and configs up to here"},
        "partitions": {**_COUNT, "description": "Parquet parts the stage wrote"},
        "resumed": {"type": "boolean", "description": "true when this run reused a completed stage"},
        "skipped": {"type": "string", "description": "present when the stage, as configured, did nothing (every "
                                                    "document passed untouched): why, and what to do about it"},
        "columns": {"type": "array", "items": {"type": "string"},
                    "description": "the columns of the documents the stage passed on (map stages)"},
        "parts_kept": {"type": "boolean", "description": "false for a stage that ran fused inside a chain of map "
                                                         "stages: its kept documents live on in the chain's last "
                                                         "stage and the later stages' rejects"},
        "partition_seconds_p50": {"type": "number", "minimum": 0, "description": "median wall time of one "
                                  "partition task (map stages and tokenize); absent for the others"},
        "partition_seconds_p99": {"type": "number", "minimum": 0, "description": "99th percentile of the "
                                  "partition task wall times (linear interpolation)"},
        "files": {"type": "object", "additionalProperties": {"type": "array"},
                  "description": "the stage's marker only (not RUN/stats.json): every file it produced, path "
                                 "relative to the run -> [size, xxh3-128], checked on resume"},
    },
}

_RATE = {"type": ["number", "null"], "minimum": 0}
_COUNTS = {"type": "object", "additionalProperties": _COUNT}
_QUANT = {"type": "object", "additionalProperties": {"type": "number"}}
_GROUP = {"type": "object", "additionalProperties": False, "required": ["documents", "tokens", "chars",
                                                                        "chars_per_token"],
          "properties": {"documents": _COUNT, "tokens": _COUNT, "chars": _COUNT, "chars_per_token": _RATE,
                         "token_count": _QUANT, "compression_ratio": _QUANT}}

METRICS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "description": "the dashboard metrics: pipeline health, data quality, output (gpupipe/report/metrics.py; "
                   "also RUN/metrics.prom)",
    "required": ["stages", "languages", "quality_scores", "token_count_histogram", "dedup_rate",
                 "tokens_by_language", "top_domains", "domains_total", "sources", "token_stats",
                 "daily_output_volume"],
    "properties": {
        "stages": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["name", "docs_per_second", "partition_seconds_p50", "partition_seconds_p99", "errors",
                         "error_rate", "retries"],
            "properties": {"name": {"type": "string"}, "docs_per_second": _RATE, "partition_seconds_p50": _RATE,
                           "partition_seconds_p99": _RATE, "errors": _COUNT, "error_rate": _RATE,
                           "retries": _COUNT}}},
        "languages": _COUNTS,
        "quality_scores": {"type": "object", "additionalProperties": _COUNTS},
        "token_count_histogram": _COUNTS,
        "dedup_rate": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": False, "required": ["docs", "bytes"],
            "properties": {"docs": _RATE, "bytes": {"type": ["number", "null"]}}}},
        "tokens_by_language": _COUNTS,
        "top_domains": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["domain", "documents", "tokens"],
            "properties": {"domain": {"type": "string"}, "documents": _COUNT, "tokens": _COUNT}}},
        "domains_total": _COUNT,
        "sources": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": False, "required": ["documents", "tokens"],
            "properties": {"documents": _COUNT, "tokens": _COUNT}}},
        "token_stats": {"type": "object", "additionalProperties": False, "properties": {
            "by_language": {"type": "object", "additionalProperties": _GROUP},
            "by_source": {"type": "object", "additionalProperties": _GROUP}}},
        "daily_output_volume": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": False, "required": ["documents", "tokens"],
            "properties": {"documents": _COUNT, "tokens": _COUNT}}},
    },
}

RUN_STATS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "gpupipe/run-stats/1",
    "title": "gpupipe run stats (RUN/stats.json)",
    "type": "object",
    "additionalProperties": False,
    "required": ["gpupipe_version", "device", "executor", "workers", "results_hash", "input_records",
                 "output_docs", "removed_total", "docs_added_total", "conservation_ok", "seconds", "curated_dir",
                 "shards_dir", "stages"],
    "properties": {
        "gpupipe_version": {"type": "string"},
        "device": {"enum": ["cpu", "gpu"], "description": "the device the run resolved `device: auto` to"},
        "executor": {"enum": ["local", "dask"]},
        "workers": {"type": "integer", "minimum": 1, "description": "Dask workers; 1 for the local executor"},
        "results_hash": {**_HASH, "description": "hash of what determines the results (stages, seed, input "
                                                 "format); equals the manifest's config_hash"},
        "input_records": {**_COUNT, "description": "records read: stages[0].docs_in"},
        "output_docs": {**_COUNT, "description": "documents out of the last stage: stages[-1].docs_out"},
        "removed_total": {**_COUNT, "description": "sum of every stage's removed counts"},
        "docs_added_total": {"type": "integer", "description": "documents splitting stages added: sum of "
                                                               "extra.docs_added (chunk_markdown: chunks)"},
        "conservation_ok": {"type": "boolean", "description": "the conservation invariant held"},
        "seconds": {"type": "number", "minimum": 0, "description": "wall time of the whole run"},
        "started_at": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$",
                       "description": "when the run started, UTC"},
        "run_date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
                     "description": "the UTC date the run ended: the date its output counts under "
                                    "(metrics.daily_output_volume)"},
        "retries": {"type": "object", "additionalProperties": _COUNT, "required": ["total"],
                    "description": "retries by kind (storage, task, judge) summed over the stages this run ran, "
                                   "and their total"},
        "curated_dir": {"type": "string", "description": "folder of the curated documents (last stage before "
                                                         "tokenize/mixture/pack)"},
        "shards_dir": {"type": ["string", "null"], "description": "RUN/shards when the run packs, else null"},
        "stages": {"type": "array", "items": STAGE_STATS_SCHEMA, "description": "one entry per stage, in order"},
        "empty": {"type": "string", "description": "present when the run yielded no documents: which stage "
                                                   "removed the last ones, and why"},
        "metrics": METRICS_SCHEMA,
        "warnings": {"type": "array", "items": {"type": "string"},
                     "description": "what went wrong without failing the run (the report could not be written)"},
    },
}


# -- a validator for the keywords above (type, enum, pattern, minimum, required, properties,
#    additionalProperties, items); jsonschema gives the same answers where it is installed ---------------------

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def check_schema(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Problems of `value` against `schema`, each naming its JSON path; [] when valid."""
    problems: list[str] = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, k) for k in kinds):
            return [f"{where}: expected {' or '.join(kinds)}, got {type(value).__name__} {value!r:.60}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        problems.append(f"{where}: {value!r:.60} does not match {schema['pattern']}")
    if "minimum" in schema and _is(value, "number") and value < schema["minimum"]:
        problems.append(f"{where}: {value} < minimum {schema['minimum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                problems.append(f"{where}: missing required field '{key}'")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                problems += check_schema(item, props[key], f"{where}.{key}")
            elif extra is False:
                problems.append(f"{where}: undocumented field '{key}' (document it in gpupipe/report/schema.py "
                                f"and docs/stats_schema.md)")
            elif isinstance(extra, dict):
                problems += check_schema(item, extra, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += check_schema(item, schema["items"], f"{where}[{i}]")
    return problems


def conservation_problems(stats: dict[str, Any]) -> list[str]:
    """The invariant a schema cannot state: every document is kept or removed for a reason, stage after stage
    (a splitting stage counts the documents it added in extra.docs_added)."""
    stages = stats.get("stages") or []
    out = []
    for i, s in enumerate(stages):
        removed, added = sum(s["removed"].values()), s["extra"].get("docs_added", 0)
        if s["docs_in"] + added != s["docs_out"] + removed:
            out.append(f"stage {s['name']}: docs_in {s['docs_in']} + added {added} != docs_out {s['docs_out']} "
                       f"+ removed {removed}")
        if i and s["docs_in"] != stages[i - 1]["docs_out"]:
            out.append(f"stage {s['name']}: docs_in {s['docs_in']} != previous docs_out {stages[i - 1]['docs_out']}")
    if stages:
        if stats.get("input_records") != stages[0]["docs_in"]:
            out.append(f"input_records {stats.get('input_records')} != stages[0].docs_in {stages[0]['docs_in']}")
        if stats.get("output_docs") != stages[-1]["docs_out"]:
            out.append(f"output_docs {stats.get('output_docs')} != stages[-1].docs_out {stages[-1]['docs_out']}")
        total = sum(sum(s["removed"].values()) for s in stages)
        added = sum(s["extra"].get("docs_added", 0) for s in stages)
        if stats.get("removed_total") != total:
            out.append(f"removed_total {stats.get('removed_total')} != sum of removed {total}")
        if stats.get("docs_added_total") != added:
            out.append(f"docs_added_total {stats.get('docs_added_total')} != sum of extra.docs_added {added}")
        if stats.get("input_records", 0) + added != stats.get("output_docs", 0) + total:
            out.append("input_records + docs_added_total != output_docs + removed_total")
        if stats.get("conservation_ok") is not (not out):
            out.append(f"conservation_ok is {stats.get('conservation_ok')} but the counts say {not out}")
    return out


def validate_stats(d: dict[str, Any]) -> list[str]:
    """Problems of a RUN/stats.json dict: schema first, then (if the shape is right) conservation. [] when valid."""
    problems = check_schema(d, RUN_STATS_SCHEMA)
    return problems or conservation_problems(d)


def validate_stage_stats(d: dict[str, Any]) -> list[str]:
    """Problems of one RUN/stages/NN-name/stats.json dict. [] when valid."""
    problems = check_schema(d, STAGE_STATS_SCHEMA)
    if not problems and d["docs_in"] + d["extra"].get("docs_added", 0) != d["docs_out"] + sum(d["removed"].values()):
        problems.append(f"stage {d['name']}: docs_in + extra.docs_added != docs_out + removed")
    return problems


def validate_run_dir(run_dir: str | Path) -> list[str]:
    """Validate RUN/stats.json and every stage's stats.json, and that they agree with each other."""
    from gpupipe.run.rundir import RunLayout

    run = RunLayout(run_dir)
    stats = json.loads(run.stats.read_text(encoding="utf-8"))
    problems = validate_stats(stats)
    for i, entry in enumerate(stats.get("stages", [])):
        path = run.stage(i, entry.get("name")).marker
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        own = json.loads(path.read_text(encoding="utf-8"))
        problems += [f"{path}: {p}" for p in validate_stage_stats(own)]
        # the run's entry is the stage file, except that a reused stage says resumed: true there
        differ = sorted(k for k in own.keys() | entry.keys() if k not in ("resumed", "files")
                        and own.get(k) != entry.get(k))
        if differ:
            problems.append(f"{path}: differs from stats.json stages[{i}] in {differ}")
    return problems


__all__ = ["METRICS_SCHEMA", "RUN_STATS_SCHEMA", "STAGE_STATS_SCHEMA", "check_schema", "conservation_problems",
           "validate_run_dir", "validate_stage_stats", "validate_stats"]
