"""fastText supervised prediction without the fastText binding: a reader of its model files and a numba kernel.

fastText's Python binding holds the GIL while it predicts, so language ID ran on one core. This module reads the
binary model (`.bin`, and quantized `.ftz`) and predicts the top label of every document of Arrow string buffers
(``data`` uint8, ``offsets`` int32/int64) in one numba pass, parallel over documents, without the GIL.

It is a transcription of fastText's C++ (github.com/facebookresearch/fastText, src/: fasttext.cc, args.cc,
dictionary.cc, densematrix.cc, quantmatrix.cc, productquantizer.cc, loss.cc, model.cc), step by step and in the
same float32 / float64 arithmetic, so that labels and probabilities are bit-identical to
``fasttext.load_model(path).predict(texts, k=1)`` (tests/test_fasttext_kernel.py checks it on lid.176.ftz):

- Tokens are split on fastText's whitespace bytes (space, \\t \\n \\v \\f \\r, NUL); the line ends with the token
  ``</s>``, and so does any literal ``</s>`` token (fastText stops reading there).
- A token's id: FNV-1a over its bytes, each byte XOR-ed in as a *signed* char (the quirk of the models fastText
  released, kept by its hash function on purpose), found in an open-addressing table of ceil(size / 0.7) slots.
  Tokens starting with ``__label__`` that are not in the vocabulary are skipped.
- Input rows of a word: its own id when in the vocabulary, then (unless it is ``</s>``) the character n-grams
  of ``<word>`` with minn..maxn code points (counted as fastText does, as bytes that are not UTF-8 continuation
  bytes; no 1-gram at either end), hashed modulo ``bucket``; then word n-grams when wordNgrams > 1. Pruned
  (quantized) models map n-gram buckets through ``pruneidx`` and drop those not kept.
- hidden = the mean of those rows (a quantized row is its product-quantizer centroids, times its norm centroid
  with qnorm), summed in order in float32 and multiplied by float32(1 / count), as fastText does.
- Losses: hierarchical softmax (lid.176's: the Huffman tree of label counts, searched depth first with
  fastText's pruning; ties go to the leaf reached last, as in its heap), softmax, one-vs-all and negative
  sampling (sigmoid lookup table). Scores are log(p + 1e-5) in double rounded to float, and the probability
  returned is expf of that score, as fastText's predict returns (so it can exceed 1 by up to 1e-5).

Only top-1 prediction (k = 1) is implemented, with fastText's threshold (default 0). Unsupervised models
(skipgram, cbow) have no labels and are refused.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass

import numba
import numpy as np
from numba import prange

from ._jit import njit
from .minhash import _chunk_bounds

MAGIC = 793712314              # FASTTEXT_FILEFORMAT_MAGIC_INT32
VERSION = 12                   # FASTTEXT_VERSION: newest file format fastText writes
LABEL_PREFIX = b"__label__"    # Args::label: not stored in model files, always the default
_LABEL = np.frombuffer(LABEL_PREFIX, np.uint8).copy()
MODELS = {1: "cbow", 2: "skipgram", 3: "supervised"}
LOSSES = {1: "hs", 2: "ns", 3: "softmax", 4: "ova"}
_KSUB = 256                    # ProductQuantizer: 2^8 centroids per sub-quantizer
_DEQUANTIZE_MAX = 64 << 20     # quantized input matrices up to this many values are expanded at load (float32)

_FNV_OFFSET = np.uint64(2166136261)
_FNV_PRIME = np.uint64(16777619)
_MASK32 = np.uint64(0xFFFFFFFF)
_SIGN_EXT = np.uint64(0xFFFFFF00)
_SIGN_EXT64 = np.uint64(0xFFFFFFFF00000000)
_NGRAM_MUL = np.uint64(116049371)


@dataclass(frozen=True)
class FastTextArgs:
    """The Args a model file stores (args.cc Args::save), with fastText's names."""
    dim: int
    ws: int
    epoch: int
    minCount: int
    neg: int
    wordNgrams: int
    loss: str
    model: str
    bucket: int
    minn: int
    maxn: int
    lrUpdateRate: int
    t: float


class _Reader:
    def __init__(self, raw: bytes, path: str):
        self.raw, self.pos, self.path = raw, 0, path

    def take(self, fmt: str):
        try:
            values = struct.unpack_from("<" + fmt, self.raw, self.pos)
        except struct.error:
            raise ValueError(f"{self.path}: truncated fastText model") from None
        self.pos += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def array(self, dtype, count: int) -> np.ndarray:
        nbytes = np.dtype(dtype).itemsize * count
        if count < 0 or self.pos + nbytes > len(self.raw):
            raise ValueError(f"{self.path}: truncated fastText model")
        a = np.frombuffer(self.raw, dtype=dtype, count=count, offset=self.pos)
        self.pos += nbytes
        return a


def _read_matrix(r: _Reader, quantized: bool) -> tuple:
    """A DenseMatrix or QuantMatrix as the kernel's tuple (dense, codes, centroids, norm codes, norm centroids,
    meta = [quantized, qnorm, nsubq, dsub, lastdsub, rows, cols])."""
    none_u8, none_f32 = np.zeros(1, np.uint8), np.zeros(1, np.float32)
    if not quantized:
        m, n = r.take("qq")
        dense = r.array(np.float32, m * n).reshape(m, n)
        return dense, none_u8, none_f32, none_u8, none_f32, np.array([0, 0, 0, 0, 0, m, n], np.int64)
    qnorm, m, n, codesize = r.take("?qqi")
    codes = r.array(np.uint8, codesize)
    dim, nsubq, dsub, lastdsub = r.take("iiii")
    centroids = r.array(np.float32, dim * _KSUB)
    if dim != n or codesize != m * nsubq or nsubq < 1 or (nsubq - 1) * dsub + lastdsub != dim or \
            not 0 < lastdsub <= dsub:
        raise ValueError(f"{r.path}: inconsistent quantized matrix ({m}x{n}, {codesize} codes, pq dim {dim}, "
                         f"{nsubq} sub-quantizers of {dsub}, the last of {lastdsub})")
    ncodes, ncent = none_u8, none_f32
    if qnorm:
        ncodes = r.array(np.uint8, m)
        ndim = r.take("iiii")[0]
        if ndim != 1:
            raise ValueError(f"{r.path}: a norm quantizer of dimension {ndim}")
        ncent = r.array(np.float32, _KSUB)
    return (np.zeros((0, 0), np.float32), codes, centroids, ncodes, ncent,
            np.array([1, int(qnorm), nsubq, dsub, lastdsub, m, n], np.int64))


def _dequantize(mat: tuple) -> tuple:
    """A quantized input matrix as the dense one it stands for: row r = norm_r * centroids, the float32 products
    that QuantMatrix::addRowToVector adds, so the sums stay bit-identical and each row is one contiguous read."""
    _, codes, cent, ncodes, ncent, meta = mat
    rows, cols = int(meta[5]), int(meta[6])
    nsubq, dsub, lastdsub = int(meta[2]), int(meta[3]), int(meta[4])
    codes = codes.reshape(rows, nsubq).astype(np.int64)
    dense = np.empty((rows, cols), np.float32)
    for m in range(nsubq):
        d = lastdsub if m == nsubq - 1 else dsub
        start = m * _KSUB * dsub  # get_centroids(m, code): start + code * d for every m (d = dsub but the last)
        table = cent[start:start + _KSUB * d].reshape(_KSUB, d)
        dense[:, m * dsub:m * dsub + d] = table[codes[:, m]]
    if meta[1]:
        dense *= ncent[ncodes.astype(np.int64)][:, None]  # float32 * float32, as alpha * c[n]
    return dense, np.zeros(1, np.uint8), np.zeros(1, np.float32), np.zeros(1, np.uint8), np.zeros(1, np.float32), \
        np.array([0, 0, 0, 0, 0, rows, cols], np.int64)


def _hs_tree(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Children of every node of HierarchicalSoftmaxLoss::buildTree's Huffman tree (leaves: labels 0..osz-1,
    root: 2*osz-2; -1 for none)."""
    osz = len(counts)
    n = max(2 * osz - 1, 1)
    left, right = np.full(n, -1, np.int32), np.full(n, -1, np.int32)
    count = np.full(n, 10**15, np.int64)
    count[:osz] = counts
    leaf, node = osz - 1, osz
    for i in range(osz, 2 * osz - 1):
        mini = [0, 0]
        for j in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                mini[j], leaf = leaf, leaf - 1
            else:
                mini[j], node = node, node + 1
        left[i], right[i] = mini
        count[i] = count[mini[0]] + count[mini[1]]
    return left, right


def _read_head(path: str) -> tuple[_Reader, int, FastTextArgs, dict]:
    """The file read in, its version, Args and Dictionary (FastText::loadModel up to the input matrix)."""
    raw = bytearray(os.path.getsize(path))  # writable, so that every array made from it is too
    with open(path, "rb") as f:
        f.readinto(raw)
    r = _Reader(raw, path)
    if len(raw) < 8 or r.take("i") != MAGIC:
        raise ValueError(f"{path}: not a fastText model (wrong magic number)")
    version = r.take("i")
    if version > VERSION:
        raise ValueError(f"{path}: fastText file format version {version} is newer than {VERSION}")
    a = list(r.take("12id"))
    loss, model = a[6], a[7]
    if model not in MODELS or loss not in LOSSES:
        raise ValueError(f"{path}: not a fastText model (model {model}, loss {loss})")
    a[6], a[7] = LOSSES[loss], MODELS[model]
    if model != 3:
        raise ValueError(f"{path}: a {MODELS[model]} (unsupervised) fastText model has no labels to predict; "
                         "only supervised models are supported")
    if version == 11:  # fasttext.cc: old supervised models do not use char n-grams
        a[10] = 0
    args = FastTextArgs(*a)

    # Dictionary::load: entries are a NUL-terminated word, an int64 count, an int8 type (0 word, 1 label)
    size, nwords, nlabels, ntokens, pruneidx_size = r.take("iiiqq")
    words, counts, types = [], np.empty(max(size, 0), np.int64), np.empty(max(size, 0), np.int8)
    pos = r.pos
    for i in range(size):
        end = raw.find(b"\0", pos)
        if end < 0 or end + 10 > len(raw):
            raise ValueError(f"{path}: truncated fastText model")
        words.append(bytes(raw[pos:end]))
        counts[i], types[i] = struct.unpack_from("<qb", raw, end + 1)
        pos = end + 10
    r.pos = pos
    if nwords + nlabels != size or nlabels < 1 or not (types[:nwords] == 0).all() or \
            not (types[nwords:] == 1).all():
        raise ValueError(f"{path}: inconsistent fastText dictionary ({nwords} words, {nlabels} labels)")
    pairs = r.array(np.int32, 2 * max(pruneidx_size, 0)).reshape(-1, 2)
    return r, version, args, {"nwords": nwords, "nlabels": nlabels, "ntokens": ntokens, "pruneidx_size": pruneidx_size,
                                  "words": words, "counts": counts, "types": types, "pairs": pairs}


def read_labels(path) -> list[str]:
    """The labels of a supervised fastText model (with their __label__ prefix), without loading the rest."""
    d = _read_head(os.fspath(path))[3]
    return [w.decode("utf-8", "replace") for w in d["words"][d["nwords"]:]]


class FastTextModel:
    """A supervised fastText model read from its file; ``predict_buffers`` is the kernel's entry point."""

    def __init__(self, path):
        path = os.fspath(path)
        r, self.version, self.args, d = _read_head(path)
        self.nwords, self.nlabels, self.ntokens = d["nwords"], d["nlabels"], d["ntokens"]
        self.pruneidx_size = pruneidx_size = d["pruneidx_size"]
        words, counts, types, pairs = d["words"], d["counts"], d["types"], d["pairs"]
        size = len(words)
        self._word_bytes = words

        # FastText::loadModel: input matrix, qout, output matrix
        quant_input = r.take("?")
        if not quant_input and pruneidx_size >= 0:
            raise ValueError(f"{path}: invalid model file (a pruned dictionary with a dense input matrix)")
        self._input = _read_matrix(r, quant_input)
        if quant_input and self._input[5][5] * self._input[5][6] <= _DEQUANTIZE_MAX:
            self._input = _dequantize(self._input)
        self.qout = r.take("?")
        self._output = _read_matrix(r, quant_input and self.qout)
        self.quantized = bool(quant_input)
        if r.pos != len(r.raw):
            raise ValueError(f"{path}: {len(r.raw) - r.pos} unexpected bytes after the model")
        # The kernel does not check bounds: every row it can address must exist.
        a = self.args
        n_in = self.nwords + (pruneidx_size if pruneidx_size >= 0 else a.bucket)
        shapes = (tuple(int(v) for v in self._input[5][5:]), tuple(int(v) for v in self._output[5][5:]))
        # one output row per label (hs uses the first nlabels - 1: one per inner node of its tree)
        if shapes != ((n_in, a.dim), (self.nlabels, a.dim)):
            raise ValueError(f"{path}: matrix shapes {shapes} do not match dim {a.dim}, {self.nwords} words, "
                             f"{self.nlabels} labels and {n_in - self.nwords} n-gram rows")
        if a.bucket <= 0 and (a.maxn > 0 or a.wordNgrams > 1):
            raise ValueError(f"{path}: n-grams without buckets (bucket {a.bucket})")
        if len(pairs) and (pairs[:, 0].min() < 0 or pairs[:, 0].max() >= a.bucket or pairs[:, 1].min() < 0
                           or pairs[:, 1].max() >= pruneidx_size):
            raise ValueError(f"{path}: pruneidx out of range")

        # Kernel tables: words as one byte buffer, the word2int table, the pruneidx remap, every word's n-gram
        # rows (fastText's initNgrams: in-vocabulary words need no n-gram hashing), the loss.
        lens = np.fromiter((len(w) for w in words), np.int64, size)
        woff = np.zeros(size + 1, np.int64)
        np.cumsum(lens, out=woff[1:])
        wdata = np.frombuffer(b"".join(words), np.uint8).copy() if size else np.zeros(1, np.uint8)
        table = np.full(math.ceil(size / 0.7), -1, np.int32)
        _build_table(wdata, woff, table)
        prune = np.zeros(1, np.int32)
        if pruneidx_size > 0:
            prune = np.full(a.bucket, -1, np.int32)
            prune[pairs[:, 0]] = pairs[:, 1]
        loss_code = {"hs": 0, "softmax": 1}.get(a.loss, 2)  # 2: ova and ns (sigmoid of each label's score)
        self._cfg = np.array([self.nwords, a.minn, a.maxn, max(a.bucket, 1), a.wordNgrams, pruneidx_size, loss_code,
                              self.nlabels], np.int64)
        sub_off, sub_rows = _word_subwords(wdata, woff, self._cfg, prune, self._input)
        self._dict = (wdata, woff, types, table, sub_off, sub_rows, prune)
        left = right = np.zeros(1, np.int32)
        if a.loss == "hs":
            left, right = _hs_tree(counts[self.nwords:])
        self._loss = (left, right, _sigmoid_table())

    # -- what fastText's Python model exposes, for checks -------------------------------------------------------
    def get_dimension(self) -> int:
        return self.args.dim

    def get_words(self) -> list[str]:
        return [w.decode("utf-8", "replace") for w in self._word_bytes[:self.nwords]]

    def get_labels(self) -> list[str]:
        return [w.decode("utf-8", "replace") for w in self._word_bytes[self.nwords:]]

    # -- prediction ---------------------------------------------------------------------------------------------
    def predict_buffers(self, data: np.ndarray, offsets: np.ndarray, *, max_chars: int = 0,
                        newline_is_space: bool = False, threshold: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Top label (index into get_labels(), -1 when none) and its probability (float32, 0 when none) of every
        document of the Arrow buffers.

        As fastText's ``predict`` sees one line: without ``newline_is_space`` a document ends at its first "\\n"
        (fastText stops reading there); with it, "\\n" is whitespace, as if replaced by " ". ``max_chars`` > 0: a
        document of more code points is predicted on its head, middle and tail, a third of max_chars each,
        joined by spaces (gpupipe.stages.filters.langid.spread_sample). No label: fastText returns none when a line
        has no input row (only possible when ``</s>`` is not in the vocabulary) or none reaches threshold."""
        data = np.ascontiguousarray(data, dtype=np.uint8)
        offsets = np.ascontiguousarray(offsets)
        if offsets.dtype not in (np.int32, np.int64) or offsets.ndim != 1 or len(offsets) < 1:
            raise TypeError("offsets must be int32 or int64 with n + 1 entries")
        n = len(offsets) - 1
        labels, probs = np.full(n, -1, np.int32), np.zeros(n, np.float32)
        if n:
            bounds = _chunk_bounds(offsets, 16 * numba.get_num_threads())
            _predict_chunks(data, offsets, bounds, np.int64(max_chars), bool(newline_is_space), self._cfg,
                            self._dict, self._input, self._output, self._loss, np.float32(threshold), labels, probs)
        return labels, probs

    def predict(self, texts, k: int = 1, threshold: float = 0.0):
        """fastText's ``model.predict`` for a list of lines (or one line), k = 1 only: (labels, probabilities) in
        the shapes fastText returns them."""
        import pyarrow as pa

        from .strings import arrow_buffers

        if k != 1:
            raise NotImplementedError("only k=1 is implemented")
        single = isinstance(texts, str)
        lines = [texts] if single else list(texts)
        if any("\n" in t for t in lines):
            raise ValueError("predict processes one line at a time (remove '\\n')")
        ids, probs = self.predict_buffers(*arrow_buffers(pa.array(lines, pa.large_string())), threshold=threshold)
        names = self.get_labels()
        labels = [[names[i]] if i >= 0 else [] for i in ids]
        probs = [p[None] if i >= 0 else np.zeros(0, np.float32) for i, p in zip(ids, probs)]
        if single:
            return tuple(labels[0]), probs[0]
        return labels, probs


def load_model(path) -> FastTextModel:
    return FastTextModel(path)


# ----------------------------------------------------------------------------------------------------------------
# Kernel. The model reaches it as cfg = int64 [nwords, minn, maxn, bucket, wordNgrams, pruneidx_size, loss (0 hs,
# 1 softmax, 2 ova/ns), nlabels]; dic = (word bytes, word offsets, word types, word2int table, every word's n-gram
# rows as offsets and rows, pruneidx remap); a matrix = (dense, codes, centroids, norm codes, norm centroids, meta).
# ----------------------------------------------------------------------------------------------------------------

@njit(cache=True)
def _sigmoid_table():
    """Loss::t_sigmoid_: float x = float(i * 16) / 512 - 8, then 1.0 / (1.0 + expf(-x)) in double."""
    t = np.empty(513, np.float32)
    for i in range(513):
        x = np.float32(i * 16) / np.float32(512) - np.float32(8)
        t[i] = np.float32(1.0 / (1.0 + np.float64(math.exp(-x))))
    return t


@njit(cache=True, inline="always")
def _hash_byte(h, b):
    # fastText XORs each byte in as int8 widened to uint32: bytes >= 0x80 bring 24 high one-bits with them.
    v = np.uint64(b)
    if v >= np.uint64(0x80):
        v |= _SIGN_EXT
    return ((h ^ v) * _FNV_PRIME) & _MASK32


@njit(cache=True)
def _find(buf, s, e, h, wdata, woff, table):
    """Dictionary::find: the table slot of the word buf[s:e] (hash h), linear probing."""
    size = np.int64(table.shape[0])
    slot = np.int64(h % np.uint64(size))
    n = e - s
    while table[slot] != -1:
        w = table[slot]
        ws, we = woff[w], woff[w + 1]
        if we - ws == n:
            same = True
            for i in range(n):
                if wdata[ws + i] != buf[s + i]:
                    same = False
                    break
            if same:
                return slot
        slot = (slot + 1) % size
    return slot


@njit(cache=True)
def _build_table(wdata, woff, table):
    for w in range(woff.shape[0] - 1):
        h = _FNV_OFFSET
        for i in range(woff[w], woff[w + 1]):
            h = _hash_byte(h, wdata[i])
        table[_find(wdata, woff[w], woff[w + 1], h, wdata, woff, table)] = w


@njit(cache=True, inline="always")
def _bucket_row(bucket_id, cfg, prune):
    """Dictionary::pushHash: the input row of n-gram bucket bucket_id, -1 when a pruned model dropped it."""
    prune_size = cfg[5]
    if prune_size == 0:
        return np.int64(-1)
    if prune_size > 0:
        bucket_id = np.int64(prune[bucket_id])
        if bucket_id < 0:
            return np.int64(-1)
    return cfg[0] + bucket_id


@njit(cache=True)
def _subwords(tok, W, cfg, prune, inp, x, rows, n, collect):
    """Dictionary::computeSubwords on tok[0:W] ("<token>"): the n-grams of minn..maxn code points (no 1-gram at
    either end). Each one's input row is added to x, or with `collect` written to rows[n:]; returns the count."""
    minn, maxn, bucket = cfg[1], cfg[2], np.uint64(cfg[3])
    count = 0
    for i in range(W):
        if (tok[i] & 0xC0) == 0x80:  # n-grams start on code points, not on UTF-8 continuation bytes
            continue
        g = _FNV_OFFSET
        j = i
        k = 1
        while j < W and k <= maxn:
            g = _hash_byte(g, tok[j])
            j += 1
            while j < W and (tok[j] & 0xC0) == 0x80:
                g = _hash_byte(g, tok[j])
                j += 1
            if k >= minn and not (k == 1 and (i == 0 or j == W)):
                r = _bucket_row(np.int64(g % bucket), cfg, prune)
                if r >= 0:
                    if collect:
                        rows[n + count] = r
                    else:
                        _add_row(inp, r, x)
                    count += 1
            k += 1
    return count


@njit(cache=True)
def _word_subwords(wdata, woff, cfg, prune, inp):
    """Dictionary::initNgrams: the n-gram rows of every vocabulary word (none for </s>), as offsets and rows."""
    nwords, maxn = cfg[0], max(cfg[2], 0)
    total = 0
    for w in range(nwords):
        total += (woff[w + 1] - woff[w] + 2) * maxn
    rows = np.empty(total, np.int32)
    off = np.zeros(nwords + 1, np.int64)
    tok = np.empty(1, np.uint8)
    dummy_x = np.empty(1, np.float32)
    for w in range(nwords):
        L = woff[w + 1] - woff[w]
        if tok.shape[0] < L + 2:
            tok = np.empty(2 * L + 2, np.uint8)
        tok[0], tok[L + 1] = 60, 62  # "<" word ">"
        tok[1:L + 1] = wdata[woff[w]:woff[w + 1]]
        n = off[w]
        if not _is_eos(tok, L):
            n += _subwords(tok, L + 2, cfg, prune, inp, dummy_x, rows, n, True)
        off[w + 1] = n
    return off, rows[:off[nwords]].copy()


@njit(cache=True, inline="always")
def _is_eos(tok, L):
    return L == 4 and tok[1] == 60 and tok[2] == 47 and tok[3] == 115 and tok[4] == 62  # "</s>"


@njit(cache=True, inline="always")
def _add_row(mat, row, x):
    """x += row `row` of a dense or quantized matrix (DenseMatrix / QuantMatrix::addRowToVector)."""
    dense, codes, cent, ncodes, ncent, meta = mat
    if meta[0] == 0:
        for j in range(x.shape[0]):
            x[j] += dense[row, j]
        return
    alpha = ncent[np.int64(ncodes[row])] if meta[1] != 0 else np.float32(1.0)
    nsubq, dsub, lastdsub = meta[2], meta[3], meta[4]
    for m in range(nsubq):
        # ProductQuantizer::get_centroids: sub-quantizer m's table starts at m * 256 * dsub; the last one's
        # vectors may be narrower (lastdsub).
        d = lastdsub if m == nsubq - 1 else dsub
        c0 = m * _KSUB * dsub + np.int64(codes[row * nsubq + m]) * d
        for k in range(d):
            x[m * dsub + k] += alpha * cent[c0 + k]


@njit(cache=True, inline="always")
def _dot_row(mat, row, x):
    """DenseMatrix::dotRow / ProductQuantizer::mulcode: float32, summed in order."""
    dense, codes, cent, ncodes, ncent, meta = mat
    res = np.float32(0.0)
    if meta[0] == 0:
        for j in range(x.shape[0]):
            res += dense[row, j] * x[j]
        return res
    alpha = ncent[np.int64(ncodes[row])] if meta[1] != 0 else np.float32(1.0)
    nsubq, dsub, lastdsub = meta[2], meta[3], meta[4]
    for m in range(nsubq):
        d = lastdsub if m == nsubq - 1 else dsub
        c0 = m * _KSUB * dsub + np.int64(codes[row * nsubq + m]) * d
        for k in range(d):
            res += x[m * dsub + k] * cent[c0 + k]
    return res * alpha


@njit(cache=True, inline="always")
def _std_log(x):
    """std_log(real x) = log(x + 1e-5) in double, returned as float."""
    return np.float32(math.log(np.float64(x) + 1e-5))


@njit(cache=True)
def _token_rows(tok, L, cfg, dic, inp, x, wh, nwh):
    """Adds the input rows of one token tok[1:1+L] to x (tok[0] = '<' and tok[L+1] = '>' are in place), as
    Dictionary::getLine does; returns (rows added, word hashes now in wh, the token is </s>)."""
    wdata, woff, wtype, table, sub_off, sub_rows, prune = dic
    h = _FNV_OFFSET
    for i in range(1, 1 + L):
        h = _hash_byte(h, tok[i])
    wid = np.int64(table[_find(tok, 1, 1 + L, h, wdata, woff, table)])
    eos = _is_eos(tok, L)
    if wid >= 0:
        is_label = wtype[wid] == 1
    else:  # getType(token): starts with "__label__"
        is_label = L >= 9
        if is_label:
            for i in range(9):
                if tok[1 + i] != _LABEL[i]:
                    is_label = False
                    break
    if is_label:
        return 0, nwh, eos
    if wid >= 0:  # the word's row, then its n-grams' (computed at load, as fastText's initNgrams)
        _add_row(inp, wid, x)
        for r in range(sub_off[wid], sub_off[wid + 1]):
            _add_row(inp, np.int64(sub_rows[r]), x)
        rows = 1 + sub_off[wid + 1] - sub_off[wid]
    elif not eos:
        rows = _subwords(tok, L + 2, cfg, prune, inp, x, sub_rows, 0, False)
    else:
        rows = 0
    if wh.shape[0] > 1:  # word n-grams: addWordNgrams widens the int32 hashes to uint64 with their sign
        wh[nwh] = h | _SIGN_EXT64 if h >= np.uint64(0x80000000) else h
        nwh += 1
    return rows, nwh, eos


@njit(cache=True)
def _cp_to_byte(data, s, e, cp):
    """Byte offset of code point number cp of data[s:e] (e when cp is the count)."""
    k = -1
    for i in range(s, e):
        if (data[i] & 0xC0) != 0x80:
            k += 1
            if k == cp:
                return i
    return e


@njit(cache=True, inline="always")
def _is_space(b):
    return b == 32 or b == 10 or b == 13 or b == 9 or b == 11 or b == 12 or b == 0  # readWord: " \n\r\t\v\f\0"


@njit(cache=True)
def _predict_one(data, s, e, max_chars, newline_is_space, cfg, dic, inp, out, loss_tables, threshold,
                 tok, wh, hidden, output, stack_node, stack_score):
    """(label, probability) of one document data[s:e]; (-1, 0) when fastText predicts nothing."""
    if not newline_is_space:  # fastText's line ends at the first "\n"
        for i in range(s, e):
            if data[i] == 10:
                e = i
                break
    seg = np.empty(6, np.int64)
    seg[0], seg[1], nseg = s, e, 1
    if max_chars > 0:  # spread_sample: head, middle and tail, a third of max_chars each, joined by spaces
        ncp = 0
        for i in range(s, e):
            if (data[i] & 0xC0) != 0x80:
                ncp += 1
        if ncp > max_chars:
            k = max_chars // 3
            mid = (ncp - k) // 2
            seg[1] = _cp_to_byte(data, s, e, k)
            seg[2], seg[3] = _cp_to_byte(data, s, e, mid), _cp_to_byte(data, s, e, mid + k)
            seg[4], seg[5] = _cp_to_byte(data, s, e, ncp - k), e
            nseg = 3
    hidden[:] = 0
    rows, nwh, eos = 0, 0, False
    for g in range(nseg):
        i, end = seg[2 * g], seg[2 * g + 1]
        while i < end and not eos:
            if _is_space(data[i]):
                i += 1
                continue
            L = 0
            while i < end and not _is_space(data[i]):
                tok[1 + L] = data[i]
                L += 1
                i += 1
            tok[0], tok[L + 1] = 60, 62  # "<" token ">"
            r, nwh, eos = _token_rows(tok, L, cfg, dic, inp, hidden, wh, nwh)
            rows += r
        if eos:
            break
    if not eos:  # the end of the line: "</s>"
        tok[0], tok[1], tok[2], tok[3], tok[4], tok[5] = 60, 60, 47, 115, 62, 62
        r, nwh, eos = _token_rows(tok, 4, cfg, dic, inp, hidden, wh, nwh)
        rows += r
    word_ngrams, bucket = cfg[4], np.uint64(cfg[3])
    for a in range(nwh):  # Dictionary::addWordNgrams
        hh = wh[a]
        for b in range(a + 1, min(nwh, a + word_ngrams)):
            hh = hh * _NGRAM_MUL + wh[b]
            r = _bucket_row(np.int64(hh % bucket), cfg, dic[6])
            if r >= 0:
                _add_row(inp, r, hidden)
                rows += 1
    if rows == 0:  # FastText::predict: no input, no prediction
        return -1, np.float32(0.0)
    scale = np.float32(1.0 / rows)  # Vector::mul(real): 1.0 / n rounded to float
    for j in range(hidden.shape[0]):
        hidden[j] *= scale

    loss, osz = cfg[6], cfg[7]
    left, right, sig = loss_tables
    best, best_score = -1, np.float32(0.0)
    if loss == 0:  # HierarchicalSoftmaxLoss::dfs, with an explicit stack (left subtree first)
        min_score = _std_log(threshold)
        sp = 1
        stack_node[0], stack_score[0] = 2 * osz - 2, np.float32(0.0)
        while sp > 0:
            sp -= 1
            node, score = stack_node[sp], stack_score[sp]
            if score < min_score or (best >= 0 and score < best_score):
                continue
            if left[node] == -1 and right[node] == -1:
                best, best_score = node, score  # k = 1: fastText's heap keeps the later of equal scores
                continue
            f = _dot_row(out, node - osz, hidden)
            f = np.float32(1.0 / np.float64(np.float32(1.0) + math.exp(-f)))  # expf, then 1. / x in double
            stack_node[sp], stack_score[sp] = right[node], score + _std_log(f)
            stack_node[sp + 1], stack_score[sp + 1] = left[node], score + _std_log(np.float32(1.0 - np.float64(f)))
            sp += 2
    else:
        for i in range(osz):
            output[i] = _dot_row(out, np.int64(i), hidden)
        if loss == 1:  # SoftmaxLoss::computeOutput: exp in double, sums in float
            mx = output[0]
            for i in range(osz):
                mx = mx if output[i] < mx else output[i]  # noqa: FURB136 (std::max(output[i], max), as written)
            z = np.float32(0.0)
            for i in range(osz):
                output[i] = np.float32(math.exp(np.float64(output[i] - mx)))
                z += output[i]
            for i in range(osz):
                output[i] /= z
        else:  # BinaryLogisticLoss::computeOutput (ova, ns): Loss::sigmoid's table
            for i in range(osz):
                v = output[i]
                if v < np.float32(-8.0):
                    output[i] = np.float32(0.0)
                elif v > np.float32(8.0):
                    output[i] = np.float32(1.0)
                else:
                    output[i] = sig[np.int64((v + np.float32(8.0)) * np.float32(512) / np.float32(8)
                                             / np.float32(2))]
        for i in range(osz):  # Loss::findKBest, k = 1
            if output[i] < threshold:
                continue
            ls = _std_log(output[i])
            if best >= 0 and ls < best_score:
                continue
            best, best_score = i, ls
    if best < 0:
        return -1, np.float32(0.0)
    return best, np.float32(math.exp(best_score))  # FastText::predictLine: expf of the score


@njit(parallel=True, cache=True, nogil=True)
def _predict_chunks(data, offsets, bounds, max_chars, newline_is_space, cfg, dic, inp, out, loss_tables,
                    threshold, labels, probs):
    """Every document's top label; chunk c (documents bounds[c]..bounds[c+1]) per parallel task, with its own
    scratch sized to its longest document."""
    dim, osz = inp[5][6], cfg[7]
    for c in prange(bounds.shape[0] - 1):
        d0, d1 = bounds[c], bounds[c + 1]
        longest = 0
        for d in range(d0, d1):
            longest = max(longest, np.int64(offsets[d + 1] - offsets[d]))
        tok = np.empty(longest + 8, np.uint8)
        wh = np.empty(longest + 2 if cfg[4] > 1 else 1, np.uint64)
        hidden = np.empty(dim, np.float32)
        output = np.empty(osz, np.float32)
        stack_node = np.empty(2 * osz + 2, np.int64)
        stack_score = np.empty(2 * osz + 2, np.float32)
        for d in range(d0, d1):
            labels[d], probs[d] = _predict_one(data, np.int64(offsets[d]), np.int64(offsets[d + 1]), max_chars,
                                               newline_is_space, cfg, dic, inp, out, loss_tables, threshold,
                                               tok, wh, hidden, output, stack_node, stack_score)
