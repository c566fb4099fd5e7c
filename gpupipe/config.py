"""Run configuration: YAML → validated pydantic models, with errors that name the key and the file.

A config file has `input`, `output`, `executor`, `device`, `seed` and `stages`; `stages` is an ordered list of one-key
mappings `{stage_name: {params}}`. Each stage's parameters are validated by that stage's own `Config` class.
"""

from __future__ import annotations

import hashlib
import logging
import os
import json
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from gpupipe.config_base import (FILE_REF, ConfigError, Strict, _names_file, format_error, parse_size,
                                 read_yaml_file)
from gpupipe.config_convert import from_template, is_template
from gpupipe.io import storage
from gpupipe.stages import STAGES, build_stage_configs
from gpupipe.io.inputs import is_pattern
from gpupipe.stages.read import InputConfig


class GpuClusterConfig(Strict):
    """dask-cuda LocalCUDACluster settings (device: gpu with executor: dask); see docs.rapids.ai, dask-cuda API."""

    visible_devices: str | None = None              # CUDA_VISIBLE_DEVICES, e.g. "0,1,2,3"; None = every GPU
    rmm_pool_size: str | None = None                # e.g. "60GB": one RMM pool per GPU, allocated up front
    rmm_async: bool = False                         # RMM's cudaMallocAsync resource instead of a pool
    device_memory_limit: str | float = 0.8          # spill device → host past this share/size (0 = never)
    enable_cudf_spill: bool = True                  # cuDF's native spilling (better than whole-task spilling)
    # One allocator: CuPy and torch allocate from the same RMM resource as cuDF, so they do not fight over memory.
    rmm_allocator_libs: list[str] = ["cupy", "torch"]


# Bytes of text (or HTML) per partition when the config gives none: large enough that per-partition costs
# (a Parquet round trip, a task, a bucket file per global stage) vanish against the work, small enough that a
# worker holds a few of them. A GPU takes larger ones: its kernels need millions of documents to fill the device.
DEFAULT_PARTITION_BYTES = {"cpu": 128 * 2**20, "gpu": 512 * 2**20}
MIN_PARTITION_BYTES = 4 * 2**20   # smaller parts cost more in tasks and Parquet round trips than they spread
POOL_MIN_BYTES = 64 * 2**20      # workers: auto on a smaller input (file sizes, compressed as stored) runs in-process
MAX_WORKERS = 4096               # worker processes one machine can start; a larger count is a typo, refused


def available_cores() -> int:
    """The cores this process may run on (its affinity mask, which containers and `taskset` set), else all."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:   # not on Linux
        return max(1, os.cpu_count() or 1)


class ExecutorConfig(Strict):
    kind: Literal["local", "dask"] = "local"
    workers: int | Literal["auto"] = Field("auto", description="worker processes: local, a pool on this machine "
                                           "(1: in this process); dask, the LocalCluster's. auto: one per core")
    partition_bytes: int | None = Field(None, ge=1, description="text (HTML) bytes per partition written by the "
                                        "read stage; None: 128 MiB on the CPU, 512 MiB on the GPU")
    # at most 2^40, the records one input file may hold (40 bits of doc_index, stages/read.py RECORD_BITS)
    partition_docs: int = Field(1_000_000, ge=1, le=1 << 40, description="upper bound on documents per partition")
    scheduler_address: str | None = None
    shuffle_buckets: int = Field(8, ge=1, le=1 << 16, description="buckets of the key exchange in global stages "
                                 "(a file per bucket and partition: at most 65536)")
    gpu: GpuClusterConfig = GpuClusterConfig()

    @field_validator("partition_bytes", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        return parse_size(v)

    @field_validator("workers")
    @classmethod
    def _workers(cls, v: Any) -> Any:
        if v != "auto" and not 1 <= v <= MAX_WORKERS:
            raise ValueError(f"workers must be 1 to {MAX_WORKERS} (processes on one machine), or auto")
        return v

    def worker_count(self, input_bytes: int | None = None) -> int:
        """Worker processes: `workers`; with auto the cores this process may use, except for a local run whose
        input files are known to be smaller than POOL_MIN_BYTES: starting and filling a pool of workers (imports,
        models, per-task hand-offs) costs more than it spreads there (measured: 39 MB of text, 2 cores, 5% slower
        and 28% more CPU than one process), so such a run stays in this process."""
        if self.workers != "auto":
            return self.workers
        if self.kind == "local" and input_bytes is not None and input_bytes < POOL_MIN_BYTES:
            return 1
        return available_cores()

    def partitioning(self, device: str, input_bytes: int | None = None) -> tuple[int, int]:
        """(documents, bytes) a read-stage partition holds at most, for the resolved device. Without a configured
        `partition_bytes`, an input smaller than a partition per worker is cut so that every worker gets at
        least one (input_bytes: the input files' size, when known), never below MIN_PARTITION_BYTES."""
        size = self.partition_bytes or DEFAULT_PARTITION_BYTES[device]
        workers = self.worker_count(input_bytes)
        if self.partition_bytes is None and input_bytes and self.kind == "local" and workers > 1:
            share = -(-input_bytes // workers)
            size = min(size, max(MIN_PARTITION_BYTES, share))
        return self.partition_docs, size


class StorageConfig(Strict):
    """Where paths are URLs (io/storage.py): filesystem options, and the local copy of a run directory at a URL."""

    # protocol → keyword arguments of its fsspec filesystem, e.g. {s3: {endpoint_url: "http://minio:9000"}};
    # credentials are better left to the environment (AWS_ACCESS_KEY_ID, ...); config.resolved.yaml redacts them
    options: dict[str, dict[str, Any]] = {}
    # the local copy of a run directory whose `output` is a URL (run/remote.py); default
    # ~/.cache/gpupipe/runs/<hash of the URL> (or $GPUPIPE_WORK_DIR/<hash>). On a multi-node cluster it must be a
    # path every node sees.
    work_dir: str | None = None


class RunConfig(Strict):
    input: InputConfig
    output: str = "runs/default"
    executor: ExecutorConfig = ExecutorConfig()
    storage: StorageConfig = StorageConfig()
    device: Literal["auto", "cpu", "gpu"] = "auto"
    seed: int = Field(0, ge=0)  # numpy's generators take non-negative seeds only
    allow_empty: bool = False   # a run that yields no documents is an error unless this says it may
    # Consecutive map stages run fused, one task per partition, and only the chain's last stage writes parts;
    # true keeps every stage's parts (for inspection, at the cost of a Parquet write per stage).
    keep_intermediate: bool = False
    stages: list[dict[str, Any]]

    def results_hash(self) -> str:
        """Hash of what determines the results (not where they go, nor how many workers make them)."""
        payload = {"stages": self.stages, "seed": self.seed,
                   "input": {"format": self.input.format, "text_field": self.input.text_field,
                             "source": self.input.source,
                             **({"crawl_id": self.input.crawl_id} if self.input.crawl_id else {})}}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read, override (command-line flags) and validate a config; raise ConfigError naming file and key."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    raw = read_yaml_file(path)   # UTF-8/16/32; duplicate keys and alias bombs refused (config_base)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys (input, output, stages, ...)")
    template = is_template(raw)
    if template:   # seed 002's datapipe_config.yaml as written: the translation `gpupipe config convert` prints
        raw, notes = from_template(raw, str(path), path.parent)
        for note in notes:
            logging.getLogger("gpupipe").warning("seed 002 template: %s", note)
    for dotted, value in (overrides or {}).items():
        node = raw
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    if template and "input" not in raw:
        raise ConfigError(f"{path}: seed 002's template names no input: give `--input FILES` (or add input.path)")
    return validate_config(raw, str(path))


def check_scheduler(address: str, where: str, timeout: float = 5.0) -> None:
    """A Dask scheduler's TCP address must accept a connection (within `timeout` s) before any work: a closed port
    is one line now, not a traceback after the client's own 30 s. Other protocols (ucx, inproc) are left to Dask."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme not in ("tcp", "tls"):
        return
    at = f"{where}: key 'executor.scheduler_address': {address}"
    try:
        host, port = parts.hostname, parts.port
    except ValueError as e:   # a port that is not a number, or out of range
        raise ConfigError(f"{at}: {e}") from None
    if not host or not port:
        raise ConfigError(f"{at}: expected tcp://HOST:PORT")
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(f"{at}: no Dask scheduler answers there ({e.strerror or type(e).__name__}); start it, "
                          f"or leave the address out for a local cluster") from None


def validate_config(raw: dict[str, Any], where: str = "<config>") -> RunConfig:
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(format_error(e, where)) from None
    storage.configure(cfg.storage.options)   # URLs in this config are opened with its options from here on
    local, urls = local_file_refs(cfg.stages, where)
    cfg.stages = build_stage_configs(local, where)
    for item, at in zip(cfg.stages, urls):   # the config keeps naming the URLs (hashes, config.resolved.yaml)
        (params,) = item.values()
        params.update(at)
    for p in cfg.input.path:  # a URL is resolved by the read stage, still before any work
        if storage.is_url(p) or Path(p).exists():
            continue
        if not is_pattern(p):
            raise ConfigError(f"{where}: key 'input.path': input not found: {p}")
        if not storage.glob(p):
            raise ConfigError(f"{where}: key 'input.path': input pattern matched nothing: {p}")
    _check_output(cfg.output, where)
    if cfg.executor.kind == "dask" and cfg.executor.scheduler_address:
        check_scheduler(cfg.executor.scheduler_address, where)
    return cfg


def local_file_refs(items: list[Any], where: str = "<config>") -> tuple[list[Any], list[dict[str, str]]]:
    """(stage items with every FileRef parameter that is a URL (s3://..., https://...) replaced by a local copy of
    the file, {field: URL} replaced per item). io/storage.local_copy downloads a URL once per version of the object;
    stages and their validators read models and indexes by path, and the copy's content enters the resume key
    like any FileRef's. The config itself keeps the URL."""
    out, urls = [], []
    for i, item in enumerate(items):
        urls.append({})
        if not (isinstance(item, dict) and len(item) == 1 and next(iter(item)) in STAGES
                and isinstance(next(iter(item.values())), dict)):
            out.append(item)  # build_stage_configs says what is wrong with it
            continue
        (name, params), = item.items()
        params = dict(params)
        for field, info in STAGES[name].Config.model_fields.items():
            value = params.get(field)
            if (FILE_REF in info.metadata or _names_file(info.annotation)) and storage.is_url(value):
                try:
                    params[field] = storage.local_copy(value)
                except (OSError, ValueError, RuntimeError) as e:
                    raise ConfigError(f"{where}: key 'stages.{i}.{name}.{field}': cannot read {value}: "
                                      f"{type(e).__name__}: {e}") from None
                urls[-1][field] = value
        out.append({name: params})
    return out, urls


def _check_output(output: str, where: str) -> None:
    """The run directory must be a folder or creatable as one: neither it nor a parent may be a file; a URL must
    be one that can be written (not http(s))."""
    from gpupipe.io.storage import is_url, protocol

    if is_url(output):
        if protocol(output) in ("http", "https"):
            raise ConfigError(f"{where}: key 'output': {output}: http(s) URLs can be read, not written; use a "
                              f"bucket (s3://, gs://, ...) or a local path")
        return
    for p in (Path(output), *Path(output).parents):
        if p.exists():
            if not p.is_dir():
                what = "is a file" if p == Path(output) else f"is inside {p}, which is a file"
                raise ConfigError(f"{where}: key 'output': the run directory {output} {what}, not a folder")
            return


# storage.options keys whose values are credentials (s3fs key/secret/token, adlfs account_key/sas_token, ...)
_SECRET_KEY = re.compile(r"^(key|token)$|secret|password|credential|account_key|sas_token|session_token", re.I)
REDACTED = "<redacted>"


def _redacted(options: Any) -> Any:
    if isinstance(options, dict):
        return {k: REDACTED if _SECRET_KEY.search(str(k)) and v is not None else _redacted(v)
                for k, v in options.items()}
    return [_redacted(v) for v in options] if isinstance(options, list) else options


def dump_config(cfg: RunConfig) -> str:
    """The resolved config as YAML, credentials in `storage.options` redacted: the file travels with the run
    directory (to a bucket too)."""
    data = cfg.model_dump(mode="json")
    data["storage"]["options"] = _redacted(data["storage"]["options"])
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
