"""Compute kernels of gpupipe: CUDA C sources (compiled at run time by CuPy) and numba CPU twins.

Each GPU kernel in ``*.cu`` has a CPU twin with the same integer arithmetic, so the two give
bit-identical results. Import the submodules you need (``gpupipe.kernels.text_hash``); this
package itself imports nothing heavy, so ``import gpupipe.kernels`` stays cheap.
"""

if __name__ == "kernels":
    # Imported as a top-level `kernels`: a checkout's root is on sys.path (`python -m` run there, pytest's rootdir),
    # and this folder shadows PyPI's `kernels` (transformers >= 5.25 imports it). Hand the import to PyPI's, when
    # installed: the import system returns whatever sys.modules holds under the name once this file has run.
    import importlib.machinery
    import importlib.util
    import os
    import sys

    _here = os.path.realpath(__file__)
    _root = os.path.dirname(os.path.dirname(_here))
    _path = [p for p in sys.path if os.path.realpath(p or os.curdir) != _root]
    _spec = importlib.machinery.PathFinder.find_spec("kernels", _path)
    if _spec is not None and _spec.origin and os.path.realpath(_spec.origin) != _here:
        _module = importlib.util.module_from_spec(_spec)
        sys.modules["kernels"] = _module
        _spec.loader.exec_module(_module)
