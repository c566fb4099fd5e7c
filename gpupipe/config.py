"""Run configuration: YAML → validated pydantic models, with errors that name the key and the file.

A config file has `input`, `output`, `executor`, `device`, `seed` and `stages`; `stages` is an ordered list of one-key
mappings `{stage_name: {params}}`. Each stage's parameters are validated by that stage's own `Config` class.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """A config problem, already phrased for the user (file and key named)."""


class Strict(BaseModel):
    """Base of every config model: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


# A share, ratio, probability or score: every such config value is checked to lie in [0, 1].
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class KeyProblem(ValueError):
    """Raised by a model validator to blame one key of its model: the error then names that key (e.g.
    'stages.3.doc_filter.min_words'), not the whole model."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def ordered(*pairs: tuple[str, str]):
    """A model validator for (low, high) field pairs such as ("min_words", "max_words"): where both are set
    (None switches a bound off), low must not exceed high. Assign it in the class body: `_order = ordered(...)`."""

    @model_validator(mode="after")
    def _ordered(self):
        for low, high in pairs:
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                raise KeyProblem(low, f"{low} ({lo}) must not exceed {high} ({hi})")
        return self

    return _ordered


def did_you_mean(word: str, choices: typing.Iterable[str], n: int = 1, cutoff: float = 0.6) -> str:
    """' (did you mean 'x'?)' for the closest of `choices` to a misspelt `word` (up to n of them: 'x' or 'y'),
    or '' when none is close (difflib's similarity ratio below cutoff)."""
    close = difflib.get_close_matches(str(word), sorted(choices), n=n, cutoff=cutoff)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


class _FileRefMarker:
    """Metadata that marks a config field as naming a file the stage reads (a model, tokenizer, index)."""

    def __repr__(self) -> str:
        return "FileRef"


FILE_REF = _FileRefMarker()


def _existing_file(v: str) -> str:
    from gpupipe.io import storage

    if storage.is_url(v):   # validated as such where a config is re-read; runs use its local copy
        if not storage.exists(v):
            raise ValueError(f"file not found: {v}")
        return v
    p = Path(v)
    if not p.exists():
        raise ValueError(f"file not found: {v}")
    if p.is_dir() and not any(p.iterdir()):
        raise ValueError(f"folder is empty: {v}")
    return v


# A config field that names a file a stage reads: it must exist when the config is validated (before any work),
# and its content, not its path, enters the stage's resume key (`file_refs`, `run/rundir.py`).
FileRef = Annotated[str, AfterValidator(_existing_file), FILE_REF]


def _names_file(annotation: Any) -> bool:
    """True for FileRef, and for FileRef inside an Optional / Union."""
    return annotation is FILE_REF or any(_names_file(a) for a in typing.get_args(annotation))


def file_refs(model: BaseModel) -> Iterator[tuple[str, str]]:
    """(field name, path) of every FileRef field of `model` (nested models included) that is set."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if (FILE_REF in info.metadata or _names_file(info.annotation)) and isinstance(value, str):
            yield name, value
        elif isinstance(value, BaseModel):
            yield from ((f"{name}.{n}", v) for n, v in file_refs(value))


class InputConfig(Strict):
    path: list[str] = Field(description="input file(s) or folder(s)")
    format: Literal["auto", "warc", "jsonl", "parquet", "html_dir", "markdown_dir"] = "auto"
    text_field: str = "text"
    source: str = Field("web", description="mixture source label for documents without a `source` field")
    max_replaced_share: float = Field(0.01, ge=0, le=1, description="HTML whose bytes fit no encoding is read with "
                                      "U+FFFD for at most this share of its bytes, else it is a decode_error")

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


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_size(v: Any) -> Any:
    """128000000, "128MB", "128 MiB", "1.5GB" → bytes (an int); anything else is left to the type check."""
    if isinstance(v, str):
        m = _SIZE.match(v)
        if not m:
            raise ValueError(f"not a size: {v!r} (write e.g. 134217728, '128MB' or '128MiB')")
        unit = (m.group(2) or "").lower().removesuffix("b")
        return int(float(m.group(1)) * _UNITS[unit])
    return v


# Bytes of text (or HTML) per partition when the config gives none: large enough that per-partition costs
# (a Parquet round trip, a task, a bucket file per global stage) vanish against the work, small enough that a
# worker holds a few of them. A GPU takes larger ones: its kernels need millions of documents to fill the device.
DEFAULT_PARTITION_BYTES = {"cpu": 128 * 2**20, "gpu": 512 * 2**20}


class ExecutorConfig(Strict):
    kind: Literal["local", "dask"] = "local"
    workers: int = Field(2, ge=1, description="dask: worker processes of the LocalCluster; local: threads that run "
                         "the tasks of global stages' phases (map chains run one partition at a time)")
    partition_bytes: int | None = Field(None, ge=1, description="text (HTML) bytes per partition written by the "
                                        "read stage; None: 128 MiB on the CPU, 512 MiB on the GPU")
    partition_docs: int = Field(1_000_000, ge=1, description="upper bound on documents per partition")
    scheduler_address: str | None = None
    shuffle_buckets: int = Field(8, ge=1, description="buckets of the key exchange in global stages")
    gpu: GpuClusterConfig = GpuClusterConfig()

    @field_validator("partition_bytes", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        return parse_size(v)

    def partitioning(self, device: str) -> tuple[int, int]:
        """(documents, bytes) a read-stage partition holds at most, for the resolved device."""
        return self.partition_docs, self.partition_bytes or DEFAULT_PARTITION_BYTES[device]


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
                             "source": self.input.source}}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _all_models(cls: type[BaseModel] = Strict) -> Iterator[type[BaseModel]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_models(sub)


def _model_named(title: str) -> type[BaseModel] | None:
    """The config model a ValidationError is about (its title is the class name), when the name is unique."""
    found = {m for m in _all_models() if m.__name__ == title}
    return found.pop() if len(found) == 1 else None


def _inner(annotation: Any) -> Any:
    """X for Annotated[X, ...] and for Optional[X]; the annotation itself otherwise."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _inner(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _inner(members[0])
    return annotation


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _resolve(model: type[BaseModel] | None, loc: tuple) -> tuple[tuple, tuple | None, Any]:
    """Follow an error location through the model's annotations. Returns the location without the member tags
    pydantic inserts after a union ('min_score.constrained-float' → 'min_score'), the location of that union
    (None when there is none), and the annotation the location ends at (None where not known)."""
    tp: Any = model
    out: list = []
    union_at = None
    for part in loc:
        tp = _inner(tp)
        if _is_union(tp) and union_at is None:   # `part` names the member tried: drop it, and stop following
            union_at, tp = tuple(out), None
            continue
        out.append(part)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            tp = tp.model_fields[part].annotation if part in tp.model_fields else None
        elif typing.get_origin(tp) in (list, dict):   # an item of a list, a value of a mapping
            tp = typing.get_args(tp)[-1]
        else:
            tp = None
    return tuple(out), union_at, _inner(tp)


def _keys_at(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """The keys a config model accepts at `loc` (a path into its input); [] where that is not a model."""
    tp = _resolve(model, loc)[2]
    return list(tp.model_fields) if isinstance(tp, type) and issubclass(tp, BaseModel) else []


def _is_type_error(kind: str) -> bool:
    """The input is not of the type at all (not a number, not a mapping, none of a Literal's words), as opposed to a
    value out of range."""
    return kind.endswith(("_type", "_parsing")) or kind == "literal_error"


def _format_error(err: ValidationError, where: str, prefix: str = "") -> str:
    """One line per problem, naming the file and the dotted key; `prefix` is where the model sits in the file.

    The model (found by the error's title) tells the keys an unknown key might have meant. Where a value may be
    one of several types (a number or a mapping), a wrong value gets the errors of the types it has; a value of
    none of them gets one line listing what each type wanted."""
    model = _model_named(err.title)
    found = []   # (error, the exception a validator raised, location in the input, key, location of a union)
    for e in err.errors():
        cause = e.get("ctx", {}).get("error")
        raw = tuple(e["loc"]) + ((cause.key,) if isinstance(cause, KeyProblem) else ())
        loc, union_at, _ = _resolve(model, raw)
        found.append((e, cause, raw, loc, union_at))

    def not_this_type(loc: tuple, union_at: tuple | None, kind: str) -> bool:
        return union_at == loc and _is_type_error(kind)

    lines: list[str] = []
    merged: dict[tuple, tuple[int, str, list[str], Any]] = {}  # union location → (line, key, messages, value)
    for e, cause, raw, loc, union_at in found:
        key = (prefix + ".".join(str(p) for p in loc)).rstrip(".")
        at = f"{where}: key '{key}'" if key else where
        kind = e["type"]
        if kind == "extra_forbidden":
            lines.append(f"{where}: unknown key '{key}'" + did_you_mean(loc[-1], _keys_at(model, raw[:-1])))
        elif kind == "missing":
            lines.append(f"{where}: missing key '{key}'")
        elif kind in ("value_error", "assertion_error"):  # a validator's own message, which names the values
            lines.append(f"{at}: {str(cause or '') or e['msg']}")
        elif not_this_type(loc, union_at, kind):
            if not all(not_this_type(lo, u, o["type"]) for o, _, _, lo, u in found if u == union_at):
                continue   # the value is of one of the union's types: that type's own error says what is wrong
            if union_at not in merged:
                merged[union_at] = (len(lines), at, [], e.get("input"))
                lines.append("")
            merged[union_at][2].append(e["msg"])
        else:
            lines.append(f"{at}: {e['msg']} (got {e.get('input')!r})")
    for i, at, messages, value in merged.values():
        lines[i] = f"{at}: {'; or '.join(messages)} (got {value!r})"
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
    from gpupipe.io import storage
    from gpupipe.stages import build_stage_configs  # late import: stages import this module

    storage.configure(cfg.storage.options)   # URLs in this config are opened with its options from here on
    local, urls = local_file_refs(cfg.stages, where)
    cfg.stages = build_stage_configs(local, where)
    for item, at in zip(cfg.stages, urls):   # the config keeps naming the URLs (hashes, config.resolved.yaml)
        (params,) = item.values()
        params.update(at)
    from gpupipe.stages.read import is_pattern  # late import, as above

    for p in cfg.input.path:  # a URL is resolved by the read stage, still before any work
        if storage.is_url(p) or Path(p).exists():
            continue
        if not is_pattern(p):
            raise ConfigError(f"{where}: key 'input.path': input not found: {p}")
        if not storage.glob(p):
            raise ConfigError(f"{where}: key 'input.path': input pattern matched nothing: {p}")
    _check_output(cfg.output, where)
    return cfg


def local_file_refs(items: list[Any], where: str = "<config>") -> tuple[list[Any], list[dict[str, str]]]:
    """(stage items with every FileRef parameter that is a URL (s3://..., https://...) replaced by a local copy of
    the file, {field: URL} replaced per item). io/storage.local_copy downloads a URL once per version of the object;
    stages and their validators read models and indexes by path, and the copy's content enters the resume key
    like any FileRef's. The config itself keeps the URL."""
    from gpupipe.io import storage
    from gpupipe.stages import STAGES

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
