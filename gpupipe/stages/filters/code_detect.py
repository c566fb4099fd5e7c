"""Code detection: the probability that a document is source code rather than prose, from the shape of its text.

One numba pass over each document's first `max_bytes` bytes counts line shapes (how lines end, indentation,
comment and bullet lines), character classes (symbols by kind, letters, digits, non-ASCII) and tokens (programming
keywords, English function words, identifier-shaped tokens, calls, attribute access): kernels/code_features.py.
`features` turns the counts into ratios (per line, per non-space character, per token) and a logistic model
(`MODEL`: a weight per feature, on features standardised by the training set's mean and spread) gives the
probability of code. No model file: the weights are the constants below, fitted by `fit` (Newton's method on the
L2-penalised log-loss: deterministic) on the training half of real files from installed packages
(code_samples.py); `python profiling/bench_code_detect.py --fit` prints them again. The other half measures it.

Why features and not a fastText model: a text's language is in its words, code's is in its shape (line ends,
indentation, symbols), which a bag of words sees only in part; the features are computed from the bytes in one
pass (no tokenisation, no model to load or ship), and the fit is reproducible from what any environment has.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

# Case-sensitive: tokens that are keywords or built-in names of common languages and rare as English words.
KEYWORDS = (
    "def elif self cls import lambda None True False nonlocal isinstance kwargs args len dict str int float bool "
    "tuple super __init__ __name__ __main__ yield async await const var let void char struct typedef static public "
    "private protected include define ifdef ifndef endif pragma nullptr NULL namespace sizeof printf fprintf std "
    "null undefined function unsigned double enum extern inline template typename auto goto throw catch "
    "try except finally raise assert del elif println malloc free size_t int32_t int64_t uint8_t uint32_t "
    "uint64_t PyObject Py_ssize_t np torch instanceof typeof echo fi esac elif return endl cout argv argc "
    "isinstance getattr setattr hasattr ValueError TypeError KeyError").split()
# Lowercased: English function words (prose has one in four or five tokens of them).
STOP_WORDS = (
    "the of and to a an that was were are be been being by at which its their has have had this it on as with "
    "we you they he she his her will would can could should may might more also than these those there such "
    "when into about after only other some most many our your what who how very much where before between "
    "through during each both any all been because while so do does did not no but or").split()

MAX_BYTES = 8192      # each document is judged by its first 8 KiB


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a / np.maximum(b, 1)


RATIOS = ("indented", "deep_indent", "hash_line", "slash_line", "bullet_line", "prompt_line", "blank",
          "end_semibrace", "end_colon", "end_close", "end_open", "end_period", "end_word", "end_quote",
          "end_nonascii", "end_other", "letters", "digits", "braces", "brackets", "parens", "semi", "eq",
          "underscore", "angle", "ops", "quotes", "period", "comma", "ops2_per_line", "keywords", "stop_words",
          "ident_like", "calls", "attr", "log_chars_per_line", "log_tokens_per_line", "prose_lines", "flat_lines",
          "flat_prose_lines", "rule_lines", "block_intro")
FEATURES = RATIOS + tuple(f"sqrt_{r}" for r in RATIOS)   # each ratio and its square root (a bend for the linear model)
MAX_NONASCII = 0.25   # a text with more non-ASCII characters than this share of its non-space ones is not code


def features(counts: np.ndarray) -> np.ndarray:
    """(n, len(FEATURES)) float64: the RATIOS of kernels/code_features.py's counts, then their square roots."""
    from gpupipe.kernels import code_features as k

    c = counts.astype(np.float64)
    lines, nonspace, tokens = c[:, k.LINES], c[:, k.NONSPACE], c[:, k.TOKENS]
    cols = []
    for name in RATIOS:
        if name == "blank":
            cols.append(_ratio(c[:, k.BLANK], lines + c[:, k.BLANK]))
        elif name == "ops2_per_line":
            cols.append(_ratio(c[:, k.OPS2], lines))
        elif name == "log_chars_per_line":
            cols.append(np.log1p(_ratio(nonspace, lines)))
        elif name == "log_tokens_per_line":
            cols.append(np.log1p(_ratio(tokens, lines)))
        elif name == "flat_prose_lines":    # of the lines without indentation
            cols.append(_ratio(c[:, k.FLAT_PROSE_LINES], c[:, k.FLAT_LINES]))
        elif name in ("prose_lines", "flat_lines", "rule_lines", "block_intro"):
            cols.append(_ratio(c[:, k.COUNTS.index(name)], lines))
        else:
            j = k.COUNTS.index(name)
            per = lines if j < k.NONSPACE else (nonspace if j < k.TOKENS else tokens)
            cols.append(_ratio(c[:, j], per))
    x = np.stack(cols, axis=1)
    return np.hstack([x, np.sqrt(x)])


def not_code(counts: np.ndarray) -> np.ndarray:
    """Texts that cannot be code: more than MAX_NONASCII of their non-space characters are non-ASCII (code is
    written in ASCII identifiers, keywords and symbols; Chinese or Russian prose is not), or nothing but spaces."""
    from gpupipe.kernels import code_features as k

    return (counts[:, k.NONASCII] > MAX_NONASCII * counts[:, k.NONSPACE]) | (counts[:, k.NONSPACE] == 0)


@functools.lru_cache(maxsize=1)
def _tables() -> tuple[np.ndarray, np.ndarray]:
    from gpupipe.kernels.code_features import hash_table

    return hash_table(KEYWORDS), hash_table(STOP_WORDS, lower=True)


def text_counts(texts, max_bytes: int = MAX_BYTES) -> np.ndarray:
    """The kernel's counts for an Arrow string array (or a list of str)."""
    from gpupipe.kernels.code_features import code_counts
    from gpupipe.kernels.strings import arrow_buffers

    if not isinstance(texts, (pa.Array, pa.ChunkedArray)):
        texts = pa.array(list(texts), type=pa.large_string())
    return code_counts(*arrow_buffers(texts), *_tables(), max_bytes=max_bytes)


def probability(x: np.ndarray, model: dict) -> np.ndarray:
    z = (x - np.asarray(model["mean"])) / np.asarray(model["scale"])
    return 1.0 / (1.0 + np.exp(-(z @ np.asarray(model["weights"]) + model["bias"])))


def code_probability(texts, model: dict | None = None) -> np.ndarray:
    """P(code) for each text (Arrow string array or list of str), with the shipped MODEL by default; 0 for a
    text `not_code` rules out."""
    counts = text_counts(texts)
    return np.where(not_code(counts), 0.0, probability(features(counts), model or MODEL))


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, iterations: int = 50) -> dict:
    """Logistic regression by Newton's method on standardised features, each class weighted to half the loss,
    L2 penalty `l2` on the weights (not the bias). Deterministic: no random start, no sampling."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    sw = np.where(y == 1, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2 / len(x))
    penalty[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (sw * (p - y)) + penalty * w
        hess = (z * (sw * p * (1 - p))[:, None]).T @ z + np.diag(penalty + 1e-12)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return {"features": list(FEATURES), "mean": mean.round(6).tolist(), "scale": scale.round(6).tolist(),
            "weights": w[:-1].round(6).tolist(), "bias": round(float(w[-1]), 6)}


# Fitted by `fit` on the training half of code_samples.labelled_samples() (python profiling/bench_code_detect.py
# --fit prints this dict); measured on the other half by the same script.
MODEL: dict = {
    "features": list(FEATURES),
    "mean": [
        0.566935, 0.537612, 0.06413, 0.016158, 0.010645, 0.019858, 0.204006, 0.097757, 0.111176, 0.092835,
        0.145624, 0.136513, 0.248535, 0.05616, 0.000622, 0.110778, 0.8097, 0.034414, 0.003801, 0.005038,
        0.013528, 0.000614, 0.00482, 0.013784, 0.005109, 0.034041, 0.027761, 0.015643, 0.012852, 0.22384,
        0.079294, 0.1627, 0.125454, 0.035891, 0.050282, 3.679437, 1.868476, 0.242679, 0.433065, 0.379016,
        0.00699, 0.049947, 0.689401, 0.652822, 0.125449, 0.03672, 0.028026, 0.042096, 0.43552, 0.2066,
        0.285355, 0.219769, 0.274192, 0.304384, 0.444945, 0.18263, 0.002494, 0.243969, 0.898318, 0.145431,
        0.043298, 0.046624, 0.086128, 0.009994, 0.045658, 0.097026, 0.050669, 0.166742, 0.147, 0.118857,
        0.101806, 0.368054, 0.206332, 0.379305, 0.32381, 0.125411, 0.193873, 1.915698, 1.358916, 0.436358,
        0.609773, 0.522045, 0.026356, 0.141663],
    "scale": [
        0.314013, 0.332764, 0.150455, 0.063255, 0.049482, 0.077927, 0.094688, 0.137318, 0.095509, 0.128864,
        0.185128, 0.150703, 0.201557, 0.06774, 0.007364, 0.146016, 0.086205, 0.050427, 0.005415, 0.0099,
        0.017507, 0.002058, 0.008085, 0.015474, 0.008704, 0.033533, 0.025453, 0.010272, 0.016423, 0.373246,
        0.102774, 0.096886, 0.097236, 0.05384, 0.046529, 0.37267, 0.394119, 0.217307, 0.314013, 0.302432,
        0.024493, 0.071055, 0.302756, 0.333819, 0.219984, 0.121693, 0.099298, 0.134485, 0.119701, 0.234678,
        0.172477, 0.211038, 0.265411, 0.209435, 0.224853, 0.151016, 0.024805, 0.226402, 0.052197, 0.115168,
        0.04389, 0.053522, 0.078165, 0.022664, 0.052298, 0.066107, 0.050419, 0.07898, 0.078433, 0.038942,
        0.04987, 0.297282, 0.191626, 0.137211, 0.143533, 0.141997, 0.112676, 0.097655, 0.147732, 0.228627,
        0.247471, 0.326321, 0.079343, 0.172854],
    "weights": [
        0.495764, 0.389252, -0.64591, 0.175972, 0.132632, -1.056965, 0.752925, -0.610856, -0.610031,
        -0.28849, 0.506822, 0.08794, 0.189181, 0.35538, -0.150155, 0.07631, 0.115289, -0.156111, -0.493496,
        0.125585, -0.169181, -0.444886, -0.339901, -0.047363, -0.008802, 0.138479, -0.002668, -0.101834,
        0.270978, -0.241559, 0.624487, 0.177213, -0.188318, 0.451783, -0.041531, -0.395533, 0.384172,
        -1.02986, -0.495764, -0.852504, -0.958194, -1.134936, -0.583736, -0.6902, 1.991236, 0.694229,
        -0.660609, 0.377451, 0.252275, -0.029716, -0.055911, 0.067869, 0.383486, -0.214667, 0.130366,
        0.815898, 0.435522, 0.351698, -0.061029, 0.026863, 0.594563, 0.176027, 0.060694, -0.066345,
        0.782121, 0.540331, 0.487956, -0.185835, -0.408575, -0.335594, 0.023997, -0.45917, 1.319231,
        0.340059, 0.934917, 0.600218, 0.51141, -0.388825, 0.494742, -0.169527, -0.150314, -0.397904,
        0.212126, -2.05137],
    "bias": -2.242794,
}

__all__ = ["FEATURES", "KEYWORDS", "MODEL", "STOP_WORDS", "code_probability", "features", "fit", "not_code",
           "probability", "text_counts"]
