"""Semantic dedup: documents whose encoder embeddings are near-identical (cosine ≥ threshold) within a k-means
cluster; one kept per group.

  config  SemanticDedupConfig
  kmeans  seeded spherical k-means and nearest-centroid assignment (torch; GPU when asked and available)
  pairs   within one cluster, the pairs at cosine ≥ threshold, in blocks of rows
  stage   the `semantic_dedup` stage: embed → centroids → assign → compare → cluster → apply (phases)
The encoder (loading, length-sorted batching, mean pooling) is `gpupipe/models/encoder.py`, shared with the
`classifier` stage.
"""

from gpupipe.stages.dedup.semantic.config import SemanticDedupConfig
from gpupipe.stages.dedup.semantic.kmeans import assign_clusters, kmeans
from gpupipe.stages.dedup.semantic.pairs import similar_pairs
from gpupipe.stages.dedup.semantic.stage import SemanticDedup

__all__ = ["SemanticDedup", "SemanticDedupConfig", "assign_clusters", "kmeans", "similar_pairs"]
