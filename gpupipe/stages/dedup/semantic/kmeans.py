"""Seeded spherical k-means (cosine) with torch, on the GPU when asked and available, else the CPU.

k-means++ seeding from a `numpy` generator (the seed fixes it on every device), then Lloyd iterations on unit
vectors: assign each point to its most similar centroid, centroid = normalised mean of its points; an emptied
cluster keeps its centroid. Stops when no assignment changes or after `iterations`. Assignment ties go to the
lower centroid number (argmax)."""

from __future__ import annotations

import numpy as np


def _torch_device(device: str) -> str:
    import torch

    return "cuda" if device == "gpu" and torch.cuda.is_available() else "cpu"


def kmeans(x: np.ndarray, k: int, seed: int, iterations: int = 25, device: str = "cpu") -> tuple[np.ndarray, int]:
    """Centroids (k', d) float32 with k' = min(k, rows), unit length; and the iterations run."""
    import torch

    n = len(x)
    k = max(1, min(k, n))
    dev = _torch_device(device)
    pts = torch.nn.functional.normalize(torch.tensor(np.asarray(x, dtype=np.float32), device=dev), dim=1)
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(n))]
    # k-means++ on cosine distance (1 - sim): each next centre drawn with probability ∝ distance² to the nearest
    best = 1.0 - pts @ pts[chosen[0]]
    for _ in range(1, k):
        w = best.clamp(min=0.0).double().pow(2).cpu().numpy()
        total = w.sum()
        nxt = int(rng.choice(n, p=w / total)) if total > 0 else int(rng.integers(n))
        chosen.append(nxt)
        best = torch.minimum(best, 1.0 - pts @ pts[nxt])
    cent = pts[chosen].clone()
    assign = None
    it = 0
    for it in range(1, iterations + 1):
        new = (pts @ cent.T).argmax(dim=1)
        if assign is not None and torch.equal(new, assign):
            it -= 1
            break
        assign = new
        sums = torch.zeros_like(cent).index_add_(0, assign, pts)
        counts = torch.bincount(assign, minlength=k)
        filled = counts > 0
        cent[filled] = torch.nn.functional.normalize(sums[filled], dim=1)
    return cent.cpu().numpy().astype(np.float32), it


def assign_clusters(x: np.ndarray, centroids: np.ndarray, device: str = "cpu", block: int = 65536) -> np.ndarray:
    """The most similar centroid of each row (int64), in blocks of rows."""
    import torch

    dev = _torch_device(device)
    c = torch.tensor(np.asarray(centroids, dtype=np.float32), device=dev)
    out = np.empty(len(x), dtype=np.int64)
    for s in range(0, len(x), block):
        e = torch.tensor(np.asarray(x[s:s + block], dtype=np.float32), device=dev)
        out[s:s + block] = (e @ c.T).argmax(dim=1).cpu().numpy()
    return out


__all__ = ["kmeans", "assign_clusters"]
