"""symbol_counts against the Arrow compute calls it replaced in the quality station (RE2 regexes, substring
counts), on edge cases and on random texts over an alphabet of the characters that matter."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpupipe.kernels.strings import arrow_buffers
from gpupipe.kernels.symbol_counts import CAPITALIZED, ELLIPSIS, HASH, WORDS, symbol_counts


def arrow_counts(texts: list[str]) -> np.ndarray:
    arr = pa.array(texts, pa.large_string())

    def n(f, *a):
        return np.asarray(f(arr, *a).fill_null(0).to_numpy(zero_copy_only=False), np.int64)

    first = np.asarray(pc.match_substring_regex(arr, r"^\p{Lu}").fill_null(False).to_numpy(zero_copy_only=False),
                       np.int64)
    out = np.zeros((len(texts), 4), np.int64)
    out[:, HASH] = n(pc.count_substring, "#")
    out[:, ELLIPSIS] = n(pc.count_substring, "...") + n(pc.count_substring, "…")
    out[:, CAPITALIZED] = n(pc.count_substring_regex, r"\s\p{Lu}") + first
    out[:, WORDS] = n(pc.count_substring_regex, r"\S+")
    return out


def kernel_counts(texts: list[str]) -> np.ndarray:
    return symbol_counts(*arrow_buffers(pa.array(texts, pa.large_string())))


CASES = ["", " ", "Hello World", " hello World", "ÉCOLE à Paris", "Σ σ Ω", "Ａ fullwidth", "x\u000bY", "x\u00a0Y",
         "x\u3000Y", "....", "......", "a...b…c", "##h#", "\tA\nB\rC\fD E", "中文 Ünd", "ǅ title-case"]


def test_edge_cases_match_arrow():
    assert kernel_counts(CASES).tolist() == arrow_counts(CASES).tolist()


@pytest.mark.parametrize("seed", [0, 1])
def test_random_texts_match_arrow(seed):
    rng = np.random.default_rng(seed)
    alphabet = list("aZ .#…\t\n\r\f\u000b\u00a0\u3000ÉéΣ中ǅ1-") + ["\U0001E900"]   # U+1E900: an Adlam capital
    texts = ["".join(rng.choice(alphabet, rng.integers(0, 60))) for _ in range(3000)]
    assert np.array_equal(kernel_counts(texts), arrow_counts(texts))


def test_sliced_array_and_no_documents():
    arr = pa.array(["skip me", "A b. C...", "#x"], pa.large_string()).slice(1)
    assert symbol_counts(*arrow_buffers(arr)).tolist() == arrow_counts(["A b. C...", "#x"]).tolist()
    assert symbol_counts(*arrow_buffers(pa.array([], pa.large_string()))).shape == (0, 4)
