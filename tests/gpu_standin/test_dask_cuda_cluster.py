"""executor: dask with device: gpu builds its dask-cuda cluster on a machine without cuDF or RMM (CuPy-only mode),
dropping enable_cudf_spill and the RMM settings with a warning that names them, and passes them unchanged where
cuDF and RMM are installed. dask_cuda is a stub that does what dask-cuda >= 24.10 does at start: import cuDF for
enable_cudf_spill and RMM for a pool, async resource or RMM allocator (a ModuleNotFoundError when absent)."""

import importlib
import importlib.machinery
import logging
import sys
import types

import pytest

from gpupipe.config import GpuClusterConfig
from gpupipe.run.executors import DaskExecutor


class _Cluster:
    started: list = []

    def __init__(self, resources=None, **kwargs):
        if kwargs.get("enable_cudf_spill"):
            importlib.import_module("cudf")
        if any(kwargs.get(k) for k in ("rmm_pool_size", "rmm_async", "rmm_allocator_external_lib_list")):
            importlib.import_module("rmm")
        self.kwargs, self.resources = kwargs, resources
        _Cluster.started.append(self)

    def close(self):
        pass


class _Client:
    def __init__(self, cluster):
        self.cluster = cluster

    def scheduler_info(self):
        return {"workers": {"w0": {"resources": self.cluster.resources}}}

    def close(self):
        pass


def _module(name, **attrs):
    m = types.ModuleType(name)
    m.__spec__ = importlib.machinery.ModuleSpec(name, None)
    m.__dict__.update(attrs)
    return m


@pytest.fixture
def stub_dask_cuda(monkeypatch):
    import distributed

    _Cluster.started = []
    monkeypatch.setitem(sys.modules, "dask_cuda", _module("dask_cuda", LocalCUDACluster=_Cluster))
    monkeypatch.setattr(distributed, "Client", _Client)
    return _Cluster


GPU = GpuClusterConfig(rmm_pool_size="1GB", enable_cudf_spill=True)


def test_without_cudf_or_rmm_the_cluster_starts(stub_dask_cuda, monkeypatch, caplog):
    for name in ("cudf", "rmm"):
        monkeypatch.setitem(sys.modules, name, None)     # not importable, whatever this machine has
    with caplog.at_level(logging.WARNING, logger="gpupipe.run.executors"):
        ex = DaskExecutor(1, device="gpu", gpu=GPU)
    kwargs = stub_dask_cuda.started[0].kwargs
    assert kwargs["enable_cudf_spill"] is False and "rmm_pool_size" not in kwargs
    assert "rmm_allocator_external_lib_list" not in kwargs and ex.places
    text = caplog.text
    assert "enable_cudf_spill" in text and "cuDF is not installed" in text and "rmm_pool_size" in text
    ex.close()


def test_with_cudf_and_rmm_the_settings_pass(stub_dask_cuda, monkeypatch, caplog):
    for name in ("cudf", "rmm"):
        monkeypatch.setitem(sys.modules, name, _module(name))
    with caplog.at_level(logging.WARNING, logger="gpupipe.run.executors"):
        DaskExecutor(1, device="gpu", gpu=GPU).close()
    kwargs = stub_dask_cuda.started[0].kwargs
    assert kwargs["enable_cudf_spill"] is True and kwargs["rmm_pool_size"] == "1GB"
    assert kwargs["rmm_allocator_external_lib_list"] == ["cupy", "torch"] and not caplog.text
