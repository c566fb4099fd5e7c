"""`gpupipe verify`: recompute a shard directory and check it against its manifest.

Each shard is read once, through np.memmap in fixed-size chunks (the corpus never sits in RAM),
and every check on a chunk is a vectorized numpy call. Shards are scanned by a thread pool:
hashlib and numpy release the GIL on large buffers. Besides the per-shard bookkeeping (size,
tokens, sequences, sha256, EOS count, ids < vocab_size) it checks the continuous stream's
invariants: one EOS per document, no two adjacent EOS anywhere (across blocks and shards too),
whole blocks only, and a remainder that is exactly stream_tokens mod seq_len.

A best-fit shard directory (manifest `packing: "bestfit"`, see gpupipe.tokens.bestfit) is checked
block by block as well: pad id != EOS id; pads only as a block's suffix, right after an EOS; no
all-pad block; a block that ends inside a document (no EOS, no pad at its end) holds no EOS at all,
since only documents longer than a block are split and their pieces fill whole blocks; the pad
count per shard and in total (padding_tokens); tokens = stream_tokens + padding_tokens, nothing
dropped; EOS count = documents_packed.

Format B (manifest `shard_format: "parquet"`, gpupipe.tokens.packing.write_parquet_shards) gets the same checks:
its schema (one column `input_ids`, a fixed-size list of seq_len ids of the manifest dtype), rows = sequences,
sha256 of the file's bytes, and every token check above, row group by row group.

Megatron files the manifest lists (`megatron`: prefix, sha256 of data.bin and data.idx, documents, tokens) are
checked by gpupipe.tokens.megatron.verify_megatron: their sha256, the index against the data, one EOS ending each
sequence; and they must hold the documents and stream tokens the shards hold.

A phased stream (manifest `phases`, a mixture's curriculum) is checked per phase: its shards in order, each
phase's own dropped partial block, its tokens per group against its shards' cards. Per-shard data cards (`card`:
phase, tokens_by_group, quality score histograms; with the manifest's tokenizer sha256, gpupipe version and config
hash they make the card manifest.shard_card returns) must add up to the shard's tokens.
"""
from __future__ import annotations

import hashlib
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from gpupipe.io import storage

from .manifest import CARD_RUN_FIELDS, read_manifest
from .packing import (MANIFEST_FILE, PARQUET_SHARD_RE, SHARD_DTYPES, SHARD_FORMATS, SHARD_RE, parquet_schema,
                      shard_dtype)

CHUNK_TOKENS = 1 << 22  # 4M tokens per memmap slice: big enough to amortize, small enough for RAM

_INT_FIELDS = (
    "seq_len", "vocab_size", "eos_id", "documents_packed", "stream_tokens", "sequences", "tokens",
    "dropped_remainder_tokens", "dropped_remainder_eos",
)
_SHARD_INT_FIELDS = ("sequences", "tokens", "eos")


@dataclass
class _ShardScan:
    """What one pass over a shard file found."""

    problems: list[str] = field(default_factory=list)
    readable: bool = False
    eos: int = 0
    first_is_eos: bool = False
    last_is_eos: bool = False
    tokens: int = 0
    pads: int = 0


def verify_shards(shard_dir) -> list[str]:
    """Return one human-readable line per problem; an empty list means the shards are sound."""
    shard_dir = os.fspath(shard_dir)
    try:
        m = read_manifest(shard_dir)
    except (FileNotFoundError, ValueError) as exc:
        return [f"{MANIFEST_FILE}: {exc}"]
    problems = _check_fields(m)
    if problems:
        return problems  # the remaining checks need well-typed fields
    problems += _check_header(m)

    shards = m["shards"]
    workers = max(1, min(8, os.cpu_count() or 1, len(shards)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        scan_one = _scan_parquet_shard if m.get("shard_format") == "parquet" else _scan_shard
        scans = list(pool.map(lambda s: scan_one(shard_dir, s, m), shards))
    for scan in scans:
        problems += scan.problems
    problems += _check_shard_boundaries(shards, scans)
    problems += _check_stream(m, scans)
    problems += _check_unlisted_files(shard_dir, shards)
    problems += _check_cards(m)
    problems += _check_tokenizer(shard_dir, m)
    problems += _check_megatron(shard_dir, m)
    return problems


# -- manifest fields ------------------------------------------------------------------------


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_fields(m: dict) -> list[str]:
    problems = [f"{MANIFEST_FILE}: field {k!r} missing or not a non-negative integer"
                for k in _INT_FIELDS if not _is_int(m.get(k))]
    if m.get("dtype") not in SHARD_DTYPES:
        problems.append(f"{MANIFEST_FILE}: dtype {m.get('dtype')!r} is not one of {SHARD_DTYPES}")
    if not isinstance(m.get("tokens_per_source"), dict):
        problems.append(f"{MANIFEST_FILE}: tokens_per_source missing or not an object")
    shards = m.get("shards")
    if not isinstance(shards, list):
        return problems + [f"{MANIFEST_FILE}: shards missing or not a list"]
    for i, s in enumerate(shards):
        name = s.get("file") if isinstance(s, dict) else None
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
            problems.append(f"{MANIFEST_FILE}: shards[{i}] has no plain file name: {name!r}")
            continue
        problems += [f"{name}: manifest field {k!r} missing or not a non-negative integer"
                     for k in _SHARD_INT_FIELDS if not _is_int(s.get(k))]
        if not isinstance(s.get("sha256"), str):
            problems.append(f"{name}: manifest field 'sha256' missing")
    if _is_int(m.get("seq_len")) and m["seq_len"] == 0:
        problems.append(f"{MANIFEST_FILE}: seq_len is 0")
    return problems + _check_format_fields(m) + _check_bestfit_fields(m, shards)


def _bestfit(m: dict) -> bool:
    return m.get("packing") == "bestfit"


def _check_format_fields(m: dict) -> list[str]:
    fmt = m.get("shard_format", "bin")
    if fmt not in SHARD_FORMATS:
        return [f"{MANIFEST_FILE}: shard_format {fmt!r} is not one of {SHARD_FORMATS}"]
    suffix = f".{fmt}"
    return [f"{MANIFEST_FILE}: shard {s['file']!r} is not a {suffix} file (shard_format {fmt!r})"
            for s in m.get("shards") or [] if isinstance(s, dict) and isinstance(s.get("file"), str)
            and not s["file"].endswith(suffix)]


def _check_bestfit_fields(m: dict, shards: list) -> list[str]:
    if m.get("packing", "stream") not in ("stream", "bestfit"):
        return [f"{MANIFEST_FILE}: packing {m.get('packing')!r} is not 'stream' or 'bestfit'"]
    if not _bestfit(m):
        return []
    problems = [f"{MANIFEST_FILE}: field {k!r} missing or not a non-negative integer"
                for k in ("pad_id", "padding_tokens") if not _is_int(m.get(k))]
    named = [s for s in shards if isinstance(s, dict) and isinstance(s.get("file"), str)]
    problems += [f"{s['file']}: manifest field 'pad' missing or not a non-negative integer"
                 for s in named if not _is_int(s.get("pad"))]
    return problems


def _check_header(m: dict) -> list[str]:
    problems = []
    if m["eos_id"] >= m["vocab_size"]:
        problems.append(f"{MANIFEST_FILE}: eos_id {m['eos_id']} >= vocab_size {m['vocab_size']}")
    if m["vocab_size"] - 1 > np.iinfo(m["dtype"]).max:
        problems.append(f"{MANIFEST_FILE}: vocab_size {m['vocab_size']} does not fit dtype {m['dtype']}")
    if _bestfit(m):
        if m["pad_id"] == m["eos_id"]:
            problems.append(f"{MANIFEST_FILE}: pad_id == eos_id {m['eos_id']} (EOS used as padding)")
        if m["pad_id"] >= m["vocab_size"]:
            problems.append(f"{MANIFEST_FILE}: pad_id {m['pad_id']} >= vocab_size {m['vocab_size']}")
    return problems


# -- one shard ------------------------------------------------------------------------------


def _scan_shard(shard_dir: str, entry: dict, m: dict) -> _ShardScan:
    name, seq_len = entry["file"], m["seq_len"]
    dtype = shard_dtype(m["dtype"])
    scan = _ShardScan()
    path = storage.join(shard_dir, name)
    if not storage.isfile(path):
        scan.problems.append(f"{name}: missing")
        return scan
    size = storage.size(path)
    block_bytes = seq_len * dtype.itemsize
    if size % block_bytes:
        scan.problems.append(f"{name}: size {size} bytes is not a whole number of "
                             f"{seq_len}-token blocks ({block_bytes} bytes each)")
    n = size // dtype.itemsize
    if n != entry["tokens"]:
        scan.problems.append(f"{name}: holds {n} tokens, manifest says {entry['tokens']}")
    if entry["tokens"] != entry["sequences"] * seq_len:
        scan.problems.append(f"{name}: manifest says {entry['sequences']} sequences but "
                             f"{entry['tokens']} tokens (seq_len {seq_len})")

    sha = hashlib.sha256()
    _scan_tokens(_bin_chunks(path, n, dtype), m, scan, name, sha)
    _hash_trailing_bytes(path, n * dtype.itemsize, size, sha)
    _check_content(entry, m, scan, name, sha.hexdigest(), n,
                   lambda: _bin_blocks(path, n - n % seq_len, dtype, seq_len))
    scan.readable, scan.tokens = True, n
    return scan


def _check_content(entry: dict, m: dict, scan: _ShardScan, name: str, digest: str, n: int, blocks) -> None:
    """The checks both shard formats share, once their tokens were scanned: sha256, EOS count, best-fit blocks."""
    if digest != entry["sha256"]:
        scan.problems.append(f"{name}: sha256 mismatch (file {digest}, manifest {entry['sha256']})")
    if scan.eos != entry["eos"]:
        scan.problems.append(f"{name}: {scan.eos} EOS tokens in the file, manifest says {entry['eos']}")
    if _bestfit(m) and n:
        _scan_bestfit_blocks(blocks(), m, scan, name)
        if scan.pads != entry["pad"]:
            scan.problems.append(f"{name}: {scan.pads} pad tokens in the file, manifest says {entry['pad']}")


def _scan_parquet_shard(shard_dir: str, entry: dict, m: dict) -> _ShardScan:
    """A Format B shard (gpupipe.tokens.packing.parquet_schema): its schema, rows, file sha256, then the same token
    and block checks as a .bin shard, row group by row group."""
    name, seq_len = entry["file"], m["seq_len"]
    scan = _ShardScan()
    path = storage.join(shard_dir, name)
    if not storage.isfile(path):
        scan.problems.append(f"{name}: missing")
        return scan
    try:
        pf = _parquet_file(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... on a damaged file
        scan.problems.append(f"{name}: not a readable Parquet file ({exc}); sha256 {storage.sha256(path)}")
        return scan
    want = parquet_schema(m["dtype"], seq_len)
    if not pf.schema_arrow.remove_metadata().equals(want):
        scan.problems.append(f"{name}: schema {pf.schema_arrow.remove_metadata()} is not {want}")
        return scan
    n = pf.metadata.num_rows * seq_len
    if n != entry["tokens"]:
        scan.problems.append(f"{name}: holds {n} tokens, manifest says {entry['tokens']}")
    if entry["tokens"] != entry["sequences"] * seq_len:
        scan.problems.append(f"{name}: manifest says {entry['sequences']} sequences but "
                             f"{entry['tokens']} tokens (seq_len {seq_len})")
    try:
        _scan_tokens(_parquet_chunks(pf), m, scan, name)
    except Exception as exc:  # a damaged page: pyarrow raises OSError, ArrowInvalid, ...
        digest = storage.sha256(path)
        scan.problems.append(f"{name}: a row group is unreadable ({exc})"
                             + (f"; sha256 mismatch (file {digest}, manifest {entry['sha256']})"
                                if digest != entry["sha256"] else ""))
        return scan
    _check_content(entry, m, scan, name, storage.sha256(path), n,
                   lambda: (c.reshape(-1, seq_len) for c in _parquet_chunks(_parquet_file(path))))
    scan.readable, scan.tokens = True, n
    return scan


def _parquet_file(path: str):
    """pyarrow's reader of a local file by name; a URL through a streamed file (ranged reads)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(storage.open_input(path) if storage.is_url(path) else path)


def _parquet_chunks(pf):
    """The token ids of each row group, flat."""
    for i in range(pf.metadata.num_row_groups):
        col = pf.read_row_group(i, columns=["input_ids"]).column(0).combine_chunks()
        yield col.flatten().to_numpy(zero_copy_only=False)


def _bin_chunks(path: str, n: int, dtype: np.dtype):
    if n and storage.is_url(path):   # streamed: one pass of CHUNK_TOKENS-token reads
        with storage.open_input(path) as f:
            for start in range(0, n, CHUNK_TOKENS):
                yield np.frombuffer(f.read(min(CHUNK_TOKENS, n - start) * dtype.itemsize), dtype=dtype)
    elif n:
        mm = np.memmap(path, dtype=dtype, mode="r", shape=(n,))
        for start in range(0, n, CHUNK_TOKENS):
            yield mm[start:start + CHUNK_TOKENS]


def _bin_blocks(path: str, n: int, dtype: np.dtype, seq_len: int):
    if n and storage.is_url(path):   # streamed, whole blocks per read
        step = max(1, CHUNK_TOKENS // seq_len) * seq_len
        with storage.open_input(path) as f:
            for start in range(0, n, step):
                chunk = np.frombuffer(f.read(min(step, n - start) * dtype.itemsize), dtype=dtype)
                yield chunk.reshape(-1, seq_len)
    elif n:
        mm = np.memmap(path, dtype=dtype, mode="r", shape=(n // seq_len, seq_len))
        step = max(1, CHUNK_TOKENS // seq_len)
        for start in range(0, mm.shape[0], step):
            yield np.asarray(mm[start:start + step])


def _scan_bestfit_blocks(chunks, m: dict, scan: _ShardScan, name: str) -> None:
    """Per-block best-fit rules, on whole blocks read in chunks (2-D arrays); see the module docstring."""
    seq_len, eos, pad = m["seq_len"], m["eos_id"], m["pad_id"]
    bad: dict[str, list[int]] = {}  # rule → [count, first block]
    prev_last = None                # the token ending the previous block
    start = 0
    for blocks in chunks:
        if not len(blocks):
            continue
        is_pad = blocks == pad
        n_pad = is_pad.sum(axis=1)
        first_pad = np.where(n_pad > 0, is_pad.argmax(axis=1), seq_len)
        before = blocks[np.arange(len(blocks)), np.maximum(first_pad - 1, 0)]
        last = blocks[:, -1]
        inside_doc = (last != eos) & (last != pad)
        # the token before each block (EOS stands in before the first: no rule fires on it); an EOS
        # opening a block must follow a split document's piece, never padding
        prev = np.concatenate(([eos if prev_last is None else prev_last], last[:-1]))
        rules = {
            "pad not only at the block end": (n_pad > 0) & (n_pad != seq_len - first_pad),
            "all-pad block": n_pad == seq_len,
            "pad not right after an EOS": (n_pad > 0) & (first_pad > 0) & (before != eos),
            "block ends inside a document yet holds an EOS (a document cut that fits a block)":
                inside_doc & ((blocks == eos).sum(axis=1) > 0),
            "block starts with EOS after padding (an empty document)": (blocks[:, 0] == eos) & (prev == pad),
        }
        for rule, mask in rules.items():
            if mask.any():
                entry = bad.setdefault(rule, [0, start + int(np.flatnonzero(mask)[0])])
                entry[0] += int(mask.sum())
        scan.pads += int(n_pad.sum())
        prev_last = int(last[-1])
        start += len(blocks)
    if prev_last is None:
        return
    scan.last_is_eos = prev_last in (eos, pad)  # pads follow an EOS, so the content ends with one
    for rule, (count, first) in bad.items():
        scan.problems.append(f"{name}: {count} block(s) with {rule}, first block {first}")


def _scan_tokens(chunks, m: dict, scan: _ShardScan, name: str, sha=None) -> None:
    """One pass over a shard's tokens in 1-D chunks: EOS positions, adjacent EOS, ids >= vocab_size (and the
    sha256 of a .bin shard's data)."""
    eos, vocab = m["eos_id"], m["vocab_size"]
    prev_last_eos, first = False, None
    adjacent, first_adjacent = 0, None
    bad_ids, first_bad = 0, None
    start = 0
    for chunk in chunks:
        if not len(chunk):
            continue
        if sha is not None:
            sha.update(chunk)
        if first is None:
            first = bool(chunk[0] == eos)
        pos = np.flatnonzero(chunk == eos)  # EOS are sparse: work on their positions
        scan.eos += pos.size
        # adjacent EOS = consecutive positions, or an EOS at 0 right after the previous chunk's
        pairs = pos[1:][np.diff(pos) == 1]
        if prev_last_eos and pos.size and pos[0] == 0:
            pairs = np.concatenate(([0], pairs))
        if pairs.size:
            adjacent += pairs.size
            first_adjacent = first_adjacent if first_adjacent is not None else start + int(pairs[0])
        if int(chunk.max()) >= vocab:
            over = np.flatnonzero(chunk >= vocab)
            bad_ids += over.size
            first_bad = first_bad if first_bad is not None else start + int(over[0])
        prev_last_eos = bool(chunk[-1] == eos)
        start += len(chunk)
    if first is None:
        return
    scan.first_is_eos, scan.last_is_eos = first, prev_last_eos
    if adjacent:
        scan.problems.append(f"{name}: {adjacent} adjacent EOS pair(s), first EOS-after-EOS at token "
                             f"{first_adjacent} (EOS used as padding or an empty document)")
    if bad_ids:
        scan.problems.append(f"{name}: {bad_ids} token id(s) >= vocab_size {vocab}, first at token {first_bad}")


def _hash_trailing_bytes(path: str, start: int, size: int, sha) -> None:
    """A file whose size is not a multiple of the item size still hashes all its bytes."""
    if size > start:
        sha.update(storage.read_bytes(path, start, size))


# -- the stream as a whole ------------------------------------------------------------------


def _check_shard_boundaries(shards: list[dict], scans: list[_ShardScan]) -> list[str]:
    """An EOS ending one shard followed by an EOS starting the next (empty shards skipped)."""
    problems, prev = [], None
    for entry, scan in zip(shards, scans):
        if not scan.readable or scan.tokens == 0:
            prev = None if not scan.readable else prev
            continue
        if prev is not None and prev[1].last_is_eos and scan.first_is_eos:
            problems.append(f"{entry['file']}: starts with EOS right after the EOS ending {prev[0]['file']}")
        prev = (entry, scan)
    return problems


def _check_stream(m: dict, scans: list[_ShardScan]) -> list[str]:
    problems = []
    seq_len, shards = m["seq_len"], m["shards"]
    dropped, dropped_eos = m["dropped_remainder_tokens"], m["dropped_remainder_eos"]
    listed_tokens = sum(s["tokens"] for s in shards)
    listed_sequences = sum(s["sequences"] for s in shards)

    if m["tokens"] != listed_tokens:
        problems.append(f"{MANIFEST_FILE}: tokens {m['tokens']} != sum over shards {listed_tokens}")
    if m["sequences"] != listed_sequences:
        problems.append(f"{MANIFEST_FILE}: sequences {m['sequences']} != sum over shards {listed_sequences}")
    if _bestfit(m):
        problems += _check_bestfit_totals(m, scans, listed_tokens)
    elif m["stream_tokens"] != listed_tokens + dropped:
        problems.append(f"{MANIFEST_FILE}: stream_tokens {m['stream_tokens']} != tokens in shards "
                        f"{listed_tokens} + dropped_remainder_tokens {dropped}")
    if "phases" in m:
        problems += _check_phases(m)
    elif not _bestfit(m) and dropped != m["stream_tokens"] % seq_len:
        problems.append(f"{MANIFEST_FILE}: dropped_remainder_tokens {dropped} != stream_tokens "
                        f"{m['stream_tokens']} mod seq_len {seq_len}")
    if dropped_eos > dropped:
        problems.append(f"{MANIFEST_FILE}: dropped_remainder_eos {dropped_eos} > dropped_remainder_tokens {dropped}")
    per_source = sum(v for v in m["tokens_per_source"].values() if _is_int(v))
    if per_source != m["stream_tokens"]:
        problems.append(f"{MANIFEST_FILE}: tokens_per_source sums to {per_source}, "
                        f"stream_tokens is {m['stream_tokens']}")

    if not all(s.readable for s in scans):
        return problems  # the EOS accounting below needs every shard's content
    counted = sum(s.eos for s in scans)
    if counted + dropped_eos != m["documents_packed"]:
        problems.append(f"{MANIFEST_FILE}: documents_packed {m['documents_packed']} != EOS in shards "
                        f"{counted} + dropped_remainder_eos {dropped_eos}")
    problems += _check_stream_ends(m, scans)
    return problems


def _check_phases(m: dict) -> list[str]:
    """A phased stream (a mixture's curriculum): the phases list the shards in order, each shard in one phase; each
    phase drops its own partial block (stream_tokens mod seq_len); their counts add up to the run's."""
    phases, seq_len = m["phases"], m["seq_len"]
    if not isinstance(phases, list) or not all(isinstance(p, dict) for p in phases):
        return [f"{MANIFEST_FILE}: phases is not a list of objects"]
    problems = []
    listed = [f for p in phases for f in p.get("shards", [])]
    if listed != [s["file"] for s in m["shards"]]:
        problems.append(f"{MANIFEST_FILE}: the phases' shards {listed} are not the shards in order")
    by_file = {s["file"]: s for s in m["shards"]}
    for p in phases:
        name = p.get("name")
        ints = ("tokens", "stream_tokens", "documents", "dropped_remainder_tokens", "dropped_remainder_eos")
        bad = [k for k in ints if not _is_int(p.get(k))]
        if bad:
            problems.append(f"{MANIFEST_FILE}: phase {name!r}: field(s) {bad} missing or not non-negative integers")
            continue
        in_shards = sum(by_file[f]["tokens"] for f in p["shards"] if f in by_file)
        if p["tokens"] != in_shards:
            problems.append(f"{MANIFEST_FILE}: phase {name!r}: tokens {p['tokens']} != its shards' {in_shards}")
        if p["stream_tokens"] != p["tokens"] + p["dropped_remainder_tokens"]:
            problems.append(f"{MANIFEST_FILE}: phase {name!r}: stream_tokens {p['stream_tokens']} != tokens "
                            f"{p['tokens']} + dropped {p['dropped_remainder_tokens']}")
        if p["dropped_remainder_tokens"] != p["stream_tokens"] % seq_len:
            problems.append(f"{MANIFEST_FILE}: phase {name!r}: dropped_remainder_tokens "
                            f"{p['dropped_remainder_tokens']} != stream_tokens mod seq_len")
        groups = p.get("tokens_by_group")
        if isinstance(groups, dict) and sum(groups.values()) != p["stream_tokens"]:
            problems.append(f"{MANIFEST_FILE}: phase {name!r}: tokens_by_group sums to {sum(groups.values())}, "
                            f"stream_tokens is {p['stream_tokens']}")
        cards = [by_file[f].get("card") for f in p["shards"] if f in by_file]
        if isinstance(groups, dict) and isinstance(p.get("dropped_by_group"), dict) and all(cards):
            counted = Counter(p["dropped_by_group"])
            for c in cards:
                counted.update(c.get("tokens_by_group") or {})
            if dict(counted) != {g: n for g, n in groups.items() if n}:
                problems.append(f"{MANIFEST_FILE}: phase {name!r}: tokens_by_group {groups} != its shards' cards "
                                f"+ dropped_by_group {dict(sorted(counted.items()))}")
        wrong = [f for f in p["shards"] if by_file.get(f, {}).get("card", {}).get("phase", name) != name]
        if wrong:
            problems.append(f"{MANIFEST_FILE}: phase {name!r}: shard card(s) {wrong} name another phase")
    for k in ("stream_tokens", "documents_packed", "dropped_remainder_tokens", "dropped_remainder_eos"):
        key = "documents" if k == "documents_packed" else k
        total = sum(p.get(key, 0) for p in phases if _is_int(p.get(key)))
        if total != m[k]:
            problems.append(f"{MANIFEST_FILE}: {k} {m[k]} != the sum over phases {total}")
    return problems


def _check_cards(m: dict) -> list[str]:
    """Per-shard data cards: the run's tokenizer, version and config; tokens per group adding up to the shard's
    tokens (stream packing: every token, EOS included, belongs to one document); and to the run's tokens_per_group
    with the dropped remainders."""
    problems, cards = [], [(s["file"], s["card"]) for s in m["shards"] if isinstance(s.get("card"), dict)]
    if cards:   # the run's part of every card (manifest.shard_card)
        # config_hash may be "": a station run outside `gpupipe run` (a library call, the tests) has no run config
        problems += [f"{MANIFEST_FILE}: data cards need the run's {k}, missing" for k in CARD_RUN_FIELDS
                     if not isinstance(m.get(k), str) or not (m[k] or k == "config_hash")]
    for name, card in cards:
        groups = card.get("tokens_by_group")
        if not isinstance(groups, dict) or not all(_is_int(v) for v in groups.values()):
            problems.append(f"{name}: card tokens_by_group missing or not counts")
            continue
        if not _bestfit(m) and sum(groups.values()) != next(s["tokens"] for s in m["shards"] if s["file"] == name):
            problems.append(f"{name}: card tokens_by_group sums to {sum(groups.values())}, not the shard's tokens")
        for col, q in (card.get("quality") or {}).items():
            if sum(q.get("histogram", [])) != q.get("scored_tokens") or len(q.get("edges", [])) != \
                    len(q.get("histogram", [])) + 1:
                problems.append(f"{name}: card quality {col!r}: histogram does not add up to its scored tokens")
    totals = m.get("tokens_per_group")
    if cards and isinstance(totals, dict) and len(cards) == len(m["shards"]) and not _bestfit(m):
        in_shards = sum(sum(c["tokens_by_group"].values()) for _, c in cards if isinstance(c.get("tokens_by_group"), dict))
        if sum(totals.values()) != in_shards + m["dropped_remainder_tokens"]:
            problems.append(f"{MANIFEST_FILE}: tokens_per_group sums to {sum(totals.values())}, not the cards' "
                            f"{in_shards} + dropped {m['dropped_remainder_tokens']}")
    return problems


def _check_bestfit_totals(m: dict, scans: list[_ShardScan], listed_tokens: int) -> list[str]:
    """Best-fit drops nothing: shard tokens = documents with their EOS + padding."""
    problems = []
    if m["dropped_remainder_tokens"] or m["dropped_remainder_eos"]:
        problems.append(f"{MANIFEST_FILE}: best-fit packing drops nothing, yet dropped_remainder_* is not 0")
    if listed_tokens != m["stream_tokens"] + m["padding_tokens"]:
        problems.append(f"{MANIFEST_FILE}: tokens in shards {listed_tokens} != stream_tokens {m['stream_tokens']} "
                        f"+ padding_tokens {m['padding_tokens']}")
    listed_pad = sum(s["pad"] for s in m["shards"])
    if listed_pad != m["padding_tokens"]:
        problems.append(f"{MANIFEST_FILE}: padding_tokens {m['padding_tokens']} != sum over shards {listed_pad}")
    return problems


def _check_stream_ends(m: dict, scans: list[_ShardScan]) -> list[str]:
    """The stream starts with a document token and ends with an EOS (maybe in the remainder)."""
    problems = []
    nonempty = [(entry, s) for entry, s in zip(m["shards"], scans) if s.tokens]
    if nonempty and nonempty[0][1].first_is_eos:
        problems.append(f"{nonempty[0][0]['file']}: stream starts with EOS (an empty first document)")
    if m["documents_packed"] == 0:
        return problems
    if m["dropped_remainder_tokens"]:
        if m["dropped_remainder_eos"] == 0:
            problems.append(f"{MANIFEST_FILE}: dropped remainder holds no EOS, yet the stream must end with one")
    elif nonempty and not nonempty[-1][1].last_is_eos:
        problems.append(f"{nonempty[-1][0]['file']}: stream does not end with EOS")
    return problems


def _check_unlisted_files(shard_dir: str, shards: list[dict]) -> list[str]:
    listed = {s["file"] for s in shards}
    return [f"{name}: shard file on disk but not in {MANIFEST_FILE}"
            for name in storage.listdir(shard_dir)
            if (SHARD_RE.match(name) or PARQUET_SHARD_RE.match(name)) and name not in listed]


def _check_tokenizer(shard_dir: str, m: dict) -> list[str]:
    """Check the tokenizer's sha256 when its file is reachable (relative to the shard dir or absolute)."""
    name = m.get("tokenizer_file")
    if not isinstance(name, str) or not name:
        return []
    # an absolute name stays absolute
    path = os.path.join(shard_dir, name) if not storage.is_url(shard_dir) else storage.join(shard_dir, name)
    if not storage.isfile(path):
        return []  # shards may travel without their tokenizer; nothing to compare
    digest = hashlib.sha256(storage.read_bytes(path)).hexdigest()  # tokenizer files are small
    if digest != m.get("tokenizer_sha256"):
        return [f"{name}: tokenizer sha256 {digest} != manifest tokenizer_sha256 {m.get('tokenizer_sha256')}"]
    return []


def _check_megatron(shard_dir: str, m: dict) -> list[str]:
    """The Megatron .bin/.idx pair the manifest lists (pack `megatron: true`), if any."""
    from .megatron import verify_megatron

    entry = m.get("megatron")
    if entry is None:
        return []
    prefix = entry.get("prefix") if isinstance(entry, dict) else None
    if not isinstance(prefix, str) or not prefix or prefix.startswith("/") or ".." in prefix.split("/"):
        return [f"{MANIFEST_FILE}: megatron entry has no relative prefix: {prefix!r}"]
    problems = verify_megatron(storage.join(shard_dir, *prefix.split("/")), m["eos_id"], entry)
    want = {"documents": m["documents_packed"], "tokens": m["stream_tokens"]}
    problems += [f"{MANIFEST_FILE}: megatron {k} {entry.get(k)!r} != the shards' {v} "
                 f"({'documents_packed' if k == 'documents' else 'stream_tokens'})"
                 for k, v in want.items() if entry.get(k) != v]
    return problems
