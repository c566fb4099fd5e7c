"""Markdown documents → pretraining chunks in LLaMA-Factory's format: a structure-aware chunker, a rule
filter, an optional LLM judge (llm_judge.py), the `chunk_markdown` stage and the `gpupipe chunk-markdown` command.

Chunking (after the user's reference recipe, an article on building a LLaMA-Factory pretraining set from Markdown;
the choices it leaves open are written down):
- Sections start at ATX headings (`#`..`######` + space); a `#` line inside a ``` or ~~~ fence is code, not a
  heading (fences are tracked line by line, CommonMark-style: the closing fence uses the same character and is at
  least as long; an unclosed fence runs to the end). Setext headings (`Title\\n===`) are not recognised: `---` is
  too often a rule or front matter. Text before the first heading is its own section (the preamble).
- Atomic units are paragraphs (split on blank lines) and whole fenced code blocks. A heading line is glued to the
  unit after it, so a heading never ends up alone at the end of a chunk.
- A unit over `chunk_size` is cut at sentence ends (。！？； anywhere, . ! ? ; before a space or the end, and line
  breaks, as in the recipe's regex, so table rows and list items stay whole) and re-packed up to `chunk_size`; a
  single sentence over `chunk_size` is hard-cut (at the last space in the final fifth of the window when there is
  one, so English words stay whole). Code is never cut: an oversized code block is its own chunk,
  `oversized_code: true`. No overlap (overlapping text would be learned twice).
- Sections up to `chunk_size` are packed greedily into chunks of at most `chunk_size` (the recipe's loop could exceed
  it by closing a buffer only after it overflowed; the issue's bound wins). A longer section is packed from its
  units on its own; when it yields more than `max_slices` chunks a warning is logged and counted.
- Chunks under `min_size` are merged into the previous chunk, the first into the next. Tiny neighbours first absorb
  each other (the literal rule applied right to left), so a merged chunk stays within about
  `chunk_size + 2·min_size`.
- Sections whose title (or a parent's title) is worthless (references, acknowledgements, ...) are chunked apart
  from the rest and never merged with it, so the rule filter drops them without taking good text along.
- Chunk id: sha256 of [source path relative to the input root, index, first 64 characters] (the recipe's,
  16 hex digits instead of 12 for fewer collisions): the same on every run and every machine. `chunk_ids: seed`
  gives the recipe's own: md5 of f"{file name}-{index}-{first 64 characters}", 12 hex digits (two files of one name
  in different folders whose chunks start alike then share an id).
- Rule filter: too short below `min_effective_chars` (100, the recipe's MIN_SIZE) characters other than whitespace
  and # * - | [ ] ( ); worthless titles by `title_match`: `parts` (default) splits a title (a heading of the chunk's
  section, or a first line of at most TITLE_LINE_CHARS) at separators and conjunctions (、，,/&|:; and, or, 与, 和,
  及, 以及, 或) and drops it when a part is a worthless title, so "参考文献与延伸阅读" and "References and further
  reading" go while "目录遍历漏洞" (directory traversal) stays; `seed` is the recipe's literal rule (the first non-blank
  line contains one of its DROP_TITLES, case-sensitive: it also drops "## 目录遍历漏洞"); `exact` matches the
  whole title only.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal

import pandas as pd
from pydantic import Field, ValidationError, ValidationInfo, field_validator

from gpupipe.config_base import ConfigError, Fraction, Strict, format_error
from gpupipe.io.parts import atomic_write_text
from gpupipe.io.markdown_dir import iter_markdown_dir
from gpupipe.io.records import Rejected, ReaderError
from gpupipe.kernels.script_class import SEED_HAN, class_body
from gpupipe.stages.base import Applied, MapStage, StageStats
from gpupipe.stages.text.llm_judge import JudgeConfig, JudgeError, LLMJudge, Verdict
from gpupipe.stages.text.sentences import split_sentences

log = logging.getLogger("gpupipe")

SEP = "\n\n"  # between packed units and sections: a Markdown paragraph break
ID_PREFIX_CHARS = 64

# ----------------------------------------------------------------------------- Markdown structure

_ATX = re.compile(r"^ {0,3}(#{1,6})(?=[ \t]|$)(.*)$")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_BLANK = re.compile(r"^[ \t]*$")


@dataclass(frozen=True)
class Section:
    path: tuple[str, ...]  # heading titles from the top level down; () for the preamble
    lines: list[str]

    @property
    def text(self) -> str:
        return "\n".join(self.lines).strip()


@dataclass(frozen=True)
class Unit:
    text: str
    code: bool = False


@dataclass(frozen=True)
class Chunk:
    text: str
    path: tuple[str, ...]
    oversized_code: bool = False
    isolated: bool = False  # from a worthless section: kept apart, never merged with other text


def heading(line: str) -> tuple[int, str] | None:
    """(level, title) of an ATX heading line, else None. A closing run of #s is not part of the title."""
    m = _ATX.match(line)
    if not m:
        return None
    title = re.sub(r"(?:^|[ \t]+)#+[ \t]*$", "", m.group(2)).strip()
    return len(m.group(1)), title


class _Fences:
    """Tracks whether a line sequence is inside a fenced code block."""

    def __init__(self):
        self.marker: str | None = None  # the opening fence's run, e.g. "````"

    def step(self, line: str) -> str:
        """Consume one line; returns 'open', 'close', 'code' (inside) or 'text'."""
        if self.marker is None:
            m = _FENCE_OPEN.match(line)
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):  # ```x``` is inline code, not a fence
                self.marker = m.group(1)
                return "open"
            return "text"
        stripped = line.strip()
        if (len(line) - len(line.lstrip(" ")) <= 3 and stripped and set(stripped) == {self.marker[0]}
                and len(stripped) >= len(self.marker)):
            self.marker = None
            return "close"
        return "code"


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")


def split_sections(md: str) -> list[Section]:
    """Sections at ATX headings outside code fences; each starts with its heading line; the preamble is path ()."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    path: tuple[str, ...] = ()
    lines: list[str] = []
    fences = _Fences()
    for line in normalize_newlines(md).split("\n"):
        h = heading(line) if fences.step(line) == "text" else None
        if h is None:
            lines.append(line)
            continue
        if "\n".join(lines).strip():
            sections.append(Section(path, lines))
        while stack and stack[-1][0] >= h[0]:
            stack.pop()
        stack.append(h)
        path, lines = tuple(t for _, t in stack), [line]
    if "\n".join(lines).strip():
        sections.append(Section(path, lines))
    return sections


def atomic_units(lines: list[str]) -> list[Unit]:
    """Paragraphs (split on blank lines) and whole fenced code blocks, in order; a leading heading line is glued
    to the unit after it."""
    units: list[Unit] = []
    para: list[str] = []
    code: list[str] | None = None
    fences = _Fences()

    def end_paragraph() -> None:
        if para:
            units.append(Unit("\n".join(para).strip()))
            para.clear()

    for line in lines:
        kind = fences.step(line)
        if kind == "open":
            end_paragraph()
            code = [line]
        elif kind in ("code", "close"):
            code.append(line)
            if kind == "close":
                units.append(Unit("\n".join(code).strip("\n"), code=True))
                code = None
        elif _BLANK.match(line):
            end_paragraph()
        else:
            para.append(line)
    end_paragraph()
    if code is not None:  # unclosed fence: code to the end
        units.append(Unit("\n".join(code).strip("\n"), code=True))
    units = [u for u in units if u.text.strip()]
    if len(units) > 1 and not units[0].code and heading(units[0].text) and "\n" not in units[0].text:
        units[:2] = [Unit(units[0].text + SEP + units[1].text, units[1].code)]
    return units


# ----------------------------------------------------------------------------- cutting oversized units

def hard_split(text: str, size: int) -> list[str]:
    """Windows of at most `size` characters, cut at the last whitespace in the window's final fifth if any."""
    pieces, start = [], 0
    while len(text) - start > size:
        cut = start + size
        space = max(text.rfind(" ", cut - size // 5, cut), text.rfind("\n", cut - size // 5, cut))
        if space > start:
            cut = space + 1
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return [p.strip() for p in pieces if p.strip()]


def split_oversized(text: str, size: int) -> list[str]:
    """A long paragraph → pieces of at most `size`: whole sentences packed greedily, hard cuts only inside a
    sentence longer than `size`."""
    pieces: list[str] = []
    buf = ""
    for sentence in split_sentences(text):
        if len(sentence.strip()) > size:
            if buf.strip():
                pieces.append(buf.strip())
            buf = ""
            pieces.extend(hard_split(sentence, size))
        elif len((buf + sentence).strip()) <= size:
            buf += sentence
        else:
            pieces.append(buf.strip())
            buf = sentence
    if buf.strip():
        pieces.append(buf.strip())
    return pieces


# ----------------------------------------------------------------------------- packing and merging


def pack_units(units: list[Unit], size: int, path: tuple[str, ...] = ()) -> list[Chunk]:
    """Greedy: add units to the open chunk while it stays within `size`; an oversized unit closes the open chunk
    and is cut on its own (code: kept whole and flagged)."""
    out: list[Chunk] = []
    cur: list[str] = []
    cur_len = 0

    def close() -> None:
        nonlocal cur, cur_len
        if cur:
            out.append(Chunk(SEP.join(cur), path))
        cur, cur_len = [], 0

    for u in units:
        if len(u.text) > size:
            close()
            if u.code:
                out.append(Chunk(u.text, path, oversized_code=True))
            else:
                out.extend(Chunk(p, path) for p in split_oversized(u.text, size))
        else:
            if cur and cur_len + len(SEP) + len(u.text) > size:
                close()
            cur_len += (len(SEP) if cur else 0) + len(u.text)
            cur.append(u.text)
    close()
    return out


def chunk_sections(sections: list[Section], size: int, max_slices: int,
                   warnings: list[tuple[tuple[str, ...], int]]) -> list[Chunk]:
    """Short sections packed together (a chunk takes the path of its first section); a long one cut alone."""
    out: list[Chunk] = []
    buf: list[Section] = []
    buf_len = 0

    def close() -> None:
        nonlocal buf, buf_len
        if buf:
            out.append(Chunk(SEP.join(s.text for s in buf), buf[0].path))
        buf, buf_len = [], 0

    for sec in sections:
        text = sec.text
        if len(text) > size:
            close()
            slices = pack_units(atomic_units(sec.lines), size, sec.path)
            if len(slices) > max_slices:
                warnings.append((sec.path, len(slices)))
            out.extend(slices)
            continue
        if buf and buf_len + len(SEP) + len(text) > size:
            close()
        buf_len += (len(SEP) if buf else 0) + len(text)
        buf.append(sec)
    close()
    return out


def _join(a: Chunk, b: Chunk) -> Chunk:
    return Chunk(a.text + SEP + b.text, a.path, a.oversized_code or b.oversized_code, a.isolated)


def merge_small(chunks: list[Chunk], min_size: int) -> list[Chunk]:
    """Chunks under `min_size` join the previous chunk (one with no previous joins the next). Chunks of worthless
    sections and other chunks never mix."""
    def small(c: Chunk) -> bool:
        return len(c.text) < min_size

    # 1. neighbouring small chunks absorb each other until they reach min_size (keeps merged chunks bounded)
    runs: list[Chunk] = []
    for c in chunks:
        if runs and small(runs[-1]) and small(c) and runs[-1].isolated == c.isolated:
            runs[-1] = _join(runs[-1], c)
        else:
            runs.append(c)
    # 2. a remaining small chunk joins the previous one, or the next when there is no compatible previous
    out: list[Chunk] = []
    carry: Chunk | None = None
    for c in runs:
        if carry is not None:
            if carry.isolated == c.isolated:
                c = _join(carry, c)
            else:
                out.append(carry)
            carry = None
        if small(c) and out and out[-1].isolated == c.isolated:
            out[-1] = _join(out[-1], c)
        elif small(c):
            carry = c
        else:
            out.append(c)
    if carry is not None:
        out.append(carry)
    return out


def chunk_markdown(md: str, chunk_size: int = 1500, min_size: int = 100, max_slices: int = 20,
                   isolate: Callable[[tuple[str, ...]], bool] | None = None
                   ) -> tuple[list[Chunk], list[tuple[tuple[str, ...], int]]]:
    """A Markdown document → (chunks in document order, [(section path, slices)] of sections over max_slices).

    `isolate(path)` marks sections to chunk apart from the rest (worthless titles); None isolates nothing.
    """
    warnings: list[tuple[tuple[str, ...], int]] = []
    chunks: list[Chunk] = []
    sections = split_sections(md)
    for isolated, group in itertools.groupby(sections, key=lambda s: bool(isolate and isolate(s.path))):
        for c in chunk_sections(list(group), chunk_size, max_slices, warnings):
            chunks.append(replace(c, isolated=isolated))
    return merge_small(chunks, min_size), warnings


def chunk_id(source: str, index: int, text: str) -> str:
    payload = json.dumps([source, index, text[:ID_PREFIX_CHARS]], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def seed_chunk_id(source: str, index: int, text: str) -> str:
    """The recipe's id: hashlib.md5(f"{source}-{i}-{text[:64]}".encode()).hexdigest()[:12], where its source is
    os.path.basename(path)."""
    name = source.replace("\\", "/").rsplit("/", 1)[-1]
    return hashlib.md5(f"{name}-{index}-{text[:ID_PREFIX_CHARS]}".encode("utf-8")).hexdigest()[:12]


def section_label(path: tuple[str, ...]) -> str:
    return " > ".join(path)


# ------------------------------------------------------------ rule filter (cheap rules before the optional LLM judge)

DEFAULT_WORTHLESS_TITLES = [
    "references", "reference", "bibliography", "works cited", "literature cited", "cited literature",
    "acknowledgements", "acknowledgments", "acknowledgement", "acknowledgment",
    "table of contents", "contents", "toc",
    "about the author", "about the authors", "author biography", "author biographies", "author bio", "authors",
    "biography", "copyright", "copyright notice", "copyright statement", "all rights reserved",
    "参考文献", "参考资料", "引用文献", "致谢", "鸣谢", "目录", "作者简介", "作者介绍", "关于作者",
    "版权声明", "版权所有", "版权信息",
]

# The recipe's DROP_TITLES, as written (title_match: seed)
SEED_DROP_TITLES = ("参考文献", "References", "致谢", "Acknowledgement", "目录", "作者简介", "版权声明", "版权所有")
# title_match: parts splits a title at these (separators and conjunctions) and judges each part
_TITLE_PARTS = re.compile(r"\s*(?:[、，,/&|:：;；+]|\band\b|\bor\b|以及|与|和|及|或)\s*")
TITLE_LINE_CHARS = 60   # a first line this short (normalized) is judged as a title by parts

# Section numbering in front of a title: "7.", "7.1", "VII.", "A.", "第三章", "一、", "（二）".
_NUMBERING = re.compile(r"^(?:第[一二三四五六七八九十百零〇两\d]+[章节部分篇]|\d+(?:\.\d+)*\.?|[ivxlc]+\.|[a-z][.)]"
                        r"|[（(]?[一二三四五六七八九十\d]+[)）、.．])\s*")
_EFFECTIVE_IGNORED = re.compile(r"[\s#*\-|\[\]()]")          # the recipe's "effective characters"
_CITATION = re.compile(r"\[\d+(?:[,\-–]\s*\d+)*\]|\barxiv\b|\bdoi\b\s*[:.]|doi\.org|\bet al\.", re.I)
_URL = re.compile(r"https?://|\bwww\.", re.I)
PROSE_LINE_CHARS = 150
_SYMBOL = re.compile(rf"[^\w\s{class_body(SEED_HAN, 'python')}]")   # the recipe's special characters

# Markup: what a reader of the rendered page does not read as text. Badges (`[![CI](img)](link)`, `<img ...>`),
# images, HTML tags and comments, link targets and definitions, bare URLs. A link's own text stays text, and so
# does code (fenced or inline: an HTML example is content), so a prose paragraph with many links is not markup.
_CODE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^ {0,3}\1[`~]*[ \t]*$|\Z)"   # fenced, to its closing fence
                   r"|(`+)[^`\n][^\n]*?\2(?!`)", re.M | re.S)                       # inline code span (one line)
_MARKUP = re.compile(
    r"<!--.*?(?:-->|\Z)"                                        # HTML comment
    r"|!\[[^\]]{0,300}\]\([^)\s]*(?:\s+\"[^\"]*\")?\)"          # image ![alt](src "title"): alt text included
    r"|!\[[^\]]{0,300}\]\[[^\]\n]*\]"                           # image by reference ![alt][ref]
    r"|\]\([^)\s]*(?:\s+\"[^\"]*\")?\)"                         # a link's target ](url "title")
    r"|\]\[[^\]\n]*\]"                                          # reference link's target ][ref]
    r"|^ {0,3}\[(?!\^)[^\]\n]+\]:[ \t]*<?[^\s>]+>?"             # link definition [ref]: url "title"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*$"  # (not a footnote [^1]: text)
    r"|</?[a-zA-Z][\w:-]*(?:\s[^<>]*)?/?>"                      # HTML tag with its attributes
    r"|<?(?:https?|ftp)://[^\s<>)\]]+>?|\bwww\.[^\s<>)\]]+"     # bare URL or autolink
    r"|&(?:[a-zA-Z]+|#\d+|#x[\da-fA-F]+);",                    # HTML entity
    re.M | re.S)


def effective_chars(text: str) -> int:
    return len(_EFFECTIVE_IGNORED.sub("", text))


def _blank(m: re.Match) -> str:
    return " " + "\n" * m.group().count("\n")   # the line breaks stay: line i is still line i


def without_markup(text: str) -> str:
    """The text with markup (outside code) taken out, line for line."""
    out, pos = [], 0
    for m in _CODE.finditer(text):
        out += [_MARKUP.sub(_blank, text[pos:m.start()]), m.group()]
        pos = m.end()
    return "".join(out + [_MARKUP.sub(_blank, text[pos:])])


def _link_line(line: str, text_chars: int) -> bool:
    """A citation, or a line with a URL, unless that line is a paragraph of prose (PROSE_LINE_CHARS effective
    characters besides markup: a Markdown paragraph is often one line, and may cite a page or two)."""
    return bool(_CITATION.search(line)) or (bool(_URL.search(line)) and text_chars < PROSE_LINE_CHARS)


def normalize_title(title: str) -> str:
    """'## 7. References:' → 'references'; '**致谢**' → '致谢'."""
    t = title.strip().strip("#*_ \t").strip().lower()
    t = _NUMBERING.sub("", t)
    t = re.sub(r"[\s:：.。、]+$", "", t)
    return re.sub(r"\s+", " ", t)


class RuleFilter:
    """The recipe's four rules (too few effective characters, a worthless section title such as references or a
    table of contents, a link/citation list, symbol soup) and `markup` (badges, images, URLs, HTML); `reason(chunk)`
    is None (keep) or the reason to drop."""

    def __init__(self, min_effective_chars: int = 100, worthless_titles: Iterable[str] = DEFAULT_WORTHLESS_TITLES,
                 link_ratio: float = 0.5, symbol_ratio: float = 0.35, markup_ratio: float = 0.5,
                 markup_keep_chars: int = 200, title_match: str = "parts"):
        self.min_effective_chars = min_effective_chars
        self.titles = {normalize_title(t) for t in worthless_titles}
        self.title_match = title_match
        self.link_ratio = link_ratio
        self.symbol_ratio = symbol_ratio
        self.markup_ratio, self.markup_keep_chars = markup_ratio, markup_keep_chars

    def worthless_title(self, title: str, line: bool = False) -> bool:
        """A heading title (or, line=True, a chunk's first line) names a worthless section, by `title_match`."""
        if self.title_match == "seed":
            return any(k in title for k in SEED_DROP_TITLES)
        norm = normalize_title(title)
        if norm in self.titles:
            return True
        if self.title_match != "parts" or (line and len(norm) > TITLE_LINE_CHARS):
            return False
        return any(normalize_title(p) in self.titles for p in _TITLE_PARTS.split(norm) if p)

    def worthless_path(self, path: tuple[str, ...]) -> bool:
        return any(self.worthless_title(t) for t in path)

    def reason(self, text: str, path: tuple[str, ...] = ()) -> str | None:
        total = effective_chars(text)
        if total < self.min_effective_chars:
            return "too_short"
        lines = [ln for ln in text.splitlines() if ln.strip()]
        # by the section's titles, or a first line that is only such a title (e.g. a bold pseudo-heading)
        if self.worthless_path(path) or (lines and self.worthless_title(lines[0], line=True)):
            return "worthless_section"
        # mostly badges, images, URLs and HTML, with too little text left to be worth the noise (a badge header
        # followed by a real introduction stays); before link_list, which a column of badges would also match
        rest = effective_chars(without_markup(text))
        if rest < self.markup_keep_chars and 1 - rest / total > self.markup_ratio:
            return "markup"
        # link_list judges the lines that carry text, a line of badges or tags alone being the markup rule's; a
        # line of code is content, never a link line (a URL in a command is no link): each becomes the word "code"
        plain = _CODE.sub(lambda m: re.sub(r"[^\n]+", "code", m.group()) if m.group(1) else m.group(), text)
        bare = without_markup(plain).split("\n")
        texty = [(ln, n) for ln, b in zip(plain.split("\n"), bare) if (n := effective_chars(b))]
        if texty and sum(_link_line(ln, n) for ln, n in texty) / len(texty) > self.link_ratio:
            return "link_list"
        if len(_SYMBOL.findall(text)) / max(len(text), 1) > self.symbol_ratio:
            return "symbol_soup"
        return None


# ----------------------------------------------------------------------------- config and per-document driver


class ChunkMarkdownConfig(Strict):
    chunk_size: int = Field(1500, ge=1)
    min_size: int = Field(100, ge=0)
    max_slices: int = Field(20, ge=1)
    min_effective_chars: int = Field(100, ge=0)   # the recipe's MIN_SIZE (50 before #35)
    worthless_titles: list[str] = DEFAULT_WORTHLESS_TITLES
    title_match: Literal["parts", "seed", "exact"] = "parts"   # module docstring; seed: the recipe's DROP_TITLES
    chunk_ids: Literal["gpupipe", "seed"] = "gpupipe"           # seed: the recipe's md5 ids (module docstring)
    link_ratio: Fraction = 0.5
    symbol_ratio: Fraction = 0.35
    markup_ratio: Fraction = 0.5      # markup: more than this share of the chunk is badges, images, URLs, HTML ...
    markup_keep_chars: int = Field(200, ge=0)   # ... and fewer effective characters than this are left
    dataset_name: str = "markdown_chunks"   # the dataset_info.json entry the CLI writes
    judge: JudgeConfig = JudgeConfig()

    @field_validator("min_size")
    @classmethod
    def _below_chunk_size(cls, v: int, info: ValidationInfo) -> int:
        size = info.data.get("chunk_size")
        if size is not None and v >= size:
            raise ValueError(f"min_size ({v}) must be below chunk_size ({size})")
        return v


@dataclass
class DocChunks:
    records: list[dict[str, Any]]   # every chunk made, in order, with `reason` None (kept) or a rule's name
    warnings: list[tuple[str, int]]  # (section, slices) of sections over max_slices


def chunk_document(text: str, source: str, cfg: ChunkMarkdownConfig, rules: RuleFilter) -> DocChunks:
    """Chunk one document and apply the rule filter; ids from `source` (a path relative to the input root)."""
    chunks, warnings = chunk_markdown(text, cfg.chunk_size, cfg.min_size, cfg.max_slices, rules.worthless_path)
    records = []
    for i, c in enumerate(chunks):
        cid = seed_chunk_id(source, i, c.text) if cfg.chunk_ids == "seed" else chunk_id(source, i, c.text)
        records.append({"text": c.text, "id": cid, "source": source, "index": i,
                        "section": section_label(c.path), "chars": len(c.text),
                        "oversized_code": c.oversized_code, "reason": rules.reason(c.text, c.path)})
    for path, n in warnings:
        log.warning("chunk_markdown: %s section %r gave %d chunks (> max_slices): a whole table or code dump? "
                    "worth a look", source, section_label(path)[:80], n)
    return DocChunks(records, [(section_label(p), n) for p, n in warnings])


def rules_of(cfg: ChunkMarkdownConfig) -> RuleFilter:
    return RuleFilter(cfg.min_effective_chars, cfg.worthless_titles, cfg.link_ratio, cfg.symbol_ratio,
                      cfg.markup_ratio, cfg.markup_keep_chars, cfg.title_match)


# ----------------------------------------------------------------------------- reader: a folder of .md files

# ----------------------------------------------------------------------------- the pipeline stage

CHUNK_BITS = 16        # chunk doc_index = (file << 40) | (record << 16) | chunk
_RECORD_BITS = 40      # gpupipe.stages.read.RECORD_BITS (not imported: read.py pulls in the readers' deps)
_MAX_RECORD = 1 << (_RECORD_BITS - CHUNK_BITS)


def chunk_doc_index(parent: int, index: int) -> int:
    """Keeps input order and uniqueness: the parent's file number stays in the top bits, its record number moves
    up 16 bits to make room for the chunk number. Limits: 2^24 records per input file, 2^16 chunks per document."""
    file_no, record = parent >> _RECORD_BITS, parent & ((1 << _RECORD_BITS) - 1)
    if record >= _MAX_RECORD:
        raise ValueError(f"chunk_markdown: document record {record} of input file {file_no} is past "
                         f"{_MAX_RECORD - 1}: split that input file")
    return (file_no << _RECORD_BITS) | (record << CHUNK_BITS) | index


class ChunkMarkdown(MapStage):
    """One row per Markdown document in → one row per kept chunk out.

    Conservation for a 1→many stage: docs_in counts the documents it took (so the chain with the previous stage
    holds), docs_out the chunks it kept, `removed` the chunks it dropped by reason plus documents that gave no
    chunk (`empty_document`), and extra `docs_added` = chunks made − documents that gave chunks, the rows the
    split created. Hence docs_in + extra.docs_added == docs_out + sum(removed). Extra also has `source_docs` and
    `chunks_created`.
    """

    name = "chunk_markdown"
    Config = ChunkMarkdownConfig

    def setup(self) -> None:
        self._rules = rules_of(self.config)
        self._judge = LLMJudge(self.config.judge) if self.config.judge.enabled else None

    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        """The chunks kept, and as rejects the chunks dropped and the documents that gave none."""
        stats = StageStats()   # the counters the helpers below add to
        stats.extra["source_docs"] = len(df)
        rows, rejects = self._chunk_rows(df, stats)
        if self._judge is not None:
            self._apply_judge(rows, stats)
        kept = [r for r in rows if r["reason"] is None]
        rejects += [r for r in rows if r["reason"] is not None]
        empty = sum(r["reason"] == "empty_document" for r in rejects)
        stats.extra["docs_added"] = stats.extra["chunks_created"] - (len(df) - empty)
        return Applied(_frame(kept, df).drop(columns=["reason"]), extra=stats.extra, rejects=_frame(rejects, df))

    def _chunk_rows(self, df: pd.DataFrame, stats: StageStats) -> tuple[list[dict], list[dict]]:
        rows, rejects = [], []
        has_path = "source_path" in df.columns
        for parent in df.to_dict("records"):
            source = parent["source_path"] if has_path and isinstance(parent.get("source_path"), str) \
                else str(parent["id"])
            doc = chunk_document(parent["text"] or "", source, self.config, self._rules)
            stats.extra["sections_over_max_slices"] += len(doc.warnings)
            if not doc.records:
                rejects.append({**parent, "reason": "empty_document"})
                continue
            stats.extra["chunks_created"] += len(doc.records)
            for r in doc.records:
                stats.extra["oversized_code_chunks"] += r["oversized_code"]
                if r["index"] >= 1 << CHUNK_BITS:
                    r["reason"] = "chunk_index_overflow"  # > 65535 chunks (~100 MB): counted, not a crash
                rows.append({**parent, "id": r["id"], "doc_index": chunk_doc_index(int(parent["doc_index"]),
                                                                                   r["index"] % (1 << CHUNK_BITS)),
                             "text": r["text"], "parent_id": str(parent["id"]), "source_path": source,
                             "chunk_index": r["index"], "section": r["section"], "chars": r["chars"],
                             "oversized_code": r["oversized_code"], "reason": r["reason"]})
        return rows, rejects

    def _apply_judge(self, rows: list[dict], stats: StageStats) -> None:
        todo = [r for r in rows if r["reason"] is None]
        checkpoint, others = self._checkpoint([r["id"] for r in todo])
        verdicts, counts = self._judge.judge_all(((r["id"], r["text"]) for r in todo), checkpoint, others)
        stats.extra.update({f"judge_{k}": v for k, v in counts.items()})
        for r in rows:
            v = verdicts.get(r["id"])
            r.update(judge_keep=v.keep if v else None, judge_score=v.score if v else None,
                     judge_reason=v.reason if v else None, judge_failed=v.failed if v else None)
            if v is not None and not v.keep:
                r["reason"] = "llm_judge"

    def _checkpoint(self, ids: list[str]) -> tuple[Path | None, list[Path]]:
        """This partition's verdict file under RUN/llm_judge/<judge key>/, named by its chunk ids (stable across
        re-runs), and the other partitions' files (their verdicts count too if the partitioning changed)."""
        if not self.ctx.run_dir or not ids:
            return None, []
        folder = Path(self.ctx.run_dir) / "llm_judge" / self._judge.key
        name = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
        mine = folder / f"verdicts-{name}.jsonl"
        return mine, sorted(p for p in folder.glob("verdicts-*.jsonl") if p != mine)


CHUNK_COLUMNS = {"parent_id": object, "source_path": object, "chunk_index": "int64", "section": object,
                 "chars": "int64", "oversized_code": bool, "reason": object}


def _frame(rows: list[dict], like: pd.DataFrame) -> pd.DataFrame:
    """Rows as a frame; with no rows, the input's columns plus the chunk columns (parts keep one schema)."""
    if rows:
        return pd.DataFrame(rows)
    empty = like.iloc[:0].copy()
    for col, dtype in CHUNK_COLUMNS.items():
        if col not in empty.columns:
            empty[col] = pd.Series(dtype=dtype)
    return empty


# ----------------------------------------------------------------------------- the command: folder → dataset

CHUNKS_FILE, REJECTED_FILE, STATS_FILE, DATASET_INFO_FILE = "chunks.jsonl", "rejected.jsonl", "stats.json", \
    "dataset_info.json"
VERDICTS_FILE = "judge_verdicts.jsonl"   # the judge's checkpoint: a re-run asks only what it lacks
MAX_WARNINGS_LISTED = 1000


def chunk_markdown_dir(input_dir: str | os.PathLike, out_dir: str | os.PathLike,
                       cfg: ChunkMarkdownConfig) -> dict[str, Any]:
    """Chunk every Markdown file under input_dir into out_dir (chunks, rejects, stats, dataset_info); returns the
    stats. Output files are written under temporary names and renamed, so a killed run leaves no half dataset;
    the judge's checkpoint (judge_verdicts.jsonl) survives, and the next run resumes from it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rules = rules_of(cfg)
    judge = LLMJudge(cfg.judge) if cfg.judge.enabled else None  # fails before any work if the key is missing
    stats = _empty_stats(input_dir, cfg)
    items = iter_markdown_dir(input_dir)  # raises ReaderError now if the folder cannot be read
    candidates, rejected = out / ".candidates.jsonl.tmp", out / f".{REJECTED_FILE}.tmp"
    with open(candidates, "w", encoding="utf-8") as cand, open(rejected, "w", encoding="utf-8") as rej:
        for item in items:
            stats["docs_in"] += 1
            if isinstance(item, Rejected):
                _count(stats["docs_removed"], item.reason)
                _write(rej, {"source": None, "reason": item.reason, "detail": item.detail})
                continue
            doc = chunk_document(item["text"], item["source_path"], cfg, rules)
            _note_document(stats, doc)
            for r in doc.records:
                reason = r.pop("reason")
                if reason is None:
                    _write(cand, r)
                else:
                    _count(stats["chunks_removed"], reason)
                    _write(rej, {**r, "reason": reason})
    verdicts = _judge_candidates(judge, candidates, out, stats) if judge else {}
    _finish(out, candidates, rejected, verdicts, judge, stats)
    return stats


def _empty_stats(input_dir, cfg: ChunkMarkdownConfig) -> dict[str, Any]:
    return {"input_dir": os.fspath(input_dir), "docs_in": 0, "docs_chunked": 0, "docs_removed": {},
            "chunks_created": 0, "chunks_out": 0, "chunks_removed": {}, "chars_out": 0,
            "oversized_code_chunks": 0, "sections_over_max_slices": 0, "max_slices_warnings": [],
            "judge": None, "config": cfg.model_dump(mode="json")}


def _note_document(stats: dict[str, Any], doc: DocChunks) -> None:
    if not doc.records:
        _count(stats["docs_removed"], "empty_document")
        return
    stats["docs_chunked"] += 1
    stats["chunks_created"] += len(doc.records)
    stats["oversized_code_chunks"] += sum(r["oversized_code"] for r in doc.records)
    stats["sections_over_max_slices"] += len(doc.warnings)
    room = MAX_WARNINGS_LISTED - len(stats["max_slices_warnings"])
    stats["max_slices_warnings"] += [{"source": doc.records[0]["source"], "section": s, "chunks": n}
                                     for s, n in doc.warnings[:max(room, 0)]]


def _count(counter: dict[str, int], key: str) -> None:
    counter[key] = counter.get(key, 0) + 1


def _write(f, record: dict) -> None:
    f.write(json.dumps(record, ensure_ascii=False) + "\n")


def _read_jsonl(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _judge_candidates(judge: LLMJudge, candidates: Path, out: Path, stats: dict[str, Any]) -> dict[str, Verdict]:
    verdicts, counts = judge.judge_all(((r["id"], r["text"]) for r in _read_jsonl(candidates)),
                                       checkpoint=out / VERDICTS_FILE)
    stats["judge"] = {"model": judge.cfg.model, "base_url": judge.cfg.base_url, "key": judge.key,
                      **{k: counts.get(k, 0) for k in ("asked", "resumed", "failed", "kept", "dropped", "attempts",
                                                         "retries")}}
    return verdicts


def _finish(out: Path, candidates: Path, rejected: Path, verdicts: dict[str, Verdict], judge: LLMJudge | None,
            stats: dict[str, Any]) -> None:
    """Candidates + verdicts → chunks.jsonl (and judge rejects appended to rejected.jsonl); then the renames."""
    chunks_tmp = out / f".{CHUNKS_FILE}.tmp"
    with open(chunks_tmp, "w", encoding="utf-8") as f, open(rejected, "a", encoding="utf-8") as rej:
        for r in _read_jsonl(candidates):
            v = verdicts.get(r["id"])
            if v is not None:
                r["judge"] = v.public(judge.cfg.model)
            if v is not None and not v.keep:
                _count(stats["chunks_removed"], "llm_judge")
                _write(rej, {**r, "reason": "llm_judge"})
                continue
            stats["chunks_out"] += 1
            stats["chars_out"] += r["chars"]
            _write(f, r)
    os.replace(chunks_tmp, out / CHUNKS_FILE)
    os.replace(rejected, out / REJECTED_FILE)
    candidates.unlink()
    _write_dataset_info(out / DATASET_INFO_FILE, stats["config"]["dataset_name"])
    atomic_write_text(out / STATS_FILE, json.dumps(stats, indent=2, ensure_ascii=False) + "\n")


def _write_dataset_info(path: Path, name: str) -> None:
    """LLaMA-Factory's pretraining entry (data/README.md, "Pre-training Dataset": only `prompt` is learned, mapped
    to our `text`); entries already in the file (other datasets) are kept."""
    info = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    info[name] = {"file_name": CHUNKS_FILE, "columns": {"prompt": "text"}}
    atomic_write_text(path, json.dumps(info, indent=2, ensure_ascii=False) + "\n")


def load_chunk_config(path: str | os.PathLike | None, overrides: dict[str, Any] | None = None
                      ) -> ChunkMarkdownConfig:
    """The chunker's settings from a YAML file: a pipeline config (its `chunk_markdown` stage), a mapping with a
    `chunk_markdown` key, or the settings themselves; then command-line overrides (dotted keys allowed)."""
    import yaml

    raw: dict[str, Any] = {}
    where = os.fspath(path) if path else "<command line>"
    if path:
        try:
            doc = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{where}: cannot read config: {e}") from None
        raw = _stage_params(doc, where)
    for dotted, value in (overrides or {}).items():
        node = raw
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    try:
        return ChunkMarkdownConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(format_error(e, where, prefix="chunk_markdown.")) from None


def _stage_params(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: the top level must be a mapping")
    if "stages" in doc:
        for item in doc["stages"] or []:
            if isinstance(item, dict) and "chunk_markdown" in item:
                return dict(item["chunk_markdown"] or {})
        raise ConfigError(f"{where}: no 'chunk_markdown' stage in 'stages'")
    if "chunk_markdown" in doc:
        return dict(doc["chunk_markdown"] or {})
    return dict(doc)


def add_chunk_markdown_parser(subparsers) -> argparse.ArgumentParser:
    """Add `chunk-markdown` to gpupipe's subcommands (its handler is set as `fn`)."""
    p = subparsers.add_parser(
        "chunk-markdown", help="Markdown folder → pretraining chunks for LLaMA-Factory (rules + optional LLM judge)",
        description="Split every .md file under INPUT_DIR by headings into chunks of about --chunk-size characters, "
                    "drop worthless ones by rule (and by an LLM judge with --judge), and write OUT/chunks.jsonl "
                    "({\"text\": ...} plus metadata), OUT/rejected.jsonl, OUT/stats.json and OUT/dataset_info.json.")
    return _configure(p)


def _configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("input_dir", help="folder of Markdown files (searched recursively for *.md, *.markdown)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--config", help="YAML: a pipeline config with a chunk_markdown stage, or its settings alone")
    p.add_argument("--chunk-size", dest="chunk_size", type=int, help="target chunk length in characters (1500)")
    p.add_argument("--min-size", dest="min_size", type=int, help="shorter chunks are merged (100)")
    p.add_argument("--max-slices", dest="max_slices", type=int, help="warn when a section gives more chunks (20)")
    p.add_argument("--judge", action="store_true", help="ask the LLM judge configured under judge: (see --config)")
    p.add_argument("--name", dest="dataset_name", help="dataset name in dataset_info.json (markdown_chunks)")
    p.set_defaults(fn=cmd_chunk_markdown)
    return p


def cmd_chunk_markdown(args: argparse.Namespace) -> int:
    overrides = {k: getattr(args, k) for k in ("chunk_size", "min_size", "max_slices", "dataset_name")
                 if getattr(args, k) is not None}
    if args.judge:
        overrides["judge.enabled"] = True
    try:
        cfg = load_chunk_config(args.config, overrides)
        stats = chunk_markdown_dir(args.input_dir, args.out, cfg)
    except (ConfigError, JudgeError, ReaderError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{stats['docs_in']} documents → {stats['chunks_created']} chunks → {stats['chunks_out']} kept "
          f"({stats['chars_out']:,} characters); removed {stats['chunks_removed'] or '-'}; "
          f"documents removed {stats['docs_removed'] or '-'}")
    if stats["sections_over_max_slices"]:
        print(f"warning: {stats['sections_over_max_slices']} section(s) over max_slices: see stats.json")
    if stats["judge"]:
        j = stats["judge"]
        print(f"judge {j['model']}: asked {j['asked']}, resumed {j['resumed']}, failed (kept) {j['failed']}, "
              f"dropped {j['dropped']}")
    print(f"wrote {Path(args.out) / CHUNKS_FILE} and {DATASET_INFO_FILE} (LLaMA-Factory: dataset_dir "
          f"{args.out}, dataset {cfg.dataset_name})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`gpupipe chunk-markdown` as a stand-alone entry point (python -m gpupipe.stages.text.chunk_markdown)."""
    parser = _configure(argparse.ArgumentParser(prog="gpupipe chunk-markdown",
                                                description=add_chunk_markdown_parser.__doc__))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    return args.fn(args)


__all__ = ["ChunkMarkdown", "ChunkMarkdownConfig", "Chunk", "RuleFilter", "chunk_markdown", "chunk_document",
           "chunk_markdown_dir", "iter_markdown_dir", "split_sections", "atomic_units", "split_sentences",
           "split_oversized", "hard_split", "merge_small", "chunk_id", "seed_chunk_id", "normalize_title", "load_chunk_config",
           "add_chunk_markdown_parser", "cmd_chunk_markdown", "main"]


if __name__ == "__main__":
    sys.exit(main())
