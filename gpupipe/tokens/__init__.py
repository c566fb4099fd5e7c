"""Tokens: tokenizer training/loading, EOS stream packing, shards, manifest, verification."""
from .manifest import MANIFEST_FORMAT, read_manifest, write_manifest
from .packing import MANIFEST_FILE, StreamPacker, shard_dtype, shard_name
from .tokenizer import (
    EOS_TOKEN,
    TOKENIZER_FILE,
    encode_batch,
    encode_batch_flat,
    encoder_info,
    eos_id,
    load_tokenizer,
    save_tokenizer,
    token_dtype,
    train_byte_level_bpe,
)
from .verify import verify_shards

__all__ = [
    "EOS_TOKEN",
    "MANIFEST_FILE",
    "MANIFEST_FORMAT",
    "TOKENIZER_FILE",
    "StreamPacker",
    "encode_batch",
    "encode_batch_flat",
    "encoder_info",
    "eos_id",
    "load_tokenizer",
    "read_manifest",
    "save_tokenizer",
    "shard_dtype",
    "shard_name",
    "token_dtype",
    "train_byte_level_bpe",
    "verify_shards",
    "write_manifest",
]
