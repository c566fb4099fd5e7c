"""A CuPy stand-in for CI: gpupipe's GPU host paths run without a GPU (see README "GPU code without a GPU").

`install()` (a context manager; the `gpu_standin` fixture of tests/kernels/conftest.py wraps it) puts the stand-in
in sys.modules as `cupy` and `cupyx` for its duration, in this process, with fresh stream state, and clears the
caches that remember CuPy or device objects (backend.gpu_status, kernels' compiled modules and device constants),
before and after. It yields the stand-in module: `standin.STATE.stats` counts host syncs, launches and device bytes.

What it proves: the host orchestration (every CuPy call is in the subset, with CuPy's types and argument rules),
stream ordering (streams.py: every read of a buffer is ordered after its last write), shapes, batching and routing,
and results equal to the CPU path (the kernels run as emulators built from the CPU twins' arithmetic). What it
cannot: the CUDA C itself (races between threads, bounds, shared memory), real CuPy/cuDF/cuGraph behaviour, speed.
"""

from __future__ import annotations

import contextlib
import sys

_NAMES = ("cupy", "cupy.cuda", "cupyx")


def _clear_caches():
    from gpupipe import backend
    from gpupipe.kernels import _cuda, minhash, text_hash

    backend.gpu_status.cache_clear()
    _cuda.raw_module.cache_clear()
    minhash._gpu_params_on_device.cache_clear()
    text_hash._gpu_params_on_device.cache_clear()


@contextlib.contextmanager
def install():
    from . import cupy as standin
    from .streams import STATE

    saved = {name: sys.modules.get(name) for name in _NAMES}
    sys.modules["cupy"], sys.modules["cupy.cuda"], sys.modules["cupyx"] = standin, standin.cuda, standin.cupyx
    STATE.reset()
    _clear_caches()
    try:
        yield standin
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        _clear_caches()
