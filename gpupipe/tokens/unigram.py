"""SentencePiece-style Unigram tokenizer (`tokenize: {model: unigram}`), trained by SentencePiece's own trainer
(`unigram_trainer: sentencepiece`, the default; `pip install 'gpupipe[sentencepiece]'`) or by HF tokenizers'
UnigramTrainer (`unigram_trainer: tokenizers`, nothing to install), and saved as a tokenizer.json either way (HF
tokenizers encodes it; the SentencePiece model's pieces and scores, ids unchanged).

Reproducibility: SentencePiece's trainer (one thread) gives the same model for the same texts in every process.
HF's UnigramTrainer does not: it orders pieces of equal score by Rust hash-map order, seeded anew in each process,
so two runs of the same config train different vocabularies (measured: 34 of 2,000 pieces differ on the seeds'
text, also with TOKENIZERS_PARALLELISM=false), and a run that retrains is not byte-identical to the last one; the
stage logs a warning when it is used. (Within a run every worker loads the one saved file.)

What SentencePiece's defaults do and how each is done here:

  pieces        a "▁" before the text (add_dummy_prefix) and for every space, each starting the piece that
                follows it (Metaspace), no byte-level mapping: pieces are characters, so a Chinese word is
                one or a few pieces, not its UTF-8 bytes.
  coverage      `character_coverage` (SentencePiece's default 0.9995; 1.0 for a small alphabet): the characters
                that make up that share of the sample's character occurrences, most frequent first, are the
                alphabet; the rarer ones never enter a piece (the training text is cut at them, as SentencePiece
                leaves them out of its lattice).
  byte fallback `byte_fallback: true`: the 256 pieces `<0x00>` ... `<0xFF>`: a
                character outside the vocabulary is encoded as its UTF-8 bytes instead of `<unk>`, so every text
                decodes back exactly. They score far below any learnt piece so that text which spells "<0x41>"
                is not read as the byte piece.
  ids           `<unk>` 0, the special tokens (SentencePiece's control symbols: never read from text), the byte
                pieces, the learnt pieces; without byte fallback rare characters become `<unk>`.

The vocabulary size counts everything: special tokens, `<unk>`, the byte pieces and the learnt pieces. The text
is not otherwise normalized (SentencePiece's `identity` rule, whitespace kept): the normalize stage did that. So
decoding gives the text back exactly.
"""
from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

UNK_TOKEN = "<unk>"
BYTE_PIECES = [f"<0x{b:02X}>" for b in range(256)]
_BYTE_SCORE_BELOW = 100.0   # byte pieces score this far below the lowest learnt piece


def covered_chars(texts: Sequence[str], coverage: float) -> set[str]:
    """The most frequent characters that together make `coverage` of all character occurrences (ties: by code
    point, so the set does not depend on the order of the texts)."""
    counts = Counter()
    for t in texts:
        counts.update(t)
    counts.pop(" ", None)   # becomes ▁, always kept
    total = sum(counts.values())
    keep, seen = set(), 0
    for ch, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if total and seen >= coverage * total:
            break
        keep.add(ch)
        seen += n
    return keep


def _cut_at_rare(texts: Iterable[str], keep: set[str]) -> Iterable[str]:
    for t in texts:
        start = 0
        for i, ch in enumerate(t):
            if ch != " " and ch not in keep:
                if i > start:
                    yield t[start:i]
                start = i + 1
        if start < len(t):
            yield t[start:]


def train_unigram(texts: Iterable[str], vocab_size: int, special_tokens: Sequence[str], *,
                  byte_fallback: bool = True, character_coverage: float = 0.9995, unk_token: str = UNK_TOKEN,
                  max_piece_length: int = 16, trainer: str = "sentencepiece", info: dict | None = None) -> Tokenizer:
    """Train a SentencePiece-style Unigram tokenizer (see the module docstring). `info`, when given, gets the
    SentencePiece model's bytes (`sentencepiece_model`), which encodes as the tokenizer.json does."""
    texts = [t for t in texts if t] if not isinstance(texts, list) else [t for t in texts if t]
    specials = [t for t in special_tokens if t != unk_token]
    n_bytes = len(BYTE_PIECES) if byte_fallback else 0
    if vocab_size <= len(specials) + 1 + n_bytes:
        raise ValueError(f"vocab_size {vocab_size} leaves no room for pieces after {len(specials) + 1} special "
                         f"tokens" + (f" and the {n_bytes} byte pieces" if n_bytes else ""))
    if trainer == "sentencepiece":
        return _train_sentencepiece(texts, vocab_size, specials, byte_fallback, character_coverage, unk_token,
                                    max_piece_length, {} if info is None else info)
    return _train_hf(texts, vocab_size, specials, byte_fallback, character_coverage, unk_token, max_piece_length)


def sentencepiece_module():
    try:
        import sentencepiece
    except ImportError as e:
        raise ImportError(f"tokenize: `model: unigram` trains with SentencePiece, which the base install leaves out: "
                          f"pip install 'gpupipe[sentencepiece]' (or `unigram_trainer: tokenizers`: HF's "
                          f"UnigramTrainer, not reproducible run to run) ({e})") from None
    return sentencepiece


def _train_sentencepiece(texts: list[str], vocab_size: int, specials: list[str], byte_fallback: bool,
                         coverage: float, unk_token: str, max_piece_length: int, info: dict) -> Tokenizer:
    spm = sentencepiece_module()
    model = io.BytesIO()
    # ids: <unk> 0, the special tokens (control symbols: never produced from text), the byte pieces, the pieces
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, model_type="unigram", vocab_size=vocab_size,
        byte_fallback=byte_fallback, character_coverage=coverage, max_sentencepiece_length=max_piece_length,
        unk_id=0, unk_piece=unk_token, bos_id=-1, eos_id=-1, pad_id=-1, control_symbols=specials,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        num_threads=1, input_sentence_size=0, shuffle_input_sentence=False,
        max_sentence_length=max(4096, max((len(t.encode()) for t in texts), default=0) + 1),
        hard_vocab_limit=False, minloglevel=2)
    info["sentencepiece_model"] = model.getvalue()
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    return _hf_unigram(vocab, specials, unk_token, byte_fallback)


def _train_hf(texts: list[str], vocab_size: int, specials: list[str], byte_fallback: bool, coverage: float,
              unk_token: str, max_piece_length: int) -> Tokenizer:
    n_bytes = len(BYTE_PIECES) if byte_fallback else 0
    keep = covered_chars(texts, coverage)
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size - n_bytes, special_tokens=[unk_token, *specials],
                                      unk_token=unk_token, max_piece_length=max_piece_length, show_progress=False)
    tok.train_from_iterator(_cut_at_rare(texts, keep), trainer)
    vocab = [tuple(p) for p in json.loads(tok.to_str())["model"]["vocab"]]
    head = [p for p in vocab if p[0] in (unk_token, *specials)]
    pieces = [p for p in vocab if p not in head and p[0] not in BYTE_PIECES]
    if byte_fallback:
        head += [(b, 0.0) for b in BYTE_PIECES]
    return _hf_unigram(head + pieces, specials, unk_token, byte_fallback)


def _hf_unigram(vocab: list[tuple[str, float]], specials: list[str], unk_token: str,
                byte_fallback: bool) -> Tokenizer:
    """The tokenizer.json form: HF's Unigram model over these (piece, score) in id order. Byte pieces and special
    tokens score far below every learnt piece: HF's lattice has no piece types, and text that spells "<0x41>" or
    a special token must be read as its characters, as SentencePiece does."""
    unmatched = set(BYTE_PIECES) | set(specials) | {unk_token}
    floor = min((s for p, s in vocab if p not in unmatched), default=0.0) - _BYTE_SCORE_BELOW
    final = [(p, floor if p in unmatched else float(s)) for p, s in vocab]
    out = Tokenizer(models.Unigram(final, unk_id=[p[0] for p in final].index(unk_token),
                                   byte_fallback=byte_fallback))
    # SentencePiece's add_dummy_prefix: a "▁" before every text, also one that starts with a space (Metaspace's
    # own prepending skips those), then every space a "▁" and a piece boundary before each
    out.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    out.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    # Llama's SentencePiece decoder: ▁ to space, byte pieces to bytes, the space the encoder prepended dropped
    out.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    out.add_special_tokens([unk_token, *specials])
    return out
