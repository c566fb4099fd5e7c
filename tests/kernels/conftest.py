import pytest


@pytest.fixture
def gpu_standin():
    """The CuPy stand-in as `cupy` for this test (tests/gpu_standin): GPU host paths run here, stream-checked."""
    from tests.gpu_standin import install

    with install() as standin:
        yield standin
