"""Mixture: per-source weights and epochs, applied in tokens (static weighting, as in LLaMA-1's mix).

Where it runs: right after `tokenize` and right before `pack` (tokenize → mixture → pack). Weights are shares of
the packed tokens, so they need each document's token count (`n_tokens` from tokenize); counted this way they match
the manifest's `tokens_per_source` exactly (a document counts n_tokens + 1: its EOS is packed too).

    - mixture:
        sources:                      # source = the documents' `source` column
          wikipedia: {weight: 0.045, epochs: 2.45}
          commoncrawl: {weight: 0.67, epochs: 1.10}
        total_tokens: null            # null: as many as the tightest source allows, else a number of tokens
        unlisted: error               # or drop: documents of sources not listed are removed

The plan. A source with A tokens (one epoch) gets the share w = weight / sum of weights of the total T:
- T = total_tokens, or, when null, the largest T no source exceeds its `epochs` for: min over sources of
  epochs * A / w (that source then gets exactly its epochs). With a total given, a source that would need more
  than its `epochs` is an error.
- target = w * T tokens = k whole epochs (k = floor(target / A)) plus a remainder R < A. Every document of the
  source is repeated k times; on top, a seeded subset of whole documents (a permutation seeded by the run seed and
  the source name, cut where its running token sum comes closest to R) gets one more copy. So the achieved tokens
  are within half a document of the target, and up- or down-sampling never cuts a document.
- Documents left with no copy are removed (reason `mixture_downsampled`, or `mixture_unlisted_source`).

Output: the kept documents once each, in input order, with a `copies` column (>= 1), plus `mixture.json`, the
ledger (per source: target vs achieved share and tokens, available tokens, target and effective epochs). Writing
each document once keeps the run's document accounting (docs in = out + removed) and the disk use flat. `pack`
expands the copies in passes: pass p packs, in input order, every document with copies >= p; so the repeats of a
document are a whole pass apart, never next to each other, and the order is fixed by the input and the seed. The
pack manifest carries the ledger under `mixture`.
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


class SourceMix(Strict):
    weight: float = Field(gt=0, description="share of the packed tokens (relative: divided by the sum of weights)")
    epochs: float | None = Field(1.0, gt=0, description="the most epochs of this source; null: no limit")


class MixtureConfig(Strict):
    sources: dict[str, SourceMix] = Field(min_length=1)
    total_tokens: int | None = Field(None, gt=0, description="null: as many as the tightest source allows")
    unlisted: Literal["error", "drop"] = "error"

    @model_validator(mode="after")
    def _bounded(self) -> "MixtureConfig":
        if self.total_tokens is None and any(s.epochs is None for s in self.sources.values()):
            raise ValueError("with total_tokens null every source needs an `epochs` limit")
        return self


class MixtureError(ValueError):
    pass


# -- the plan: pure functions of (token counts, sources, config, seed) ----------------------------------------


def source_rng(seed: int, source: str) -> np.random.Generator:
    """One stream per (run seed, source): stable across processes and Python versions (no hash())."""
    salt = int.from_bytes(hashlib.sha256(source.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng([seed, salt])


def _total(cfg: MixtureConfig, shares: dict[str, float], available: dict[str, int]) -> tuple[float, str]:
    """Total tokens T and what limits it (a source name, or 'total_tokens')."""
    if cfg.total_tokens is not None:
        for name, s in cfg.sources.items():
            need = shares[name] * cfg.total_tokens / available[name]
            if s.epochs is not None and need > s.epochs * (1 + 1e-9):
                raise MixtureError(f"mixture: total_tokens {cfg.total_tokens} needs {need:.3f} epochs of source "
                                   f"'{name}' ({available[name]} tokens, share {shares[name]:.4f}), more than "
                                   f"its epochs {s.epochs}")
        return float(cfg.total_tokens), "total_tokens"
    caps = {name: s.epochs * available[name] / shares[name] for name, s in cfg.sources.items()}
    name = min(caps, key=lambda k: (caps[k], k))
    return caps[name], name


def _partial_epoch(tokens: np.ndarray, remainder: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of a seeded subset of whole documents whose token sum comes closest to `remainder`."""
    perm = rng.permutation(tokens.size)
    cum = np.concatenate(([0], np.cumsum(tokens[perm])))
    j = int(np.searchsorted(cum, remainder))
    if j > 0 and (j == cum.size or remainder - cum[j - 1] <= cum[j] - remainder):
        j -= 1  # the shorter prefix is as close or closer (ties keep fewer tokens)
    return perm[:j]


def plan_copies(tokens: np.ndarray, sources: np.ndarray, cfg: MixtureConfig, seed: int) -> tuple[np.ndarray, dict]:
    """Copies per document (aligned with the inputs) and the ledger. `tokens` are packed tokens per document
    (n_tokens + 1 for its EOS), `sources` the source names, both in input order."""
    tokens = np.asarray(tokens, dtype=np.int64)
    sources = np.asarray(sources, dtype=object)
    present = sorted(set(sources.tolist()))
    unlisted = [s for s in present if s not in cfg.sources]
    if unlisted and cfg.unlisted == "error":
        raise MixtureError(f"mixture: documents of sources not in the config: {unlisted} "
                           f"(list them, or set unlisted: drop)")
    members = {name: np.flatnonzero(sources == name) for name in cfg.sources}
    available = {name: int(tokens[idx].sum()) for name, idx in members.items()}
    empty = [name for name, a in available.items() if a == 0]
    if empty:
        raise MixtureError(f"mixture: no documents for source(s) {empty} (present: {present})")

    weight_sum = sum(s.weight for s in cfg.sources.values())
    shares = {name: s.weight / weight_sum for name, s in cfg.sources.items()}
    total, limited_by = _total(cfg, shares, available)

    copies = np.zeros(tokens.size, dtype=np.int32)
    rows: dict[str, dict[str, Any]] = {}
    for name in sorted(cfg.sources):
        idx, avail = members[name], available[name]
        target = shares[name] * total
        full = int(target // avail)
        copies[idx] = full
        extra = _partial_epoch(tokens[idx], target - full * avail, source_rng(seed, name))
        copies[idx[extra]] += 1
        rows[name] = {"weight": cfg.sources[name].weight, "max_epochs": cfg.sources[name].epochs,
                      "target_share": round(shares[name], 9), "target_tokens": round(target, 3),
                      "target_epochs": round(target / avail, 6), "available_tokens": avail,
                      "available_documents": int(idx.size), "max_document_tokens": int(tokens[idx].max()),
                      "full_epochs": full, "tokens": int((tokens[idx] * copies[idx]).sum()),
                      "documents": int(copies[idx].sum()), "unique_documents": int(np.count_nonzero(copies[idx]))}
    achieved = sum(r["tokens"] for r in rows.values())
    for r in rows.values():
        r["share"] = round(r["tokens"] / achieved, 9) if achieved else 0.0
        r["epochs"] = round(r["tokens"] / r["available_tokens"], 6)
    dropped = {s: int(tokens[sources == s].sum()) for s in unlisted}
    ledger = {"seed": seed, "limited_by": limited_by, "target_total_tokens": round(total, 3),
              "total_tokens": achieved, "documents": int(copies.sum()), "passes": int(copies.max(initial=0)),
              "sources": rows, "unlisted_sources_dropped_tokens": dropped}
    return copies, ledger


# -- the stage ---------------------------------------------------------------------------------------------


def _read_counts(parts: list[Path]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Packed tokens and source per document over all parts (two small columns), and rows per part."""
    tokens, sources, sizes = [], [], []
    for p in parts:
        names = pq.ParquetFile(p).schema_arrow.names
        missing = [c for c in ("n_tokens", "source") if c not in names]
        if missing:
            raise MixtureError(f"mixture: {p.name} lacks column(s) {missing}: the mixture stage must come right "
                               f"after 'tokenize'")
        t = pq.read_table(p, columns=["n_tokens", "source"])
        tokens.append(t.column("n_tokens").to_numpy().astype(np.int64) + 1)  # + its EOS
        sources.append(np.asarray(t.column("source").to_pylist(), dtype=object))
        sizes.append(t.num_rows)
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, object), []
    return np.concatenate(tokens), np.concatenate(sources), sizes


@dataclass(slots=True)
class MixtureState:
    copies: list = field(default_factory=list)   # per input part: copies of each of its documents


class Mixture(PhasedStage):
    """Phases: `plan` (driver: tokens and source of every document, the copies of each, the ledger), `apply` (per
    partition: the documents with their copies, the rest rejected; in Arrow, as the token lists are)."""

    name = "mixture"
    Config = MixtureConfig
    State = MixtureState

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        return ("tokens", "n_tokens", "source")

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        return (COPIES_COLUMN,)

    def phases(self) -> list[Phase]:
        return [Phase("plan", plan_phase, over=DRIVER),
                Phase("apply", apply_copies, over=lambda run: list(zip(run.inputs, run.state.copies)),
                      arg=lambda run: sorted(run.stage.config.sources), counts=True)]


def plan_phase(stage: Mixture, run: PhaseRun) -> None:
    run.dir.root.mkdir(parents=True, exist_ok=True)
    tokens, sources, sizes = _read_counts(run.inputs)
    copies, ledger = plan_copies(tokens, sources, stage.config, stage.ctx.seed)
    if run.prev is not None and run.prev.tokenizer.is_file():
        shutil.copyfile(run.prev.tokenizer, run.dir.tokenizer)  # pack looks for it here
    atomic_write_text(run.dir.ledger, json.dumps(ledger, indent=2, sort_keys=True) + "\n")
    run.state.copies = np.split(copies, np.cumsum(sizes)[:-1]) if sizes else []
    run.extra.update(_ledger_counters(ledger))


def _text_bytes(table: pa.Table) -> int:
    if "text" not in table.column_names or table.num_rows == 0:
        return 0
    return int(pc.sum(pc.binary_length(table.column("text"))).as_py() or 0)


def apply_copies(stage: Mixture, task: Task) -> dict[str, Any]:
    """One partition: keep the documents with copies >= 1 (adding the `copies` column), reject the rest.

    In Arrow throughout: the `tokens` list column does not survive a round trip through pandas."""
    t0 = time.perf_counter()
    (in_path, copies), listed = task.item, task.arg
    table = pq.read_table(in_path)
    copies = np.asarray(copies, dtype=np.int32)
    keep = copies > 0
    kept = table.filter(pa.array(keep)).append_column(COPIES_COLUMN, pa.array(copies[keep], pa.int32()))
    write_table(kept, task.dir.part(Path(in_path).name))

    dropped = table.filter(pa.array(~keep))
    stats = StageStats(docs_in=table.num_rows, docs_out=kept.num_rows, bytes_in=_text_bytes(table),
                       bytes_out=_text_bytes(kept))
    if dropped.num_rows:
        cols = [c for c in dropped.column_names if c != "tokens"]
        rejects = dropped.select(cols).to_pandas(ignore_metadata=True)
        listed_mask = rejects["source"].isin(listed).to_numpy()
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
    return c


def read_ledger(path: Path) -> dict | None:
    """The ledger a mixture stage left (StageDir.ledger), or None (no mixture before pack)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


__all__ = ["COPIES_COLUMN", "Mixture", "MixtureConfig", "MixtureError", "SourceMix", "apply_copies",
           "plan_copies", "read_ledger", "source_rng"]
