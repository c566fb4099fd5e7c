"""Semantic dedup's configuration."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpupipe.config_base import Strict
from gpupipe.models.ref import ModelRef


class SemanticDedupConfig(Strict):
    model: ModelRef                                 # a local encoder folder (or hub id): mean-pooled embeddings
    threshold: float = Field(0.95, gt=0.0, le=1.0)  # cosine similarity at which two documents are duplicates
    n_clusters: int | None = Field(None, ge=1)      # k-means clusters; None: one per `cluster_docs` documents
    cluster_docs: int = Field(1000, ge=1)           # documents per cluster aimed at when n_clusters is None
    kmeans_sample: int = Field(100_000, ge=1)       # documents (a seeded sample) k-means is fitted on
    kmeans_iterations: int = Field(25, ge=1)        # Lloyd iterations at most (stops when no assignment moves)
    priority: list[str] = []                        # columns deciding the keeper ("-col" = largest first)
    max_length: int = Field(512, ge=4)              # tokens embedded per document (special tokens included)
    truncation: Literal["head", "head_tail"] = "head"
    batch_size: int = Field(64, ge=1)
    batch_tokens: int | None = Field(None, ge=1)
    device: Literal["auto", "cpu", "gpu"] = "auto"  # auto: the run's device (model, k-means, comparisons)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    sample_clusters: int = Field(20, ge=0)          # duplicate groups written to clusters_sample.jsonl


__all__ = ["SemanticDedupConfig"]
