"""gpupipe.loader: token shards → torch batches (DESIGN.md, "Loader"; issue 6, parts 5 and 6).

- `ShardDataset`, `ResumableLoader` (dataset.py): the streaming IterableDataset and the
  DataLoader wrapper that makes mid-epoch resume exact.
- `EpochOrder`, `PhasedOrder` (a curriculum's phases in order), `RankSplit` (sampler.py): the pure-numpy
  order and rank/worker split.
- `to_device` (device.py): batches into torch without a copy at the hand-off (DLPack on GPU).

Nothing is imported eagerly: `import gpupipe.loader` pulls in neither torch nor CuPy, and
device.py imports nothing from gpupipe, so it also loads on a bare GPU box.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "ShardDataset": "dataset",
    "ResumableLoader": "dataset",
    "position_ids": "dataset",
    "loss_mask": "dataset",
    "EpochOrder": "sampler",
    "PhasedOrder": "sampler",
    "RankSplit": "sampler",
    "to_device": "device",
    "to_cuda_pair": "device",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpupipe.loader' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
