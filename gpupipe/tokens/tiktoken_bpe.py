r"""tiktoken encodings by name (`tokenize: {tokenizer: cl100k_base}`), as a tokenizer.json the rest of gpupipe reads.

tiktoken downloads an encoding's BPE file (`<name>.tiktoken`: one `base64(token bytes) rank` per line) from the
internet the first time it is asked for, and gpupipe runs with no network. So the file is looked up locally, never
fetched:

  1. `tiktoken_file: PATH` in the stage config (any copy of the file);
  2. tiktoken's own cache: `$TIKTOKEN_CACHE_DIR` (else `$DATA_GYM_CACHE_DIR`, else `<tmp>/data-gym-cache`), where
     tiktoken stores the file as the sha1 of its URL (what `tiktoken.get_encoding(name)` left on a machine with
     network), or as `<name>.tiktoken`.

A file from the cache must be the published one (its sha256, as tiktoken checks); a file named by `tiktoken_file`
that is not is used with a warning (a retrained or cut-down table with the encoding's pattern and special tokens).
No file: one message saying where to put it.

The table becomes an HF tokenizers BPE (the conversion Hugging Face uses for Llama 3): ids = tiktoken's ranks, the
special tokens at tiktoken's ids, the encoding's regex as a Split pre-tokenizer then byte-level mapping without its
own regex, `ignore_merges` (tiktoken takes a piece that is a whole token as that token), and each token's merge is
the pair tiktoken's own BPE ends with on its bytes using only lower ranks. HF tokenizers then gives tiktoken's ids
(tests/tokens/test_tiktoken_bpe.py compares the two on real text); the patterns below are tiktoken's, with `$`
written `\z` (in HF's regex engine, Oniguruma, `$` also matches before every newline, in tiktoken's only at the
end of the text) and `\p{N}{1,3}+` as `\p{N}{1,3}` (Oniguruma reads `{1,3}+` as "one or more times {1,3}", which
takes a run of 5 digits whole where tiktoken takes 3 then 2).
In a run, encode_batch recognises such a tokenizer.json (`tiktoken_encoder`) and encodes with tiktoken itself
(the encoding's own pattern, the table's ranks as ids), so the stage's ids are tiktoken's by construction.
"""
from __future__ import annotations

import base64
import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from .fast_bpe import per_tokenizer

log = logging.getLogger("gpupipe")

ENDOFTEXT = "<|endoftext|>"
ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True)
class Encoding:
    name: str
    url: str
    sha256: str
    pattern: str                      # for HF tokenizers' regex engine (Oniguruma)
    special_tokens: dict[str, int]
    tiktoken_pattern: str             # tiktoken's own (tiktoken_ext/openai_public.py), for the tiktoken encoder


ENCODINGS = {
    "cl100k_base": Encoding(
        "cl100k_base", "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++\z|"""
        r"""\s*[\r\n]|\s+(?!\S)|\s""",
        {ENDOFTEXT: 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
         ENDOFPROMPT: 100276},
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|"""
        r"""\s*[\r\n]|\s+(?!\S)|\s"""),
    "o200k_base": Encoding(
        "o200k_base", "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "|".join([
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+"""]),
        {ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
        ""),   # the same pattern in both engines: set below
}


ENCODINGS["o200k_base"] = Encoding(**{**ENCODINGS["o200k_base"].__dict__,
                                      "tiktoken_pattern": ENCODINGS["o200k_base"].pattern})


class TiktokenFileMissing(FileNotFoundError):
    """The encoding's BPE file is nowhere local; the message says how to provide it."""


def cache_dirs() -> list[Path]:
    """Where tiktoken caches its files, in tiktoken's order of precedence (the first that is set)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return [Path(os.environ[var])] if os.environ[var] else []
    return [Path(tempfile.gettempdir()) / "data-gym-cache"]


def find_file(name: str, tiktoken_file: str | None = None) -> tuple[Path, bool]:
    """(the BPE file of encoding `name`, whether it is the published file). Raises TiktokenFileMissing or
    ValueError (a cached file that is not the published one)."""
    enc = ENCODINGS[name]
    if tiktoken_file:
        path = Path(tiktoken_file)
        return path, _sha256(path) == enc.sha256
    candidates = [d / hashlib.sha1(enc.url.encode()).hexdigest() for d in cache_dirs()]
    candidates += [d / f"{name}.tiktoken" for d in cache_dirs()]
    for path in candidates:
        if path.is_file():
            if _sha256(path) != enc.sha256:
                raise ValueError(f"{path} is not the published {name}.tiktoken (sha256 {_sha256(path)}, expected "
                                 f"{enc.sha256}): a damaged download; replace it, or name a file of your own with "
                                 f"`tiktoken_file:`")
            return path, True
    where = " or ".join(str(c) for c in candidates) or "(caching is off: TIKTOKEN_CACHE_DIR is empty)"
    raise TiktokenFileMissing(
        f"tiktoken encoding {name} needs its BPE file, and gpupipe downloads nothing at run time. Fetch {enc.url} "
        f"(sha256 {enc.sha256}) on a machine with network, then either name it in the stage (`tokenize: "
        f"{{tokenizer: {name}, tiktoken_file: PATH}}`) or put it at {where} (tiktoken's cache: "
        f"`TIKTOKEN_CACHE_DIR=DIR python -c \"import tiktoken; tiktoken.get_encoding('{name}')\"` fills DIR)")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_ranks(path: Path) -> dict[bytes, int]:
    """A .tiktoken file: `base64(token) rank` per line (tiktoken.load.load_tiktoken_bpe's format)."""
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError:
            raise ValueError(f"{path}: line {n} is not `base64-token rank` (not a .tiktoken file)") from None
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ValueError(f"{path}: {len(missing)} of the 256 single bytes have no rank (first: {missing[0]}): "
                         f"not a byte-level BPE table")
    return ranks


def _bpe(ranks: dict[bytes, int], piece: bytes, below: int) -> list[bytes]:
    """tiktoken's BPE of `piece` using only the ranks below `below`: repeatedly join the adjacent pair whose
    concatenation has the lowest rank, leftmost first."""
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = below, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


def to_tokenizer(name: str, ranks: dict[bytes, int]) -> Tokenizer:
    """The HF tokenizer that encodes as tiktoken's `name` with these ranks does."""
    enc = ENCODINGS[name]
    byte_char = {b: c for c, b in _char_to_byte().items()}

    def text(token: bytes) -> str:
        return "".join(byte_char[b] for b in token)

    vocab = {text(t): r for t, r in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = _bpe(ranks, token, rank)
        if len(parts) == 2:   # else unreachable by merges: ignore_merges still takes it whole
            merges.append((text(parts[0]), text(parts[1])))
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(enc.pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    clash = sorted(set(enc.special_tokens.values()) & set(ranks.values()))
    if clash:
        raise ValueError(f"{name}: the table's ranks include the special tokens' ids {clash[:5]}")
    for special, tid in sorted(enc.special_tokens.items(), key=lambda kv: kv[1]):
        _add_special_at(tok, special, tid)
    return tok


def _add_special_at(tok: Tokenizer, token: str, tid: int) -> None:
    """Add a special token with id `tid` (tiktoken's ids leave gaps, which add_special_tokens would close)."""
    import json
    data = json.loads(tok.to_str())
    data["model"]["vocab"][token] = tid   # the model's vocab too: an added token absent there gets the next free id
    data["added_tokens"].append({"id": tid, "content": token, "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": True})
    new = Tokenizer.from_str(json.dumps(data))
    tok.__setstate__(new.__getstate__())


def _char_to_byte() -> dict[str, int]:
    from .fast_bpe import _CHAR_TO_BYTE
    return _CHAR_TO_BYTE


def load(name: str, tiktoken_file: str | None = None) -> Tokenizer:
    """The tokenizer of tiktoken encoding `name`, from a local file (find_file)."""
    path, published = find_file(name, tiktoken_file)
    if not published:
        log.warning("tokenize: %s is not the published %s.tiktoken (sha256 differs): using its ranks with %s's "
                    "pattern and special tokens", path, name, name)
    return to_tokenizer(name, read_ranks(path))


def _named_encoding(spec: dict) -> Encoding | None:
    """The encoding a tokenizer.json was converted from by to_tokenizer (its pre-tokenizer, model and special
    tokens are that conversion's), else None."""
    pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
    steps = pre.get("pretokenizers") or []
    if (pre.get("type") != "Sequence" or len(steps) != 2 or steps[0].get("type") != "Split"
            or steps[0].get("behavior") != "Isolated" or steps[0].get("invert")
            or steps[1] != {**steps[1], "type": "ByteLevel", "add_prefix_space": False, "use_regex": False}
            or model.get("type") != "BPE" or not model.get("ignore_merges") or spec.get("normalizer") is not None
            or model.get("dropout") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")):
        return None
    regex = (steps[0].get("pattern") or {}).get("Regex")
    added = {t["content"]: t["id"] for t in spec.get("added_tokens") or []}
    if not all(t.get("special") for t in spec.get("added_tokens") or []):
        return None
    return next((e for e in ENCODINGS.values() if e.pattern == regex and added == e.special_tokens), None)


class TiktokenEncoder:
    """encode_batch's encoder for a tokenizer converted from a tiktoken encoding: tiktoken itself, with the
    encoding's own pattern and the table's ranks (which are the tokenizer's ids), so the ids are tiktoken's by
    construction; tiktoken releases the GIL per document and is several times faster than HF tokenizers here.
    Special-token text in a document is ordinary text, as encode_batch promises (tiktoken's encode_ordinary)."""

    def __init__(self, spec: dict, enc: Encoding):
        import tiktoken

        from .fast_bpe import _CHAR_TO_BYTE

        vocab = spec["model"]["vocab"]
        ranks = {bytes(_CHAR_TO_BYTE[c] for c in t): i for t, i in vocab.items() if t not in enc.special_tokens}
        self._enc = tiktoken.Encoding(f"gpupipe-{enc.name}", pat_str=enc.tiktoken_pattern, mergeable_ranks=ranks,
                                      special_tokens={})

    def encode_flat(self, texts):
        import numpy as np

        docs = self._enc.encode_ordinary_batch(list(texts), num_threads=max(1, os.cpu_count() or 1))
        offsets = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum([len(d) for d in docs], out=offsets[1:])
        ids = np.fromiter((i for d in docs for i in d), dtype=np.uint32, count=int(offsets[-1]))
        return ids, offsets


@per_tokenizer
def tiktoken_encoder(tok: Tokenizer) -> tuple[TiktokenEncoder | None, str | None]:
    """(the tiktoken encoder, None) for a tokenizer made by to_tokenizer, else (None, why not); built once per
    tokenizer (fast_bpe.per_tokenizer)."""
    import json

    spec = json.loads(tok.to_str())
    enc = _named_encoding(spec)
    if enc is None:
        return None, "not a tokenizer converted from a tiktoken encoding"
    return TiktokenEncoder(spec, enc), None


__all__ = ["ENCODINGS", "TiktokenFileMissing", "find_file", "load", "read_ranks", "to_tokenizer"]
