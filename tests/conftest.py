from pathlib import Path

import pytest

from gpupipe.backend import gpu_status
from tests.helpers import write_config


def pytest_collection_modifyitems(config, items):
    ok, why = gpu_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"no CUDA device: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def synth_crawl(tmp_path_factory) -> dict:
    """A small synthetic crawl (real .warc.gz + ground truth), made once per test session."""
    from gpupipe.synth import write_synthetic_crawl

    out = tmp_path_factory.mktemp("crawl") / "crawl.warc.gz"
    return write_synthetic_crawl(out, docs=120, seed=7)


@pytest.fixture
def config_file(tmp_path, synth_crawl):
    def make(**overrides) -> Path:
        overrides.setdefault("input", {"path": synth_crawl["warc"]})
        overrides.setdefault("output", str(tmp_path / "run"))
        return write_config(tmp_path / f"config-{len(list(tmp_path.glob('config-*')))}.yaml", **overrides)
    return make


@pytest.fixture(scope="module")
def model_stage():
    """A langid stage with lid.176 loaded, once per test module; tests swap configs on its model
    (tests.helpers.langid_with)."""
    from gpupipe.stages.base import RunContext
    from gpupipe.stages.filters.langid import LangId, LangIdConfig

    stage = LangId(LangIdConfig(), RunContext())
    stage.setup()
    return stage
