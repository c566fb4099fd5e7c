"""Config errors name the key and the file and stop before any work."""

import pytest
import yaml

from gpupipe.cli import main
from gpupipe.config_base import ConfigError
from gpupipe.config import load_config


def write(tmp_path, cfg) -> str:
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


@pytest.fixture
def good(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "hello"}\n')
    return {"input": {"path": str(src)}, "output": str(tmp_path / "run"),
            "stages": [{"normalize": {}}, {"langid": {"keep": ["en"], "min_score": 0.5}}]}


@pytest.mark.parametrize("mutate, needle", [
    (lambda c: c.update(outptu="x"), "unknown key 'outptu'"),
    (lambda c: c["stages"][1]["langid"].update(min_scor=0.1), "unknown key 'stages.1.langid.min_scor'"),
    (lambda c: c["stages"][1]["langid"].update(min_score="high"), "stages.1.langid.min_score"),
    (lambda c: c["executor"].update(workers="two") if "executor" in c else c.update(executor={"workers": "two"}),
     "executor.workers"),
    (lambda c: c["stages"].append({"frobnicate": {}}), "unknown stage 'frobnicate'"),
    (lambda c: c["input"].update(path="/nonexistent/crawl.warc.gz"), "input not found: /nonexistent/crawl.warc.gz"),
    (lambda c: c.pop("stages"), "missing key 'stages'"),
    (lambda c: c["stages"].append({"pack": {}}), "must come right after 'tokenize'"),
])
def test_config_errors_name_key_and_file(tmp_path, good, mutate, needle, capsys):
    mutate(good)
    path = write(tmp_path, good)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert needle in str(e.value) and path in str(e.value)
    assert main(["run", path]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "run").exists(), "no work may start on a bad config"


def test_missing_config_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_flags_override_the_file(tmp_path, good):
    cfg = load_config(write(tmp_path, good), {"executor.workers": 3, "device": "cpu"})
    assert cfg.executor.workers == 3 and cfg.device == "cpu"
    assert cfg.stages[1]["langid"]["min_score"] == 0.5 and "max_chars" in cfg.stages[1]["langid"]


def test_html_input_needs_extract(tmp_path, capsys):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "a.html").write_text("<html><body><p>hi</p></body></html>")
    path = write(tmp_path, {"input": {"path": str(tmp_path / "site")}, "output": str(tmp_path / "run"),
                            "stages": [{"normalize": {}}]})
    assert main(["run", path]) == 2
    assert "first stage must be 'extract'" in capsys.readouterr().err


def test_help_for_each_command(capsys):
    for cmd in (["--help"], ["run", "--help"], ["synth", "--help"], ["verify", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(cmd)
        assert e.value.code == 0
    assert "--partition-docs" in capsys.readouterr().out
