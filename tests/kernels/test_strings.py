"""Bad buffers give a clear error on both backends (kernels/strings.check_buffers), never a numba segfault or an
illegal address on the GPU: offsets that decrease, start below 0 or run past the data. Every entry point that
takes raw buffers checks them; a subprocess shows the process survives and says what is wrong."""

import subprocess
import sys
import numpy as np
import pytest

from gpupipe.kernels import minhash as mh, ngram_hash as nh, text_hash as th

DATA = np.frombuffer(b"one two three four five six seven eight", dtype=np.uint8)
A, B = mh.minhash_permutations(16, seed=0)
TABLE = nh.NgramTable(np.zeros(0, dtype=np.uint64))
BAD = {
    "decreasing": (np.array([0, 10, 4, 20], np.int64), "must not decrease: offsets\\[2\\] = 4 < offsets\\[1\\] = 10"),
    "past the data": (np.array([0, 10, 400], np.int64), "from 0 to 400, outside the 39 bytes"),
    "below zero": (np.array([-5, 10, 20], np.int32), "from -5 to 20"),
}


def cpu_calls(offsets):
    n = len(offsets) - 1
    return {"text_hash": lambda: th.text_hash_cpu(DATA, offsets),
            "minhash": lambda: mh.minhash_cpu(DATA, offsets, np.zeros(n, np.uint8), A, B),
            "minhash bands": lambda: mh.minhash_cpu(DATA, offsets, False, A, B, bands=4, rows=4),
            "shingles": lambda: mh.shingle_hashes_cpu(DATA, offsets, False),
            "script counts": lambda: nh.script_counts_cpu(DATA, offsets),
            "unit counts": lambda: nh.unit_counts_cpu(DATA, offsets, np.zeros(n, np.uint8)),
            "ngram lookup": lambda: nh.ngram_lookup_cpu(DATA, offsets, np.zeros(n, np.uint8), TABLE)}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_offsets_are_refused_on_the_cpu(case):
    offsets, message = BAD[case]
    for name, call in cpu_calls(offsets).items():
        with pytest.raises(ValueError, match=message):
            call()


def test_good_buffers_still_pass_and_an_empty_column_too():
    offsets = np.array([0, 3, 3, 13, 39], np.int64)          # an empty document in the middle, the last to the end
    for call in cpu_calls(offsets).values():
        call()
    sliced = np.array([4, 7, 13], np.int32)                  # a sliced column's offsets start above 0
    assert th.text_hash_cpu(DATA, sliced).shape == (2, 2)
    assert th.text_hash_cpu(np.zeros(0, np.uint8), np.zeros(1, np.int64)).shape == (0, 2)
    with pytest.raises(TypeError, match="1-d uint8"):
        th.text_hash_cpu(DATA.astype(np.int8), offsets)
    with pytest.raises(TypeError, match="int32 or int64"):
        th.text_hash_cpu(DATA, offsets.astype(np.float64))


def test_a_process_given_bad_offsets_survives_and_says_why(tmp_path):
    """Without the check, numba would read far past the buffer (a segfault kills the process, no message)."""
    code = ("import numpy as np\nfrom gpupipe.kernels import minhash as mh\n"
            "data = np.zeros(64, np.uint8)\na, b = mh.minhash_permutations(8, 0)\n"
            "try:\n    mh.minhash_cpu(data, np.array([0, 1 << 40], np.int64), False, a, b)\n"
            "except ValueError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)   # not the repo root: its gpupipe/ has no kernels/ (pyproject maps them)
    assert out.returncode == 0, out.stderr
    assert "refused: offsets run from 0 to 1099511627776, outside the 64 bytes of data" in out.stdout


requires_gpu = pytest.mark.skipif(not th.gpu_available(), reason="no CUDA device")


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_offsets_are_refused_on_the_gpu(case):
    import cupy as cp

    offsets, message = BAD[case]
    d_data, d_offsets = cp.asarray(DATA), cp.asarray(offsets)
    n = len(offsets) - 1
    calls = {"text_hash": lambda: th.text_hash_gpu(d_data, d_offsets),
             "minhash": lambda: mh.minhash_gpu(d_data, d_offsets, np.zeros(n, np.uint8), A, B),
             "ngram lookup": lambda: nh.ngram_lookup_gpu(d_data, d_offsets, np.zeros(n, np.uint8), TABLE)}
    for name, call in calls.items():
        with pytest.raises(ValueError, match=message):
            call()
    cp.cuda.Device().synchronize()   # the device is still healthy: no kernel ran on the bad offsets
