"""Compute kernels of gpupipe: CUDA C sources (compiled at run time by CuPy) and numba CPU twins.

Each GPU kernel in ``*.cu`` has a CPU twin with the same integer arithmetic, so the two give
bit-identical results. Import the submodules you need (``gpupipe.kernels.text_hash``); this
package itself imports nothing heavy, so ``import gpupipe.kernels`` stays cheap.
"""
