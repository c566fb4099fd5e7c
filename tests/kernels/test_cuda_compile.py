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


SMEM_LIMIT = 48 * 1024   # static shared memory a block may declare without opting in to more


def ptxas_report(text: str) -> dict[str, dict[str, int]]:
    """Per kernel, from `nvcc -Xptxas -v` output: registers, spill stores/loads (bytes), static shared memory."""
    import re

    out: dict[str, dict[str, int]] = {}
    name = None
    for line in text.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([A-Za-z_]\w*)'?", line)
        if m:
            name = m.group(1)
            out.setdefault(name, {"registers": 0, "spill_stores": 0, "spill_loads": 0, "smem": 0})
            continue
        if name is None:
            continue
        for key, pattern in (("spill_stores", r"(\d+) bytes spill stores"), ("spill_loads", r"(\d+) bytes spill loads"),
                             ("registers", r"Used (\d+) registers"), ("smem", r"(\d+) bytes smem")):
            m = re.search(pattern, line)
            if m:
                out[name][key] = max(out[name][key], int(m.group(1)))
    return out


def test_ptxas_report_reads_nvcc_output():
    sample = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'minhash_progression_i64' for 'sm_90'
ptxas info    : Function properties for minhash_progression_i64
    0 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 64 registers, 32768 bytes smem, 520 bytes cmem[0]
ptxas info    : Compiling entry function 'text_hash_i32' for 'sm_90'
ptxas info    : Function properties for text_hash_i32
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, 392 bytes cmem[0]
"""
    got = ptxas_report(sample)
    assert got["minhash_progression_i64"] == {"registers": 64, "spill_stores": 8, "spill_loads": 12, "smem": 32768}
    assert got["text_hash_i32"] == {"registers": 40, "spill_stores": 0, "spill_loads": 0, "smem": 0}


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH (profiling/gpu_check.sh runs this where it is)")
@pytest.mark.parametrize("source", SOURCES, ids=[s.name for s in SOURCES])
def test_no_register_spills_and_shared_memory_within_48k(source, tmp_path):
    """ptxas's resource report of every kernel, as CuPy compiles it (headers pasted, -std=c++17) for sm_90: a
    register spill (local memory traffic in a hot loop) or more than 48 KB of static shared memory fails."""
    from gpupipe.kernels._cuda import cuda_source

    alone = tmp_path / source.name
    alone.write_text(cuda_source(source.name))
    cmd = [NVCC, "-std=c++17", "-arch=sm_90", "-Xptxas", "-v", "-c", str(alone), "-o", str(tmp_path / "k.o")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stderr}"
    report = ptxas_report(result.stdout + result.stderr)
    assert report, result.stderr
    bad = {k: r for k, r in report.items() if r["spill_stores"] or r["spill_loads"] or r["smem"] > SMEM_LIMIT}
    assert not bad, bad
