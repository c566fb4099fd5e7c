"""Fault suite, input and config block (#32): inputs and configs the read stage and the config loader must not trust,
each tried through the real `gpupipe run` in a fresh process, counted as the issue counts them:

  clean      exit 0 with every record accounted for (docs in = out + removed) and what the case expects (the right
             file read, the documents decoded, the odd entry counted by reason), or exit 2 with one `error:` line
             and no work done, when the case is a refusal
  lost       exit 0, but records miscounted or the wrong data read (a rewritten page not noticed, another file read)
  traceback  a Python traceback reached the user
  hung       still running after its timeout (a FIFO opened, /dev/zero read)
  blow-up    peak RSS of the run's process over RSS_BOUND_MB (os.wait4: that process alone)

Usage: python profiling/fault_inputs.py [--work DIR] [--big]   (--big: the issue's sizes, a 200 MB JSONL line and
a 4 MB .jsonl.gz of 4 GB of NULs; default: 64 MB and 1 GB, the same code paths in a quarter of the time)
"""

from __future__ import annotations

import argparse
import codecs
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import yaml

RSS_BOUND_MB = 1536   # the smallest budget was 3 GB; one process of the default pipeline idles at ~0.3
TEXT = [{"normalize": {}}]
HTML = [{"extract": {}}, {"normalize": {}}]


def docs(n: int, tag: str = "doc") -> list[dict]:
    return [{"id": f"{tag}{i}", "text": f"{tag} number {i}: a document with a few words of text in it"}
            for i in range(n)]


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def page(i: int, words: str = "Words of the page.") -> str:
    return f"<html><body><article><p>{(words + ' ') * 30}{i}</p></article></body></html>"


def run_rss(cfg: Path, timeout: float = 600, args: tuple = ()) -> tuple[subprocess.CompletedProcess | None, float]:
    """`gpupipe run cfg ARGS` in a fresh process; (result or None when it hung, peak RSS of that process in MB)."""
    err_file = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen([sys.executable, "-m", "gpupipe", "run", str(cfg), *args], stdout=subprocess.DEVNULL,
                         stderr=err_file, text=True)
    t0 = time.monotonic()
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - t0 > timeout:
            p.kill()
            os.wait4(p.pid, 0)
            return None, 0.0
        time.sleep(0.2)
    p.returncode = os.waitstatus_to_exitcode(status)
    err_file.seek(0)
    return subprocess.CompletedProcess(p.args, p.returncode, "", err_file.read()), usage.ru_maxrss / 1024


def write_cfg(work: Path, name: str, paths, stages=TEXT, **kw) -> Path:
    name = "".join(ch if ch.isalnum() else "-" for ch in name)
    out = work / f"run-{name}"
    shutil.rmtree(out, ignore_errors=True)
    cfg = {"input": {"path": [str(p) for p in (paths if isinstance(paths, list) else [paths])],
                     **kw.pop("input", {})},
           "output": str(out), "device": "cpu", "executor": {"kind": "local", "workers": 1}, "stages": stages, **kw}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return path


def stats_of(cfg: Path) -> dict | None:
    out = Path(yaml.safe_load(cfg.read_text(encoding="utf-8"))["output"])
    f = out / "stats.json"
    return json.loads(f.read_text()) if f.is_file() else None


def verdict(r, rss: float, ok: bool) -> str:
    if r is None:
        return "hung"
    if "Traceback" in r.stderr:
        return "traceback"
    if rss > RSS_BOUND_MB:
        return "blow-up"
    return "clean" if ok else "lost"


def one_line(r) -> bool:
    return r is not None and len([x for x in r.stderr.strip().splitlines() if x.startswith("error:")]) == 1


def said(r, stats: dict | None) -> str:
    if r is None:
        return "hung"
    if r.returncode == 0 and stats:
        read = stats["stages"][0]
        return f"exit 0: {stats['input_records']} records, {stats['output_docs']} out, read removed {read['removed']}"
    lines = [x for x in r.stderr.strip().splitlines() if x.startswith("error:")] or r.stderr.strip().splitlines()[-1:]
    return f"exit {r.returncode}: {(lines or [''])[0][:110]}"


def accounted(stats: dict | None) -> bool:
    return bool(stats) and stats["conservation_ok"] and \
        stats["input_records"] + stats["docs_added_total"] == stats["output_docs"] + stats["removed_total"]


def read_removed(stats: dict | None) -> dict:
    return stats["stages"][0]["removed"] if stats else {}


# ------------------------------------------------------------------------------------------------------- cases

def cases(work: Path, big: bool) -> list[tuple[str, object]]:
    """(name, a function returning (verdict, what happened)) for each case, its files made on disk."""
    d = work / "in"
    d.mkdir(parents=True, exist_ok=True)
    out: list[tuple[str, object]] = []

    def ran_ok(name: str, paths, expect, stages=TEXT, timeout: float = 600, **kw):
        """A run that must end 0, accounted, with `expect(stats)` true."""
        def case():
            cfg = write_cfg(work, name, paths, stages, **kw)
            r, rss = run_rss(cfg, timeout)
            stats = stats_of(cfg)
            ok = r is not None and r.returncode == 0 and accounted(stats) and expect(stats)
            return verdict(r, rss, ok), f"{said(r, stats)}, peak {rss:.0f} MB"
        out.append((name, case))

    def refused(name: str, make_cfg, needle: str, timeout: float = 120, args: tuple = (), output: str = "run-cfg"):
        """A config that must be refused: exit 2, one error line naming `needle`, no stage folder."""
        def case():
            cfg = make_cfg()
            t0 = time.monotonic()
            r, rss = run_rss(cfg, timeout, args)
            took = time.monotonic() - t0
            ok = r is not None and r.returncode == 2 and one_line(r) and needle in r.stderr \
                and not (work / output / "stages").exists()
            return verdict(r, rss, ok), f"{said(r, None)} ({took:.1f} s)"
        out.append((name, case))

    # -- names and keys
    lit = d / "literal"
    lit.mkdir()
    (lit / "data[1].jsonl").write_bytes(jsonl_bytes(docs(20)))
    (lit / "data1.jsonl").write_bytes(jsonl_bytes(docs(7)))
    ran_ok("input named data[1].jsonl beside data1.jsonl", lit / "data[1].jsonl",
           lambda s: s["input_records"] == 20)

    site = d / "site"
    site.mkdir()
    for i in range(4):
        (site / f"p{i}.html").write_text(page(i))

    def rewritten():
        cfg = write_cfg(work, "rewritten", site, HTML)
        r1, rss1 = run_rss(cfg)
        (site / "p2.html").write_text(page(2, "A page rewritten in place."))
        r, rss = run_rss(cfg)
        stats = stats_of(cfg)
        import pyarrow.parquet as pq

        out_dir = Path(yaml.safe_load(cfg.read_text())["output"]) / "stages"
        texts = [t for p in sorted(out_dir.glob("*-normalize/part-*.parquet"))
                 for t in pq.read_table(p, columns=["text"]).column("text").to_pylist()]
        ok = r1 is not None and r1.returncode == 0 and r is not None and r.returncode == 0 and accounted(stats) \
            and any("rewritten in place" in t for t in texts)
        return verdict(r, max(rss, rss1), ok), f"{said(r, stats)}; new text in the output: {ok}"
    out.append(("HTML page rewritten in place, same name, same command", rewritten))

    # -- encodings
    bom = d / "bom.jsonl"
    bom.write_bytes(codecs.BOM_UTF8 + jsonl_bytes(docs(5, "a")) + codecs.BOM_UTF8 + jsonl_bytes(docs(5, "b")))
    ran_ok("UTF-8 BOM at the start of a later line (cat a b)", bom,
           lambda s: s["input_records"] == 10 and not read_removed(s))
    for enc, bom_bytes, tag in (("utf-16-le", codecs.BOM_UTF16_LE, "utf16"), ("utf-16-be", b"", "utf16be-nobom"),
                                ("utf-32-le", codecs.BOM_UTF32_LE, "utf32")):
        f = d / f"{tag}.jsonl"
        f.write_bytes(bom_bytes + jsonl_bytes(docs(6) + [{"text": "中文文本 😀 and more words"}]).decode()
                      .encode(enc))
        ran_ok(f"JSONL in {enc.upper()}{' with BOM' if bom_bytes else ', no BOM'}", f,
               lambda s: s["input_records"] == 7 and not read_removed(s))
    f = d / "utf16.jsonl.gz"
    f.write_bytes(gzip.compress(codecs.BOM_UTF16_LE + jsonl_bytes(docs(6)).decode().encode("utf-16-le")))
    ran_ok("gzipped UTF-16 JSONL", f, lambda s: s["input_records"] == 6 and not read_removed(s))

    # -- entries that are not regular files
    def folder_with(name: str, make) -> Path:
        root = d / name
        root.mkdir()
        (root / "ok.jsonl").write_bytes(jsonl_bytes(docs(5)))
        make(root)
        return root

    def counted_once(s):
        return read_removed(s) == {"not_regular_file": 1} and s["input_records"] == 6

    ran_ok("FIFO pipe.jsonl in an input folder", folder_with("fifo", lambda r: os.mkfifo(r / "pipe.jsonl")),
           counted_once, timeout=180)
    ran_ok("zero.jsonl -> /dev/zero in an input folder",
           folder_with("zero", lambda r: os.symlink("/dev/zero", r / "zero.jsonl")), counted_once, timeout=180)
    sock_holder: list[socket.socket] = []

    def make_socket(r: Path):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(r / "sock.jsonl"))
        sock_holder.append(s)
    ran_ok("a Unix socket in an input folder", folder_with("sock", make_socket), counted_once, timeout=180)
    ran_ok("a symlink loop in an input folder", folder_with("loop", lambda r: os.symlink("l.jsonl", r / "l.jsonl")),
           counted_once)
    ran_ok("a dangling symlink in an input folder",
           folder_with("dangling", lambda r: os.symlink("gone.jsonl", r / "gone.jsonl")), counted_once)

    def bad_name(r: Path):
        with open(os.fsencode(r) + b"/caf\xe9.jsonl", "wb") as fh:
            fh.write(jsonl_bytes(docs(2)))
    ran_ok("a file name with invalid UTF-8 bytes in an input folder", folder_with("badname", bad_name), counted_once)

    def html_odd(r: Path):
        (r / "a.html").write_text(page(1))
        os.mkfifo(r / "b.html")
        os.symlink("c.html", r / "c.html")
    ran_ok("FIFO and symlink loop among an HTML folder's pages", folder_with("htmlodd", html_odd),
           lambda s: read_removed(s) == {"not_regular_file": 2} and s["input_records"] == 8, HTML, timeout=180)
    os.mkfifo(d / "named.jsonl")
    refused("a FIFO named as the input", lambda: write_cfg(work, "named-fifo", d / "named.jsonl"), "is a FIFO",
            output="run-named-fifo")

    # -- memory bounded by max_doc_bytes
    good = d / "good.jsonl"
    good.write_bytes(jsonl_bytes(docs(5)))
    line_mb = 200 if big else 64
    f = d / "one-line.jsonl"
    # every big file is written in 1 MiB pieces: the suite itself stays small, so the peak RSS of the process it
    # starts (which counts what a fork copied before the exec) is the run's own
    mib = 1 << 20
    with open(f, "wb") as fh:
        fh.write(jsonl_bytes(docs(3)))
        fh.write(b'{"text": "')
        for _ in range(line_mb):
            fh.write(b"w " * (mib // 2))
        fh.write(b'"}\n')
        fh.write(jsonl_bytes(docs(3, "after")))
    ran_ok(f"one {line_mb} MB JSONL line (a single document)", f,
           lambda s: read_removed(s) == {"doc_too_large": 1} and s["input_records"] == 7)
    bomb_gb = 4 if big else 1
    f = d / "bomb.jsonl.gz"
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * mib
    with open(f, "wb") as fh:
        for _ in range(bomb_gb << 10):
            fh.write(c.compress(block))
        fh.write(c.flush())
    ran_ok(f"{f.stat().st_size >> 10} KB .jsonl.gz inflating to {bomb_gb} GB of NULs, no newline", [good, f],
           lambda s: read_removed(s) == {"doc_too_large": 1})
    import zstandard

    f = d / "bomb.jsonl.zst"
    with open(f, "wb") as fh, zstandard.ZstdCompressor(level=3).stream_writer(fh) as w:
        for _ in range(bomb_gb << 10):
            w.write(block)
    ran_ok(f"{f.stat().st_size >> 10} KB .jsonl.zst inflating to {bomb_gb} GB of NULs", [good, f],
           lambda s: read_removed(s) == {"doc_too_large": 1})
    hsite = d / "bigpage"
    hsite.mkdir()
    (hsite / "small.html").write_text(page(0))
    with open(hsite / "big.html", "w") as fh:
        fh.write("<html><body><p>")
        for _ in range(100):
            fh.write("x" * mib)
        fh.write("</p></body></html>")
    with gzip.open(hsite / "bomb.html.gz", "wb") as fh:
        fh.write(b"<p>")
        for _ in range(512):
            fh.write(b"y" * mib)
    ran_ok("a 100 MB HTML page and a 512 MB gzipped one", hsite,
           lambda s: read_removed(s) == {"doc_too_large": 2} and s["input_records"] == 3, HTML)
    small = d / "small.jsonl"
    small.write_bytes(jsonl_bytes(docs(5)) + jsonl_bytes([{"text": "z " * (1 << 20)}]))
    ran_ok("max_doc_bytes: 1MiB set in the config", small,
           lambda s: read_removed(s) == {"doc_too_large": 1}, input={"max_doc_bytes": "1MiB"})

    # -- configs

    def text_cfg(name: str, text: str, encoding: str = "utf-8") -> Path:
        p = work / f"{name}.yaml"
        p.write_bytes(text.encode(encoding))
        return p

    base = f"input: {{path: {good}}}\noutput: {work / 'run-cfg'}\ndevice: cpu\n"
    laughs = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
    refused("YAML billion laughs (9^10 strings)", lambda: text_cfg(
        "laughs", base + "stages: [{normalize: {}}]\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + laughs),
        "YAML aliases")
    refused("a recursive YAML alias", lambda: text_cfg("recursive", base + "stages: &s [{normalize: {}}, *s]\n"),
            "recursive YAML alias")
    refused("duplicate key: two `stages` lists", lambda: text_cfg(
        "dup", base + "stages: [{exact_dedup: {}}]\nstages: [{normalize: {}}]\n"), "'stages' is given twice")
    refused("tokenize.vocab_size 2^31", lambda: text_cfg(
        "vocab31", base + f"stages: [{{tokenize: {{vocab_size: {2**31}}}}}]\n"), "vocab_size")
    refused("tokenize.vocab_size 2^40", lambda: text_cfg(
        "vocab40", base + f"stages: [{{tokenize: {{vocab_size: {2**40}}}}}]\n"), "vocab_size")
    refused("executor.workers 10^6", lambda: text_cfg(
        "workers", base + "executor: {workers: 1000000}\nstages: [{normalize: {}}]\n"), "executor.workers")
    refused("a config that is not text (bytes of no encoding)", lambda: text_cfg(
        "binary", base + "stages: [{normalize: {}}]\n# \xff\xfe\xfa\n", "latin-1"), "not valid UTF-8")

    def utf16_config():
        cfg = text_cfg("utf16", "\ufeff" + base.replace("run-cfg", "run-utf16") + "stages: [{normalize: {}}]\n",
                       "utf-16-le")
        r, rss = run_rss(cfg)
        stats = json.loads((work / "run-utf16" / "stats.json").read_text()) \
            if (work / "run-utf16" / "stats.json").is_file() else None
        ok = r is not None and r.returncode == 0 and accounted(stats) and stats["input_records"] == 5
        return verdict(r, rss, ok), said(r, stats)
    out.append(("a UTF-16 config file (must run)", utf16_config))

    with socket.socket() as s:   # a port that was free a moment ago: closed now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused("--scheduler-address of a closed port", lambda: text_cfg(
        "sched", base + "stages: [{normalize: {}}]\n"), "no Dask scheduler answers",
            args=("--scheduler-address", f"tcp://127.0.0.1:{port}"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", help="working folder (default: a fresh temp folder, removed at the end)")
    ap.add_argument("--big", action="store_true", help="the issue's sizes: a 200 MB line, a 4 GB gzip bomb")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="gpupipe-fault-inputs-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows = []
    for name, case in cases(work, args.big):
        try:
            v, what = case()
        except Exception as e:   # the suite's own failure, not the project's: shown, counted as not clean
            v, what = "suite error", f"{type(e).__name__}: {e}"
        rows.append((name, v, what))
        print(f"  {v:<11} {name:<62} {what}", flush=True)
    kinds = ("clean", "lost", "traceback", "hung", "blow-up", "suite error")
    counts = {k: sum(1 for _, v, _ in rows if v == k) for k in kinds}
    print(f"\n## inputs and configs (#32): {len(rows)} tried, " + ", ".join(f"{n} {k}" for k, n in counts.items())
          + f"; {time.time() - t0:.0f} s")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if counts["clean"] == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
