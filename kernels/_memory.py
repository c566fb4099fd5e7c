"""Large host buffers for the parallel CPU kernels, allocated without numpy's huge-page advice.

numpy marks every allocation of 4 MiB or more with madvise(MADV_HUGEPAGE). On a Linux host whose
THP defrag setting is "madvise" (a common default) and whose memory is fragmented, the first touch
of such memory can stall in direct compaction, and the kernels' threads touch it all at once. On
the project's 2-core machine (`python profiling/bench_alloc.py`: 121 MB written by 2 threads,
fresh processes), the first write took 10-15 ms when free huge pages were at hand and ~150 ms when
they were not (3 runs of 5), and 25 ms every time without the advice. The whole near dedup of a
39 MB corpus (find_duplicates) ran ~45 ms faster without it. Predictable beats sometimes faster.
"""

from __future__ import annotations

import threading

import numpy as np

try:  # numpy >= 2
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # numpy 1.x
    try:
        from numpy.core.multiarray import _set_madvise_hugepage
    except ImportError:  # pragma: no cover - an unknown numpy: plain np.empty
        _set_madvise_hugepage = None

_FLAG = threading.Lock()  # two threads switching numpy's flag at once could leave it off for good


def empty(shape, dtype) -> np.ndarray:
    """np.empty(shape, dtype) without MADV_HUGEPAGE (numpy's flag is restored at once)."""
    if _set_madvise_hugepage is None:
        return np.empty(shape, dtype=dtype)
    with _FLAG:
        previous = _set_madvise_hugepage(False)
        try:
            return np.empty(shape, dtype=dtype)
        finally:
            _set_madvise_hugepage(previous)
