"""Sentence splitting shared by chunk_markdown (packing sentences into chunks) and exact_dedup's sentence level."""

from __future__ import annotations

import re

# A sentence ends after 。！？； (closing quotes/brackets included), after . ! ? ; followed by whitespace or the
# end, or at a line break. Trailing whitespace stays with the sentence, so pieces concatenate back to the text.
_SENTENCE_END = re.compile(r"(?:[。！？；]+[”’」』）】\"')\]]*|[.!?;]+[\"'”’)\]]*(?=\s|$)|\n)[ \t\n]*")


def split_sentences(text: str) -> list[str]:
    """The text's sentences, in order; "".join of them is the text."""
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        if m.end() > start:
            out.append(text[start:m.end()])
            start = m.end()
    if start < len(text):
        out.append(text[start:])
    return out


__all__ = ["split_sentences"]
