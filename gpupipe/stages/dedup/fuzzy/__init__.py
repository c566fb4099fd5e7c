"""Near-duplicate removal: MinHash signatures → LSH band buckets → candidate edges → (exact Jaccard check) →
connected components → one document kept per cluster.

  config      FuzzyDedupConfig and the LSH shape (bands × rows)
  signatures  per partition: shingling mode, MinHash signatures folded at once into one 64-bit hash per band (only
              band hashes and the priority columns leave the partition: 8 bytes × bands per document)
  bands       the (band, hash, doc) rows of a band group
  edges       documents sharing a (band, hash) bucket become a star of edges to the bucket's smallest doc_index
  verify      optional: shingle sets of the candidate documents only, true Jaccard per edge, edges below threshold cut
  components  union-find (or cuGraph) over the edges, one keeper per cluster, the cluster-size histogram. Memory is
              bounded by the candidate documents (those with at least one edge), not the corpus: 16 bytes per edge
              plus the shingle sets when verifying
  in_memory   `find_duplicates`: all of it on one frame (kernels/near_dedup.py's chain, on the device for "gpu")
  stage       the `fuzzy_dedup` stage: the phases above, declared (`stages/phases.py` runs them; its last two
              phases, apply and the clusters sample, are `stages/cluster_sample.py`'s)
The compute is in kernels/lsh_graph.py (bucket tables, Jaccard, union-find as numba twins; device sorts and label
propagation as array forms for CuPy), picked by where the arrays are: the stage's steps run on the GPU for
device "gpu".
Every decision uses hashes, priority columns and `doc_index`, so results do not depend on partitioning, bucket
count or backend.
"""

from gpupipe.stages.dedup.fuzzy.components import choose_keepers, cluster_size_histogram, connected_components
from gpupipe.stages.dedup.fuzzy.config import FuzzyDedupConfig, lsh_shape
from gpupipe.stages.dedup.fuzzy.edges import star_edges
from gpupipe.stages.dedup.fuzzy.in_memory import find_duplicates
from gpupipe.stages.dedup.fuzzy.signatures import lsh_band_hashes
from gpupipe.stages.dedup.fuzzy.stage import FuzzyDedup
from gpupipe.stages.dedup.fuzzy.verify import identical_texts, shingle_sets, verify_edges

__all__ = ["FuzzyDedup", "FuzzyDedupConfig", "find_duplicates", "connected_components", "star_edges",
           "lsh_band_hashes", "verify_edges", "choose_keepers", "lsh_shape", "cluster_size_histogram",
           "identical_texts", "shingle_sets"]
