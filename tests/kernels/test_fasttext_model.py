"""gpupipe.kernels.fasttext_model against fastText itself (the `fasttext` package): the model reader, and labels and
probabilities bit for bit (float32 equality of the bits, not a tolerance) on lid.176.ftz and on model files written
here for the paths lid.176 does not take (dense input, softmax / one-vs-all / negative sampling, word n-grams,
norm and output quantization, version 11); the langid stage against its former fastText-backed implementation."""

import functools
import random
import struct
import zlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from gpupipe.kernels.fasttext_model import MAGIC, FastTextModel, read_labels
from gpupipe.kernels.strings import arrow_buffers

from gpupipe.stages.base import RunContext
from gpupipe.stages.filters.langid import (
    LABEL_PREFIX,
    UNDETERMINED,
    LangId,
    LangIdConfig,
    default_model_path,
    spread_sample,
)
from gpupipe.synth import text as synth

fasttext = pytest.importorskip("fasttext")
fasttext.FastText.eprint = lambda *a, **k: None  # silence the load-time warning on stderr


@pytest.fixture(scope="module")
def lid():
    path = default_model_path()
    return fasttext.load_model(path), FastTextModel(path)


def _same(ft_model, model, texts):
    """Both models' top label and probability for every text: labels equal, float32 bits equal."""
    want_labels, want_probs = ft_model.predict(texts, k=1)
    ids, probs = model.predict_buffers(*arrow_buffers(pa.array(texts, pa.large_string())))
    names = model.get_labels()
    got = [[names[i]] if i >= 0 else [] for i in ids]
    assert got == [list(x) for x in want_labels]
    want = np.array([p[0] if len(p) else 0 for p in want_probs], np.float32)
    bad = np.flatnonzero(want.view(np.uint32) != probs.view(np.uint32))
    assert not len(bad), [(texts[i][:60], want[i], probs[i]) for i in bad[:5]]


# ----------------------------------------------------------------------------------------------------------------
# Texts: synthetic articles in six languages, random words of many scripts, lid.176's own words, edge cases
# ----------------------------------------------------------------------------------------------------------------

SCRIPTS = [(0x41, 0x7A), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x531, 0x587), (0x5D0, 0x5EA),
           (0x620, 0x64A), (0x900, 0x97F), (0x980, 0x9FF), (0xE01, 0xE5B), (0x10D0, 0x10FF), (0xAC00, 0xD7A3),
           (0x3041, 0x30FF), (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF), (0x2200, 0x22FF), (0x20000, 0x2A6DF)]
SEPARATORS = [" ", " ", " ", "  ", "\t", "\v", "\f", "\r", "\x00", "\u00a0", "\u3000", "\x1c", "\x85", "\u2028"]
EDGE_CASES = [
    "", " ", "     ", "\t\v\f\r\x00", "a", "é", "日", "🙂", "</s>", "a </s> b c d", "</s></s>", "<s>", "<>",
    "__label__en", "__label__fr bonjour le monde", "hello __label__de world", "__label__", "__label__zz x",
    "x" * 5000, "ab" * 3000 + " the end", "日本語" * 700, "🙂" * 400, "a\u0301" * 100, "\ufeffhello world",
    "mixed Русский English 中文 العربية हिन्दी ελληνικά", "tab\tseparated\twords here", "nul\x00separated\x00words",
    "cr\rlf-less carriage\rreturns", "form\ffeed and\vvertical", "\u200b\u200c\u200d zero width", "\x7f\x01\x02",
    "Ünïcödé wörds wïth dïäcrïtïcs", "ﬁ ligature and ½ fraction", "\U0010fffd private plane", "\ufffd\ufffd",
    "the the the the the", "le la les de des du", "der die das und", " leading and trailing spaces ",
]


def _random_word(rng: random.Random) -> str:
    lo, hi = rng.choice(SCRIPTS)
    return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.choice([1, 2, 3, 4, 5, 6, 8, 12, 30])))


@functools.lru_cache(maxsize=1)
def _lid_words() -> list[str]:
    return FastTextModel(default_model_path()).get_words()


def generated_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    langs = [synth.EN, synth.ZH, synth.FR, synth.DE, synth.ES, synth.RU]
    vocab = _lid_words()
    texts = list(EDGE_CASES)
    while len(texts) < n:
        kind = rng.random()
        if kind < 0.5:  # an article, or a paragraph of one, cut at a random length
            article, _ = synth.article(rng.choice(langs), rng)
            t = article.replace("\n", " ") if rng.random() < 0.5 else rng.choice(article.split("\n"))
            texts.append(t[:rng.choice([10, 40, 120, 500, 3000])])
        elif kind < 0.8:  # words of random scripts, random separators
            texts.append("".join(_random_word(rng) + rng.choice(SEPARATORS) for _ in range(rng.randint(1, 40))))
        else:  # lid.176's vocabulary, with labels, </s> and random words mixed in
            odd = ["__label__en", "__label__xx", "</s>"]
            words = [rng.choice(vocab) if rng.random() < 0.8 else rng.choice([*odd, _random_word(rng)])
                     for _ in range(rng.randint(1, 60))]
            texts.append(" ".join(words))
    return texts[:n]


# ----------------------------------------------------------------------------------------------------------------
# lid.176.ftz
# ----------------------------------------------------------------------------------------------------------------


def test_reader_matches_fasttext(lid):
    ft_model, model = lid
    assert model.get_dimension() == ft_model.get_dimension() == 16
    assert model.get_words() == ft_model.get_words()
    assert model.get_labels() == ft_model.get_labels() == read_labels(default_model_path())
    a, b = model.args, ft_model.f.getArgs()
    for name in ("dim", "ws", "epoch", "minCount", "neg", "wordNgrams", "bucket", "minn", "maxn", "lrUpdateRate", "t"):
        assert getattr(a, name) == getattr(b, name), name
    assert (a.loss, a.model) == (b.loss.name, "supervised") == ("hs", "supervised")
    assert model.quantized == ft_model.is_quantized() and model.pruneidx_size > 0
    assert model.get_words()[0] == "</s>"


def test_lid176_parity_on_generated_texts(lid):
    texts = generated_texts(4000)
    assert len(set(texts)) > 3500
    _same(*lid, texts)


def test_lid176_parity_on_edge_cases(lid):
    _same(*lid, EDGE_CASES)
    _ft_model, model = lid
    labels, probs = model.predict(["bonjour le monde"])
    assert labels == [["__label__fr"]] and probs[0].dtype == np.float32
    assert model.predict("Das ist ein Haus")[0] == ("__label__de",)
    with pytest.raises(ValueError, match="one line"):
        model.predict(["two\nlines"])


def test_newlines_and_spread_sample_in_the_kernel(lid):
    ft_model, model = lid
    rng = random.Random(1)
    docs = []
    for _ in range(300):
        article, _ = synth.article(rng.choice([synth.EN, synth.ZH, synth.RU, synth.FR]), rng)
        docs.append(article * rng.choice([1, 3, 10]))
    docs += ["", "\n", "a\nb", "\n\nstarts with newlines", "日本語\n" * 300, "é" * 301, "é" * 302 + "\nx"]
    data, offsets = arrow_buffers(pa.array(docs, pa.large_string()))
    for max_chars in (300, 301, 10_000):
        ids, probs = model.predict_buffers(data, offsets, max_chars=max_chars, newline_is_space=True)
        want_ids, want_probs = model.predict_buffers(
            *arrow_buffers(pa.array([spread_sample(t, max_chars).replace("\n", " ") for t in docs], pa.large_string())))
        assert (ids == want_ids).all() and (probs.view(np.uint32) == want_probs.view(np.uint32)).all()
    # without newline_is_space a document is read as fastText reads a stream: up to its first newline
    ids, probs = model.predict_buffers(data, offsets)
    _same(ft_model, model, [t.split("\n")[0] for t in docs])
    first = model.predict_buffers(*arrow_buffers(pa.array([t.split("\n")[0] for t in docs], pa.large_string())))
    assert (ids == first[0]).all() and (probs == first[1]).all()


def test_int32_offsets_sliced_arrays_and_threads(lid):
    import numba

    _, model = lid
    texts = generated_texts(600, seed=3)
    arr = pa.array(texts, pa.string())[100:500]
    ids, probs = model.predict_buffers(*arrow_buffers(arr))
    want = model.predict_buffers(*arrow_buffers(pa.array(texts[100:500], pa.large_string())))
    assert (ids == want[0]).all() and (probs == want[1]).all()
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = model.predict_buffers(*arrow_buffers(arr))
    finally:
        numba.set_num_threads(before)
    assert (one[0] == ids).all() and (one[1] == probs).all()


def test_refuses_what_it_cannot_read(lid, tmp_path):
    with open(default_model_path(), "rb") as f:
        raw = bytearray(f.read())
    bad = tmp_path / "bad.ftz"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(ValueError, match="not a fastText model"):
        FastTextModel(bad)
    unsup = bytearray(raw)
    struct.pack_into("<i", unsup, 8 + 7 * 4, 2)  # Args.model = skipgram
    bad.write_bytes(unsup)
    with pytest.raises(ValueError, match="unsupervised"):
        FastTextModel(bad)
    newer = bytearray(raw)
    struct.pack_into("<i", newer, 4, 13)
    bad.write_bytes(newer)
    with pytest.raises(ValueError, match="newer"):
        FastTextModel(bad)
    bad.write_bytes(raw[:len(raw) // 2])
    with pytest.raises(ValueError, match="truncated"):
        FastTextModel(bad)
    bad.write_bytes(raw + b"\0")
    with pytest.raises(ValueError, match="unexpected bytes"):
        FastTextModel(bad)
    with pytest.raises(NotImplementedError):
        lid[1].predict(["x"], k=2)


# ----------------------------------------------------------------------------------------------------------------
# Model files written here: the paths lid.176 does not take
# ----------------------------------------------------------------------------------------------------------------


def write_model(path, rng: np.random.Generator, words: list[str], labels: list[str], *, dim=8, loss=1, word_ngrams=1,
                minn=2, maxn=4, bucket=3000, quant=False, qnorm=False, qout=False, dsub=2, prune=None, version=12):
    """A supervised model file in fastText's format (FastText::saveModel) with random weights; prune: how many
    n-gram buckets a pruned (quantized) model kept, None when not pruned."""
    losses_rows = len(labels)
    entries = [(w, int(c)) for w, c in zip(words, sorted(rng.integers(1, 10**6, len(words)), reverse=True))]
    entries += [(w, int(c)) for w, c in zip(labels, sorted(rng.integers(1, 10**6, len(labels)), reverse=True))]
    out = bytearray(struct.pack("<ii", MAGIC, version))
    out += struct.pack("<12id", dim, 5, 5, 1, 5, word_ngrams, loss, 3, bucket, minn, maxn, 100, 1e-4)
    pairs = [(int(k), j) for j, k in enumerate(rng.choice(bucket, size=prune or 0, replace=False))]
    out += struct.pack("<iiiqq", len(entries), len(words), len(labels), 10**7, -1 if prune is None else prune)
    for i, (w, c) in enumerate(entries):
        out += w.encode() + b"\0" + struct.pack("<qb", c, 0 if i < len(words) else 1)
    for k, j in pairs:
        out += struct.pack("<ii", k, j)

    def matrix(rows, quantized, scale):
        if not quantized:
            weights = (rng.standard_normal((rows, dim)) * scale).astype(np.float32)
            return struct.pack("<qq", rows, dim) + weights.tobytes()
        nsubq = -(-dim // dsub)
        lastdsub = dim - (nsubq - 1) * dsub
        m = struct.pack("<?qqi", qnorm, rows, dim, rows * nsubq)
        m += rng.integers(0, 256, rows * nsubq, np.uint8).tobytes()
        m += struct.pack("<iiii", dim, nsubq, dsub, lastdsub) + \
            (rng.standard_normal(dim * 256) * scale).astype(np.float32).tobytes()
        if qnorm:
            m += rng.integers(0, 256, rows, np.uint8).tobytes() + struct.pack("<iiii", 1, 1, 1, 1) + \
                rng.uniform(0.5, 2, 256).astype(np.float32).tobytes()
        return m

    n_in = len(words) + (bucket if prune is None else prune)
    out += struct.pack("<?", quant) + matrix(n_in, quant, 0.5)
    out += struct.pack("<?", qout) + matrix(losses_rows, quant and qout, 1.0)
    path.write_bytes(bytes(out))
    return path


MODEL_CASES = {
    "hs dense": {},
    "softmax dense dim 10": {"loss": 3, "dim": 10},
    "ova dense": {"loss": 4},
    "ns dense": {"loss": 2},
    "softmax word 3-grams": {"loss": 3, "word_ngrams": 3},
    "hs word 2-grams, no char n-grams": {"word_ngrams": 2, "minn": 0, "maxn": 0},
    "hs 1..6-grams": {"minn": 1, "maxn": 6},
    "quantized, dsub 3 (narrower last sub-quantizer)": {"quant": True, "dsub": 3, "dim": 10},
    "quantized qnorm": {"quant": True, "qnorm": True, "loss": 3},
    "quantized qnorm qout hs": {"quant": True, "qnorm": True, "qout": True},
    "quantized qout ova, pruned": {"quant": True, "qout": True, "loss": 4, "prune": 500},
    "pruned to no n-gram at all": {"quant": True, "prune": 0, "loss": 3},
    "version 11 (no char n-grams)": {"version": 11},
    "no </s> in the vocabulary (empty lines: no prediction)": {"no_eos": True, "word_ngrams": 2},
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_written_models_match_fasttext(case, tmp_path):
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    texts = generated_texts(800, seed=7)
    counts = pd.Series(" ".join(texts).split()).value_counts()
    params = dict(MODEL_CASES[case])
    words = ([] if params.pop("no_eos", False) else ["</s>"]) + \
        [w for w in counts.index[:400] if "__label__" not in w and w != "</s>"]
    labels = [f"__label__l{i}" for i in range(int(rng.integers(2, 40)))]
    path = write_model(tmp_path / "m.bin", rng, words, labels, **params)
    ft_model, model = fasttext.load_model(str(path)), FastTextModel(path)
    assert model.get_words() == ft_model.get_words() and model.get_labels() == ft_model.get_labels()
    assert model.get_dimension() == ft_model.get_dimension()
    _same(ft_model, model, texts)


# ----------------------------------------------------------------------------------------------------------------
# The langid stage against its former fastText-backed implementation
# ----------------------------------------------------------------------------------------------------------------


class FastTextLangId(LangId):
    """LangId with fastText's own predict in place of the kernel (Python lists into the binding): everything else,
    the script rules and the rest of #23 included, is the stage's own code."""

    def setup(self) -> None:
        super().setup()
        self._fasttext = fasttext.load_model(self.config.model or default_model_path())

    def _predict(self, texts):
        texts = [spread_sample(t, self.config.max_chars).replace("\n", " ") for t in texts.to_pylist()]
        if not texts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        labels, probs = self._fasttext.predict(texts, k=1)
        index = {name: i for i, name in enumerate(self._names())}
        ids = np.array([index[label[0][len(LABEL_PREFIX):]] for label in labels], dtype=np.int64)
        return ids, np.asarray(probs, dtype=np.float64).reshape(len(texts))


def _frame():
    rng = random.Random(11)
    langs = [synth.EN, synth.ZH, synth.FR, synth.DE, synth.ES, synth.RU]
    texts = []
    for i in range(400):
        article, _ = synth.article(rng.choice(langs), rng)
        if i % 4 == 0:  # a mixed-language document
            other, _ = synth.article(rng.choice(langs), rng)
            article = article + "\n" + other
        texts.append(article * rng.choice([1, 1, 2, 8]))
    texts += generated_texts(300, seed=5) + [None, "", "short one", "\n\n\n", "a\nb\nc"]
    return pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))], "doc_index": range(len(texts)), "text": texts})


@pytest.mark.parametrize("params", [{}, {"level": "paragraph"}, {"max_chars": 300},
                                    {"level": "paragraph", "max_chars": 200, "paragraph_min_chars": 20, "min_chars": 0},
                                    {"keep": ["en", "zh"], "min_score": {"zh": 0.65, "en": 0.8, "default": 0.85}}])
def test_stage_output_equals_the_fasttext_backed_stage(params):
    """The kernel's predictions inside the whole stage (the script rules and the rest of #23 on, as by default, and
    off) give what fastText's own predict gives, value for value."""
    df = _frame()
    for extra in ({}, {"script_rules": False, "casefold_below": 0, "merge": {}}):
        cfg = LangIdConfig(**params, **extra)
        old, new = FastTextLangId(cfg, RunContext()), LangId(cfg, RunContext())
        old.setup()
        new.setup()
        want, got = old.transform(df), new.transform(df)
        pd.testing.assert_frame_equal(got, want)
        assert (got["lang"] != UNDETERMINED).sum() > 300
        kept_old, rej_old, stats_old = old.run_partition(df)
        kept_new, rej_new, stats_new = new.run_partition(df)
        pd.testing.assert_frame_equal(kept_new, kept_old)
        pd.testing.assert_frame_equal(rej_new, rej_old)
    assert stats_new.removed == stats_old.removed
