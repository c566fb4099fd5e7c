"""Within one k-means cluster: the pairs of documents whose embeddings reach the cosine threshold, compared in
blocks of rows (a cluster of m documents costs m² similarities, never the corpus')."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupipe.stages.dedup.semantic.kmeans import _torch_device

BLOCK = 2048


def similar_pairs(emb: np.ndarray, doc_index: np.ndarray, threshold: float, device: str = "cpu") -> pd.DataFrame:
    """Edges (u, v, similarity) with u < v in doc_index for every pair at cosine ≥ threshold; emb unit rows."""
    import torch

    order = np.argsort(doc_index, kind="stable")
    doc, dev = np.asarray(doc_index, np.int64)[order], _torch_device(device)
    e = torch.tensor(np.asarray(emb[order], dtype=np.float32), device=dev)
    us, vs, ss = [], [], []
    for s in range(0, len(doc), BLOCK):
        sim = e[s:s + BLOCK] @ e.T                      # rows s.., every column
        rows = torch.arange(s, min(s + BLOCK, len(doc)), device=dev).unsqueeze(1)
        cols = torch.arange(len(doc), device=dev).unsqueeze(0)
        hit = (sim >= threshold) & (cols > rows)        # each pair once, never a document with itself
        i, j = torch.nonzero(hit, as_tuple=True)
        us.append(doc[(i + s).cpu().numpy()])
        vs.append(doc[j.cpu().numpy()])
        ss.append(sim[i, j].float().cpu().numpy())
    if not us:
        return pd.DataFrame({"u": np.zeros(0, np.int64), "v": np.zeros(0, np.int64),
                             "similarity": np.zeros(0, np.float32)})
    return pd.DataFrame({"u": np.concatenate(us), "v": np.concatenate(vs), "similarity": np.concatenate(ss)})


__all__ = ["similar_pairs"]
