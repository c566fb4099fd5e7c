"""Run configuration: YAML → validated pydantic models, with errors that name the key and the file.

A config file has `input`, `output`, `executor`, `device`, `seed` and `stages`; `stages` is an ordered list of one-key
mappings `{stage_name: {params}}`. Each stage's parameters are validated by that stage's own `Config` class.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class ConfigError(ValueError):
    """A config problem, already phrased for the user (file and key named)."""


class Strict(BaseModel):
    """Base of every config model: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class InputConfig(Strict):
    path: list[str] = Field(description="input file(s) or folder(s)")
    format: Literal["auto", "warc", "jsonl", "parquet", "html_dir", "markdown_dir"] = "auto"
    text_field: str = "text"
    source: str = Field("web", description="mixture source label for documents without a `source` field")

    @field_validator("path", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class GpuClusterConfig(Strict):
    """dask-cuda LocalCUDACluster settings (device: gpu with executor: dask); see docs.rapids.ai, dask-cuda API."""

    visible_devices: str | None = None              # CUDA_VISIBLE_DEVICES, e.g. "0,1,2,3"; None = every GPU
    rmm_pool_size: str | None = None                # e.g. "60GB": one RMM pool per GPU, allocated up front
    rmm_async: bool = False                         # RMM's cudaMallocAsync resource instead of a pool
    device_memory_limit: str | float = 0.8          # spill device → host past this share/size (0 = never)
    enable_cudf_spill: bool = True                  # cuDF's native spilling (better than whole-task spilling)
    # One allocator: CuPy and torch allocate from the same RMM resource as cuDF, so they do not fight over memory.
    rmm_allocator_libs: list[str] = ["cupy", "torch"]


class ExecutorConfig(Strict):
    kind: Literal["local", "dask"] = "local"
    workers: int = Field(2, ge=1)
    partition_docs: int = Field(500, ge=1, description="documents per partition written by the read stage")
    scheduler_address: str | None = None
    shuffle_buckets: int = Field(8, ge=1, description="buckets of the key exchange in global stages")
    gpu: GpuClusterConfig = GpuClusterConfig()


class RunConfig(Strict):
    input: InputConfig
    output: str = "runs/default"
    executor: ExecutorConfig = ExecutorConfig()
    device: Literal["auto", "cpu", "gpu"] = "auto"
    seed: int = 0
    stages: list[dict[str, Any]]

    def results_hash(self) -> str:
        """Hash of what determines the results (not where they go, nor how many workers make them)."""
        payload = {"stages": self.stages, "seed": self.seed,
                   "input": {"format": self.input.format, "text_field": self.input.text_field,
                             "source": self.input.source}}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _format_error(err: ValidationError, where: str, prefix: str = "") -> str:
    lines = []
    for e in err.errors():
        key = prefix + ".".join(str(p) for p in e["loc"])
        kind = e["type"]
        if kind == "extra_forbidden":
            lines.append(f"{where}: unknown key '{key}'")
        elif kind == "missing":
            lines.append(f"{where}: missing key '{key}'")
        else:
            lines.append(f"{where}: key '{key}': {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read, override (command-line flags) and validate a config; raise ConfigError naming file and key."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys (input, output, stages, ...)")
    for dotted, value in (overrides or {}).items():
        node = raw
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return validate_config(raw, str(path))


def validate_config(raw: dict[str, Any], where: str = "<config>") -> RunConfig:
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_format_error(e, where)) from None
    from gpupipe.stages import build_stage_configs  # late import: stages import this module

    cfg.stages = build_stage_configs(cfg.stages, where)
    for p in cfg.input.path:
        if not Path(p).exists():
            raise ConfigError(f"{where}: key 'input.path': input not found: {p}")
    return cfg


def dump_config(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
