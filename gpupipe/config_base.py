"""The config vocabulary every station's `Config` is written in, and the wording of config errors: a leaf that
imports no station (gpupipe/config.py, which reads whole run configs, imports the stations' registry; the
stations import this).

`Strict` models refuse unknown keys; `Fraction` is a value in [0, 1]; `FileRef` names a file that must exist when
the config is validated and whose content enters the resume key; `KeyProblem` blames one key from a model
validator; `format_error` turns pydantic's errors into one line per problem, naming the file and the dotted key.
`read_yaml_file` reads a config file: UTF-8, or UTF-16/32 (a BOM, or the NULs of its first characters); YAML parsed
with duplicate keys refused (YAML says keys are unique; PyYAML keeps the last one silently) and aliases expanded to
at most MAX_YAML_NODES nodes ("billion laughs": a few lines that expand to 10^9 nodes), recursive ones refused.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Iterator

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator


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


def format_error(err: ValidationError, where: str, prefix: str = "") -> str:
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


MAX_CONFIG_BYTES = 16 << 20   # a run config is a few KB; a larger file is not one
MAX_YAML_NODES = 100_000      # after alias expansion: the largest real config has a few thousand


def read_yaml_file(path: str | Path) -> Any:
    """A config file's YAML as Python values (ConfigError, naming the file, for what is wrong with it)."""
    return parse_yaml(read_config_text(Path(path)), str(path))


def read_config_text(path: Path) -> str:
    """A config file's text: UTF-8 (a BOM allowed), or UTF-16/32 found by its BOM or NUL pattern."""
    from gpupipe.io.records import text_encoding

    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {size} bytes: too large for a config file (at most {MAX_CONFIG_BYTES})")
    data = path.read_bytes()
    encoding = text_encoding(data[:4])
    try:
        return data.decode("utf-8-sig" if encoding == "utf-8" else encoding)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not valid {encoding.upper()} text ({e.reason} at byte {e.start}); save it "
                          f"as UTF-8") from None


def parse_yaml(text: str, where: str) -> Any:
    """YAML text → Python values, refusing duplicate keys and aliases that expand past MAX_YAML_NODES nodes. The
    document is composed into nodes first (an alias is a shared node there, so this is cheap), checked, and only
    then constructed."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {e}") from None
    finally:
        loader.dispose()


_MERGE = "tag:yaml.org,2002:merge"


def _check_nodes(root: yaml.Node, where: str) -> None:
    """Count the nodes `root` expands to (an alias counts its target's nodes each time it is used), refusing past
    MAX_YAML_NODES; refuse a duplicate key of a mapping (named, with its two lines) and a recursive alias."""
    sizes: dict[int, int] = {}   # id(node) → nodes it expands to (each node counted once: aliases make a graph)
    active: set[int] = set()     # nodes being counted: one reached again through itself is a cycle

    def size(node: yaml.Node, at: str) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in active:
            raise ConfigError(f"{where}: key '{at}': a recursive YAML alias (a value that contains itself)")
        active.add(id(node))
        n = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for k, v in node.value:
                plain = isinstance(k, yaml.ScalarNode)
                key = f"{at}.{k.value if plain else '?'}" if at else str(k.value if plain else "?")
                if plain and k.tag != _MERGE:
                    line = k.start_mark.line + 1
                    if (k.tag, k.value) in seen:
                        raise ConfigError(f"{where}: key '{key}' is given twice (lines {seen[k.tag, k.value]} and "
                                          f"{line}); YAML keys must be unique")
                    seen[k.tag, k.value] = line
                n += size(k, key) + size(v, key)
        elif isinstance(node, yaml.SequenceNode):
            n += sum(size(v, f"{at}.{i}" if at else str(i)) for i, v in enumerate(node.value))
        active.discard(id(node))
        sizes[id(node)] = n
        if n > MAX_YAML_NODES:
            raise ConfigError(f"{where}: key '{at or '(top level)'}' expands through YAML aliases to more than "
                              f"{MAX_YAML_NODES} values; no config is that large")
        return n

    size(root, "")
