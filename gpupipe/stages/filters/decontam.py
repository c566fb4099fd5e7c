"""Benchmark decontamination: find training documents that contain text of evaluation items (questions
and answers), then drop them or cut the leaked spans out.

Method
------
1. Index (`build_index`, CLI `gpupipe decontam-index`). Benchmark files are read into items
   (JSONL with named fields: GSM8K question/answer, HumanEval prompt/canonical_solution, records with
   question + choices; headerless CSV like MMLU: question, choices..., answer letter; plain text, one
   item per line or paragraph; .gz). An item gives a few *passages*, each hashed on its own: every
   field, all fields joined, the choices lettered "A. ..." as eval prompts show them, and GSM8K
   answers without their <<calculator>> annotations. Passages are normalized as the normalize stage
   does (`normalize_array`; NFC by default: give the form the run's normalize stage uses), then
   hashed as word n-grams by the `ngram_hash` kernel, whose units ARE the decontamination
   normalization: ASCII case folded, punctuation (ASCII, general, CJK and full-width) and
   whitespace only separate units (`kernels.ngram_hash.decontam_units` spells it out in Python).
   n = 13 (GPT-3); an item (all fields joined) shorter than n units uses min_n = 8 for all its
   passages; one shorter than min_n is not indexed (`grams` 0 in the index, `too short` in the CLI
   summary). Chinese items (CJK share of letters > 0.5) use character n-grams: cjk_n = 20
   characters, since a Chinese word averages ~1.5 characters, so 20 characters carry about as much
   text as 13 English words (13 characters are ~8 words, short enough that set phrases of news
   Chinese would collide); cjk_min_n = 12.
   The index is a Parquet file of (hash, benchmark, item_id, item) rows sorted by hash; a hash
   shared by several items keeps a row for each. Its footer metadata keeps the parameters and each
   item's text for reports.
2. Lookup (`ngram_hash` kernel, GPU or numba): every training document's n-grams (both n and min_n;
   character grams for documents whose CJK share is > 0.5) are looked up in the sorted hashes;
   documents with enough text of the other script are looked up in the other mode too;
   hits come back with their byte spans in the ORIGINAL text (units remember where they lie), so
   nothing has to be mapped back from a normalized copy.
3. Policy. drop: any hit drops the document (`benchmark_leak`). cut: the matched spans, widened by
   `margin_chars` (200, GPT-3) on each side to whitespace and merged, are removed; the document is
   dropped as `leak_fragmented` when more than `max_pieces` (10) pieces remain, as `leak_too_short`
   when fewer than `min_remaining_chars` (or `min_remaining_fraction` of the original) remain;
   otherwise its pieces are kept, joined by blank lines.
4. Report: `decontam_report.json` in the stage folder: per benchmark, items found of items indexed,
   documents, n-gram hits, and examples (training snippet beside the benchmark item); per-partition
   details in `matches/part-*.parquet`.

What it catches: verbatim copies and copies changed in case (ASCII), punctuation or whitespace;
paraphrases that leave 13 consecutive words intact somewhere (a 3-word change inside a 40-word item
still leaves several 13-grams); items embedded anywhere in a longer page.

What it cannot catch
- paraphrase beyond a few words in short items: a 15-word question with one word changed in the
  middle has no intact 13-gram left; items under 8 words are not indexed at all;
- translation, transliteration, or any change of the words themselves (synonyms, reordering);
- reformatted math and code: "3 × 4 = 12" vs "3*4=12" ("×" is a letter-like unit), LaTeX vs plain,
  1,000 vs 1000 (digit groups are separate units), renamed variables, reflowed code;
- Unicode case beyond ASCII ("Ä" vs "ä") and compatibility forms (full-width letters): use NFKC on
  both sides (`--form NFKC` and the normalize stage's `form: NFKC`) for the latter; training text
  that did not go through the normalize stage (decomposed accents) against an NFC index;
- answers alone when they are short (a GSM8K "#### 72" is not a leak we can see), and leaks split
  across documents; fuzzy matching of reworded items (MinHash + LSH or embeddings) is not done here.
"""

from __future__ import annotations

import argparse
import csv
import functools
import gzip
import io
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from gpupipe.columns import text_array
from gpupipe.config_base import FileRef, Fraction, Strict
from gpupipe.io.parts import atomic_write_text, read_part, write_table
from gpupipe.stages.base import DEVICE, Applied, StageStats
from gpupipe.stages.phases import APPLY, DRIVER, Phase, PhasedStage, PhaseRun
from gpupipe.stages.text.normalize import normalize_array

INDEX_META_KEY = b"gpupipe.decontam"
INDEX_VERSION = 1
CJK_SHARE = 0.5           # above this share of CJK among letters, a text uses character n-grams
SNIPPET_CHARS = 160       # training text shown on each side of a match in reports
ITEM_TEXT_CHARS = 2000    # benchmark item text kept in the index for reports
MATCHES = "matches"        # the side table of every match (document, benchmark item, snippet), beside the parts

_GSM8K_CALC = re.compile(r"<<[^<>]*>>")
_GENERIC_STEMS = {"test", "dev", "val", "valid", "validation", "train", "data", "eval"}
FORMATS = ("jsonl", "csv", "lines", "paragraphs")


# ---------------------------------------------------------------------------- benchmark items
@dataclass(frozen=True)
class BenchmarkItem:
    benchmark: str
    item_id: str
    text: str                    # all fields joined: decides the gram length, shown in reports
    passages: tuple[str, ...]    # texts hashed on their own (text is always one of them)


def _passages(parts: list[str | list[str]]) -> tuple[str, tuple[str, ...]]:
    """(full text, passages) of an item from its fields; a list field is a list of choices."""
    parts = [p for p in parts if p]
    plain = ["\n".join(p) if isinstance(p, list) else p for p in parts]
    lettered = ["\n".join(f"{chr(65 + i)}. {c}" for i, c in enumerate(p)) if isinstance(p, list) else p
                for p in parts]
    full = "\n".join(plain)
    out = [full, "\n".join(lettered), *plain]
    out += [_GSM8K_CALC.sub("", t) for t in (full, *plain) if "<<" in t]
    return full, tuple(dict.fromkeys(t for t in out if t))  # unique, in order


def _record_parts(rec: dict, fields: tuple[str, ...] | None) -> list:
    if fields is None:
        for schema in (("question", "choices"), ("question", "answer"), ("prompt", "canonical_solution"),
                       ("text",)):
            if all(k in rec for k in schema):
                fields = schema
                break
        else:
            raise ValueError(f"no known item fields in a record with keys {sorted(rec)}; "
                             "name them: FILE:jsonl:field1,field2")
    missing = [f for f in fields if f not in rec]
    if missing:
        raise ValueError(f"record without field(s) {missing}: keys are {sorted(rec)}")
    return [rec[f] if isinstance(rec[f], list) else str(rec[f] if rec[f] is not None else "") for f in fields]


def _open_text(path: Path) -> io.TextIOBase:
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _bare_name(path: Path) -> str:
    name = path.name
    for ext in (".gz", ".jsonl", ".json", ".csv", ".txt"):
        name = name[: -len(ext)] if name.endswith(ext) else name
    return name


def _guess_format(path: Path) -> str:
    name = path.name.removesuffix(".gz")
    if name.endswith((".jsonl", ".json")):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    return "lines"


@dataclass(frozen=True)
class BenchmarkSource:
    """One benchmark file or folder: ``[NAME=]PATH[:format[:fields]]`` on the command line."""

    path: str
    format: str = "auto"                   # auto | jsonl | csv | lines | paragraphs
    fields: tuple[str, ...] | None = None  # jsonl: field names; csv: column numbers
    name: str | None = None                # default: a record's "benchmark" field, else the file name

    @classmethod
    def parse(cls, spec: str) -> "BenchmarkSource":
        name = None
        head, eq, rest = spec.partition("=")
        if eq and "/" not in head and ":" not in head and head:
            name, spec = head, rest
        parts = spec.split(":")
        fmt, fields = "auto", None
        if len(parts) >= 3 and parts[-2] in FORMATS:
            fmt, fields, parts = parts[-2], tuple(f for f in parts[-1].split(",") if f), parts[:-2]
        elif len(parts) >= 2 and parts[-1] in FORMATS:
            fmt, parts = parts[-1], parts[:-1]
        return cls(":".join(parts), fmt, fields or None, name)

    def files(self) -> list[Path]:
        from gpupipe.io import storage

        # a benchmark at a URL (s3://, https://) is copied locally once per version, as models and indexes are
        p = Path(storage.local_copy(self.path) if storage.exists(self.path) else self.path)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
            if self.format != "auto":
                files = [f for f in files if _guess_format(f) == self.format or self.format in
                         ("lines", "paragraphs")]
            return files
        if not p.is_file():
            raise FileNotFoundError(f"benchmark file not found: {p}")
        return [p]

    def default_name(self) -> str:
        p = Path(self.path)
        stem = p.name if p.is_dir() else _bare_name(p)
        if stem.lower() in _GENERIC_STEMS and p.parent.name:
            stem = p.parent.name
        return self.name or stem.lower()

    def items(self) -> Iterator[BenchmarkItem]:
        files = self.files()
        for f in files:
            fmt = self.format if self.format != "auto" else _guess_format(f)
            prefix = f"{_bare_name(f)}/" if len(files) > 1 else ""
            reader = {"jsonl": self._jsonl, "csv": self._csv, "lines": self._lines,
                      "paragraphs": self._paragraphs}[fmt]
            yield from reader(f, prefix)

    def _jsonl(self, path: Path, prefix: str) -> Iterator[BenchmarkItem]:
        with _open_text(path) as fh:
            for i, line in enumerate(l for l in fh if l.strip()):
                rec = json.loads(line)
                bench = self.name or rec.get("benchmark") or self.default_name()
                ident = next((rec[k] for k in ("item_id", "task_id", "id") if rec.get(k) is not None), i)
                full, passages = _passages(_record_parts(rec, self.fields))
                yield BenchmarkItem(str(bench), f"{prefix}{ident}", full, passages)

    def _csv(self, path: Path, prefix: str) -> Iterator[BenchmarkItem]:
        with _open_text(path) as fh:
            for i, row in enumerate(r for r in csv.reader(fh) if r):
                if self.fields:
                    cols = [row[int(c)] for c in self.fields]
                else:  # MMLU: question, choices..., answer letter (left out: it is no text)
                    cols = row[:-1] if len(row) > 2 and re.fullmatch(r"[A-Ja-j]", row[-1].strip()) else row
                parts = [cols[0], list(cols[1:])] if len(cols) > 1 else cols
                full, passages = _passages(parts)
                yield BenchmarkItem(self.default_name(), f"{prefix}{i}", full, passages)

    def _lines(self, path: Path, prefix: str) -> Iterator[BenchmarkItem]:
        with _open_text(path) as fh:
            for i, line in enumerate(l.strip() for l in fh if l.strip()):
                yield BenchmarkItem(self.default_name(), f"{prefix}{i}", line, (line,))

    def _paragraphs(self, path: Path, prefix: str) -> Iterator[BenchmarkItem]:
        with _open_text(path) as fh:
            paragraphs = [p.strip() for p in re.split(r"\n\s*\n", fh.read()) if p.strip()]
        for i, para in enumerate(paragraphs):
            yield BenchmarkItem(self.default_name(), f"{prefix}{i}", para, (para,))


# ---------------------------------------------------------------------------- the index
def script_counts(texts) -> np.ndarray:
    """(n, 3): CJK letters, other letters, words per text (kernels.ngram_hash.script_counts_cpu)."""
    from gpupipe.kernels.ngram_hash import script_counts_cpu
    from gpupipe.kernels.text_hash import arrow_buffers

    return script_counts_cpu(*arrow_buffers(text_array(texts)))


def cjk_flags(texts=None, counts: np.ndarray | None = None) -> np.ndarray:
    """uint8 per text: 1 when CJK letters are more than CJK_SHARE of its letters (character grams)."""
    c = script_counts(texts) if counts is None else counts
    return (c[:, 0] > CJK_SHARE * (c[:, 0] + c[:, 1])).astype(np.uint8)


def _mixed_script(counts: np.ndarray, flags: np.ndarray, lengths: dict) -> np.ndarray:
    """Rows that could also hold an item of the other mode: enough CJK letters in a word-mode
    text, or enough words in a character-mode text, for the other mode's shortest gram."""
    return np.flatnonzero(np.where(flags == 1, counts[:, 2] >= lengths["word"][1],
                                   counts[:, 0] >= lengths["char"][1]))


def _merge_hits(n_docs: int, a, b, b_rows: np.ndarray):
    """Hits of all documents (a) and of the documents b_rows (b), grouped per document, a's first."""
    from gpupipe.kernels.ngram_hash import NgramHits

    doc = np.concatenate([np.repeat(np.arange(n_docs), np.diff(a.hit_offsets)),
                          np.repeat(b_rows, np.diff(b.hit_offsets))])
    order = np.argsort(doc, kind="stable")
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.bincount(doc, minlength=n_docs), out=offsets[1:])
    return NgramHits(offsets, *(np.concatenate([getattr(a, k), getattr(b, k)])[order]
                                for k in ("pos", "start", "end")))


@dataclass
class DecontamIndex:
    """Sorted unique gram hashes (a kernel table) and, per hash, the items it came from."""

    table: Any                 # kernels.ngram_hash.NgramTable
    ref_offsets: np.ndarray    # int64, len(table) + 1: refs of hash i are ref_items[ref_offsets[i]:...]
    ref_items: np.ndarray      # int32 indices into items
    items: pd.DataFrame        # benchmark, item_id, text, grams (hashes indexed; 0 = unindexed)
    params: dict               # n, min_n, cjk_n, cjk_min_n, form

    @property
    def lengths(self) -> dict:
        p = self.params
        return {"word": (p["n"], p["min_n"]), "char": (p["cjk_n"], p["cjk_min_n"])}

    def save(self, path: str | Path) -> None:
        rows = np.repeat(np.arange(len(self.table)), np.diff(self.ref_offsets))
        bench = self.items["benchmark"].to_numpy(dtype=object)[self.ref_items]
        ident = self.items["item_id"].to_numpy(dtype=object)[self.ref_items]
        table = pa.table({"hash": pa.array(self.table.hashes[rows], pa.uint64()),
                          "benchmark": pa.array(bench, pa.string()).dictionary_encode(),
                          "item_id": pa.array(ident, pa.string()),
                          "item": pa.array(self.ref_items, pa.int32())})
        meta = {"version": INDEX_VERSION, "params": self.params,
                "items": self.items[["benchmark", "item_id", "text", "grams"]].values.tolist()}
        table = table.replace_schema_metadata({INDEX_META_KEY: json.dumps(meta, ensure_ascii=False)})
        write_table(table, path)

    @classmethod
    def load(cls, path: str | Path) -> "DecontamIndex":
        from gpupipe.kernels.ngram_hash import NgramTable

        t = pq.read_table(path, columns=["hash", "item"])
        raw = (t.schema.metadata or {}).get(INDEX_META_KEY)
        if raw is None:
            raise ValueError(f"{path}: not a gpupipe decontamination index (no {INDEX_META_KEY.decode()})")
        meta = json.loads(raw)
        if meta.get("version") != INDEX_VERSION:
            raise ValueError(f"{path}: index version {meta.get('version')}, expected {INDEX_VERSION}")
        hashes = t.column("hash").to_numpy()
        unique, first = np.unique(hashes, return_index=True)
        items = pd.DataFrame(meta["items"], columns=["benchmark", "item_id", "text", "grams"])
        return cls(NgramTable(unique), np.append(first, len(hashes)).astype(np.int64),
                   t.column("item").to_numpy().astype(np.int32), items, meta["params"])

    def summary(self) -> dict:
        """Per benchmark: items, items indexed, unique hashes."""
        out = {}
        rows = np.repeat(np.arange(len(self.table)), np.diff(self.ref_offsets))
        bench_of_ref = self.items["benchmark"].to_numpy()[self.ref_items]
        for bench, group in self.items.groupby("benchmark", sort=True):
            out[bench] = {"items": len(group), "indexed": int((group["grams"] > 0).sum()),
                          "hashes": int(np.unique(rows[bench_of_ref == bench]).size)}
        return out


def _normalized(texts: list[str], normalize: Callable[[str], str] | None, form: str) -> pa.Array:
    if normalize is None:  # the normalize stage's own vectorized code (equal to normalize_text)
        return normalize_array(pa.array(texts, pa.large_string()), form)
    return pa.array([normalize(t) for t in texts], pa.large_string())


def build_index_from_items(items: Iterable[BenchmarkItem], n: int = 13, min_n: int = 8, cjk_n: int = 20,
                           cjk_min_n: int = 12, normalize: Callable[[str], str] | None = None,
                           form: str = "NFC") -> DecontamIndex:
    """Index benchmark items (see the module docstring). Text is normalized as the normalize stage
    does with this Unicode `form`, or by `normalize` when given (`form` then only labels it)."""
    from gpupipe.kernels.ngram_hash import NgramTable, _lengths, gram_hashes_cpu, unit_counts_cpu
    from gpupipe.kernels.text_hash import arrow_buffers

    _lengths((n, min_n), (cjk_n, cjk_min_n))  # validates
    items = list(items)
    full = _normalized([it.text for it in items], normalize, form)
    flags = cjk_flags(full)
    m = unit_counts_cpu(*arrow_buffers(full), flags)
    long_k, short_k = np.where(flags, cjk_n, n), np.where(flags, cjk_min_n, min_n)
    item_k = np.where(m >= long_k, long_k, np.where(m >= short_k, short_k, 0))

    owner = np.repeat(np.arange(len(items)), [len(it.passages) for it in items])
    passages = _normalized([p for it in items for p in it.passages], normalize, form)
    # a passage is hashed with its item's gram length and mode, so that its parts match the whole
    grams, offsets = gram_hashes_cpu(*arrow_buffers(passages), flags[owner], item_k[owner])
    gram_owner = np.repeat(owner, np.diff(offsets)).astype(np.int32)
    order = np.lexsort((gram_owner, grams))  # by hash, then item
    grams, gram_owner = grams[order], gram_owner[order]
    new = np.ones(grams.size, dtype=bool)  # first of each distinct (hash, item)
    new[1:] = (grams[1:] != grams[:-1]) | (gram_owner[1:] != gram_owner[:-1])
    grams, ref_items = grams[new], gram_owner[new]
    first = np.flatnonzero(np.r_[True, grams[1:] != grams[:-1]]) if grams.size else np.zeros(0, np.int64)
    frame = pd.DataFrame({"benchmark": pd.Series([it.benchmark for it in items], dtype=object),
                          "item_id": pd.Series([it.item_id for it in items], dtype=object),
                          "text": pd.Series([it.text[:ITEM_TEXT_CHARS] for it in items], dtype=object),
                          "grams": np.bincount(ref_items, minlength=len(items)).astype(np.int64)})
    params = {"n": n, "min_n": min_n, "cjk_n": cjk_n, "cjk_min_n": cjk_min_n, "form": form}
    return DecontamIndex(NgramTable(grams[first]), np.append(first, grams.size).astype(np.int64), ref_items,
                         frame, params)


def build_index(sources: list[BenchmarkSource | str], n: int = 13, min_n: int = 8, cjk_n: int = 20,
                cjk_min_n: int = 12, normalize: Callable[[str], str] | None = None,
                form: str = "NFC") -> DecontamIndex:
    """Read benchmark sources (objects or ``[NAME=]PATH[:format[:fields]]`` strings) and index them."""
    items: list[BenchmarkItem] = []
    for src in sources:
        src = BenchmarkSource.parse(src) if isinstance(src, str) else src
        items.extend(src.items())
    keys = Counter((it.benchmark, it.item_id) for it in items)
    repeated = [k for k, c in keys.items() if c > 1]
    if repeated:
        raise ValueError(f"item ids must be unique per benchmark; repeated: {repeated[:5]}")
    return build_index_from_items(items, n, min_n, cjk_n, cjk_min_n, normalize, form)


# ---------------------------------------------------------------------------- the stage
class DecontamConfig(Strict):
    index: FileRef = Field(description="index Parquet written by `gpupipe decontam-index`")
    policy: Literal["drop", "cut"] = "drop"
    margin_chars: int = Field(200, ge=0, description="cut: characters removed on each side of a match")
    max_pieces: int = Field(10, ge=1, description="cut: drop the document when more pieces remain")
    min_remaining_chars: int = Field(200, ge=0, description="cut: drop when fewer characters remain")
    min_remaining_fraction: Fraction = Field(0.0, description="cut: drop when less of the original remains")
    examples_per_benchmark: int = Field(5, ge=0, description="report: examples per benchmark")


_ACTION = "_decontam_action"   # per row: None (keep) or the drop reason; never written out


@dataclass
class _Cut:
    text: str
    pieces: int
    remaining: int
    removed: int


def _char_spans(text: str, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte offsets (at code point boundaries) of the UTF-8 text → character offsets."""
    raw = np.frombuffer(text.encode(), dtype=np.uint8)
    chars_before = np.concatenate([[0], np.cumsum((raw & 0xC0) != 0x80)])  # code points before byte j
    return chars_before[starts], chars_before[ends]


def cut_spans(text: str, starts, ends, margin: int) -> _Cut:
    """Remove [start - margin, end + margin) around each character span, widened to whitespace and
    merged; the pieces left (non-blank) are joined by blank lines."""
    cuts: list[list[int]] = []
    for s, e in sorted(zip((max(0, int(s) - margin) for s in starts), (int(e) + margin for e in ends))):
        e = min(e, len(text))
        while s > 0 and not text[s - 1].isspace():  # never leave half a word behind
            s -= 1
        while e < len(text) and not text[e].isspace():
            e += 1
        if cuts and s <= cuts[-1][1]:
            cuts[-1][1] = max(cuts[-1][1], e)
        else:
            cuts.append([s, e])
    bounds = [0] + [x for c in cuts for x in c] + [len(text)]
    pieces = [text[bounds[i]:bounds[i + 1]].strip() for i in range(0, len(bounds), 2)]
    pieces = [p for p in pieces if p]
    kept = "\n\n".join(pieces)
    return _Cut(kept, len(pieces), sum(map(len, pieces)), len(text) - sum(map(len, pieces)))


class Decontaminate(PhasedStage):
    name = "decontaminate"
    resources = DEVICE
    Config = DecontamConfig

    index: DecontamIndex | None = None

    def setup(self) -> None:
        self.index = _load_index(self.config.index)

    # -- detection: hits per document, their items and spans
    def _lookup(self, arr: pa.Array):
        """Hits of every document in its mode, plus, for mixed-script documents, in the other mode
        (a Chinese item quoted in an English page, or the reverse)."""
        if self.index is None:
            self.setup()
        counts = script_counts(arr)
        flags = cjk_flags(counts=counts)
        hits = self._lookup_mode(arr, flags)
        mixed = _mixed_script(counts, flags, self.index.lengths)
        if mixed.size:
            other = self._lookup_mode(arr.take(pa.array(mixed)), 1 - flags[mixed])
            hits = _merge_hits(len(arr), hits, other, mixed)
        return hits

    def _lookup_mode(self, arr: pa.Array, flags: np.ndarray):
        from gpupipe.kernels.ngram_hash import ngram_lookup_cpu, ngram_lookup_gpu
        from gpupipe.kernels.text_hash import arrow_buffers

        data, offsets = arrow_buffers(arr)
        lengths = self.index.lengths
        if self.ctx.device == "gpu":
            return ngram_lookup_gpu(data, offsets, flags, self.index.table, **lengths).get()
        return ngram_lookup_cpu(data, offsets, flags, self.index.table, **lengths)

    def _hit_refs(self, hits) -> pd.DataFrame:
        """One row per (hit, item that has the hit's gram): row (document), item, start, end (bytes)."""
        idx = self.index
        per_hit = np.diff(hits.hit_offsets)
        row = np.repeat(np.arange(per_hit.size), per_hit)
        n_refs = idx.ref_offsets[hits.pos + 1] - idx.ref_offsets[hits.pos]
        first = np.repeat(idx.ref_offsets[hits.pos], n_refs)
        within = np.arange(int(n_refs.sum())) - np.repeat(np.cumsum(n_refs) - n_refs, n_refs)
        return pd.DataFrame({"row": np.repeat(row, n_refs), "item": idx.ref_items[first + within],
                             "start": np.repeat(hits.start, n_refs), "end": np.repeat(hits.end, n_refs)})

    def detect(self, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(df with decontam_hits (gram hits) and decontam_items (JSON array of "benchmark:item_id") and,
        under cut, the cut text; the matches table)."""
        arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True).fill_null("")
        hits = self._lookup(arr)
        refs = self._hit_refs(hits)
        items = self.index.items
        labels = (items["benchmark"] + ":" + items["item_id"]).to_numpy()
        per_doc = [[] for _ in range(len(df))]
        for r, it in refs[["row", "item"]].drop_duplicates().sort_values(["row", "item"]).itertuples(index=False):
            per_doc[r].append(labels[it])
        # a JSON array per row ("[]" without hits): one string type in every part, whatever it holds
        out = df.assign(decontam_hits=np.diff(hits.hit_offsets).astype(np.int32),
                        decontam_items=pd.Series([json.dumps(x, ensure_ascii=False) for x in per_doc],
                                                 index=df.index, dtype=object))
        out[_ACTION] = pd.Series([None] * len(df), index=df.index, dtype=object)
        leaked = np.flatnonzero(np.diff(hits.hit_offsets))
        # Python strings only for documents with hits: few, so the loops below are not a hot path
        texts = dict(zip(leaked.tolist(), arr.take(pa.array(leaked, pa.int64())).to_pylist()))
        matches = self._matches(df, texts, refs)
        if self.config.policy == "drop":
            out.iloc[leaked, out.columns.get_loc(_ACTION)] = "benchmark_leak"
        else:
            self._apply_cuts(out, texts, hits)
        return out, matches

    def _apply_cuts(self, out: pd.DataFrame, texts: dict[int, str], hits) -> None:
        c = self.config
        action, text_col = out.columns.get_loc(_ACTION), out.columns.get_loc("text")  # by position
        for r, text in texts.items():
            a, b = hits.hit_offsets[r], hits.hit_offsets[r + 1]
            cut = cut_spans(text, *_char_spans(text, hits.start[a:b], hits.end[a:b]), c.margin_chars)
            if cut.pieces > c.max_pieces:
                out.iloc[r, action] = "leak_fragmented"
            elif cut.remaining < max(c.min_remaining_chars, c.min_remaining_fraction * len(text)):
                out.iloc[r, action] = "leak_too_short"
            else:  # dropped documents keep their text: rejects show the leak
                out.iloc[r, text_col] = cut.text

    def _matches(self, df: pd.DataFrame, texts: dict[int, str], refs: pd.DataFrame) -> pd.DataFrame:
        """One row per (document, item): gram hits and the first matched span with a snippet."""
        cols = ["id", "doc_index", "benchmark", "item_id", "hits", "start_char", "end_char", "snippet"]
        if refs.empty:
            return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("doc_index", "hits", "start_char",
                                                                     "end_char") else "object")
                                 for c in cols})
        g = refs.groupby(["row", "item"], sort=True).agg(hits=("start", "size"), start=("start", "min"),
                                                        end=("end", "max")).reset_index()
        ids = df["id"].astype(str).to_numpy() if "id" in df.columns else np.arange(len(df)).astype(str)
        doc_index = df["doc_index"].to_numpy() if "doc_index" in df.columns else np.arange(len(df))
        rows = []
        for r, it, n_hits, s, e in g.itertuples(index=False):
            (cs,), (ce,) = _char_spans(texts[r], np.array([s]), np.array([e]))
            text = texts[r]
            snippet = text[max(0, cs - SNIPPET_CHARS):min(ce, cs + ITEM_TEXT_CHARS) + SNIPPET_CHARS]
            rows.append((ids[r], int(doc_index[r]), self.index.items.at[it, "benchmark"],
                         self.index.items.at[it, "item_id"], int(n_hits), int(cs), int(ce), snippet))
        return pd.DataFrame(rows, columns=cols)

    # -- the partition hook: detection, the policy's reasons, counters and the matches table, all returned
    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        out, matches = self.detect(df)
        why = out[_ACTION]
        drop = why.notna().to_numpy()
        hit = out["decontam_hits"].to_numpy() > 0
        extra = Counter({"docs_with_leaks": int(hit.sum()), "ngram_hits": int(out["decontam_hits"].sum()),
                         "docs_cut": int((hit & ~drop & (out["text"] != df["text"]).to_numpy()).sum())})
        return Applied(out.drop(columns=[_ACTION]), why, extra, {MATCHES: matches})

    def phases(self) -> list[Phase]:
        """The partitions as any map stage's (parts, rejects, and the `matches` side table beside them), then the
        report from the matches."""
        return [Phase("apply", None, over=APPLY), Phase("report", report_phase, over=DRIVER)]


def report_phase(stage: Decontaminate, run: PhaseRun) -> None:
    report = build_report(run.dir.side(MATCHES), _load_index(stage.config.index), stage.config, run.total)
    atomic_write_text(run.dir.decontam_report, json.dumps(report, indent=2, ensure_ascii=False))


def _load_index(path: str) -> DecontamIndex:
    """The index at path, loaded once per process (per version of the file)."""
    st = Path(path).stat()
    return _load_index_version(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _load_index_version(path: str, mtime_ns: int, size: int) -> DecontamIndex:
    return DecontamIndex.load(path)


def build_report(matches_dir: str | Path, index: DecontamIndex, config: DecontamConfig,
                 stats: StageStats | None = None) -> dict:
    """decontam_report.json's content from the stage's `matches` side table (its folder of parts)."""
    parts = sorted(Path(matches_dir).glob("part-*.parquet"))
    matches = pd.concat([read_part(p) for p in parts], ignore_index=True) if parts else pd.DataFrame(
        columns=["id", "doc_index", "benchmark", "item_id", "hits", "snippet"])
    matches = matches.sort_values(["benchmark", "item_id", "doc_index"], kind="stable")
    text_of = dict(zip(zip(index.items["benchmark"], index.items["item_id"]), index.items["text"]))
    summary = index.summary()
    benchmarks = {}
    for bench, info in summary.items():
        m = matches[matches["benchmark"] == bench]
        firsts = m.drop_duplicates("item_id").head(config.examples_per_benchmark)
        benchmarks[bench] = {
            "items": info["items"], "items_indexed": info["indexed"],
            "items_found": int(m["item_id"].nunique()), "documents": int(m["id"].nunique()),
            "ngram_hits": int(m["hits"].sum()),
            "examples": [{"item_id": r.item_id, "document_id": r.id, "ngram_hits": int(r.hits),
                          "benchmark_item": text_of[(bench, r.item_id)], "training_snippet": r.snippet}
                         for r in firsts.itertuples(index=False)],
        }
    report = {"index": str(config.index), "params": index.params, "policy": config.policy,
              "documents_with_leaks": int(matches["id"].nunique()), "benchmarks": benchmarks}
    if config.policy == "cut":
        report["cut"] = {"margin_chars": config.margin_chars, "max_pieces": config.max_pieces,
                         "min_remaining_chars": config.min_remaining_chars,
                         "min_remaining_fraction": config.min_remaining_fraction}
    if stats is not None:
        report["removed"] = dict(sorted(stats.removed.items()))
        report["docs_cut"] = int(stats.extra.get("docs_cut", 0))
    return report


# ---------------------------------------------------------------------------- command line
def configure_parser(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("sources", nargs="+", metavar="[NAME=]FILE[:format[:fields]]",
                   help=f"benchmark file or folder; format one of {', '.join(FORMATS)} (default: by extension); "
                        "fields: JSONL field names or CSV column numbers, comma-separated")
    p.add_argument("--out", required=True, help="index Parquet to write")
    p.add_argument("--n", type=int, default=13, help="word n-gram length (default 13, as GPT-3)")
    p.add_argument("--min-n", dest="min_n", type=int, default=8,
                   help="word n for items shorter than n words (default 8)")
    p.add_argument("--cjk-n", dest="cjk_n", type=int, default=20,
                   help="character n-gram length for Chinese/Japanese/Korean items (default 20)")
    p.add_argument("--cjk-min-n", dest="cjk_min_n", type=int, default=12,
                   help="character n for short CJK items (default 12)")
    p.add_argument("--form", choices=["NFC", "NFKC", "none"], default="NFC",
                   help="Unicode form of the normalize stage the training text went through (default NFC)")
    p.set_defaults(fn=cmd_decontam_index)
    return p


def add_decontam_index_parser(subparsers) -> argparse.ArgumentParser:
    """Add `decontam-index` to gpupipe's subcommands (its handler is set as `fn`)."""
    p = subparsers.add_parser(
        "decontam-index", help="build a benchmark n-gram index for the decontaminate stage",
        description="Read benchmark files (JSONL, CSV, text; .gz), normalize them as training text is, and "
                    "write the sorted hashes of their word n-grams (character n-grams for Chinese) with "
                    "the items they came from.")
    return configure_parser(p)


def cmd_decontam_index(args: argparse.Namespace) -> int:
    try:
        index = build_index(list(args.sources), args.n, args.min_n, args.cjk_n, args.cjk_min_n,
                            form=args.form)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    index.save(args.out)
    for bench, info in index.summary().items():
        print(f"{bench}: {info['items']} items ({info['items'] - info['indexed']} too short to index), "
              f"{info['hashes']} n-gram hashes")
    print(f"wrote {args.out}: {len(index.table)} unique hashes, {len(index.ref_items)} references")
    return 0


def decontam_index_main(argv: list[str] | None = None) -> int:
    """`gpupipe decontam-index` as a stand-alone entry point."""
    parser = configure_parser(argparse.ArgumentParser(prog="gpupipe decontam-index",
                                                      description=add_decontam_index_parser.__doc__))
    args = parser.parse_args(argv)
    return args.fn(args)
