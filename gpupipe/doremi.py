"""DoReMi: domain weights learned with a small proxy model (seed 001 §2.6.2; Xie et al. 2023, "DoReMi: Optimizing
Data Mixtures Speeds Up Language Model Pretraining", Algorithm 1), written as a mixture config.

    gpupipe doremi RUN/stages/01-tokenize --by source --out doremi.yaml

Input: tokenized parts (a `tokens` list column and the grouping column, e.g. a tokenize stage's folder). Each
group's documents are packed into its own stream (document, EOS, document, ...) and cut into blocks of
`seq_len + 1` tokens: a block is one training example of one group.

1. A reference model is trained on the initial weights (uniform: every group's loss counts alike).
2. A proxy model of the same shape is trained from scratch with Group DRO over the groups. At step t, with a batch
   of `batch_per_group` blocks of each group:
       λ_t[g]  = Σ_tokens max(ℓ_proxy - ℓ_ref, 0) / tokens   over group g's blocks   (the clipped excess loss)
       α'_t    = α_{t-1} · exp(η λ_t)
       α_t     = (1 - c) α'_t / Σ α'_t + c u                                          (u uniform, c smoothing)
   and the proxy takes a gradient step on Σ_g α_t[g] · (its mean token loss on group g).
3. The learned weights are the average of α_t over the steps.

A group the reference cannot learn either (noise) has no excess loss to give: its weight falls; groups the proxy
still lags the reference on gain weight. The models are tiny (an embedding and a linear head: a bigram language
model), on the CPU, or the GPU when there is one (`device`); the weights are a function of the data and the seed.
The output is a mixture stage config (`by`, `sources` with the learned weights, `total_tokens` = the input's
tokens) that `gpupipe run` takes as is.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpupipe.io.parts import part_paths


@dataclass
class DoremiConfig:
    by: str = "source"
    seq_len: int = 64
    steps: int = 200                  # proxy steps (the reference trains as many)
    batch_per_group: int = 8
    dim: int = 32
    lr: float = 0.003
    eta: float = 1.0                  # the step size of the weight update
    smoothing: float = 1e-3           # c: mixed with the uniform weights
    clip: str = "sequence"            # where the excess loss is clipped at 0: per block ("sequence") or "token"
    seed: int = 0
    device: str = "cpu"


@dataclass
class DoremiResult:
    groups: list[str]
    weights: dict[str, float]         # the average of α_t
    alphas: list[list[float]] = field(default_factory=list)    # α_t per step
    excess: list[list[float]] = field(default_factory=list)    # λ_t per step
    total_tokens: int = 0
    reference_loss: dict[str, float] = field(default_factory=dict)


def update_weights(alpha: np.ndarray, excess: np.ndarray, eta: float, smoothing: float) -> np.ndarray:
    """One Group DRO step of DoReMi: exponentiated excess losses, normalized, smoothed towards uniform."""
    a = alpha * np.exp(eta * excess)
    return (1 - smoothing) * a / a.sum() + smoothing / alpha.size


def excess_loss(proxy, reference, clip: str):
    """λ of one group's batch from per-token losses (blocks, tokens): the mean of max(proxy - reference, 0) per
    token (the paper's Algorithm 1), or per block ("sequence": each block's mean difference clipped, as nanotron
    does), which the per-token jitter of an unlearnable group averages out of."""
    import torch

    diff = proxy - reference
    if clip == "token":
        return torch.clamp(diff, min=0).mean()
    return torch.clamp(diff.mean(dim=1), min=0).mean()


def group_blocks(folder, by: str, seq_len: int) -> tuple[dict[str, np.ndarray], int, int]:
    """Blocks (n, seq_len + 1) of each group's own stream, the vocabulary size (the EOS is the largest id + 1) and
    the tokens read."""
    import pyarrow.parquet as pq

    docs: dict[str, list[np.ndarray]] = {}
    parts = part_paths(folder)
    if not parts:
        raise ValueError(f"doremi: no part-*.parquet in {folder} (give a tokenize stage's folder)")
    for p in parts:
        names = pq.ParquetFile(p).schema_arrow.names
        missing = [c for c in ("tokens", by) if c not in names]
        if missing:
            raise ValueError(f"doremi: {p.name} lacks column(s) {missing} (tokenized parts with a {by!r} column)")
        t = pq.read_table(p, columns=["tokens", by])
        for toks, g in zip(t.column("tokens").to_pylist(), t.column(by).to_pylist()):
            docs.setdefault("none" if g is None else str(g), []).append(np.asarray(toks, dtype=np.int64))
    eos = 1 + max(int(d.max()) for ds in docs.values() for d in ds if d.size)
    blocks, total = {}, 0
    for g in sorted(docs):
        stream = np.concatenate([np.append(d, eos) for d in docs[g]])
        total += stream.size
        n = stream.size // (seq_len + 1)
        if n == 0:
            raise ValueError(f"doremi: group {g!r} has {stream.size} tokens, less than one block of {seq_len + 1}")
        blocks[g] = stream[:n * (seq_len + 1)].reshape(n, seq_len + 1)
    return blocks, eos + 1, total


def _model(vocab: int, cfg: DoremiConfig):
    import torch

    head = torch.nn.Linear(cfg.dim, vocab)
    torch.nn.init.zeros_(head.weight)   # start uniform (loss log V), as a language model's init nearly does: an
    torch.nn.init.zeros_(head.bias)     # unlearnable group then shows no excess loss from the first step
    return torch.nn.Sequential(torch.nn.Embedding(vocab, cfg.dim), head).to(cfg.device)


def _token_losses(model, batch):
    """Per-token next-token losses (batch, seq_len)."""
    import torch.nn.functional as F

    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none")


def _batches(blocks: dict[str, np.ndarray], groups: list[str], cfg: DoremiConfig, stream: int):
    """Per step, `batch_per_group` blocks of each group (seeded: the reference and the proxy see the same)."""
    import torch

    rng = np.random.default_rng([cfg.seed, stream])
    for _ in range(cfg.steps):
        yield [torch.as_tensor(blocks[g][rng.integers(0, len(blocks[g]), cfg.batch_per_group)], device=cfg.device)
               for g in groups]


def learn_weights(blocks: dict[str, np.ndarray], vocab: int, cfg: DoremiConfig) -> DoremiResult:
    import torch

    torch.manual_seed(cfg.seed)
    groups = sorted(blocks)
    k = len(groups)
    if k < 2:
        raise ValueError(f"doremi: weights need two groups or more, found {groups}")
    ref = _model(vocab, cfg)
    opt = torch.optim.Adam(ref.parameters(), lr=cfg.lr)
    for batch in _batches(blocks, groups, cfg, 0):   # the reference: uniform weights
        loss = sum(_token_losses(ref, b).mean() for b in batch) / k
        opt.zero_grad()
        loss.backward()
        opt.step()
    ref.eval()

    torch.manual_seed(cfg.seed + 1)
    proxy = _model(vocab, cfg)
    opt = torch.optim.Adam(proxy.parameters(), lr=cfg.lr)
    alpha = np.full(k, 1.0 / k)
    result = DoremiResult(groups=groups, weights={})
    for batch in _batches(blocks, groups, cfg, 1):
        losses = [_token_losses(proxy, b) for b in batch]
        with torch.no_grad():
            excess = np.array([float(excess_loss(l, _token_losses(ref, b), cfg.clip)) for l, b in zip(losses, batch)])
        alpha = update_weights(alpha, excess, cfg.eta, cfg.smoothing)
        loss = sum(float(a) * l.mean() for a, l in zip(alpha, losses))
        opt.zero_grad()
        loss.backward()
        opt.step()
        result.alphas.append(alpha.tolist())
        result.excess.append(excess.tolist())
    mean = np.mean(result.alphas, axis=0)
    result.weights = {g: round(float(w), 6) for g, w in zip(groups, mean)}
    with torch.no_grad():
        result.reference_loss = {g: round(float(_token_losses(ref, torch.as_tensor(
            blocks[g][:64], device=cfg.device)).mean()), 4) for g in groups}
    return result


def mixture_config(result: DoremiResult, by: str) -> dict:
    """The learned weights as a mixture stage config (no epoch limit: the total is the input's tokens)."""
    return {"mixture": {"by": by, "total_tokens": int(result.total_tokens),
                        "sources": {g: {"weight": max(w, 1e-6), "epochs": None} for g, w in result.weights.items()}}}


def run(folder, out, cfg: DoremiConfig) -> DoremiResult:
    import yaml

    blocks, vocab, total = group_blocks(folder, cfg.by, cfg.seq_len)
    result = learn_weights(blocks, vocab, cfg)
    result.total_tokens = total
    header = (f"# DoReMi weights learned on {folder} by {cfg.by} ({cfg.steps} steps, seq_len {cfg.seq_len}, "
              f"seed {cfg.seed}); reference loss per group: {result.reference_loss}\n")
    Path(out).write_text(header + yaml.safe_dump(mixture_config(result, cfg.by), sort_keys=False), encoding="utf-8")
    return result


def add_parser(sub) -> None:
    d = sub.add_parser("doremi", help="learn mixture weights with a small proxy model (DoReMi, Group DRO)",
                       description=__doc__.split("\n\n")[0])
    d.add_argument("parts", help="a folder of tokenized parts (e.g. RUN/stages/01-tokenize)")
    d.add_argument("--out", required=True, help="the mixture config to write (YAML)")
    defaults = DoremiConfig()
    for name in ("by", "seq_len", "steps", "batch_per_group", "lr", "eta", "smoothing", "clip", "seed", "device"):
        d.add_argument(f"--{name.replace('_', '-')}", dest=name, type=type(getattr(defaults, name)),
                       default=getattr(defaults, name))
    d.set_defaults(fn=cmd_doremi)


def cmd_doremi(args: argparse.Namespace) -> int:
    cfg = DoremiConfig(**{k: getattr(args, k) for k in ("by", "seq_len", "steps", "batch_per_group", "lr", "eta",
                                                         "smoothing", "clip", "seed", "device")})
    result = run(args.parts, args.out, cfg)
    for g in result.groups:
        print(f"{g:<30} weight {result.weights[g]:.4f}  reference loss {result.reference_loss[g]:.3f}")
    print(f"mixture config: {args.out}")
    return 0


__all__ = ["DoremiConfig", "DoremiResult", "add_parser", "group_blocks", "learn_weights", "mixture_config", "run",
           "update_weights"]
