"""`gpupipe fetch-cc` against a real HTTP server on 127.0.0.1 serving a small crawl: warc.paths.gz and WARC files
built here (the synthetic crawl and copies of it), one server dropping the connection in the middle of files."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from gpupipe.acquire.commoncrawl import (LEDGER_FILE, FetchError, FetchOptions, fetch_crawl, fetch_retries,
                                         read_ledger, select_paths)
from gpupipe.cli import main
from tests.helpers.range_http import RangeServer as Server

CRAWL = "CC-MAIN-2024-51"
SEGMENTS = ["1733066035857.0", "1733066035857.1", "1733066035857.2"]


@pytest.fixture(scope="module")
def site(tmp_path_factory, synth_crawl) -> Path:
    """A Common Crawl layout: crawl-data/CRAWL/warc.paths.gz listing 2 files in each of 3 segments."""
    from gpupipe.synth import write_synthetic_crawl

    root = tmp_path_factory.mktemp("cc-site")
    rels = []
    for s, seg in enumerate(SEGMENTS):
        for k in range(2):
            rel = f"crawl-data/{CRAWL}/segments/{seg}/warc/{CRAWL}-2024120{s}-{k:05d}.warc.gz"
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if s == k == 0:
                shutil.copyfile(synth_crawl["warc"], dest)
            else:
                write_synthetic_crawl(root / "tmp" / f"{s}-{k}.warc.gz", docs=30 + 7 * s + k, seed=s * 10 + k)
                shutil.copyfile(root / "tmp" / f"{s}-{k}.warc.gz", dest)
            rels.append(rel)
    with gzip.open(root / "crawl-data" / CRAWL / "warc.paths.gz", "wt") as f:
        f.write("\n".join(rels) + "\n")
    return root


def _listing(site: Path) -> list[str]:
    with gzip.open(site / "crawl-data" / CRAWL / "warc.paths.gz", "rt") as f:
        return f.read().split()


def test_select_first_segments_then_cap():
    listing = [f"crawl-data/C/segments/{s}/warc/{s}-{k}.warc.gz" for s in "abc" for k in range(3)]
    assert select_paths(listing, 1) == listing[:3]
    assert select_paths(listing, 2) == listing[:6]
    assert select_paths(listing, 9) == listing
    assert select_paths(listing, 2, max_files=4) == listing[:4]
    with pytest.raises(FetchError, match="no segments"):
        select_paths(["crawl-data/C/x.warc.gz"], 1)


def test_fetch_cut_connections_then_rerun_fetches_nothing(site, tmp_path):
    rels = _listing(site)
    chosen = rels[:4]   # --segments 2
    names = [r.rsplit("/", 1)[1] for r in chosen]
    out = tmp_path / "out"
    opts = dict(concurrency=3, retries=3, backoff=0.05, timeout=30)
    with Server(site, cut={names[0]: 1, names[3]: 2}) as srv:
        s = fetch_crawl(CRAWL, 2, out, FetchOptions(base_url=srv.url, **opts))
        assert s.selected == names and sorted(s.fetched) == sorted(names) and not s.skipped
        for rel, name in zip(chosen, names):
            assert (out / name).read_bytes() == (site / rel).read_bytes(), name
        # no part file left; the ledger holds each file's retries
        assert sorted(p.name for p in out.iterdir()) == sorted(names + ["warc.paths.gz", LEDGER_FILE])
        ledger = read_ledger(str(out))["files"]
        assert {n: e["retries"] for n, e in ledger.items()} == {names[0]: 1, names[1]: 0, names[2]: 0, names[3]: 2}
        assert all(e["complete"] for e in ledger.values())
        gets = srv.gets()
        assert gets[names[0]] == 2 and gets[names[3]] == 3 and gets[names[1]] == gets[names[2]] == 1
        ranged = [(n, r) for m, n, r in srv.requests if m == "GET" and r]
        assert {n for n, _ in ranged} == {names[0], names[3]}, "a cut connection resumes with a Range request"
        assert s.retries == 3 and s.resumed == 3
        assert s.bytes_fetched == sum((site / r).stat().st_size for r in chosen)

        srv.requests.clear()
        again = fetch_crawl(CRAWL, 2, out, FetchOptions(base_url=srv.url, **opts))
        assert sorted(again.skipped) == sorted(names) and not again.fetched and again.bytes_fetched == 0
        assert not srv.gets(), "a re-run fetches nothing (HEAD only, to compare sizes)"


def test_a_server_ignoring_range_starts_the_part_over(site, tmp_path):
    name = _listing(site)[0].rsplit("/", 1)[1]
    with Server(site, cut={name: 1}, ranges=False) as srv:
        s = fetch_crawl(CRAWL, 1, tmp_path, FetchOptions(base_url=srv.url, backoff=0.05), max_files=1)
    assert s.fetched == [name] and s.resumed == 0 and s.retries == 1
    assert (tmp_path / name).read_bytes() == (site / _listing(site)[0]).read_bytes()


def test_a_truncated_file_is_fetched_again_and_failures_are_reported(site, tmp_path):
    rels = _listing(site)
    name = rels[0].rsplit("/", 1)[1]
    with Server(site) as srv:
        fetch_crawl(CRAWL, 1, tmp_path, FetchOptions(base_url=srv.url, backoff=0.05))
        whole = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(whole[:100])   # not the server's size: not complete
        srv.requests.clear()
        s = fetch_crawl(CRAWL, 1, tmp_path, FetchOptions(base_url=srv.url, backoff=0.05))
        assert s.fetched == [name] and len(s.skipped) == 1 and (tmp_path / name).read_bytes() == whole
        with pytest.raises(FetchError, match="listing of crawl CC-MAIN-1999-01"):
            fetch_crawl("CC-MAIN-1999-01", 1, tmp_path / "none", FetchOptions(base_url=srv.url, backoff=0.05))
    # a server that always cuts: gives up after the retries, naming the file; the others are complete
    with Server(site, cut={name: 99}) as srv:
        out = tmp_path / "flaky"
        with pytest.raises(FetchError, match="1 of 2 files failed"):
            fetch_crawl(CRAWL, 1, out, FetchOptions(base_url=srv.url, backoff=0.01, retries=2))
        assert not (out / name).exists() and (out / rels[1].rsplit("/", 1)[1]).is_file()


def test_cli(site, tmp_path, capsys):
    with Server(site) as srv:
        out = tmp_path / "cli"
        args = ["fetch-cc", "--crawl", CRAWL, "--segments", "3", "--max-files", "5", "--out", str(out),
                "--base-url", srv.url, "--backoff", "0.05"]
        assert main(args) == 0
        assert "5 WARC files" in capsys.readouterr().out
        assert len(list(out.glob("*.warc.gz"))) == 5
        assert main(args[:4] + ["0"] + args[5:]) == 2
        assert "segments must be >= 1" in capsys.readouterr().err


def test_a_run_counts_the_retries_its_input_files_took_to_fetch(site, tmp_path):
    """#35 part 4: fetch-cc's retries reach the run's stats: a file cut twice, then a file that failed once and was
    fetched by a later invocation (its failed attempts still count); the run that reads them has them in its read
    stage's `fetch_retries`, its dashboard row and its `retries`."""
    import json

    import yaml

    from gpupipe.report.metrics import stage_health

    small = _listing(site)[1].rsplit("/", 1)[1]     # segment 0's second file (30 documents)
    first = _listing(site)[0].rsplit("/", 1)[1]
    out = tmp_path / "cc"
    with Server(site, cut={small: 2}) as srv:
        fetch_crawl(CRAWL, 1, out, FetchOptions(base_url=srv.url, backoff=0.01, retries=3))
    assert fetch_retries([str(out / small)]) == 2 and fetch_retries([str(out / first)]) == 0
    (out / small).unlink()
    with Server(site, cut={small: 99}) as srv, pytest.raises(FetchError):
        fetch_crawl(CRAWL, 1, out, FetchOptions(base_url=srv.url, backoff=0.01, retries=1))
    failed = read_ledger(str(out))["files"][small]
    assert failed["complete"] is False and failed["retries"] > 1
    assert fetch_retries([str(out / small)]) == 0   # not a complete download: no file a run could read
    with Server(site) as srv:
        fetch_crawl(CRAWL, 1, out, FetchOptions(base_url=srv.url, backoff=0.01))
    n = failed["retries"]   # the failed invocation's retries, carried to the download that completed
    assert read_ledger(str(out))["files"][small]["retries"] == n and (out / small).is_file()

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"input": {"path": [str(out / small), str(out / first)]},
                                   "output": str(tmp_path / "run"), "device": "cpu",
                                   "executor": {"workers": 1}, "stages": [{"extract": {"extractor": "fast"}}]}))
    assert main(["run", str(cfg)]) == 0
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    read = stats["stages"][0]
    assert read["name"] == "read" and read["extra"]["fetch_retries"] == n
    assert stage_health(read)["retries"] == n and stats["metrics"]["stages"][0]["retries"] == n
    assert stats["retries"] == {"fetch": n, "total": n}
