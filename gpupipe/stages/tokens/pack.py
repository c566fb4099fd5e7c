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
from gpupipe.stages.tokens.mixture import COPIES_COLUMN, read_ledger
from gpupipe.tokens.bestfit import DEFAULT_WINDOW_DOCS, PAD_TOKEN, BestFitPacker
from gpupipe.tokens.manifest import write_manifest
from gpupipe.tokens.megatron import MegatronWriter
from gpupipe.tokens.packing import PARQUET_COMPRESSION, PARQUET_ROW_GROUP_SIZE, StreamPacker, write_parquet_shards
from gpupipe.tokens.tokenizer import EOS_TOKEN, TOKENIZER_FILE, eos_id, load_tokenizer, save_tokenizer, token_dtype
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


def _documents(parts: list[Path], copies: bool) -> Iterator[tuple[int, list[np.ndarray], list[str], int]]:
    """(pass, token arrays, sources, rows read) per part and pass; one pass unless a mixture asked for copies."""
    passes = 1
    if copies:
        passes = max((int(pq.read_table(p, columns=[COPIES_COLUMN]).column(0).to_numpy().max(initial=0))
                      for p in parts), default=1)
    for p in range(1, passes + 1):
        for part in parts:
            table = pq.read_table(part, columns=["tokens", "source"] + ([COPIES_COLUMN] if copies else []))
            rows = table.num_rows
            if copies:
                table = table.filter(table.column(COPIES_COLUMN).to_numpy() >= p)
            col = table.column("tokens").combine_chunks()
            flat = col.values.to_numpy(zero_copy_only=False).astype(np.uint32, copy=False)
            offsets = col.offsets.to_numpy()
            docs = np.split(flat[offsets[0]:offsets[-1]], offsets[1:-1] - offsets[0]) if len(col) else []
            yield p, docs, table.column("source").to_pylist(), rows


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
            planned = {name: r["tokens"] for name, r in ledger["sources"].items()}
            packed = {name: n for name, n in manifest["tokens_per_source"].items() if n}
            if planned != packed:
                problems.append(f"mixture: packed tokens per source {packed} != the ledger's {planned}")
        if problems:
            raise PackError("the shards just written fail verification:\n" + "\n".join(problems))


def pack_phase(stage: Pack, run: PhaseRun) -> None:
    tok = load_tokenizer(run.prev.tokenizer)
    vocab, eos = tok.get_vocab_size(), eos_id(tok, stage.config.eos_token)
    pad = _pad_id(tok, stage.config, eos) if stage.config.mode == "bestfit" else None
    dtype = token_dtype(vocab)
    out = run.dir.shards
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tok_sha = save_tokenizer(tok, out / TOKENIZER_FILE)
    if pad is None:
        packer = StreamPacker(out, stage.config.seq_len, eos, dtype, stage.config.blocks_per_shard)
    else:
        packer = BestFitPacker(out, stage.config.seq_len, eos, pad, dtype, stage.config.blocks_per_shard,
                               stage.config.bestfit_window)
    mega = MegatronWriter(out / MEGATRON_PREFIX, dtype, eos) if stage.config.megatron else None
    ledger = read_ledger(run.prev.ledger)
    copies = bool(run.inputs) and COPIES_COLUMN in pq.ParquetFile(run.inputs[0]).schema_arrow.names
    stats = run.total
    with annotate("gpupipe/pack"):
        for p, docs, sources, rows in _documents(run.inputs, copies):
            packer.add_many(docs, sources)
            if mega is not None:
                mega.add_many(docs)
            if p == 1:
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
    return extra
