"""docs/seed_requirements.md, the table of the seeds' requirements (#35): every row is implemented or a stated
departure, and every reference an implemented row makes is checked against the code: a config key (and its default
when the row gives one), a command and its flags, a file, a Python object (and its value), a removal reason, a
column or a stats field. A renamed key or flag, a changed default, a moved file fails here. README's summary counts
are the table's."""

from __future__ import annotations

import argparse
import importlib
import re
from functools import cache
from typing import Annotated

import pytest
import yaml
from pydantic import BaseModel

from tests.helpers import ROOT

TABLE = ROOT / "docs" / "seed_requirements.md"
STATUSES = ("implemented", "departure")
_SOURCE_DIRS = ("gpupipe", "kernels")


def rows() -> list[dict[str, str]]:
    """Every data row of the tables: id, section, requirement, status, where."""
    out = []
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| ") or line.startswith("| id ") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == 5, line
        out.append(dict(zip(("id", "section", "requirement", "status", "where"), cells)))
    return out


def references(where: str) -> list[str]:
    return [r.replace("\\|", "|") for r in re.findall(r"`([^`]+)`", where)]


# -- resolvers ----------------------------------------------------------------------------------------------------

_MISSING = object()


def _default(model_cls: type[BaseModel], field: str):
    info = model_cls.model_fields.get(field)
    if info is None:
        return _MISSING
    if info.default_factory is not None:
        return info.default_factory()
    return info.default


def _step(value, key: str):
    """One dotted step into a default: a sub-config's field, a mapping's key (int keys as written), or a sub-config
    class (a field whose default is required has its annotation's model)."""
    if isinstance(value, BaseModel):
        return getattr(value, key) if key in type(value).model_fields else _MISSING
    if isinstance(value, type) and issubclass(value, BaseModel):
        return _default(value, key)
    if isinstance(value, dict):
        if key in value:
            return value[key]
        if key.isdigit() and int(key) in value:
            return value[int(key)]
    return _MISSING


def config_default(ref: str):
    """The default of `stage.key.sub` (or of a run config key); _MISSING when no such key."""
    from gpupipe.config import RunConfig
    from gpupipe.stages import STAGES
    from gpupipe.stages.read import InputConfig

    head, *rest = ref.split(".")
    if head in STAGES:
        value = STAGES[head].Config
    elif head == "input":
        value = InputConfig
    elif head in RunConfig.model_fields:
        value = _default(RunConfig, head)
    else:
        return _MISSING
    for key in rest:
        value = _step(value, key)
        if value is _MISSING:
            return _MISSING
    return value


@cache
def _parser_commands() -> dict[str, set[str]]:
    """'run' → its --flags, 'config convert' → ..., from the real parser."""
    from gpupipe.cli import build_parser

    out: dict[str, set[str]] = {}

    def walk(p: argparse.ArgumentParser, prefix: str) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    cmd = f"{prefix} {name}".strip()
                    out[cmd] = {o for act in sub._actions for o in act.option_strings}
                    walk(sub, cmd)
    walk(build_parser(), "")
    return out


@cache
def _sources() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for d in _SOURCE_DIRS for p in sorted((ROOT / d).rglob("*.py")))


def _literal_in_code(name: str) -> bool:
    """`name` as a string literal of the code, or as the fixed start of one (f"{name}_{k}")."""
    return re.search(r"[\"']" + re.escape(name) + r"[\"'_{]", _sources()) is not None


def _python_object(path: str):
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return _MISSING


def _equal(actual, written: str) -> bool:
    expected = yaml.safe_load(written)
    if isinstance(actual, BaseModel):
        return False
    if isinstance(expected, (int, float)) and not isinstance(expected, bool) and isinstance(actual, (int, float)):
        return float(actual) == float(expected)
    return actual == expected


def check(ref: str) -> str | None:
    """What is wrong with a reference (None: it holds)."""
    if ref.startswith("gpupipe "):
        words = ref.split()[1:]
        cmd = " ".join(w for w in words if not w.startswith("-"))
        flags = [w for w in words if w.startswith("--")]
        commands = _parser_commands()
        if cmd not in commands:
            return f"no command `gpupipe {cmd}`"
        missing = [f for f in flags if f not in commands[cmd]]
        return f"`gpupipe {cmd}` has no {missing}" if missing else None
    kind, sep, rest = ref.partition(":")
    if sep and kind in ("reason", "column", "stat"):
        return None if _literal_in_code(rest) else f"no {kind} {rest!r} in the code"
    if sep and kind == "py":
        path, eq, value = rest.partition("=")
        obj = _python_object(path)
        if obj is _MISSING:
            return f"no Python object {path}"
        return None if not eq or _equal(obj, value) else f"{path} is {obj!r}, the table says {value}"
    if "/" in ref and " " not in ref:
        return None if (ROOT / ref).exists() else f"no file {ref}"
    m = re.fullmatch(r"([a-z_][a-z0-9_]*(?:\.[A-Za-z0-9_]+)*)(?:([=~])(.*))?", ref)
    if m is None:
        return f"not a reference this test can check: {ref!r}"
    key, op, value = m.groups()
    default = config_default(key)
    if default is _MISSING:
        return f"no config key {key}"
    if op == "=" and not _equal(default, value):
        return f"{key} defaults to {default!r}, the table says {value}"
    if op == "~" and not accepts(key, value):
        return f"{key} does not accept {value}"
    return None


def accepts(key: str, value: str) -> bool:
    """Whether config key `stage.key` (nested: its parent's field) validates the YAML value."""
    from pydantic import TypeAdapter, ValidationError

    parent, _, field = key.rpartition(".")
    owner = config_default(parent) if "." in parent else None
    if owner is None:
        from gpupipe.config import RunConfig
        from gpupipe.stages import STAGES
        from gpupipe.stages.read import InputConfig

        owner = STAGES[parent].Config if parent in STAGES else InputConfig if parent == "input" else \
            RunConfig.model_fields[parent].annotation
    cls = owner if isinstance(owner, type) else type(owner)
    info = cls.model_fields[field]
    try:   # the field's type with its constraints (Field(ge=..., le=...))
        TypeAdapter(Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
                    ).validate_python(yaml.safe_load(value))
    except ValidationError:
        return False
    return True


# -- the tests ----------------------------------------------------------------------------------------------------

def test_every_row_is_implemented_or_a_stated_departure():
    rs = rows()
    assert len(rs) >= 150
    ids = [r["id"] for r in rs]
    assert len(ids) == len(set(ids)), "duplicate row ids"
    for r in rs:
        assert r["status"] in STATUSES, r
        assert r["requirement"], r
        if r["status"] == "implemented":
            assert references(r["where"]), f"{r['id']}: an implemented row names where (a backticked reference)"
        else:
            assert len(r["where"]) > 15, f"{r['id']}: a departure says why"


def test_every_implemented_reference_exists_in_the_code():
    problems = [f"{r['id']}: {why}" for r in rows() if r["status"] == "implemented"
                for ref in references(r["where"]) if (why := check(ref))]
    assert problems == []


@pytest.mark.parametrize("ref, wrong", [
    ("fuzzy_dedup.num_perm=128", None), ("fuzzy_dedup.num_perms=128", "no config key"),
    ("fuzzy_dedup.num_perm=256", "defaults to 128"), ("quality.gopher_repetition.dup_ngrams.5=0.15", None),
    ("quality.zh.min_chars=99", "defaults to 100"), ("langid.min_score.default=0.85", None),
    ("gpupipe plan --usd-per-core-hour", None), ("gpupipe plan --usd-per-hour", "has no"),
    ("gpupipe config convert", None), ("gpupipe frobnicate", "no command"),
    ("reason:near_duplicate", None), ("reason:near_duplicates_x", "no reason"),
    ("py:gpupipe.report.audit.SAMPLE_SIZE=1000", None), ("py:gpupipe.report.audit.SAMPLE_SIZE=999", "the table says"),
    ("configs/default.yaml", None), ("configs/nope.yaml", "no file"), ("chunk_markdown.judge.max_chars=3000", None),
    ("input.source", None), ("executor.kind", None), ("Fuzzy dedup", "not a reference"),
    ("extract.extractor~trafilatura", None), ("extract.extractor~jusText", "does not accept"),
    ("input.format~markdown_dir", None), ("chunk_markdown.judge.temperature~0.5", None),
    ("chunk_markdown.judge.temperature~5", "does not accept"),
])
def test_the_checker_catches_a_wrong_reference(ref, wrong):
    """The check itself: right references pass, a renamed key, a changed default, an unknown flag or file fail."""
    why = check(ref)
    assert (why is None) if wrong is None else (why is not None and wrong in why), (ref, why)


def test_readme_summarises_the_table():
    rs = rows()
    counts = {s: sum(r["status"] == s for r in rs) for s in STATUSES}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Seed requirements", 1)[1].split("\n## ", 1)[0]
    assert "docs/seed_requirements.md" in section
    assert f"{len(rs)} requirements" in section
    assert f"{counts['implemented']} implemented" in section and f"{counts['departure']} departures" in section
    for seed in ("000", "001", "002", "004"):
        n = {s: sum(r["status"] == s and r["id"].startswith(seed) for r in rs) for s in STATUSES}
        assert re.search(rf"\| {seed} .*\| {n['implemented']} \| {n['departure']} \|", section), seed
