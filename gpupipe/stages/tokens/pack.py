"""Packing: the tokenized documents, in input order, become one continuous stream with exactly one EOS after each
document, cut into fixed `seq_len` blocks written to `RUN/shards/` with a manifest; the last partial block is dropped
and counted (drop_last). The shards are verified before the stage counts as done.

Options (the defaults keep the behaviour above):
- `mode: bestfit` places documents whole into padded blocks instead (gpupipe.tokens.bestfit); it needs the pad
  token (`pad_token`, default `<|pad|>`) in the tokenizer: add it to the tokenize stage's `special_tokens`.
- `megatron: true` also writes `RUN/shards/megatron/data.bin|.idx` (Megatron-LM MMIDIDX v1, one sequence per
  document with its EOS, documents in packing input order), recorded in the manifest under `megatron`.
- `format: parquet` writes the blocks as `shards/shard-NNNNN.parquet` instead (for Hugging Face datasets: one row
  per block, column `input_ids` a fixed-size list of `seq_len` ids of the shard dtype, zstd, `row_group_size` rows
  per row group), for `datasets.load_dataset("parquet", data_files="RUN/shards/*.parquet")` and pyarrow as is;
  the manifest says `shard_format: parquet` and lists each file's sha256; `gpupipe verify` checks them the same way.
- After a `mixture` stage, each document is packed `copies` times, in passes: pass p packs, in input order, every
  document with copies >= p; the mixture ledger goes into the manifest under `mixture`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator, Literal

import numpy as np
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from gpupipe.config_base import KeyProblem, Strict
from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.phases import DRIVER, Phase, PhasedStage, PhaseRun
from gpupipe.stages.tokens.mixture import COPIES_COLUMN, GROUP_COLUMN, PHASE_COPIES_COLUMN, read_ledger
from gpupipe.tokens.bestfit import DEFAULT_WINDOW_DOCS, PAD_TOKEN, BestFitPacker
from gpupipe.tokens.manifest import write_manifest
from gpupipe.tokens.megatron import MegatronWriter
from gpupipe.tokens.packing import PARQUET_COMPRESSION, PARQUET_ROW_GROUP_SIZE, StreamPacker, write_parquet_shards
from gpupipe.tokens.tokenizer import (EOS_TOKEN, TOKENIZER_FILE, eos_id, id_space, load_tokenizer, save_tokenizer,
                                      token_dtype)
from gpupipe.tokens.verify import verify_shards

MEGATRON_PREFIX = "megatron/data"  # relative to the shards folder


class PackConfig(Strict):
    seq_len: int = Field(2048, ge=2)               # a training sequence needs an input and a next token
    blocks_per_shard: int = Field(1024, ge=1)
    eos_token: str = EOS_TOKEN
    mode: Literal["stream", "bestfit"] = "stream"
    pad_token: str = PAD_TOKEN                     # bestfit only: the dedicated padding token, never EOS
    bestfit_window: int = Field(DEFAULT_WINDOW_DOCS, ge=1)  # bestfit only: documents placed together
    megatron: bool = False                         # also write shards/megatron/data.bin|.idx
    format: Literal["bin", "parquet"] = "bin"      # parquet: one row per block instead of .bin shards
    row_group_size: int = Field(PARQUET_ROW_GROUP_SIZE, ge=1)  # parquet only: blocks per row group

    @model_validator(mode="after")
    def _pad_is_not_eos(self) -> "PackConfig":
        if self.mode == "bestfit" and self.pad_token == self.eos_token:
            raise KeyProblem("pad_token", f"bestfit pads with a token of its own, not EOS ({self.eos_token!r})")
        return self


class PackError(RuntimeError):
    pass


def _pad_id(tok, cfg: PackConfig, eos: int) -> int:
    pad = tok.token_to_id(cfg.pad_token)
    if pad is None:
        raise PackError(f"pack mode 'bestfit' needs the pad token {cfg.pad_token!r} in the tokenizer's vocabulary: "
                        f"add it to the tokenize stage, e.g. special_tokens: [{EOS_TOKEN!r}, {cfg.pad_token!r}]")
    if pad == eos:
        raise PackError(f"pack: pad token {cfg.pad_token!r} has the EOS id {eos}; padding with EOS is not allowed")
    return pad


QUALITY_SUFFIX = "_score"   # score columns (quality_score, a classifier's edu_score, ...) go into the data cards
NOT_QUALITY = ("lang_score",)


def score_columns(names: list[str]) -> list[str]:
    """The quality scores present: `*_score` columns other than langid's confidence."""
    return sorted(c for c in names if c.endswith(QUALITY_SUFFIX) and c not in NOT_QUALITY)


def _documents(parts: list[Path], copies: bool, phases: int, scores: list[str]) -> Iterator[tuple]:
    """(phase, pass, token arrays, sources, groups, scores, rows read) per phase, pass and part; one phase of one
    pass unless a mixture asked for copies (with phases: copies per phase, packed phase after phase)."""
    for k in range(max(phases, 1)):
        passes = 1
        if copies:   # at least one pass: an empty phase is still opened (and listed, with no shards)
            passes = max((int(_copies(pq.read_table(p, columns=_copy_cols(phases)), phases, k).max(initial=0))
                          for p in parts), default=1)
        for p in range(1, max(passes, 1) + 1):
            for part in parts:
                names = pq.ParquetFile(part).schema_arrow.names
                group = [GROUP_COLUMN] if GROUP_COLUMN in names else []
                cols = ["tokens", "source", *group, *[c for c in scores if c in names]]
                table = pq.read_table(part, columns=cols + (_copy_cols(phases) if copies else []))
                rows = table.num_rows
                if copies:
                    table = table.filter(_copies(table, phases, k) >= p)
                col = table.column("tokens").combine_chunks()
                flat = col.values.to_numpy(zero_copy_only=False).astype(np.uint32, copy=False)
                offsets = col.offsets.to_numpy()
                docs = np.split(flat[offsets[0]:offsets[-1]], offsets[1:-1] - offsets[0]) if len(col) else []
                sources = table.column("source").to_pylist()
                groups = table.column(GROUP_COLUMN).to_pylist() if group else sources
                values = {c: table.column(c).to_numpy(zero_copy_only=False).astype(np.float64)
                          for c in scores if c in names}
                yield k, p, docs, sources, groups, values, rows


def _copy_cols(phases: int) -> list[str]:
    return [PHASE_COPIES_COLUMN] if phases else [COPIES_COLUMN]


def _copies(table, phases: int, k: int) -> np.ndarray:
    """Copies of each document (in phase k of a phased mixture)."""
    col = table.column(_copy_cols(phases)[0]).combine_chunks()
    if not phases:
        return col.to_numpy()
    return col.values.to_numpy().reshape(-1, phases)[:, k]


class Pack(PhasedStage):
    """One driver phase: packing is one ordered stream of documents into fixed-length blocks (the shards, the
    run's shards folder), read part by part."""

    name = "pack"
    Config = PackConfig

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        return ("tokens", "source")

    def phases(self) -> list[Phase]:
        return [Phase("pack", pack_phase, over=DRIVER)]

    def _verify(self, out: Path, manifest: dict, ledger: dict | None) -> None:
        problems = verify_shards(out)   # the Megatron files the manifest lists too (sha256, counts, invariants)
        if ledger is not None:
            problems += mixture_problems(manifest, ledger)
        if problems:
            raise PackError("the shards just written fail verification:\n" + "\n".join(problems))


def pack_phase(stage: Pack, run: PhaseRun) -> None:
    tok = load_tokenizer(run.prev.tokenizer)
    vocab, eos = id_space(tok), eos_id(tok, stage.config.eos_token)
    pad = _pad_id(tok, stage.config, eos) if stage.config.mode == "bestfit" else None
    dtype = token_dtype(vocab)
    out = run.dir.shards
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tok_sha = save_tokenizer(tok, out / TOKENIZER_FILE)
    ledger = read_ledger(run.prev.ledger)
    names = pq.ParquetFile(run.inputs[0]).schema_arrow.names if run.inputs else []
    copies = COPIES_COLUMN in names
    phase_names = [p["name"] for p in (ledger or {}).get("phases") or []] if PHASE_COPIES_COLUMN in names else []
    if phase_names and pad is not None:
        raise PackError("pack: a phased mixture needs mode: stream (best-fit packing has no phase boundaries yet)")
    if pad is None:   # with data cards: tokens per group (and quality scores) per shard
        packer = StreamPacker(out, stage.config.seq_len, eos, dtype, stage.config.blocks_per_shard, cards=True,
                              score_columns=score_columns(names))
    else:
        packer = BestFitPacker(out, stage.config.seq_len, eos, pad, dtype, stage.config.blocks_per_shard,
                               stage.config.bestfit_window)
    mega = MegatronWriter(out / MEGATRON_PREFIX, dtype, eos) if stage.config.megatron else None
    stats, phase = run.total, None
    with annotate("gpupipe/pack"):
        for k, p, docs, sources, groups, scores, rows in _documents(run.inputs, copies, len(phase_names),
                                                                    packer.score_columns if pad is None else []):
            if phase_names and phase != k:   # a phase's documents start its own shards
                packer.start_phase(phase_names[phase := k])
            if pad is None:
                packer.add_many(docs, sources, groups, scores)
            else:
                packer.add_many(docs, sources)
            if mega is not None:
                mega.add_many(docs)
            if p == 1 and k == 0:
                stats.docs_in += rows
                run.progress(1)
        summary = packer.finish()
        mega_summary = mega.finish() if mega is not None else None
        if stage.config.format == "parquet":
            summary = write_parquet_shards(out, summary, stage.config.seq_len, dtype, stage.config.row_group_size)
    extra = _manifest_extra(summary, mega_summary, ledger)
    if stage.config.format == "parquet":
        extra.update(shard_format="parquet", row_group_size=stage.config.row_group_size,
                     compression=PARQUET_COMPRESSION)
    manifest = write_manifest(out, summary, seq_len=stage.config.seq_len, dtype=np.dtype(dtype).name,
                              vocab_size=vocab, eos_id=eos, tokenizer_sha256=tok_sha,
                              tokenizer_file=TOKENIZER_FILE, config_hash=stage.ctx.results_hash,
                              extra=extra or None)
    stage._verify(out, manifest, ledger)
    stats.docs_out = stats.docs_in
    stats.extra.update({"stream_tokens": manifest["stream_tokens"], "sequences": manifest["sequences"],
                        "dropped_remainder_tokens": manifest["dropped_remainder_tokens"],
                        "shards": len(manifest["shards"])})
    if pad is not None:
        stats.extra.update({"padding_tokens": summary["padding_tokens"], "padding_rate": summary["padding_rate"],
                            "split_documents": summary["split_documents"]})
    if copies:
        stats.extra["documents_packed"] = manifest["documents_packed"]


def _manifest_extra(summary: dict, mega_summary: dict | None, ledger: dict | None) -> dict:
    extra: dict = {}
    if "padding_tokens" in summary:
        extra.update({k: summary[k] for k in ("pad_id", "padding_tokens", "padding_rate", "split_documents")})
        extra.update(packing="bestfit", bestfit_window=summary["window_docs"])
    if mega_summary is not None:
        extra["megatron"] = {"prefix": MEGATRON_PREFIX, **mega_summary}
    if ledger is not None:
        extra["mixture"] = ledger
    for key in ("tokens_per_group", "phases"):
        if key in summary:
            extra[key] = summary[key]
    return extra


def mixture_problems(manifest: dict, ledger: dict) -> list[str]:
    """The packed stream against the mixture's plan: tokens per group over the run and per phase, exactly."""
    problems = []
    planned = {name: r["tokens"] for name, r in ledger["sources"].items() if r["tokens"]}
    packed = manifest.get("tokens_per_group", manifest["tokens_per_source"])
    packed = {name: n for name, n in packed.items() if n}
    if planned != packed:
        problems.append(f"mixture: packed tokens per group {packed} != the ledger's {planned}")
    want = [(p["name"], {g: r["tokens"] for g, r in p["sources"].items() if r["tokens"]})
            for p in ledger.get("phases") or []]
    got = [(p["name"], p["tokens_by_group"]) for p in manifest.get("phases") or []]
    if want and want != got:
        problems.append(f"mixture: packed phases {got} != the ledger's {want}")
    return problems
