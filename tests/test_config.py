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


def test_a_light_command_does_not_wait_for_the_stations_and_a_typo_lists_every_command():
    """Only the subcommand argv names is set up: `gpupipe plan` never imports the stations (pandas, numba; the
    parser's set-up alone once took ~2.5 s for every command); `run --help` still lists the stages, and a name
    that is no command is answered with all of them, those set up lazily included."""
    import subprocess
    import sys

    code = ("import sys; from gpupipe.cli import main; rc = main(['plan', '--tokens', '1T']); "
            "print(rc, 'gpupipe.stages' in sys.modules, 'pandas' in sys.modules, 'numba' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-4:] == ["0", "False", "False", "False"], r.stdout[-2000:]
    r = subprocess.run([sys.executable, "-c", "from gpupipe.cli import main; main(['run', '--help'])"],
                       capture_output=True, text=True, timeout=300)
    assert "fuzzy_dedup" in r.stdout and "substring_dedup" in r.stdout, r.stdout[-2000:]
    r = subprocess.run([sys.executable, "-c", "from gpupipe.cli import main; main(['rnu', 'c.yaml'])"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "invalid choice: 'rnu'" in r.stderr
    for name in ("run", "plan", "doremi", "minhash-params", "decontam-index", "train-quality", "report", "audit",
                 "chunk-markdown"):
        assert f"'{name}'" in r.stderr, r.stderr


# ----------------------------------------------------------------------- configs that must not be trusted (#32)

def laughs(levels: int) -> str:
    """YAML "billion laughs": each level an alias list of nine of the one before (9^levels strings)."""
    names = [f"l{i}" for i in range(levels + 1)]
    out = f"{names[0]}: &{names[0]} [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for prev, name in zip(names, names[1:]):
        out += f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    return out


def test_yaml_alias_expansion_is_bounded(tmp_path, good, capsys):
    p = tmp_path / "laughs.yaml"
    p.write_text(yaml.safe_dump(good) + laughs(9))   # 9^10 = 3.5e9 strings once expanded
    with pytest.raises(ConfigError, match="expands through YAML aliases to more than 100000 values"):
        load_config(p)
    assert main(["run", str(p)]) == 2 and "YAML aliases" in capsys.readouterr().err
    p.write_text(yaml.safe_dump(good) + "loop: &a [1, *a]\n")
    with pytest.raises(ConfigError, match="key 'loop.1': a recursive YAML alias"):
        load_config(p)
    # aliases that stay small are YAML like any other: a config may reuse a block
    text = yaml.safe_dump(good).replace("langid:\n", "langid: &lang\n")
    p.write_text(text + "x-again: *lang\n")
    with pytest.raises(ConfigError, match="unknown key 'x-again'"):   # read, then validated as usual
        load_config(p)


def test_duplicate_keys_are_refused_naming_the_key(tmp_path, good):
    p = tmp_path / "dup.yaml"
    text = yaml.safe_dump(good, sort_keys=False)
    p.write_text(text + "stages: [{normalize: {}}]\n")
    with pytest.raises(ConfigError, match=r"key 'stages' is given twice \(lines \d+ and \d+\)"):
        load_config(p)
    p.write_text(text.replace("min_score: 0.5", "min_score: 0.5\n    min_score: 0.9"))
    with pytest.raises(ConfigError, match="key 'stages.1.langid.min_score' is given twice"):
        load_config(p)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-8-sig"])
def test_a_config_saved_as_utf16_or_utf32_is_read(tmp_path, good, encoding):
    good["input"]["source"] = "wiki-中文"
    p = tmp_path / "c.yaml"
    p.write_bytes(yaml.safe_dump(good, allow_unicode=True).encode(encoding))
    cfg = load_config(p)
    assert cfg.input.source == "wiki-中文" and cfg.stages[1]["langid"]["min_score"] == 0.5


def test_a_config_that_is_no_text_is_refused(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_bytes(b"input: {path: x}\nstages: [\xff\xfe\xfa]\n")
    with pytest.raises(ConfigError, match="not valid UTF-8 text"):
        load_config(p)


@pytest.mark.parametrize("mutate, needle", [
    (lambda c: c["stages"].append({"tokenize": {"vocab_size": 2**31}}), "stages.2.tokenize.vocab_size"),
    (lambda c: c["stages"].append({"tokenize": {"vocab_size": 2**40}}), "stages.2.tokenize.vocab_size"),
    (lambda c: c.update(executor={"workers": 10**6}), "executor.workers"),
    (lambda c: c.update(executor={"shuffle_buckets": 2**40}), "executor.shuffle_buckets"),
    (lambda c: c.update(executor={"partition_docs": 2**63}), "executor.partition_docs"),
    (lambda c: c["input"].update(max_doc_bytes="1TB"), "input.max_doc_bytes"),
])
def test_numbers_beyond_what_the_components_can_do_are_refused(tmp_path, good, mutate, needle, capsys):
    mutate(good)
    assert main(["run", write(tmp_path, good)]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_scheduler_address_nobody_listens_on_is_refused_at_once(tmp_path, good, capsys):
    import socket

    with socket.socket() as s:   # a port that was free a moment ago: closed now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = write(tmp_path, good)
    assert main(["run", path, "--scheduler-address", f"tcp://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"key 'executor.scheduler_address': tcp://127.0.0.1:{port}: no Dask scheduler answers there" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()
    with socket.socket() as s:   # one that listens passes the check (what answers is Dask's to judge)
        s.bind(("127.0.0.1", 0))
        s.listen()
        cfg = load_config(path, {"executor.kind": "dask", "executor.scheduler_address":
                                 f"tcp://127.0.0.1:{s.getsockname()[1]}"})
        assert cfg.executor.scheduler_address.endswith(str(s.getsockname()[1]))
    with pytest.raises(ConfigError, match="expected tcp://HOST:PORT"):
        load_config(path, {"executor.kind": "dask", "executor.scheduler_address": "tcp://127.0.0.1"})
