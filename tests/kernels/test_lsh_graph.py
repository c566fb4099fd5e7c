"""kernels/lsh_graph.py, the LSH graph in array operations (numpy or CuPy), against its numba twins (what the CPU
runs): the same edges and the same clusters, value for value, on random buckets with heavy collisions, chains and
stars; and CuPy against numpy where a GPU is present (profiling/gpu_check.sh)."""

import numpy as np
import pytest

from gpupipe.kernels import lsh_graph as lg
from gpupipe.kernels.text_hash import gpu_available


def _buckets(rng, docs: int, bands: int, distinct: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every doc in every band, its hash one of `distinct` values: many shared buckets, big components."""
    doc = np.tile(rng.choice(1 << 40, size=docs, replace=False).astype(np.int64), bands)
    band = np.repeat(np.arange(bands, dtype=np.int64), docs)
    hashes = rng.integers(0, distinct, size=docs * bands).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return band, hashes, doc


@pytest.mark.parametrize("docs,bands,distinct", [(0, 3, 5), (1, 4, 2), (50, 12, 400), (2000, 12, 6000),
                                                 (3000, 20, 40000)])
def test_edges_and_clusters_equal_the_numba_path(docs, bands, distinct):
    rng = np.random.default_rng(docs + bands)
    band, hashes, doc = _buckets(rng, docs, bands, distinct)
    order = rng.permutation(len(doc))     # rows in any order: the result may not depend on it
    band, hashes, doc = band[order], hashes[order], doc[order]
    want_u, want_v = lg.star_edges_rows(band, hashes, doc)          # the numba twin
    u, v = lg.star_edges_array(band, hashes, doc)
    assert u.tolist() == want_u.tolist() and v.tolist() == want_v.tolist()
    assert (u < v).all()
    want_nodes, want_cluster = lg.components(want_u, want_v)        # union-find
    nodes, cluster = lg.components_array(u, v)
    assert nodes.tolist() == want_nodes.tolist() and cluster.tolist() == want_cluster.tolist()


def test_a_long_chain_and_a_doc_listed_twice():
    u = np.arange(0, 999, dtype=np.int64) * 7            # a path of 1,000 docs: the worst case for propagation
    v = u + 7
    nodes, cluster = lg.components_array(u[::-1].copy(), v[::-1].copy())
    assert nodes.tolist() == list(range(0, 7000, 7)) and set(cluster.tolist()) == {0}
    # one doc twice in a bucket makes no self edge
    u2, v2 = lg.star_edges_array(np.zeros(3, np.int64), np.zeros(3, np.uint64), np.array([5, 5, 9]))
    assert (u2.tolist(), v2.tolist()) == ([5], [9])


requires_gpu = pytest.mark.skipif(not gpu_available(), reason="no CUDA device")


@pytest.mark.gpu
@requires_gpu
def test_cupy_equals_numpy():
    import cupy as cp

    rng = np.random.default_rng(3)
    band, hashes, doc = _buckets(rng, 20000, 12, 60000)
    u, v = lg.star_edges_array(band, hashes, doc)
    du, dv = lg.star_edges_array(cp.asarray(band), cp.asarray(hashes), cp.asarray(doc))
    assert isinstance(du, cp.ndarray) and (du.get() == u).all() and (dv.get() == v).all()
    nodes, cluster = lg.components_array(u, v)
    dn, dc = lg.components_array(du, dv)
    assert (dn.get() == nodes).all() and (dc.get() == cluster).all()
