"""The stand-in's own rules, each against CuPy's documented behaviour: what must raise does, what CUDA orders
passes (a race it missed would make every stand-in test meaningless)."""

import numpy as np
import pytest

from tests.gpu_standin import install
from tests.gpu_standin.cupy import Unsupported
from tests.gpu_standin.streams import HazardError


@pytest.fixture
def cp():
    with install() as standin:
        yield standin


def test_ordering_rules(cp):
    a = cp.cuda.Stream(non_blocking=True)
    b = cp.cuda.Stream(non_blocking=True)
    blocking = cp.cuda.Stream()
    x = cp.arange(10)                          # legacy default stream
    with a, pytest.raises(HazardError):        # non-blocking streams skip the legacy stream's implicit sync
        x + 1
    with blocking:                             # a blocking stream waits for the legacy stream
        y = x * 2
    z = y + 1                                  # and the legacy stream for every blocking stream
    with a:
        a.wait_event(cp.cuda.Stream.null.record())
        w = z + x                              # ordered by the event
    with b, pytest.raises(HazardError):
        w + 1
    a.synchronize()                            # a host sync orders everything after it
    with b:
        assert (w + 1).get().tolist() == (np.arange(10) * 3 + 2).tolist()


def test_disjoint_ranges_and_pinned_buffers(cp):
    a, b = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    d = cp.empty(100, dtype=cp.uint8)
    pinned = cp.cupyx.empty_pinned(50, dtype=np.uint8)
    pinned[:] = 1
    d[:50].set(pinned, stream=a)
    with b:
        d[50:].fill(2)                          # other bytes: no race
        with pytest.raises(HazardError):
            d[40:60].get()                      # bytes [40, 50) still being copied on a
    with pytest.raises(HazardError):
        pinned[:10] = 3                         # the host overwrites a buffer a copy may still read
    a.synchronize()
    pinned[:10] = 3
    b.synchronize()
    assert d.get().tolist() == [1] * 50 + [2] * 50


def test_cupy_refusals_and_the_subset(cp):
    x = cp.arange(4)
    with pytest.raises(TypeError):
        x + np.arange(4)                        # CuPy never mixes host arrays in
    with pytest.raises(TypeError):
        np.asarray(x)
    with pytest.raises(Unsupported):
        cp.fft                                  # outside the subset gpupipe uses
    with pytest.raises(Unsupported):
        x.dot
    assert int(x[3]) == 3 and isinstance(x[3], cp.ndarray)   # scalar indexing: a 0-d device array
    k = cp.RawModule(code='extern "C" __global__ void text_hash_i64(').get_function("text_hash_i64")
    with pytest.raises(TypeError, match="numpy int64 scalar"):
        k((1,), (32,), (cp.zeros(4, cp.uint8), cp.zeros(2, cp.int64), 1, cp.zeros((2, 8), cp.uint64),
                        cp.empty((1, 2), cp.uint64)))
    syncs = cp.STATE.stats.syncs
    bool(x.any())
    assert cp.STATE.stats.syncs == syncs + 1


def test_install_restores_modules():
    import sys

    before = sys.modules.get("cupy")
    with install() as standin:
        import cupy

        assert cupy is standin
    assert sys.modules.get("cupy") is before
