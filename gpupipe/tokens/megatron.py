"""Megatron-LM indexed dataset output: `PREFIX.bin` + `PREFIX.idx` in the MMIDIDX v1 layout.

Megatron-LM (megatron.core.datasets.indexed_dataset.IndexedDataset) trains on this pair as is:

    PREFIX.bin  every sequence's token ids back to back (raw little-endian, dtype below)
    PREFIX.idx  b"MMIDIDX\\x00\\x00"            9-byte magic
                version 1                    <Q
                dtype code                   <B   (Megatron's DType enum, _DTYPE_CODES)
                sequence count N             <Q
                document count N + 1         <Q   (length of the document index array)
                sequence lengths             int32[N]   tokens per sequence
                sequence pointers            int64[N]   byte offset of each sequence in .bin
                document indices             int64[N+1] [0, 1, ..., N]: sequence range of each document

We write one sequence per document (its tokens + one EOS), so the document indices are 0..N.
Streaming: the .bin is written as documents arrive and only the lengths stay in RAM (4 bytes a
document); the pointers and document indices are derived from them when the .idx is written.
Both files go to a temp name first and are renamed at the end, .bin before .idx, so a crash
never leaves an index describing a data file that is not whole.
"""
from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable

import numpy as np

from gpupipe.io import storage
from gpupipe.io.parts import atomic_output

from .packing import check_document, check_token_ids

INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
# megatron.core.datasets.indexed_dataset.DType: the numeric code stored in the .idx header
_DTYPE_CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7,
                "uint16": 8}
_CODE_DTYPES = {code: name for name, code in _DTYPE_CODES.items()}
_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequence count, document count
_LENGTHS_CHUNK = 1 << 20           # lengths are buffered in int32 chunks of this many documents


def megatron_dtype(dtype) -> np.dtype:
    """The .bin dtype for a shard dtype. Megatron has no uint32: vocabularies past uint16 use int32,
    as Megatron's own DType.optimal_dtype does."""
    dt = np.dtype(dtype)
    if dt.name == "uint32":
        dt = np.dtype(np.int32)
    if dt.name not in _DTYPE_CODES or dt.kind not in "iu":
        raise ValueError(f"Megatron has no integer token dtype for {dt} (supported: uint16, int32, uint32→int32)")
    return dt.newbyteorder("<")


def bin_path(prefix) -> str:
    return f"{os.fspath(prefix)}.bin"


def idx_path(prefix) -> str:
    return f"{os.fspath(prefix)}.idx"


class MegatronWriter:
    """Write documents one at a time; `finish()` writes the index and returns a summary.

    with MegatronWriter(prefix, np.uint16, eos_id) as w:
        for tokens in docs:
            w.add(tokens)           # tokens + EOS become one sequence / one document
    """

    def __init__(self, prefix, dtype, eos_id: int):
        self.prefix = os.fspath(prefix)
        self.dtype = megatron_dtype(dtype)
        if not 0 <= eos_id <= np.iinfo(self.dtype).max:
            raise ValueError(f"eos_id {eos_id} does not fit {self.dtype.name}")
        self.eos_id = int(eos_id)
        parent = os.path.dirname(self.prefix)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._bin_tmp = f"{bin_path(self.prefix)}.tmp.{os.getpid()}"
        self._bin = open(self._bin_tmp, "wb")
        self._sha = hashlib.sha256()
        self._chunks: list[np.ndarray] = []                  # full int32 length chunks
        self._chunk = np.empty(_LENGTHS_CHUNK, dtype=np.int32)
        self._fill = 0
        self._tokens = 0
        self._summary: dict | None = None

    def __enter__(self) -> "MegatronWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish()
        else:
            self._abort()

    def add(self, tokens) -> None:
        """One document: its tokens (>= 1, no EOS inside) followed by one EOS."""
        self.add_many([tokens])

    def add_many(self, token_arrays: Iterable) -> None:
        """Documents in order. The checks and the write run once per batch, not per document: a corpus has
        millions of small documents, and a batch with a bad document writes nothing."""
        if self._summary is not None:
            raise RuntimeError("MegatronWriter.finish() was already called")
        docs = [np.asarray(t) for t in token_arrays]
        if not docs:
            return
        lengths = np.fromiter((d.size for d in docs), dtype=np.int64, count=len(docs))
        bad = next((d for d in docs if d.ndim != 1 or d.size == 0), None)
        if bad is not None:
            check_document(bad, self.dtype)  # raises, naming the shape
        if int(lengths.max()) + 1 > np.iinfo(np.int32).max:
            raise ValueError(f"document of {int(lengths.max())} tokens exceeds Megatron's int32 sequence length")
        joined = np.concatenate(docs)
        check_token_ids(joined, self.dtype)
        if np.any(joined == self.eos_id):
            raise ValueError(f"document contains the EOS id {self.eos_id}")
        # one write per batch: doc EOS doc EOS ..., the EOS inserted in one vectorized call
        joined = np.insert(joined.astype(self.dtype, copy=False), np.cumsum(lengths), self.eos_id)
        data = memoryview(joined).cast("B")
        self._bin.write(data)
        self._sha.update(data)
        self._push_lengths(lengths + 1)

    def _push_lengths(self, lengths: np.ndarray) -> None:
        """Sequence lengths into the int32 chunks, a slice at a time."""
        pos = 0
        while pos < lengths.size:
            take = min(self._chunk.size - self._fill, lengths.size - pos)
            self._chunk[self._fill:self._fill + take] = lengths[pos:pos + take]
            self._fill += take
            pos += take
            if self._fill == self._chunk.size:
                self._chunks.append(self._chunk)
                self._chunk = np.empty(_LENGTHS_CHUNK, dtype=np.int32)
                self._fill = 0
        self._tokens += int(lengths.sum())

    def finish(self) -> dict:
        """Close the .bin, write the .idx; return {bin, idx, documents, tokens, dtype, dtype_code, *_sha256}."""
        if self._summary is not None:
            return self._summary
        self._bin.close()
        lengths = np.concatenate(self._chunks + [self._chunk[:self._fill]])
        self._chunks, self._chunk = [], np.empty(0, dtype=np.int32)
        os.replace(self._bin_tmp, bin_path(self.prefix))
        idx_sha = _write_index(idx_path(self.prefix), lengths, self.dtype)
        self._summary = {
            "bin": os.path.basename(bin_path(self.prefix)),
            "idx": os.path.basename(idx_path(self.prefix)),
            "documents": int(lengths.size),
            "tokens": int(self._tokens),
            "dtype": self.dtype.name,
            "dtype_code": _DTYPE_CODES[self.dtype.name],
            "bin_sha256": self._sha.hexdigest(),
            "idx_sha256": idx_sha,
        }
        return self._summary

    def _abort(self) -> None:
        self._bin.close()
        if os.path.exists(self._bin_tmp):
            os.remove(self._bin_tmp)


def _write_index(path: str, lengths: np.ndarray, dtype: np.dtype) -> str:
    """Header, lengths, then pointers and document indices derived chunk by chunk (bounded memory)."""
    n = int(lengths.size)
    sha = hashlib.sha256()
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        def put(data: bytes) -> None:
            f.write(data)
            sha.update(data)

        put(_HEADER.pack(INDEX_MAGIC, INDEX_VERSION, _DTYPE_CODES[dtype.name], n, n + 1))
        put(lengths.astype("<i4", copy=False).tobytes())
        offset = 0  # tokens before the chunk
        for start in range(0, n, _LENGTHS_CHUNK):
            chunk = lengths[start:start + _LENGTHS_CHUNK].astype(np.int64)
            ends = np.cumsum(chunk) + offset
            put(((ends - chunk) * dtype.itemsize).astype("<i8").tobytes())
            offset = int(ends[-1])
        for start in range(0, n + 1, _LENGTHS_CHUNK):
            put(np.arange(start, min(n + 1, start + _LENGTHS_CHUNK), dtype="<i8").tobytes())
    return sha.hexdigest()


def write_megatron(prefix, token_arrays_iter: Iterable, dtype, eos_id: int) -> dict:
    """Write `prefix.bin` + `prefix.idx` from an iterable of per-document token arrays (EOS appended)."""
    with MegatronWriter(prefix, dtype, eos_id) as w:
        for tokens in token_arrays_iter:
            w.add(tokens)
    return w.finish()


# -- our own reader, for verification ------------------------------------------------------

_SCAN_BYTES = 1 << 24  # bytes of .bin per read while verifying (a multiple of every dtype's size)


class MegatronIndex:
    """A parsed .idx: dtype, sequence lengths, pointers, document indices (memory-mapped; an index at a URL is
    read into memory: 20 bytes a document)."""

    def __init__(self, prefix):
        path = idx_path(prefix)
        buf = storage.read_bytes(path) if storage.is_url(path) else None
        if buf is None:
            with open(path, "rb") as f:
                head = f.read(_HEADER.size)
        else:
            head = buf[:_HEADER.size]
        if len(head) < _HEADER.size:
            raise ValueError(f"{path}: too short for an MMIDIDX header")
        magic, version, code, n_seq, n_doc = _HEADER.unpack(head)
        if magic != INDEX_MAGIC:
            raise ValueError(f"{path}: bad magic {magic!r}, expected {INDEX_MAGIC!r}")
        if version != INDEX_VERSION:
            raise ValueError(f"{path}: unsupported version {version}")
        if code not in _CODE_DTYPES:
            raise ValueError(f"{path}: unknown dtype code {code}")
        self.dtype = np.dtype(_CODE_DTYPES[code]).newbyteorder("<")
        expected = _HEADER.size + n_seq * (4 + 8) + n_doc * 8
        size = os.path.getsize(path) if buf is None else len(buf)
        if size < expected:
            raise ValueError(f"{path}: {size} bytes, header promises {expected}")

        def array(dtype: str, off: int, n: int) -> np.ndarray:
            if not n:
                return np.zeros(0, dtype)
            return np.memmap(path, dtype, "r", off, (n,)) if buf is None else np.frombuffer(buf, dtype, n, off)

        off = _HEADER.size
        self.sequence_lengths = array("<i4", off, n_seq)
        off += 4 * n_seq
        self.sequence_pointers = array("<i8", off, n_seq)
        off += 8 * n_seq
        self.document_indices = array("<i8", off, n_doc)


def _bin_tokens(prefix, dtype: np.dtype) -> np.ndarray:
    path = bin_path(prefix)
    size = os.path.getsize(path)
    if size % dtype.itemsize:
        raise ValueError(f"{path}: {size} bytes is not a whole number of {dtype.name} tokens")
    return np.memmap(path, dtype, "r") if size else np.zeros(0, dtype)


def read_megatron(prefix) -> tuple[MegatronIndex, list[np.ndarray]]:
    """(index, one token array per sequence): views into a memmap of the .bin, never a copy."""
    index = MegatronIndex(prefix)
    data = _bin_tokens(prefix, index.dtype)
    seqs = []
    for ptr, n in zip(index.sequence_pointers.tolist(), index.sequence_lengths.tolist()):
        start = ptr // index.dtype.itemsize
        if ptr % index.dtype.itemsize or start + n > data.size:
            raise ValueError(f"{bin_path(prefix)}: sequence at byte {ptr} ({n} tokens) lies outside the data file")
        seqs.append(data[start:start + n])
    return index, seqs


def _scan_bin(path: str, dtype: np.dtype, ends: np.ndarray, eos_id: int | None) -> tuple[int, int, int, int, str]:
    """One streamed pass over a .bin (local or a URL): (tokens, EOS count, sequences whose last token is not EOS,
    the first such sequence or -1, sha256 of the bytes). `ends`: each sequence's last token position, ascending."""
    sha = hashlib.sha256()
    tokens = eos_total = bad = 0
    first_bad = -1
    with storage.open_input(path) as f:
        for block in iter(lambda: f.read(_SCAN_BYTES), b""):
            sha.update(block)
            chunk = np.frombuffer(block, dtype, len(block) // dtype.itemsize)
            if eos_id is not None and chunk.size:
                eos_total += int(np.count_nonzero(chunk == eos_id))
                lo, hi = np.searchsorted(ends, [tokens, tokens + chunk.size])
                miss = np.flatnonzero(chunk[ends[lo:hi] - tokens] != eos_id)
                if miss.size and first_bad < 0:
                    first_bad = int(lo + miss[0])
                bad += int(miss.size)
            tokens += chunk.size
    return tokens, eos_total, bad, first_bad, sha.hexdigest()


def verify_megatron(prefix, eos_id: int | None = None, expected: dict | None = None) -> list[str]:
    """Problems with a .bin/.idx pair (a local prefix or a URL): pointers contiguous, document indices 0..N, the
    .bin the size the lengths say, and (eos_id given) exactly one EOS per sequence, at its end. `expected`, a
    manifest's `megatron` entry, adds its sha256 of each file, documents, tokens and dtype. One streamed pass over
    the .bin, vectorized; each problem names its file; an empty list means sound."""
    binp, idxp = bin_path(prefix), idx_path(prefix)
    missing = [f"{p}: missing" for p in (binp, idxp) if not storage.isfile(p)]
    if missing:
        return missing
    problems = []
    if expected is not None:   # the bytes first: a flipped byte may leave every invariant intact
        digest = storage.sha256(idxp)
        if digest != expected.get("idx_sha256"):
            problems.append(f"{idxp}: sha256 mismatch (file {digest}, manifest {expected.get('idx_sha256')})")
    try:
        index = MegatronIndex(prefix)
    except (OSError, ValueError) as exc:
        return problems + [str(exc)]
    lengths = index.sequence_lengths.astype(np.int64)
    ends = np.cumsum(lengths) - 1
    tokens, eos_total, bad, first_bad, digest = _scan_bin(
        binp, index.dtype, ends, eos_id if lengths.size and int(lengths.min()) >= 1 else None)
    if expected is not None:
        if digest != expected.get("bin_sha256"):
            problems.append(f"{binp}: sha256 mismatch (file {digest}, manifest {expected.get('bin_sha256')})")
        got = {"documents": int(lengths.size), "tokens": tokens, "dtype": index.dtype.name}
        problems += [f"{idxp}: {k} {v!r}, manifest says {expected.get(k)!r}" for k, v in got.items()
                     if v != expected.get(k)]
    shape = []   # the index and the data disagree: the per-sequence EOS check below would be meaningless
    size = storage.size(binp)
    if size % index.dtype.itemsize:
        shape.append(f"{binp}: {size} bytes is not a whole number of {index.dtype.name} tokens")
    if not np.array_equal(index.sequence_pointers, (ends + 1 - lengths) * index.dtype.itemsize):
        shape.append(f"{idxp}: sequence pointers are not the running sum of the lengths")
    if int(lengths.sum()) != tokens:
        shape.append(f"{binp}: holds {tokens} tokens, the sequence lengths in {idxp} sum to {int(lengths.sum())}")
    docs = index.document_indices
    if docs.size == 0 or docs[0] != 0 or docs[-1] != lengths.size or np.any(np.diff(docs) < 0):
        shape.append(f"{idxp}: document indices must rise from 0 to the sequence count")
    problems += shape
    if eos_id is not None and not shape:
        if np.any(lengths < 1):
            problems.append(f"{idxp}: empty sequence(s)")
        elif bad or eos_total != lengths.size:
            problems.append(f"{binp}: {lengths.size} sequences but {eos_total} EOS, {bad} sequence(s) not ending "
                            f"with EOS (first #{first_bad if bad else None})")
    return problems
