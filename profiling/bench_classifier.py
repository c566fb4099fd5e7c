"""Throughput of the `classifier` stage's model path (gpupipe/models/encoder.py): documents/s and tokens/s, for a
randomly initialised BERT (tiny / small / base size, made here: no download) on synthetic documents.

    python profiling/bench_classifier.py                                  # CPU, small model, 256 tokens
    python profiling/bench_classifier.py --device cuda --size base --max-length 512 --docs 8192 --check

Timed: what the stage does per partition — tokenize (Rust backend, head truncation), sort by length, pad, forward
(fp32 on the CPU, bf16 autocast on the GPU), softmax — with the first batch run before timing (CUDA context,
kernels). Documents are 0.5-2x max_length words long, so most are truncated and batches are nearly full.
Anchor: FineWeb-Edu scored with a BERT-base-size classifier at ~2.5B tokens per H100-hour; the target for a
base-size encoder is 2x that per GPU-hour (5B tokens/h = 1.39M tokens/s). `--check` compares the scores of a few
documents with a direct `model(**tokenizer(text))` pass (fp32) and with batch size 1 (exits 1 beyond tolerance).

Imports torch, transformers and gpupipe.models only (no dask, no trafilatura): runs from profiling/gpu_check.sh.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ANCHOR_TOKENS_PER_HOUR = 2.5e9   # FineWeb-Edu, per H100-hour
TARGET = 2 * ANCHOR_TOKENS_PER_HOUR


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--size", default="small", choices=["tiny", "small", "base"])
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--docs", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--check", action="store_true", help="also check scores against a direct forward pass")
    p.add_argument("--json", help="write the results here too")
    a = p.parse_args(argv)

    import torch

    from gpupipe.models.encoder import Encoder
    from gpupipe.models.tiny import make_encoder, synthetic_words

    if a.threads:
        torch.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    words = synthetic_words(20_000)
    vocab = 30522 if a.size == "base" else 8000
    texts = [" ".join(rng.choice(words, int(rng.integers(a.max_length // 2, 2 * a.max_length))))
             for _ in range(a.docs)]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = make_encoder(Path(tmp) / "m", size=a.size, vocab_size=vocab, words=words[:vocab // 2],
                            max_positions=max(512, a.max_length))
        enc = Encoder(str(path), head="classify", device=a.device, dtype=a.dtype, max_length=a.max_length)
        load_s = time.perf_counter() - t0
        params = sum(x.numel() for x in enc.model.parameters())
        enc.logits(texts[:a.batch_size], a.batch_size)            # warm-up: CUDA context, kernels, allocator
        sync = torch.cuda.synchronize if enc.device.startswith("cuda") else (lambda: None)
        sync()
        t0 = time.perf_counter()
        ids, _ = enc.encode(texts)
        tok_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        logits, truncated, tokens = enc.logits(texts, a.batch_size)
        sync()
        total_s = time.perf_counter() - t0
        out = {"device": enc.device, "gpu": torch.cuda.get_device_name() if enc.device.startswith("cuda") else None,
               "dtype": str(enc.dtype).replace("torch.", ""), "size": a.size, "params_m": round(params / 1e6, 1),
               "max_length": a.max_length, "batch_size": a.batch_size, "docs": a.docs, "tokens": tokens,
               "truncated": int(truncated.sum()), "load_s": round(load_s, 2), "tokenize_s": round(tok_s, 3),
               "seconds": round(total_s, 3), "docs_per_s": round(a.docs / total_s, 1),
               "tokens_per_s": round(tokens / total_s), "tokens_per_hour_b": round(tokens / total_s * 3600 / 1e9, 2),
               "vs_target_5b_per_hour": round(tokens / total_s * 3600 / TARGET, 2),
               "torch_threads": torch.get_num_threads()}
        status = 0
        if a.check:
            out["check"] = check(enc, path, texts[:16], a.max_length, logits[:16])
            status = 0 if out["check"]["ok"] else 1
    for k in ("dask", "trafilatura"):
        assert k not in sys.modules, f"{k} was imported"
    print(json.dumps(out))
    print(f"{out['size']} ({out['params_m']}M params) on {out['gpu'] or 'cpu'} {out['dtype']}, {a.max_length} "
          f"tokens: {out['docs_per_s']} docs/s, {out['tokens_per_s']:,} tokens/s = {out['tokens_per_hour_b']}B "
          f"tokens/hour ({out['vs_target_5b_per_hour']}x the 5B/h target); tokenize {out['tokenize_s']} s of "
          f"{out['seconds']} s")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    return status


def check(enc, path, texts, max_length, got_logits) -> dict:
    """Max |P(label 1) difference| vs a direct fp32 forward pass, one document at a time (tolerance: 1e-5 in
    fp32, 3e-2 under bf16/fp16, whose 8/11 mantissa bits give ~1e-2 on logits)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval().to(enc.device)
    ref = []
    with torch.inference_mode():
        for t in texts:
            x = {k: v.to(enc.device) for k, v in tok(t, truncation=True, max_length=max_length,
                                                     return_tensors="pt").items()}
            ref.append(torch.softmax(model(**x).logits.double(), -1)[0, 1].item())
    p = np.exp(got_logits - got_logits.max(1, keepdims=True))
    p = (p / p.sum(1, keepdims=True))[:, 1]
    one, _, _ = enc.logits(texts, batch_size=1)
    q = np.exp(one - one.max(1, keepdims=True))
    q = (q / q.sum(1, keepdims=True))[:, 1]
    tol = 1e-5 if str(enc.dtype) == "torch.float32" else 3e-2
    d_ref, d_bs = float(np.abs(p - np.array(ref)).max()), float(np.abs(p - q).max())
    return {"max_diff_vs_direct_fp32": d_ref, "max_diff_vs_batch_size_1": d_bs, "tolerance": tol,
            "ok": d_ref <= tol and d_bs <= tol}


if __name__ == "__main__":
    raise SystemExit(main())
