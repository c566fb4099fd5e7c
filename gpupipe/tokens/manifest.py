"""manifest.json: what a shard directory holds and how to check it (DESIGN.md, "Outputs").

No timestamps or host names: the same inputs give a byte-identical manifest, so a manifest's
own hash identifies the data.
"""
from __future__ import annotations

import json
import os

from .packing import MANIFEST_FILE, shard_dtype, write_atomic

MANIFEST_FORMAT = "gpupipe-shards/1"


def _gpupipe_version() -> str:
    from gpupipe import __version__  # late import: gpupipe/__init__ may import this package

    return __version__


def write_manifest(
    out_dir,
    summary: dict,
    *,
    seq_len: int,
    dtype,
    vocab_size: int,
    eos_id: int,
    tokenizer_sha256: str,
    tokenizer_file: str,
    config_hash: str,
    extra: dict | None = None,
) -> dict:
    """Write manifest.json from a StreamPacker.finish() summary and return the manifest dict."""
    shards = [dict(s) for s in summary["shards"]]
    manifest = {
        "format": MANIFEST_FORMAT,
        "gpupipe_version": _gpupipe_version(),
        "seq_len": int(seq_len),
        "dtype": shard_dtype(dtype).name,
        "vocab_size": int(vocab_size),
        "eos_id": int(eos_id),
        "tokenizer_file": str(tokenizer_file),
        "tokenizer_sha256": tokenizer_sha256,
        "documents_packed": int(summary["documents"]),
        "stream_tokens": int(summary["stream_tokens"]),
        "sequences": sum(int(s["sequences"]) for s in shards),
        "tokens": sum(int(s["tokens"]) for s in shards),
        "dropped_remainder_tokens": int(summary["dropped_remainder_tokens"]),
        "dropped_remainder_eos": int(summary["dropped_remainder_eos"]),
        "tokens_per_source": dict(summary["tokens_per_source"]),
        "shards": shards,
        "config_hash": config_hash,
    }
    clash = sorted(set(extra or {}) & set(manifest))
    if clash:
        raise ValueError(f"extra manifest fields would overwrite core fields: {clash}")
    manifest.update(extra or {})
    text = json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    os.makedirs(out_dir, exist_ok=True)
    write_atomic(os.path.join(os.fspath(out_dir), MANIFEST_FILE), text.encode("utf-8"))
    return manifest


CARD_RUN_FIELDS = ("tokenizer_sha256", "gpupipe_version", "config_hash")


def shard_card(manifest: dict, file: str) -> dict:
    """A shard's data card as it travels alone: its own card (phase, tokens_by_group, quality) and the run's
    tokenizer sha256, gpupipe version and config hash, which the manifest holds once for all shards."""
    entry = next((s for s in manifest["shards"] if s["file"] == file), None)
    if entry is None:
        raise KeyError(f"no shard {file!r} in the manifest")
    return {"file": file, "tokens": entry["tokens"], **entry.get("card", {}),
            **{k: manifest.get(k) for k in CARD_RUN_FIELDS}}


def read_manifest(shard_dir) -> dict:
    """The manifest of a shard folder: a local path or a URL (io/storage.py)."""
    from gpupipe.io import storage

    path = storage.join(os.fspath(shard_dir), MANIFEST_FILE)
    try:
        manifest = json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        raise FileNotFoundError(f"no {MANIFEST_FILE} in {shard_dir}") from None
    except IsADirectoryError:
        raise FileNotFoundError(f"no {MANIFEST_FILE} in {shard_dir} ({path} is a folder)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ValueError(f"{path}: expected format {MANIFEST_FORMAT!r}, found {found!r}")
    return manifest
