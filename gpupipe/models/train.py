"""`gpupipe train-classifier`: fine-tune an encoder (any local Hugging Face folder) into a model directory the
`classifier` stage loads.

Data: JSONL (gzip allowed), one example per line: `text` and either `label` (an integer class or a class name:
classification, cross-entropy) or `score` (a number: regression, mean squared error, FineWeb-Edu style). Labels
from the LLM judge of `chunk-markdown --judge` or from `gpupipe audit` reviews fit as they are.

Seeded: the validation split (per class for classification), the new head's initial weights, the batch order and
dropout all come from `--seed`, so on the CPU the same data and seed give the same model. A `--valid-fraction` is
held out and scored: precision / recall / F1 (of label 1 for two classes, macro-averaged otherwise) and accuracy,
or MSE / MAE for regression. Writes the model, its tokenizer and `train_info.json` (parameters, counts, metrics).
Texts are tokenized exactly as the stage tokenizes them (`Encoder.encode`: same truncation, same special tokens).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np


def read_examples(path: str | os.PathLike, text_field: str = "text") -> tuple[list[str], list[Any], str, int]:
    """(texts, targets, kind "label" | "score", skipped lines) of a labelled JSONL file."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    opener = gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")
    texts, targets, kind, skipped = [], [], None, 0
    with opener as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            text = rec.get(text_field) if isinstance(rec, dict) else None
            has = [k for k in ("label", "score") if isinstance(rec, dict) and rec.get(k) is not None]
            if not isinstance(text, str) or len(has) != 1:
                skipped += 1
                continue
            if kind is None:
                kind = has[0]
            if has[0] != kind:
                raise ValueError(f"{os.fspath(path)}: records mix `label` and `score`; use one of them")
            value = rec[kind]
            if kind == "score" and not isinstance(value, (int, float)):
                skipped += 1
                continue
            texts.append(text)
            targets.append(value)
    if not texts:
        raise ValueError(f"{os.fspath(path)}: no example with `{text_field}` and `label` or `score`")
    return texts, targets, kind, skipped


def split(targets: list, kind: str, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows): a seeded shuffle, per class for classification (every class validated)."""
    rng = np.random.default_rng(seed)
    groups = ([np.flatnonzero(np.array([t == c for t in targets])) for c in sorted(set(targets), key=str)]
              if kind == "label" else [np.arange(len(targets))])
    train, valid = [], []
    for g in groups:
        g = rng.permutation(g)
        n = round(len(g) * fraction)
        if fraction > 0 and len(g) > 1:
            n = min(max(n, 1), len(g) - 1)
        valid.append(g[:n])
        train.append(g[n:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(valid))


def classification_metrics(truth: np.ndarray, pred: np.ndarray, num_labels: int) -> dict[str, float | int]:
    def prf(c):
        tp = int(np.sum((truth == c) & (pred == c)))
        fp = int(np.sum((truth != c) & (pred == c)))
        fn = int(np.sum((truth == c) & (pred != c)))
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / (tp + fn) if tp + fn else 0.0
        return p, r, (2 * p * r / (p + r) if p + r else 0.0)

    scores = [prf(1)] if num_labels == 2 else [prf(c) for c in range(num_labels)]
    p, r, f = (float(np.mean([s[i] for s in scores])) for i in range(3))
    return {"docs": int(len(truth)), "precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4),
            "accuracy": round(float(np.mean(truth == pred)) if len(truth) else 0.0, 4),
            "averaged": "label 1" if num_labels == 2 else "macro"}


def train_classifier(model: str, data: str, out: str, *, text_field: str = "text", valid_fraction: float = 0.1,
                     epochs: int = 3, lr: float = 5e-5, batch_size: int = 16, max_length: int = 512,
                     weight_decay: float = 0.01, seed: int = 0, device: str = "cpu") -> dict[str, Any]:
    """Fine-tune `model` on `data`, write the result to `out`; returns what train_info.json holds."""
    from gpupipe.models.encoder import Encoder, quiet_transformers, require_models

    require_models()
    import torch
    from transformers import AutoModelForSequenceClassification

    if not 0.0 <= valid_fraction < 1.0:
        raise ValueError(f"valid fraction must be in [0, 1), got {valid_fraction}")
    for what, v in (("epochs", epochs), ("batch size", batch_size)):
        if v < 1:
            raise ValueError(f"{what} must be at least 1, got {v}")
    texts, targets, kind, skipped = read_examples(data, text_field)
    if kind == "label":
        ints = all(isinstance(t, int) and not isinstance(t, bool) for t in targets)
        names = [str(i) for i in range(max(targets) + 1)] if ints else sorted({str(t) for t in targets})
        if len(names) < 2:
            raise ValueError(f"{data}: classification needs two classes or more; found {names}")
        y = np.array([t if ints else names.index(str(t)) for t in targets], dtype=np.int64)
        extra = {"num_labels": len(names), "id2label": dict(enumerate(names)),
                 "label2id": {n: i for i, n in enumerate(names)}, "problem_type": "single_label_classification"}
    else:
        y = np.array(targets, dtype=np.float32)
        extra = {"num_labels": 1, "problem_type": "regression"}
    train_rows, valid_rows = split(targets, kind, valid_fraction, seed)

    torch.manual_seed(seed)
    with quiet_transformers():
        net = AutoModelForSequenceClassification.from_pretrained(model, ignore_mismatched_sizes=True, **extra)
    enc = Encoder(model, head="classify", device=device, dtype="float32", max_length=max_length, loaded=net)
    ids, truncated = enc.encode(texts)
    opt = torch.optim.AdamW(enc.model.parameters(), lr=lr, weight_decay=weight_decay)
    steps = epochs * math.ceil(len(train_rows) / batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1.0 - s / max(steps, 1)))
    gen = torch.Generator().manual_seed(seed)
    target = torch.from_numpy(y)
    losses = []
    enc.model.train()
    for _ in range(epochs):
        order = train_rows[torch.randperm(len(train_rows), generator=gen).numpy()]
        total = 0.0
        for s in range(0, len(order), batch_size):
            rows = order[s:s + batch_size]
            inputs = enc.batch_inputs([ids[i] for i in rows])
            loss = enc.model(**inputs, labels=target[rows].to(enc.device)).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(rows)
        losses.append(round(total / max(len(order), 1), 5))
    enc.model.eval()

    metrics = None
    if len(valid_rows):
        logits, _, _ = enc.logits([texts[i] for i in valid_rows], batch_size=max(batch_size, 32))
        if kind == "label":
            metrics = classification_metrics(y[valid_rows], logits.argmax(axis=1), len(names))
        else:
            err = logits[:, 0] - y[valid_rows]
            metrics = {"docs": int(len(valid_rows)), "mse": round(float(np.mean(err ** 2)), 5),
                       "mae": round(float(np.mean(np.abs(err))), 5)}

    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    enc.model.save_pretrained(tmp)
    enc.tokenizer.save_pretrained(tmp)
    info = {"model": str(out), "base_model": os.fspath(model), "task": "regression" if kind == "score" else
            "classification", "labels": extra.get("id2label"),
            "inputs": {"data": os.fspath(data), "text_field": text_field},
            "params": {"epochs": epochs, "lr": lr, "batch_size": batch_size, "max_length": max_length,
                       "weight_decay": weight_decay, "valid_fraction": valid_fraction, "seed": seed},
            "counts": {"examples": len(texts), "skipped": skipped, "train": int(len(train_rows)),
                       "valid": int(len(valid_rows)), "truncated": int(truncated.sum())},
            "train_loss": losses, "validation": metrics}
    (tmp / "train_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)   # never a half-written model under the real name
    return info


def cmd_train_classifier(args: argparse.Namespace) -> int:
    try:
        info = train_classifier(args.model, args.data, args.out, text_field=args.text_field,
                                valid_fraction=args.valid_fraction, epochs=args.epochs, lr=args.lr,
                                batch_size=args.batch_size, max_length=args.max_length, seed=args.seed,
                                device=args.device)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c = info["counts"]
    print(f"{info['task']}: trained on {c['train']} examples ({c['skipped']} skipped, {c['truncated']} truncated); "
          f"loss per epoch {info['train_loss']}")
    v = info["validation"]
    if v and "mse" in v:
        print(f"validation ({v['docs']} held-out examples): MSE {v['mse']:.4f}  MAE {v['mae']:.4f}")
    elif v:
        from gpupipe.stages.filters.model_quality import classification_scores

        print(f"validation ({v['docs']} held-out examples, {v['averaged']}): {classification_scores(v)}")
    print(f"wrote {info['model']} (load it with `- classifier: {{model: {info['model']}}}`)")
    return 0


def add_train_classifier_parser(subparsers) -> argparse.ArgumentParser:
    """Add `gpupipe train-classifier` to the CLI's subparsers."""
    t = subparsers.add_parser("train-classifier", help="fine-tune a transformer classifier for the classifier stage",
                              description=__doc__.split("\n\n")[1].replace("\n", " "))
    t.add_argument("--model", required=True, help="encoder to start from: a local Hugging Face folder")
    t.add_argument("--data", required=True, help="JSONL examples: text + label (class) or score (regression)")
    t.add_argument("--out", required=True, help="model folder to write")
    t.add_argument("--text-field", dest="text_field", default="text", help="JSONL text field (default text)")
    t.add_argument("--valid-fraction", dest="valid_fraction", type=float, default=0.1,
                   help="share held out for validation (default 0.1; per class for classification)")
    t.add_argument("--epochs", type=int, default=3, help="passes over the training examples (default 3)")
    t.add_argument("--lr", type=float, default=5e-5, help="AdamW learning rate, decayed linearly (default 5e-5)")
    t.add_argument("--batch-size", dest="batch_size", type=int, default=16, help="examples per step (default 16)")
    t.add_argument("--max-length", dest="max_length", type=int, default=512,
                   help="tokens per example, as the stage's max_length (default 512)")
    t.add_argument("--seed", type=int, default=0, help="split, head initialisation, order and dropout (default 0)")
    t.add_argument("--device", default="cpu", help="cpu (default), gpu or cuda:N")
    t.set_defaults(fn=cmd_train_classifier)
    return t


__all__ = ["train_classifier", "read_examples", "add_train_classifier_parser", "cmd_train_classifier"]
