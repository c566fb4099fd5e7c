"""kernels/code_features.py against a plain-Python reading of the same rules, on real files of the installed
packages (code and prose) and on edge cases (#34)."""

import re

import numpy as np
import pyarrow as pa

from gpupipe.kernels.code_features import COUNTS, code_counts, fnv1a, hash_table
from gpupipe.kernels.strings import arrow_buffers
from tests.helpers.installed_text import installed_samples

KEYWORDS = ["def", "return", "self", "import", "const"]
STOP = ["the", "of", "and", "is"]
END_KIND = [(";{}", "end_semibrace"), (":", "end_colon"), (")]", "end_close"), ("([,", "end_open"),
            (".?!", "end_period"), ("\"'`", "end_quote")]


def reference(text: str, max_bytes: int) -> dict:
    """The counts the kernel documents, by lines and regexes (ASCII texts: a byte is a character)."""
    text = text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
    c = dict.fromkeys(COUNTS, 0)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        body = line.strip(" \t\r\v\f")
        if not body:
            c["blank"] += i < len(lines) - 1
            continue
        c["lines"] += 1
        lead = len(line) - len(line.lstrip(" \t\r\v\f"))
        cols = sum(4 if ch == "\t" else (1 if ch == " " else 0) for ch in line[:lead])
        c["indented"] += cols > 0
        c["deep_indent"] += cols >= 4
        last = body[-1]
        kind = next((k for chars, k in END_KIND if last in chars), None)
        if kind is None:
            kind = "end_word" if (last.isascii() and (last.isalnum() or last == "_")) else (
                "end_nonascii" if not last.isascii() else "end_other")
        c[kind] += 1
    tokens = list(re.finditer(r"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*", text))
    c["tokens"] = len(tokens)
    c["keywords"] = sum(t.group() in KEYWORDS for t in tokens)
    c["stop_words"] = sum(t.group().lower() in STOP for t in tokens)
    c["calls"] = sum(text[t.end():t.end() + 1] == "(" for t in tokens)
    c["braces"] = sum(text.count(ch) for ch in "{}")
    c["semi"] = text.count(";")
    c["nonspace"] = sum(not ch.isspace() or ch in "\x1c\x1d\x1e\x1f\x85\xa0" for ch in text
                        if ch not in " \t\r\n\v\f")
    return c


def kernel(texts, max_bytes=8192):
    arr = pa.array(texts, type=pa.large_string())
    return code_counts(*arrow_buffers(arr), hash_table(KEYWORDS), hash_table(STOP, lower=True), max_bytes)


def test_counts_equal_the_reference_on_real_files():
    texts = [s.text for s in installed_samples() if s.text.isascii()][:300]
    assert len(texts) == 300
    for max_bytes in (8192, 700):
        got = kernel(texts, max_bytes)
        for text, row in zip(texts, got):
            want = reference(text, max_bytes)
            for name in ("lines", "blank", "indented", "deep_indent", "end_semibrace", "end_colon", "end_close",
                         "end_open", "end_period", "end_word", "end_quote", "end_other", "tokens", "keywords",
                         "stop_words", "calls", "braces", "semi", "nonspace"):
                assert row[COUNTS.index(name)] == want[name], (name, text[:200])


def test_edge_cases():
    texts = ["", "\n\n\n", "a", "x = f(y)  \r\n\tif x:\n", "数据 模型。\n", "The_end", "\u00e9t\u00e9 is the"]
    got = {t: dict(zip(COUNTS, row)) for t, row in zip(texts, kernel(texts))}
    assert got[""]["lines"] == 0 and got["\n\n\n"]["blank"] == 3 and got["a"]["lines"] == 1
    assert got["x = f(y)  \r\n\tif x:\n"]["end_close"] == 1 and got["x = f(y)  \r\n\tif x:\n"]["end_colon"] == 1
    assert got["x = f(y)  \r\n\tif x:\n"]["deep_indent"] == 1 and got["x = f(y)  \r\n\tif x:\n"]["calls"] == 1
    assert got["数据 模型。\n"]["nonascii"] == 5 and got["数据 模型。\n"]["end_nonascii"] == 1
    assert got["The_end"]["ident_like"] == 1 and got["The_end"]["stop_words"] == 0
    assert got["\u00e9t\u00e9 is the"]["stop_words"] == 2


def test_hash_tables_are_sorted_fnv1a():
    t = hash_table(["b", "a", "a"])
    assert t.dtype == np.uint64 and list(t) == sorted({fnv1a("a"), fnv1a("b")})
    assert fnv1a("The", lower=True) == fnv1a("the")
