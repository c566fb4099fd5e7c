"""kernels/ sits at the checkout's top level but is gpupipe.kernels: run from the checkout's root (where `python -m`
and pytest put that root on sys.path), a plain `import kernels` must still reach PyPI's `kernels` (transformers
imports it), not this folder."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _installed() -> bool:
    try:
        importlib.metadata.distribution("gpupipe")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


# gpupipe.kernels exists only in an install (pyproject maps kernels/ to it); gpu_check.sh runs these files from a
# plain source tree through a throwaway package that the subprocess here, started from the root, does not see
pytestmark = pytest.mark.skipif(not _installed(), reason="gpupipe is not installed: gpupipe.kernels is an install's")


def _import_kernels(cwd: Path, pythonpath: Path) -> str:
    code = "import kernels, gpupipe.kernels as g; print(kernels.__file__); print(getattr(kernels, 'MARK', None)); " \
           "print(g.__file__)"
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_top_level_import_reaches_the_installed_kernels(tmp_path):
    site = tmp_path / "site"
    (site / "kernels").mkdir(parents=True)
    (site / "kernels" / "__init__.py").write_text("from kernels.sub import MARK\n")
    (site / "kernels" / "sub.py").write_text("MARK = 'pypi'\n")
    # `-c` from the root puts the root first on sys.path, ahead of PYTHONPATH: the folder is found first
    lines = _import_kernels(ROOT, site).splitlines()
    assert Path(lines[0]) == site / "kernels" / "__init__.py"
    assert lines[1] == "pypi"  # its own submodules resolve inside it
    assert Path(lines[2]).resolve() == ROOT / "kernels" / "__init__.py"  # gpupipe.kernels untouched


def test_without_an_installed_kernels_the_folder_stays(tmp_path):
    lines = _import_kernels(ROOT, tmp_path).splitlines()
    if Path(lines[0]).resolve() != ROOT / "kernels" / "__init__.py":  # this venv has PyPI's kernels
        assert "site-packages" in lines[0] or "dist-packages" in lines[0]
    else:
        assert lines[1] == "None"
