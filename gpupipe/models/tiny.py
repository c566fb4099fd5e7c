"""A randomly initialised (seeded) BERT encoder with a WordPiece tokenizer, made locally: no download. For tests,
benchmarks and the demo config (`make tiny-model` → models/tiny-classifier, which configs/full.yaml's
annotate-only `classifier` loads). Its scores mean nothing; its shapes, tokenizer and files are those of a real
Hugging Face model folder.

    python -m gpupipe.models.tiny --out models/tiny-classifier [--size tiny|small|base] [--labels 2]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Iterable

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SIZES = {  # hidden, layers, heads, intermediate
    "tiny": (32, 2, 2, 64),
    "small": (256, 4, 4, 1024),
    "base": (768, 12, 12, 3072),      # BERT-base
}


def synthetic_words(n: int) -> list[str]:
    """n distinct lower-case pseudo-words (deterministic), for a vocabulary and for benchmark texts."""
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    out, i = [], 0
    while len(out) < n:
        k, w = i, ""
        while True:
            w += consonants[k % len(consonants)] + vowels[(k // len(consonants)) % len(vowels)]
            k //= len(consonants) * len(vowels)
            if k == 0:
                break
        out.append(w)
        i += 1
    return out


def vocabulary(words: Iterable[str] = (), size: int | None = None) -> list[str]:
    """Specials, characters (every ASCII letter/digit/punctuation, also as ##pieces), the given words, then
    synthetic words up to `size`."""
    chars = [chr(c) for c in range(33, 127) if not chr(c).isupper()]
    vocab = list(SPECIALS) + chars + ["##" + c for c in chars if c.isalnum()]
    seen = set(vocab)
    for w in words:
        if w not in seen:
            vocab.append(w)
            seen.add(w)
    if size is not None:
        vocab += [w for w in synthetic_words(size) if w not in seen][:max(0, size - len(vocab))]
    return vocab


def make_encoder(out: str | os.PathLike, *, size: str = "tiny", num_labels: int = 2, seed: int = 0,
                 words: Iterable[str] = (), vocab_size: int | None = None, max_positions: int = 512,
                 problem_type: str | None = None, id2label: dict[int, str] | None = None) -> Path:
    """Write a BERT sequence classifier (random weights from `seed`) and its tokenizer to `out`; returns it."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary(words, vocab_size)
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizer(str(out / "vocab.txt"), do_lower_case=True, model_max_length=max_positions)
    hidden, layers, heads, inter = SIZES[size]
    labels = id2label or {i: f"LABEL_{i}" for i in range(num_labels)}
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=inter, max_position_embeddings=max_positions, num_labels=num_labels,
                     id2label=labels, label2id={v: k for k, v in labels.items()}, problem_type=problem_type)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(cfg).eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--labels", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    print(f"wrote {make_encoder(a.out, size=a.size, num_labels=a.labels, seed=a.seed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
