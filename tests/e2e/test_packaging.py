"""The built wheel carries the CUDA sources under gpupipe/kernels, lid.176.ftz under gpupipe/data and the console
script."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT


@pytest.mark.slow
def test_wheel_has_kernels_and_cuda_sources(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    wheel = next(tmp_path.glob("gpupipe-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    cu = {Path(n).name for n in names if n.startswith("gpupipe/kernels/") and n.endswith((".cu", ".cuh"))}
    assert cu == {p.name for p in (ROOT / "kernels").glob("*.cu*")} and cu
    assert "gpupipe/kernels/text_hash.py" in names
    # the langid stage's default model and its licence notice (CC BY-SA 3.0) travel as package data
    assert {"gpupipe/data/lid.176.ftz", "gpupipe/data/NOTICE", "gpupipe/data/__init__.py"} <= set(names)
    assert "gpupipe/data/nsfw_keywords.txt" in names   # nsfw_filter's default keyword list
    assert zipfile.ZipFile(wheel).getinfo("gpupipe/data/lid.176.ftz").file_size == 938_013
    sources = {str(p.relative_to(ROOT)) for p in (ROOT / "gpupipe").rglob("*.py") if "__pycache__" not in p.parts}
    assert sources - set(names) == set(), "packages missing from pyproject's [tool.setuptools] packages"
    assert not any(n.startswith("kernels/") for n in names), "kernels must install as gpupipe.kernels only"
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "gpupipe = gpupipe.cli:entry" in zipfile.ZipFile(wheel).read(entry).decode()


def test_torch_is_not_imported_by_the_pipeline():
    code = "import sys, gpupipe.cli, gpupipe.run.pipeline, gpupipe.stages; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "False"
