"""Every kernels/*.cu compiles with nvcc for Hopper (sm_90), where nvcc is installed."""

import shutil
import subprocess

import pytest

from tests.helpers import ROOT

KERNELS = ROOT / "kernels"
SOURCES = sorted(KERNELS.glob("*.cu"))
NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("source", SOURCES, ids=[s.name for s in SOURCES])
def test_cuda_source_compiles(source, tmp_path):
    cmd = [NVCC, "-std=c++17", "-arch=sm_90", f"-I{KERNELS}", "-c", str(source),
           "-o", str(tmp_path / (source.stem + ".o"))]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stdout}\n{result.stderr}"
    # warnings are how mistakes in device code usually show up first
    assert "warning" not in result.stderr.lower(), result.stderr


def test_there_is_something_to_compile():
    assert SOURCES, f"no .cu files under {KERNELS}"


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("source", SOURCES, ids=[s.name for s in SOURCES])
def test_inlined_source_compiles_alone(source, tmp_path):
    """What CuPy is given (local headers pasted in) compiles with no include path: nothing is left to find."""
    from gpupipe.kernels._cuda import cuda_source

    text = cuda_source(source.name)
    assert '.cuh"' not in text
    alone = tmp_path / source.name
    alone.write_text(text)
    cmd = [NVCC, "-std=c++17", "-arch=sm_90", "--ptx", str(alone), "-o", str(tmp_path / "k.ptx")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stderr}"
