"""Packing: the tokenized documents, in input order, become one continuous stream with exactly one EOS after each
document, cut into fixed `seq_len` blocks written to `RUN/shards/` with a manifest; the last partial block is dropped
and counted (seed 000 §18.14). The shards are verified before the stage counts as done."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from gpupipe.config import Strict
from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.base import Stage, StageJob, StageStats
from gpupipe.stages.tokenize import TOKENIZER_FILE
from gpupipe.tokens.manifest import write_manifest
from gpupipe.tokens.packing import StreamPacker
from gpupipe.tokens.tokenizer import EOS_TOKEN, eos_id, load_tokenizer, save_tokenizer, token_dtype
from gpupipe.tokens.verify import verify_shards

SHARDS_DIR = "shards"


class PackConfig(Strict):
    seq_len: int = 2048
    blocks_per_shard: int = 1024
    eos_token: str = EOS_TOKEN


class PackError(RuntimeError):
    pass


class Pack(Stage):
    name = "pack"
    Config = PackConfig

    def execute(self, job: StageJob) -> StageStats:
        tok_path = job.in_dir / TOKENIZER_FILE
        tok = load_tokenizer(tok_path)
        vocab, eos = tok.get_vocab_size(), eos_id(tok, self.config.eos_token)
        dtype = token_dtype(vocab)
        out = Path(job.ctx.run_dir) / SHARDS_DIR
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        tok_sha = save_tokenizer(tok, out / TOKENIZER_FILE)
        packer = StreamPacker(out, self.config.seq_len, eos, dtype, self.config.blocks_per_shard)
        stats = StageStats()
        with annotate("gpupipe/pack"):
            for i, part in enumerate(job.inputs):
                table = pq.read_table(part, columns=["tokens", "source"])
                col = table.column("tokens").combine_chunks()
                flat = col.values.to_numpy(zero_copy_only=False).astype(np.uint32, copy=False)
                offsets = col.offsets.to_numpy()
                docs = np.split(flat[offsets[0]:offsets[-1]], offsets[1:-1] - offsets[0]) if len(col) else []
                packer.add_many(docs, table.column("source").to_pylist())
                stats.docs_in += len(col)
                job.progress(1)
            summary = packer.finish()
        manifest = write_manifest(out, summary, seq_len=self.config.seq_len, dtype=np.dtype(dtype).name,
                                  vocab_size=vocab, eos_id=eos, tokenizer_sha256=tok_sha,
                                  tokenizer_file=TOKENIZER_FILE, config_hash=job.ctx.results_hash)
        problems = verify_shards(out)
        if problems:
            raise PackError("the shards just written fail verification:\n" + "\n".join(problems))
        stats.docs_out = stats.docs_in
        stats.extra.update({"stream_tokens": manifest["stream_tokens"], "sequences": manifest["sequences"],
                            "dropped_remainder_tokens": manifest["dropped_remainder_tokens"],
                            "shards": len(manifest["shards"])})
        return stats
