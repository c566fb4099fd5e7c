"""Megatron-LM .bin/.idx (MMIDIDX v1): our writer, our reader, and megatron-core's own IndexedDataset."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import gpupipe.tokens.megatron as mg
from gpupipe.cli import main
from gpupipe.io.parts import part_paths
from gpupipe.tokens.megatron import MegatronWriter, read_megatron, verify_megatron, write_megatron
from tests.helpers import megatron_run

EOS = 0
# megatron-core runs in a subprocess: its import is slow and noisy, and it may live in another virtualenv
# (GPUPIPE_MEGATRON_PYTHON=/path/to/python); by default this interpreter, where the dev extra installs it.
MEGATRON_PYTHON = os.environ.get("GPUPIPE_MEGATRON_PYTHON", sys.executable)

READER = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from megatron.core.datasets.indexed_dataset import IndexedDataset
out = []
for prefix in sys.argv[1:]:
    ds = IndexedDataset(prefix)
    out.append({"dtype": ds.index.dtype.__name__, "documents": ds.document_indices.tolist(),
                "sequences": [ds[i].tolist() for i in range(len(ds))]})
print(json.dumps(out))
"""


def megatron_read(*prefixes) -> list[dict]:
    """megatron-core's IndexedDataset on each prefix, in one subprocess (its import takes seconds); skips the
    test, saying why, when that interpreter cannot import megatron-core."""
    try:
        r = subprocess.run([MEGATRON_PYTHON, "-c", READER, *map(str, prefixes)], capture_output=True, text=True,
                           timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot run {MEGATRON_PYTHON}: {exc}")
    if r.returncode and "ModuleNotFoundError" in r.stderr:
        pytest.skip(f"megatron-core is not importable by {MEGATRON_PYTHON} (pip install megatron-core, or set "
                    f"GPUPIPE_MEGATRON_PYTHON to a python that has it): {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def docs_of(n, seed=0, hi=1000):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, hi, size=int(k)) for k in rng.integers(1, 50, size=n)]


@pytest.mark.parametrize("dtype, mega_dtype, code", [(np.uint16, "uint16", 8), (np.uint32, "int32", 4)])
def test_layout_byte_by_byte(tmp_path, dtype, mega_dtype, code):
    docs = docs_of(30)
    summary = write_megatron(tmp_path / "d", docs, dtype, EOS)
    assert summary["dtype"] == mega_dtype and summary["dtype_code"] == code and summary["documents"] == 30
    idx = (tmp_path / "d.idx").read_bytes()
    magic, version, dcode, n_seq, n_doc = struct.unpack_from("<9sQBQQ", idx)
    assert (magic, version, dcode, n_seq, n_doc) == (b"MMIDIDX\x00\x00", 1, code, 30, 31)
    off = 34
    lengths = np.frombuffer(idx, "<i4", 30, off)
    pointers = np.frombuffer(idx, "<i8", 30, off + 120)
    doc_idx = np.frombuffer(idx, "<i8", 31, off + 360)
    assert len(idx) == off + 120 + 240 + 248
    assert lengths.tolist() == [d.size + 1 for d in docs]
    item = np.dtype(mega_dtype).itemsize
    assert pointers.tolist() == (np.concatenate(([0], np.cumsum(lengths)[:-1])) * item).tolist()
    assert doc_idx.tolist() == list(range(31))
    data = np.fromfile(tmp_path / "d.bin", dtype="<" + np.dtype(mega_dtype).str[1:])
    assert data.tolist() == [t for d in docs for t in d.tolist() + [EOS]]
    assert summary["bin_sha256"] and summary["idx_sha256"]


def test_our_reader_round_trip(tmp_path):
    docs = docs_of(100, seed=1)
    write_megatron(tmp_path / "x", docs, np.uint16, EOS)
    index, seqs = read_megatron(tmp_path / "x")
    assert [s[:-1].tolist() for s in seqs] == [d.tolist() for d in docs]
    assert all(s[-1] == EOS for s in seqs)
    assert verify_megatron(tmp_path / "x", EOS) == []


def test_index_written_in_chunks_is_the_same(tmp_path, monkeypatch):
    docs = docs_of(50, seed=2)
    write_megatron(tmp_path / "big", docs, np.uint16, EOS)
    monkeypatch.setattr(mg, "_LENGTHS_CHUNK", 7)  # lengths, pointers, indices all cross chunk edges
    summary = write_megatron(tmp_path / "small", docs, np.uint16, EOS)
    assert (tmp_path / "big.idx").read_bytes() == (tmp_path / "small.idx").read_bytes()
    assert (tmp_path / "big.bin").read_bytes() == (tmp_path / "small.bin").read_bytes()
    assert summary["documents"] == 50


def test_writer_rejects_bad_documents_and_cleans_up_on_error(tmp_path):
    w = MegatronWriter(tmp_path / "e", np.uint16, EOS)
    for bad in (np.array([], dtype=np.int64), np.array([3, EOS, 4]), np.array([70000]), np.array([[1, 2]])):
        with pytest.raises(ValueError):
            w.add(bad)
    w.finish()
    assert verify_megatron(tmp_path / "e", EOS) == [] and read_megatron(tmp_path / "e")[1] == []
    with pytest.raises(RuntimeError):
        with MegatronWriter(tmp_path / "f", np.uint16, EOS) as w2:
            w2.add(np.array([1, 2]))
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.bin", "e.idx"]


def test_no_megatron_dtype_for_floats():
    with pytest.raises(ValueError, match="no integer token dtype"):
        MegatronWriter("/nonexistent/x", np.float32, 0)


def test_verify_catches_corruption(tmp_path):
    write_megatron(tmp_path / "c", docs_of(10, seed=3), np.uint16, EOS)
    data = np.fromfile(tmp_path / "c.bin", dtype="<u2")
    data[-1] = 5  # the last document loses its EOS
    data.tofile(tmp_path / "c.bin")
    assert any("EOS" in p for p in verify_megatron(tmp_path / "c", EOS))
    with open(tmp_path / "c.bin", "ab") as f:
        f.write(b"\x01\x00")
    assert any("c.bin: holds" in p for p in verify_megatron(tmp_path / "c", EOS))
    (tmp_path / "c.idx").write_bytes(b"NOTMEGA" + bytes(40))
    assert any("bad magic" in p for p in verify_megatron(tmp_path / "c"))


def test_megatron_core_reads_our_files(tmp_path):
    """The acceptance test of part 4: megatron-core's own reader gets back exactly our tokens."""
    docs16, docs32 = docs_of(40, seed=4), docs_of(40, seed=5, hi=70000)
    write_megatron(tmp_path / "m16", docs16, np.uint16, EOS)
    write_megatron(tmp_path / "m32", docs32, np.uint32, EOS)
    got16, got32 = megatron_read(tmp_path / "m16", tmp_path / "m32")
    for got, docs, dtype in ((got16, docs16, "uint16"), (got32, docs32, "int32")):
        assert got["dtype"] == dtype
        assert got["documents"] == list(range(41))
        assert got["sequences"] == [d.tolist() + [EOS] for d in docs]


def test_pack_stage_writes_megatron_alongside_the_shards(tmp_path):
    texts = [f"document {i} " + "word " * (i % 17 + 1) + "数据" * (i % 3) for i in range(60)]
    shards = megatron_run(tmp_path, texts, executor={"kind": "local", "partition_docs": 16}, blocks_per_shard=4)
    m = json.loads((shards / "manifest.json").read_text())
    assert m["megatron"]["prefix"] == "megatron/data" and m["megatron"]["documents"] == 60
    assert m["megatron"]["tokens"] == m["stream_tokens"]
    assert "packing" not in m  # the stream manifest is unchanged apart from the megatron entry
    import pyarrow.parquet as pq

    tokenized = [t for p in part_paths(tmp_path / "run" / "stages" / "01-tokenize")
                 for t in pq.read_table(p, columns=["tokens"]).column("tokens").to_pylist()]
    _, seqs = read_megatron(shards / "megatron" / "data")
    assert [s.tolist() for s in seqs] == [t + [m["eos_id"]] for t in tokenized]  # input order
    assert main(["verify", str(shards)]) == 0
    assert megatron_read(shards / "megatron" / "data")[0]["sequences"] == [s.tolist() for s in seqs]


def test_verify_checks_the_megatron_files_the_manifest_lists(tmp_path, capsys):
    """#28 (4): `gpupipe verify SHARD_DIR` checks megatron/data.bin|.idx too: two flipped bytes in data.bin fail
    it (sha256, naming the file), as does an index whose pointers were rewritten, or a file gone."""
    import shutil

    shards = megatron_run(tmp_path, [f"document {i} " + "word " * (i % 13 + 2) for i in range(40)])
    assert main(["verify", str(shards)]) == 0
    capsys.readouterr()

    bad = tmp_path / "bad"
    shutil.copytree(shards, bad)
    data = bytearray((bad / "megatron" / "data.bin").read_bytes())
    data[5] ^= 1
    data[len(data) // 2] ^= 0x10
    (bad / "megatron" / "data.bin").write_bytes(bytes(data))
    assert main(["verify", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad / 'megatron' / 'data.bin'}: sha256 mismatch" in err and "data.idx" not in err

    # an index whose first sequence pointer moved: its sha256 and the invariant (pointers = running sum) both fail
    shutil.copyfile(shards / "megatron" / "data.bin", bad / "megatron" / "data.bin")
    idx = bytearray((bad / "megatron" / "data.idx").read_bytes())
    n = struct.unpack_from("<Q", idx, 18)[0]
    struct.pack_into("<q", idx, 34 + 4 * n, 2)
    (bad / "megatron" / "data.idx").write_bytes(bytes(idx))
    assert main(["verify", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "data.idx: sha256 mismatch" in err and "pointers are not the running sum" in err

    (bad / "megatron" / "data.idx").unlink()
    assert main(["verify", str(bad)]) == 1
    assert f"{bad / 'megatron' / 'data.idx'}: missing" in capsys.readouterr().err
    assert main(["verify", str(shards)]) == 0
    assert "Megatron megatron/data.bin/.idx: 40 documents" in capsys.readouterr().out
