"""GPU check of gpupipe.loader.device: zero copy through DLPack, stream safety, H2D throughput.

Needs only numpy, cupy and torch (a CUDA build): gpupipe/loader/device.py is loaded by file
path, so neither gpupipe nor its dependencies need to be installed. Checks:
  zero copy     the torch tensor's data_ptr() is the CuPy array's data.ptr (uint16 and widened
                int64), on the device asked for, with the right dtype and shape
  values        round trip equals the host data: plain arrays, memmap slices, a list of memmap
                blocks assembled in pinned memory, a pinned torch tensor used in place, a dict
  stream safety many batches, each consumed on torch's stream right after the hand-off (on the
                default stream, a non-default torch stream, and an explicit side stream) with
                earlier tensors dropped while still in use; every sum must match the host's
Then a throughput table: to_device (uint16 over the bus, widened on the GPU) against torch's
usual paths (widen on the CPU + pageable copy; pinned uint16 + non_blocking copy).
Exit status: 1 if any check fails; 0 otherwise (also when there is no CUDA device: SKIP).

Usage:  python profiling/gpu_dlpack_check.py [--iters 50]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

DEVICE_PY = Path(__file__).resolve().parents[1] / "gpupipe" / "loader" / "device.py"
failures: list[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"[{'ok' if ok else 'FAIL'}] {name}" + (f" ({detail})" if detail else ""))
    if not ok:
        failures.append(name)


def load_device_module():
    spec = importlib.util.spec_from_file_location("gpupipe_loader_device", DEVICE_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_zero_copy_and_values(dev, torch, cupy, tmp: str) -> None:
    rng = np.random.default_rng(0)
    host = rng.integers(0, 65536, (32, 2048), dtype=np.uint16)

    t, c = dev.to_cuda_pair(host, "cuda:0")
    check("zero copy, uint16", t.data_ptr() == c.data.ptr and t.device == torch.device("cuda:0")
          and t.dtype == torch.uint16 and tuple(t.shape) == host.shape,
          f"tensor {t.data_ptr():#x} cupy {c.data.ptr:#x} {t.dtype} {tuple(t.shape)}")
    check("values, uint16", np.array_equal(cupy.asnumpy(c), host))
    t, c = dev.to_cuda_pair(host, "cuda", widen=True)
    check("zero copy, widened to int64", t.data_ptr() == c.data.ptr and t.dtype == torch.int64)
    check("values, int64", np.array_equal(t.cpu().numpy(), host.astype(np.int64)))

    path = os.path.join(tmp, "shard-00000.bin")
    host.tofile(path)
    mm = np.memmap(path, dtype="<u2", mode="r", shape=host.shape)
    t = dev.to_device(mm[4:12], "cuda", widen=True)
    check("memmap slice", np.array_equal(t.cpu().numpy(), host[4:12]))
    rows = [3, 0, 7, 31]
    t = dev.to_device([mm[i] for i in rows], "cuda", widen=True)
    check("memmap blocks assembled in pinned memory", np.array_equal(t.cpu().numpy(), host[rows]))
    pinned = torch.from_numpy(host).pin_memory()
    t = dev.to_device(pinned, "cuda", widen=True)
    check("pinned torch tensor in place", np.array_equal(t.cpu().numpy(), host))
    d = dev.to_device({"input_ids": host, "loss_mask": np.ones(host.shape, np.float32)}, "cuda", widen=True)
    check("dict batch", d["input_ids"].dtype == torch.int64 and d["loss_mask"].dtype == torch.float32
          and bool(d["loss_mask"].sum().item() == host.size))


def check_stream_safety(dev, torch, iters: int) -> None:
    """If the consumer stream did not wait for the copy, or memory still read by torch were reused
    for the next copy, sums would come out wrong. Batches are big so a copy takes a while."""
    shape = (512, 2048)
    base = np.random.default_rng(1).integers(0, 60000, shape, dtype=np.uint16)
    expected = [int(base.astype(np.int64).sum()) + i * base.size for i in range(iters)]

    def run(stream=None) -> bool:
        sums = []
        for i in range(iters):
            t = dev.to_device(base + np.uint16(i), "cuda", stream, widen=True)
            sums.append((t * 3 - t * 2).sum())  # queued on torch's current stream at once
            del t  # dropped while the kernels above may still be queued
        got = torch.stack(sums).cpu().tolist()
        return got == expected

    check("stream safety, torch default stream", run())
    side = torch.cuda.Stream()
    with torch.cuda.stream(torch.cuda.Stream()):
        check("stream safety, torch on a non-default stream", run())
        check("stream safety, explicit torch side stream", run(side))
    torch.cuda.synchronize()


def throughput(dev, torch, iters: int) -> None:
    print(f"\n{'batch':>10} {'MiB u16':>8} | {'to_device':>10} {'GB/s':>6} {'Gtok/s':>7} | "
          f"{'torch int64 pageable':>21} | {'torch pinned u16':>17}")
    rng = np.random.default_rng(2)
    for shape in [(32, 2048), (128, 2048), (512, 2048), (32, 8192)]:
        x = rng.integers(0, 65536, shape, dtype=np.uint16)
        pinned = torch.from_numpy(x).pin_memory()

        def ours():
            return dev.to_device(x, "cuda", widen=True)

        def naive():
            return torch.from_numpy(x.astype(np.int64)).to("cuda")

        def pinned_copy():
            return pinned.to("cuda", non_blocking=True).to(torch.int64)

        times = [_time(fn, iters, torch) for fn in (ours, naive, pinned_copy)]
        if times[0] is None:
            check(f"to_device {shape}", False, "raised")
            continue
        peers = [f"{t * 1e3:.3f}ms" if t else "n/a" for t in times[1:]]
        print(f"{'x'.join(map(str, shape)):>10} {x.nbytes / 2**20:>8.2f} | {times[0] * 1e3:>8.3f}ms "
              f"{x.nbytes / times[0] / 1e9:>6.2f} {x.size / times[0] / 1e9:>7.2f} | {peers[0]:>21} | "
              f"{peers[1]:>17}")


def _time(fn, iters: int, torch) -> float | None:
    """Seconds per call, device work included; None when the path is not supported here."""
    try:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    except Exception as exc:  # e.g. a torch build without uint16 → int64 casts on CUDA
        print(f"  ({getattr(fn, '__name__', fn)}: {type(exc).__name__}: {exc})")
        return None
    return (time.perf_counter() - t0) / iters


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args(argv)
    try:
        import cupy
        import torch
    except ImportError as exc:
        print(f"SKIP: {exc}")
        return 0
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver
        n, why = 0, exc
    else:
        why = "no device"
    if n < 1 or not torch.cuda.is_available():
        print(f"SKIP: no CUDA device ({why}; torch.cuda.is_available()={torch.cuda.is_available()})")
        return 0
    print(f"torch {torch.__version__} | cupy {cupy.__version__} | {torch.cuda.get_device_name(0)}")
    dev = load_device_module()
    with tempfile.TemporaryDirectory() as tmp:
        stages = [("zero copy and values", lambda: check_zero_copy_and_values(dev, torch, cupy, tmp)),
                  ("stream safety", lambda: check_stream_safety(dev, torch, args.iters)),
                  ("throughput", lambda: throughput(dev, torch, args.iters))]
        for name, stage in stages:
            try:
                stage()
            except Exception as exc:  # report and go on: later stages still say something
                traceback.print_exc()
                check(name, False, f"{type(exc).__name__}: {exc}")
    print(f"\ngpu_dlpack_check: {'FAILED: ' + ', '.join(failures) if failures else 'all checks passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
