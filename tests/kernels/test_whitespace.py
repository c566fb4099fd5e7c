"""clean_whitespace against the Arrow regex passes it replaced in normalize (the reference chain is spelt out
here), on edge cases and random texts over an alphabet of every character class the rules treat."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpupipe.kernels.strings import arrow_buffers
from gpupipe.kernels.whitespace import clean_whitespace
from gpupipe.stages.text.normalize import clean_lines


def arrow_chain(arr: pa.Array) -> pa.Array:
    arr = pc.replace_substring_regex(arr, r"\r\n?", "\n")
    arr = pc.replace_substring_regex(arr, r"[\x00-\x08\x0b-\x1f\x7f-\x{9f}]", "")
    arr = pc.replace_substring_regex(arr, r"[\t\p{Zs}\x{2028}\x{2029}]+", " ")
    arr = pc.replace_substring_regex(arr, r" ?\n[ \n]*", "\n")
    return pc.utf8_trim(arr, " \n")


def kernel(texts: list[str]) -> list[str]:
    return clean_lines(pa.array(texts, pa.large_string())).to_pylist()


ZS = [chr(c) for c in range(0x110000) if c < 0xD800 or c > 0xDFFF
      if __import__("unicodedata").category(chr(c)) == "Zs"]

CASES = ["", " ", "\n", " \n \n ", "a", " a ", "a  b", "a \n b", "a\r\nb", "a\rb", "a\r\rb", "a\r\x00\nb",
         "x\x00y", "x\x0by\x0cz", "x\x85y", "\x7fq", "tab\there", "a\u2028b\u2029c", "a\u3000\u00a0b",
         "中文\u3000测试\n\n  第二行 ", "a \x01 b", "a\x01\nb", "\u200bzero-width stays", "é\u0301", "end\n"]


def test_edge_cases_match_arrow():
    assert kernel(CASES) == arrow_chain(pa.array(CASES, pa.large_string())).to_pylist()


def test_every_space_separator_is_a_space():
    texts = [f"a{z}{z}b" for z in ZS] + [f"{z}a{z}" for z in ZS]
    assert kernel(texts) == arrow_chain(pa.array(texts, pa.large_string())).to_pylist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_texts_match_arrow(seed):
    rng = np.random.default_rng(seed)
    alphabet = list("ab中 \t\n\r\x00\x0b\x1f\x7f\x85\x9f\u00a0\u1680\u2000\u200a\u200b\u2028\u2029\u202f\u205f"
                    "\u3000\u00e9\U0001F600")
    texts = ["".join(rng.choice(alphabet, rng.integers(0, 40))) for _ in range(4000)]
    arr = pa.array(texts, pa.large_string())
    assert clean_lines(arr).to_pylist() == arrow_chain(arr).to_pylist()


def test_sliced_and_int32_arrays():
    arr = pa.array(["skip\r\n", " a \n\n b ", "\tc\t"], pa.string()).slice(1)
    out = clean_lines(arr)
    assert out.type == pa.string() and out.to_pylist() == ["a\nb", "c"]
    data, offsets = clean_whitespace(*arrow_buffers(pa.array([], pa.large_string())))
    assert len(data) == 0 and offsets.tolist() == [0]
