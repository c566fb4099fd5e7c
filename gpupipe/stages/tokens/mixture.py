"""Mixture: weights and epochs per group of documents, applied in tokens (static weighting, as in LLaMA-1's mix),
optionally as a curriculum of phases (general first, then an annealing phase on a high-quality mix).

Where it runs: right after `tokenize` and right before `pack` (tokenize → mixture → pack). Weights are shares of
the packed tokens, so they need each document's token count (`n_tokens` from tokenize); counted this way they match
the manifest's `tokens_per_group` exactly (a document counts n_tokens + 1: its EOS is packed too).

    - mixture:
        by: source                    # the grouping column: source (default), lang, domain_tier, any column
        sources:                      # the groups: values of the `by` column, and `other` for all the rest
          wikipedia: {weight: 0.045, epochs: 2.45}
          commoncrawl: {weight: 0.67, epochs: 1.10}
          other: {epochs: 0.5}        # no weight: exactly this many epochs (its tokens come off the total first)
        total_tokens: null            # null: as many as the tightest group allows, else a number of tokens
        unlisted: error               # or drop: documents of groups not listed (and no `other`) are removed

Groups. A document's group is its `by` value (null → "none", the value domain_tier uses for untiered pages);
a value no group names goes to `other` when the config lists it. The group of each kept document is written as
the `mixture_group` column, which pack counts tokens by (the manifest's `tokens_per_group`, the shards' cards).

The plan. A group with A tokens (one epoch) and no weight gets exactly epochs * A tokens; the weighted groups
share the rest R of the total T by w = weight / sum of weights:
- T = total_tokens, or, when null, the largest T no weighted group exceeds its `epochs` for: R = min over groups
  of epochs * A / w (that group then gets exactly its epochs). With a total given, a group that would need more
  than its `epochs` is an error that says how many epochs it would need.
- target = w * R tokens = k whole epochs (k = floor(target / A)) plus a remainder below A. Every document of the
  group is repeated k times; on top, a seeded subset of whole documents (a permutation seeded by the run seed and
  the group name, cut where its running token sum comes closest to the remainder) gets one more copy. So the
  achieved tokens are within half a document of the target, and sampling never cuts a document.
- Planned vs achieved share per group is in the ledger and the stats (share_<g>, target_share_<g>); a group more
  than 0.5 percentage points off its plan gets a note saying why (its documents are too large for its target).
- Documents left with no copy are removed (reason `mixture_downsampled`, or `mixture_unlisted_source`).

Phases (a curriculum; the token stream is laid out phase by phase, `share` of `total_tokens` each):

    - mixture:
        by: source
        total_tokens: 400000
        phases:
          - {name: general, share: 0.8, sources: {web: {weight: 0.9, epochs: null}, books: {weight: 0.1, epochs: null}}}
          - {name: anneal,  share: 0.2, sources: {books: {weight: 1.0, epochs: null}}}

Each phase is planned as above over its own groups with T = share * total_tokens (total null: the largest total
every phase allows), its `epochs` limits counting within the phase, its partial epochs seeded by phase and group.
`other` means the values no group of any phase names. The phase shares must sum to 1; every phase group needs a
weight. A document in no phase's groups is unlisted.

Output: the kept documents once each, in input order, with a `copies` column (>= 1: copies over all phases), the
`mixture_group` column, with phases a `phase_copies` column (copies per phase, in phase order), plus
`mixture.json`, the ledger (per group: target vs achieved share and tokens, available tokens, target and
effective epochs; per phase the same). Writing each document once keeps the run's document accounting (docs in =
out + removed) and the disk use flat. `pack` expands the copies in passes: pass p packs, in input order, every
document with copies >= p (per phase, phase after phase); so the repeats of a document are a whole pass apart,
never next to each other, and the order is fixed by the input and the seed. The pack manifest carries the ledger
under `mixture`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from gpupipe.config_base import Strict
from gpupipe.io.parts import atomic_write_text, write_part, write_table
from gpupipe.stages.base import StageStats, reject_frame
from gpupipe.stages.phases import DRIVER, Phase, PhasedStage, PhaseRun, Task

COPIES_COLUMN = "copies"
GROUP_COLUMN = "mixture_group"          # the resolved group of each kept document (pack counts tokens by it)
PHASE_COPIES_COLUMN = "phase_copies"    # copies per phase, in phase order (phased mixtures only)
OTHER = "other"                         # the group of every value no group names
NULL_GROUP = "none"                     # the group of a null `by` value (url_filter's untiered domain_tier)
SHARE_TOLERANCE_PP = 0.5                # planned vs achieved share: a group further off gets a note


class SourceMix(Strict):
    weight: float | None = Field(None, gt=0, description="share of the packed tokens (relative: divided by the sum "
                                                         "of weights); null: exactly `epochs` epochs")
    epochs: float | None = Field(1.0, gt=0, description="the most epochs of this group; null: no limit")

    @model_validator(mode="after")
    def _weight_or_epochs(self) -> "SourceMix":
        if self.weight is None and self.epochs is None:
            raise ValueError("a group needs a weight (a share of the tokens) or epochs (a number of epochs)")
        return self


class PhaseMix(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    share: float = Field(gt=0, le=1, description="this phase's share of total_tokens")
    sources: dict[str, SourceMix] = Field(min_length=1)

    @model_validator(mode="after")
    def _weighted(self) -> "PhaseMix":
        fixed = [g for g, s in self.sources.items() if s.weight is None]
        if fixed:
            raise ValueError(f"phase {self.name!r}: every group of a phase needs a weight (no weight: {fixed})")
        return self


class MixtureConfig(Strict):
    by: str = Field("source", min_length=1, description="the grouping column: source, lang, domain_tier, ...")
    sources: dict[str, SourceMix] | None = Field(None, min_length=1)
    phases: list[PhaseMix] | None = Field(None, min_length=1)
    total_tokens: int | None = Field(None, gt=0, description="null: as many as the tightest group allows")
    unlisted: Literal["error", "drop"] = "error"

    @model_validator(mode="after")
    def _bounded(self) -> "MixtureConfig":
        if (self.sources is None) == (self.phases is None):
            raise ValueError("mixture: give either `sources` (one mix) or `phases` (a curriculum), not both")
        for mix in self.mixes():
            weighted = [s for s in mix.values() if s.weight is not None]
            if self.total_tokens is None and any(s.epochs is None for s in weighted):
                raise ValueError("with total_tokens null every weighted group needs an `epochs` limit")
            if self.total_tokens is not None and not weighted:
                raise ValueError("total_tokens needs at least one weighted group (groups without a weight take "
                                 "exactly their epochs)")
        if self.phases is not None:
            names = [p.name for p in self.phases]
            if len(set(names)) != len(names):
                raise ValueError(f"phase names must be unique: {names}")
            total = sum(p.share for p in self.phases)
            if abs(total - 1.0) > 1e-6:
                raise ValueError(f"phase shares sum to {total:g}, not 1")
        return self

    def mixes(self) -> list[dict[str, SourceMix]]:
        """The groups of each phase (one mix without phases)."""
        return [p.sources for p in self.phases] if self.phases is not None else [self.sources]

    def group_names(self) -> list[str]:
        """Every group named anywhere, in first-seen order."""
        return list(dict.fromkeys(g for mix in self.mixes() for g in mix))


class MixtureError(ValueError):
    pass


# -- the plan: pure functions of (token counts, groups, config, seed) -----------------------------------------


def source_rng(seed: int, source: str) -> np.random.Generator:
    """One stream per (run seed, group): stable across processes and Python versions (no hash())."""
    salt = int.from_bytes(hashlib.sha256(source.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng([seed, salt])


def resolve_groups(values: np.ndarray, cfg: MixtureConfig) -> np.ndarray:
    """Each document's group: its `by` value as text (null → "none"), or `other` when no group names it and the
    config lists `other`; values neither named nor caught stay as they are (unlisted)."""
    groups = np.array([NULL_GROUP if v is None or v != v else str(v) for v in values.tolist()], dtype=object)
    named = set(cfg.group_names())
    if OTHER in named:
        groups[~np.isin(groups, list(named))] = OTHER
    return groups


def _fixed_and_rest(mix: dict[str, SourceMix], available: dict[str, int], total: float | None,
                    where: str) -> tuple[dict[str, float], dict[str, float], float, str]:
    """Targets of the epochs-only groups, shares of the weighted ones, the total and what limits it."""
    fixed = {g: s.epochs * available[g] for g, s in mix.items() if s.weight is None}
    weighted = {g: s for g, s in mix.items() if s.weight is not None}
    wsum = sum(s.weight for s in weighted.values())
    shares = {g: s.weight / wsum for g, s in weighted.items()}
    if not weighted:
        return fixed, shares, float(sum(fixed.values())), "epochs"
    if total is not None:
        rest = total - sum(fixed.values())
        if rest <= 0:
            raise MixtureError(f"mixture{where}: the groups given as epochs ({sorted(fixed)}) take "
                               f"{sum(fixed.values()):.0f} tokens, all of the total {total:.0f}")
        for g, s in weighted.items():
            need = shares[g] * rest / available[g]
            if s.epochs is not None and need > s.epochs * (1 + 1e-9):
                raise MixtureError(f"mixture{where}: {total:.0f} tokens need {need:.3f} epochs of group '{g}' "
                                   f"({available[g]} tokens, share {shares[g] * rest / total:.4f}), more than its "
                                   f"epochs {s.epochs}: too few tokens in the group (raise its epochs to "
                                   f"{need:.3f}, or lower its weight or the total)")
        return fixed, shares, float(total), "total_tokens"
    caps = {g: s.epochs * available[g] / shares[g] for g, s in weighted.items()}
    name = min(caps, key=lambda k: (caps[k], k))
    return fixed, shares, caps[name] + sum(fixed.values()), name


def _partial_epoch(tokens: np.ndarray, remainder: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of a seeded subset of whole documents whose token sum comes closest to `remainder`."""
    perm = rng.permutation(tokens.size)
    cum = np.concatenate(([0], np.cumsum(tokens[perm])))
    j = int(np.searchsorted(cum, remainder))
    if j > 0 and (j == cum.size or remainder - cum[j - 1] <= cum[j] - remainder):
        j -= 1  # the shorter prefix is as close or closer (ties keep fewer tokens)
    return perm[:j]


def _plan_mix(tokens: np.ndarray, members: dict[str, np.ndarray], mix: dict[str, SourceMix], total: float,
              fixed: dict[str, float], shares: dict[str, float], seed: int, salt: str) -> tuple[np.ndarray, dict]:
    """Copies per document for one mix of `total` tokens, and its rows (per group)."""
    copies = np.zeros(tokens.size, dtype=np.int32)
    rest = total - sum(fixed.values())
    rows: dict[str, dict[str, Any]] = {}
    for name in sorted(mix):
        idx = members[name]
        avail = int(tokens[idx].sum())
        target = fixed[name] if name in fixed else shares[name] * rest
        full = int(target // avail)
        copies[idx] = full
        extra = _partial_epoch(tokens[idx], target - full * avail, source_rng(seed, salt + name))
        copies[idx[extra]] += 1
        rows[name] = {"weight": mix[name].weight, "max_epochs": mix[name].epochs,
                      "target_share": round(target / total, 9), "target_tokens": round(target, 3),
                      "target_epochs": round(target / avail, 6), "available_tokens": avail,
                      "available_documents": int(idx.size), "max_document_tokens": int(tokens[idx].max()),
                      "full_epochs": full, "tokens": int((tokens[idx] * copies[idx]).sum()),
                      "documents": int(copies[idx].sum()), "unique_documents": int(np.count_nonzero(copies[idx]))}
    return copies, rows


def _achieved(rows: dict[str, dict], where: str) -> tuple[int, list[str]]:
    """Fill in achieved shares and epochs; notes for groups more than SHARE_TOLERANCE_PP off their plan."""
    achieved = sum(r["tokens"] for r in rows.values())
    notes = []
    for name, r in rows.items():
        r["share"] = round(r["tokens"] / achieved, 9) if achieved else 0.0
        r["epochs"] = round(r["tokens"] / r["available_tokens"], 6)
        r["share_error_pp"] = round(100 * (r["share"] - r["target_share"]), 6)
        if abs(r["share_error_pp"]) > SHARE_TOLERANCE_PP:
            notes.append(f"{where}group '{name}': {100 * r['share']:.2f}% of the tokens, planned "
                         f"{100 * r['target_share']:.2f}%: its documents are too large for its target of "
                         f"{r['target_tokens']:.0f} tokens (whole documents only; the largest has "
                         f"{r['max_document_tokens']} tokens, of {achieved} in all)")
    return achieved, notes


def plan_copies(tokens: np.ndarray, groups: np.ndarray, cfg: MixtureConfig, seed: int) -> tuple[np.ndarray, dict]:
    """Copies per document (aligned with the inputs; with phases, shape (documents, phases)) and the ledger.
    `tokens` are packed tokens per document (n_tokens + 1 for its EOS), `groups` the resolved group names
    (resolve_groups), both in input order."""
    tokens = np.asarray(tokens, dtype=np.int64)
    groups = np.asarray(groups, dtype=object)
    present = sorted(set(groups.tolist()))
    named = cfg.group_names()
    unlisted = [g for g in present if g not in named]
    if unlisted and cfg.unlisted == "error":
        raise MixtureError(f"mixture: documents of {cfg.by} values not in the config: {unlisted[:20]} "
                           f"(list them, add a group `other`, or set unlisted: drop)")
    members = {name: np.flatnonzero(groups == name) for name in named}
    available = {name: int(tokens[idx].sum()) for name, idx in members.items()}
    empty = [name for name, a in available.items() if a == 0]
    if empty:
        raise MixtureError(f"mixture: no documents for group(s) {empty} (by {cfg.by}; present: {present[:20]})")
    dropped = {g: int(tokens[groups == g].sum()) for g in unlisted}
    if cfg.phases is None:
        fixed, shares, total, limited_by = _fixed_and_rest(cfg.sources, available, cfg.total_tokens, "")
        copies, rows = _plan_mix(tokens, members, cfg.sources, total, fixed, shares, seed, "")
        achieved, notes = _achieved(rows, "")
        ledger = {"seed": seed, "by": cfg.by, "limited_by": limited_by, "target_total_tokens": round(total, 3),
                  "total_tokens": achieved, "documents": int(copies.sum()), "passes": int(copies.max(initial=0)),
                  "sources": rows, "notes": notes, "unlisted_sources_dropped_tokens": dropped}
        return copies, ledger
    return _plan_phases(tokens, members, available, cfg, seed, dropped)


def _plan_phases(tokens, members, available, cfg: MixtureConfig, seed: int, dropped: dict) -> tuple[np.ndarray, dict]:
    total, limited_by = cfg.total_tokens, "total_tokens"
    if total is None:   # the largest total every phase allows: each phase's own bound over its share
        bounds = {p.name: _fixed_and_rest(p.sources, available, None, f" phase {p.name!r}")[2] / p.share
                  for p in cfg.phases}
        limited_by = min(bounds, key=lambda k: (bounds[k], k))
        total = bounds[limited_by]
        limited_by = f"phase {limited_by}"
    copies = np.zeros((tokens.size, len(cfg.phases)), dtype=np.int32)
    phases, notes = [], []
    for k, p in enumerate(cfg.phases):
        where = f" phase {p.name!r}"
        fixed, shares, target, bound = _fixed_and_rest(p.sources, available, total * p.share, where)
        copies[:, k], rows = _plan_mix(tokens, members, p.sources, target, fixed, shares, seed, p.name + "\x00")
        achieved, phase_notes = _achieved(rows, f"phase {p.name!r}: ")
        notes += phase_notes
        phases.append({"name": p.name, "share": p.share, "target_tokens": round(target, 3), "tokens": achieved,
                       "documents": int(copies[:, k].sum()), "passes": int(copies[:, k].max(initial=0)),
                       "sources": rows})
    achieved = sum(p["tokens"] for p in phases)
    rows = {}  # the groups over all phases: what pack's tokens_per_group must equal
    for name in cfg.group_names():
        idx = members[name]
        planned = sum(p["sources"][name]["target_tokens"] for p in phases if name in p["sources"])
        got = int((tokens[idx] * copies[idx].sum(axis=1)).sum())
        rows[name] = {"target_tokens": round(planned, 3), "target_share": round(planned / total, 9),
                      "tokens": got, "share": round(got / achieved, 9) if achieved else 0.0,
                      "available_tokens": available[name], "epochs": round(got / available[name], 6),
                      "documents": int(copies[idx].sum())}
    for p in phases:
        p["share_of_tokens"] = round(p["tokens"] / achieved, 9) if achieved else 0.0
    ledger = {"seed": seed, "by": cfg.by, "limited_by": limited_by, "target_total_tokens": round(total, 3),
              "total_tokens": achieved, "documents": int(copies.sum()), "passes": int(copies.max(initial=0)),
              "sources": rows, "phases": phases, "notes": notes, "unlisted_sources_dropped_tokens": dropped}
    return copies, ledger


def share_table(ledger: dict) -> list[dict]:
    """One row per (phase, group): planned and achieved tokens and shares within the phase (a mixture without
    phases is one phase named "all")."""
    phases = ledger.get("phases") or [{"name": "all", "sources": ledger["sources"]}]
    return [{"phase": p["name"], "group": g, "target_tokens": r["target_tokens"], "tokens": r["tokens"],
             "target_share": r["target_share"], "share": r["share"]}
            for p in phases for g, r in p["sources"].items()]


# -- the stage ---------------------------------------------------------------------------------------------


def _read_counts(parts: list[Path], by: str) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Packed tokens and `by` value per document over all parts (two small columns), and rows per part."""
    tokens, values, sizes = [], [], []
    for p in parts:
        names = pq.ParquetFile(p).schema_arrow.names
        if "n_tokens" not in names:
            raise MixtureError(f"mixture: {p.name} lacks column 'n_tokens': the mixture stage must come right "
                               f"after 'tokenize'")
        if by not in names:
            raise MixtureError(f"mixture: by {by!r}: {p.name} has no such column (columns: "
                               f"{', '.join(n for n in names if n != 'tokens')})")
        t = pq.read_table(p, columns=["n_tokens", by])
        tokens.append(t.column("n_tokens").to_numpy().astype(np.int64) + 1)  # + its EOS
        values.append(np.asarray(t.column(by).to_pylist(), dtype=object))
        sizes.append(t.num_rows)
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, object), []
    return np.concatenate(tokens), np.concatenate(values), sizes


@dataclass(slots=True)
class MixtureState:
    copies: list = field(default_factory=list)   # per input part: copies of each of its documents
    groups: list = field(default_factory=list)   # per input part: the group of each of its documents


class Mixture(PhasedStage):
    """Phases: `plan` (driver: tokens and group of every document, the copies of each, the ledger), `apply` (per
    partition: the documents with their copies and group, the rest rejected; in Arrow, as the token lists are)."""

    name = "mixture"
    Config = MixtureConfig
    State = MixtureState

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        return ("tokens", "n_tokens", "source")

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        return (COPIES_COLUMN, GROUP_COLUMN)

    def phases(self) -> list[Phase]:
        return [Phase("plan", plan_phase, over=DRIVER),
                Phase("apply", apply_copies,
                      over=lambda run: list(zip(run.inputs, run.state.copies, run.state.groups)),
                      arg=lambda run: run.stage.config.group_names(), counts=True)]


def plan_phase(stage: Mixture, run: PhaseRun) -> None:
    run.dir.root.mkdir(parents=True, exist_ok=True)
    tokens, values, sizes = _read_counts(run.inputs, stage.config.by)
    groups = resolve_groups(values, stage.config)
    copies, ledger = plan_copies(tokens, groups, stage.config, stage.ctx.seed)
    if run.prev is not None and run.prev.tokenizer.is_file():
        shutil.copyfile(run.prev.tokenizer, run.dir.tokenizer)  # pack looks for it here
    atomic_write_text(run.dir.ledger, json.dumps(ledger, indent=2, sort_keys=True) + "\n")
    cuts = np.cumsum(sizes)[:-1] if sizes else []
    run.state.copies = np.split(copies, cuts) if sizes else []
    run.state.groups = np.split(groups, cuts) if sizes else []
    run.extra.update(_ledger_counters(ledger))


def _text_bytes(table: pa.Table) -> int:
    if "text" not in table.column_names or table.num_rows == 0:
        return 0
    return int(pc.sum(pc.binary_length(table.column("text"))).as_py() or 0)


def apply_copies(stage: Mixture, task: Task) -> dict[str, Any]:
    """One partition: keep the documents with copies >= 1 (adding `copies`, `mixture_group` and, with phases,
    `phase_copies`), reject the rest.

    In Arrow throughout: the `tokens` list column does not survive a round trip through pandas."""
    t0 = time.perf_counter()
    (in_path, copies, groups), listed = task.item, task.arg
    table = pq.read_table(in_path)
    copies = np.asarray(copies, dtype=np.int32)
    phased = copies.ndim == 2
    total = copies.sum(axis=1, dtype=np.int32) if phased else copies
    keep = total > 0
    kept = table.filter(pa.array(keep)).append_column(COPIES_COLUMN, pa.array(total[keep], pa.int32()))
    kept = kept.append_column(GROUP_COLUMN, pa.array(np.asarray(groups, dtype=object)[keep].tolist(), pa.string()))
    if phased:
        per = copies[keep]
        kept = kept.append_column(PHASE_COPIES_COLUMN, pa.FixedSizeListArray.from_arrays(
            pa.array(per.reshape(-1), pa.int32()), per.shape[1]))
    write_table(kept, task.dir.part(Path(in_path).name))

    dropped = table.filter(pa.array(~keep))
    stats = StageStats(docs_in=table.num_rows, docs_out=kept.num_rows, bytes_in=_text_bytes(table),
                       bytes_out=_text_bytes(kept))
    if dropped.num_rows:
        cols = [c for c in dropped.column_names if c != "tokens"]
        rejects = dropped.select(cols).to_pandas(ignore_metadata=True)
        listed_mask = np.isin(np.asarray(groups, dtype=object)[~keep], list(listed))
        rejects["reason"] = np.where(listed_mask, "mixture_downsampled", "mixture_unlisted_source")
        stats.removed.update(rejects["reason"].value_counts().to_dict())
        write_part(reject_frame(rejects), task.dir.rejects / Path(in_path).name)
    return stats.to_dict(Mixture.name, time.perf_counter() - t0)


def _ledger_counters(ledger: dict) -> Counter:
    c = Counter({"mixture_tokens": ledger["total_tokens"], "mixture_documents": ledger["documents"]})
    for name, r in ledger["sources"].items():
        c[f"tokens_{name}"] = r["tokens"]
        c[f"target_tokens_{name}"] = r["target_tokens"]
        c[f"epochs_{name}"] = r["epochs"]
        c[f"share_{name}"] = r["share"]
        c[f"target_share_{name}"] = r["target_share"]
    for p in ledger.get("phases") or []:
        c[f"phase_tokens_{p['name']}"] = p["tokens"]
        for name, r in p["sources"].items():
            c[f"share_{p['name']}_{name}"] = r["share"]
            c[f"target_share_{p['name']}_{name}"] = r["target_share"]
    c["mixture_share_notes"] = len(ledger["notes"])
    return c


def read_ledger(path: Path) -> dict | None:
    """The ledger a mixture stage left (StageDir.ledger), or None (no mixture before pack)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


__all__ = ["COPIES_COLUMN", "GROUP_COLUMN", "OTHER", "PHASE_COPIES_COLUMN", "Mixture", "MixtureConfig",
           "MixtureError", "PhaseMix", "SourceMix", "apply_copies", "plan_copies", "read_ledger", "resolve_groups",
           "share_table", "source_rng"]
