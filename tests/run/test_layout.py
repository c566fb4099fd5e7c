"""#29 "one layout": the names of a run directory (stats.json, stages/, NN-name, rejects/, shards/manifest.json, ...)
are spelled in gpupipe/run/rundir.py only; every other module reaches them through RunLayout / StageDir / NAMES.

Read from the source with `ast` (nothing is imported but rundir, for the names themselves). A string constant is a
spelling of a run-directory name when it

- equals a file name of the layout (stats.json, report.html, manifest.json, ...), or path-joins one or a folder
  name ("shards/manifest.json", "stages/", "/stats.json");
- equals a folder name of the layout (stages, shards, rejects, audit, logs, _exchange) where it is used as a path:
  an operand of `/`, an argument of a path call (os.path.join, storage.join, Path, glob, ...), compared with == or
  !=, or the value of an UPPER_CASE constant. As a dict key (s["stages"], {"shards": ...}, .get("stages")) it is
  a key of stats.json or the manifest, not a path, and is left alone;
- or is the NN- of a stage folder's name: an f-string that starts with (or follows a "/" with) `{i:02d}-`.

Docstrings and prose (a constant with whitespace: messages, help texts) are not spellings.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gpupipe.run import rundir

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = "gpupipe/run/rundir.py"

NAME_CONSTANTS = ("STATS_FILE", "CONFIG_FILE", "REPORT_FILE", "METRICS_FILE", "LOCK_FILE", "FILE_HASHES",
                  "STAGES_DIR", "LOGS_DIR", "LOG_FILE", "SHARDS_DIR", "AUDIT_DIR", "REJECTS_DIR", "EXCHANGE_DIR",
                  "MANIFEST_FILE", "TOKENIZER_FILE", "LEDGER_FILE", "DECONTAM_REPORT_FILE", "CLUSTERS_SAMPLE_FILE")
NAMES = frozenset(getattr(rundir, n) for n in NAME_CONSTANTS)

# A shard folder is a product read without a run directory (gpupipe verify, the loader): its two names live in the
# token package, and rundir imports them from there. Spelled there and nowhere else.
HOMES = {rundir.MANIFEST_FILE: {"gpupipe/tokens/packing.py"}, rundir.TOKENIZER_FILE: {"gpupipe/tokens/tokenizer.py"}}

# Products of their own that happen to share a name with a run directory's file: `gpupipe chunk-markdown` writes a
# dataset folder (chunks.jsonl, rejected.jsonl, stats.json, dataset_info.json) read by LLaMA-Factory, not a run
# directory. A file leaves this set once it spells no run-directory name (test_to_convert_is_current says when).
TO_CONVERT = {
    "gpupipe/stages/text/chunk_markdown.py",
}

# calls whose arguments are paths: a folder name passed to them is a path
PATH_CALLS = {"join", "Path", "PurePath", "PurePosixPath", "joinpath", "glob", "rglob", "iglob", "open", "listdir",
              "find", "remove", "isdir", "isfile", "exists", "mkdir", "makedirs", "rmtree", "get_file", "put_file",
              "with_name", "relative_to", "scandir", "walk", "push"}


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _docstrings(tree: ast.AST) -> set[ast.AST]:
    """Bare string statements: docstrings and the like."""
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _used_as_path(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """A folder name's context: a path (True) or a key / label (False)."""
    parent = parents.get(node)
    if isinstance(parent, ast.Tuple) and isinstance(parents.get(parent), ast.Assign) \
            and any(isinstance(t, ast.Tuple) for t in parents[parent].targets):
        return True   # A_DIR, B_DIR = "stages", "logs": a constant of each
    while isinstance(parent, (ast.Tuple, ast.List, ast.Set, ast.Starred)) and not isinstance(parents.get(parent),
                                                                                             ast.Assign):
        node, parent = parent, parents.get(parent)   # join(url, *("stages", name)): the call decides
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div):
        return True
    if isinstance(parent, ast.Call) and node in parent.args:
        return _callee(parent) in PATH_CALLS
    if isinstance(parent, ast.Compare):
        return all(isinstance(op, (ast.Eq, ast.NotEq)) for op in parent.ops)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return any(isinstance(t, ast.Name) and t.id.isupper() for t in targets)   # SHARDS_DIR = "shards"
    return False


def _stage_folder_fstring(node: ast.JoinedStr) -> bool:
    """f"{i:02d}-{name}" or f"stages/{i:02d}-..." (a stage folder's NN-), not "+7 {a:03d}-{b:02d}-{c:02d}"."""
    vals = node.values
    for k, v in enumerate(vals[:-1]):
        spec = v.format_spec if isinstance(v, ast.FormattedValue) else None
        if not isinstance(spec, ast.JoinedStr) or [getattr(c, "value", None) for c in spec.values] != ["02d"]:
            continue
        nxt, before = vals[k + 1], vals[k - 1] if k else None
        if not (isinstance(nxt, ast.Constant) and nxt.value.startswith("-")):
            continue
        if before is None or isinstance(before, ast.Constant) and before.value.endswith("/"):
            return True
    return False


def spellings(source: str) -> list[tuple[int, str]]:
    """(line, what) for every spelling of a run-directory name in one module's source (module docstring)."""
    tree = ast.parse(source)
    parents, docs = _parents(tree), _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and _stage_folder_fstring(node):
            out.append((node.lineno, "a stage folder's NN-name (rundir.stage_name / RunLayout.stage)"))
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or node in docs:
            continue
        value = node.value
        if not value or any(c.isspace() for c in value):
            continue   # prose: a message, a help text
        if "/" in value and any(seg in NAMES for seg in value.split("/")):
            out.append((node.lineno, repr(value)))
        elif value in NAMES and ("." in value or _used_as_path(node, parents)):
            out.append((node.lineno, repr(value)))
    return sorted(set(out))


def _scan() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for f in sorted((ROOT / "gpupipe").rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        if rel == LAYOUT:
            continue
        hits = [(line, what) for line, what in spellings(f.read_text(encoding="utf-8"))
                if rel not in HOMES.get(what.strip("'\""), ())]
        if hits:
            found[rel] = hits
    return found


def test_the_scan_sees_spellings():
    """The reader itself: known spellings are found and keys are not (a scan that saw nothing would pass)."""
    src = '''
"""Docstring: RUN/stats.json and stages/NN-name are documentation."""
SHARDS_DIR = "shards"
a = root / "stages" / f"{i:02d}-{name}"
b = storage.join(url, "shards", "manifest.json")
c = f"stages/{i:02d}-{n}/"
d = p.name != "rejects"
e = stats["stages"], {"shards": 1}, m.get("audit"), "stages" in doc
f = "no stats.json here: a message"
g = f"+7 {a:03d}-{b:02d}-{c:02d}"
h = ("stats.json", "report.html")
A_DIR, B = "stages", "logs"
SECTIONS = [("audit", "Audit")]
'''
    hits = spellings(src)
    assert [line for line, _ in hits] == [3, 4, 4, 5, 5, 6, 6, 7, 11, 11, 12, 12], hits


def test_run_directory_names_are_spelled_in_rundir_only():
    found = {rel: hits for rel, hits in _scan().items() if rel not in TO_CONVERT}
    lines = [f"{rel}:{line}: {what}" for rel, hits in found.items() for line, what in hits]
    assert not lines, ("run-directory names spelled outside gpupipe/run/rundir.py (use RunLayout / StageDir / NAMES, "
                       "or add the name to rundir):\n" + "\n".join(lines))


def test_to_convert_is_current():
    """An allow-listed file that spells no name any more leaves the list."""
    clean = sorted(rel for rel in TO_CONVERT if rel not in _scan())
    assert not clean, f"#29: remove from TO_CONVERT (converted, or gone): {clean}"


def test_the_shard_folder_names_have_one_home():
    from gpupipe.tokens import packing, tokenizer

    assert rundir.MANIFEST_FILE is packing.MANIFEST_FILE and rundir.TOKENIZER_FILE is tokenizer.TOKENIZER_FILE


def test_layout_paths():
    lay = rundir.RunLayout("/r")
    st = lay.stage(3, "langid")
    assert st.root == Path("/r/stages/03-langid") and st.name == rundir.stage_name(3, "langid") == "03-langid"
    assert st.station == "langid" and rundir.StageDir.of(st.root) == st
    assert lay.stage_of({"stages": [{"name": "read"}, {"name": "extract"}]}, 1).root == Path("/r/stages/01-extract")
    assert lay.stage_named("01-extract").root == Path("/r/stages/01-extract")
    assert lay.relative(lay.manifest) == "shards/manifest.json"
    assert rundir.NAMES.stats == Path("stats.json") and rundir.NAMES.stage(0, "read").root == Path("stages/00-read")
    assert rundir.at("s3://b/runs/r1/", rundir.NAMES.manifest) == "s3://b/runs/r1/shards/manifest.json"
    assert rundir.at("/runs/r1", rundir.NAMES.stage(2, "x").root) == "/runs/r1/stages/02-x"


def test_stage_dir_reads(tmp_path):
    import pandas as pd

    lay = rundir.RunLayout(tmp_path)
    read, langid = lay.stage(0, "read"), lay.stage(1, "langid")
    for st in (read, langid):
        st.rejects.mkdir(parents=True)
    pd.DataFrame({"id": [1]}).to_parquet(langid.part("part-00000.parquet"))
    pd.DataFrame({"id": [2]}).to_parquet(langid.rejects / "part-00000.parquet")
    (read.rejects / "file-0000.jsonl").write_text("{}\n")
    langid.marker.write_text('{"key": "k", "columns": ["id"]}')
    assert [s.name for s in lay.stage_dirs()] == ["00-read", "01-langid"]
    assert langid.kept_parts() == langid.parts() == [langid.root / "part-00000.parquet"]
    assert langid.reject_parts() == [langid.rejects / "part-00000.parquet"] and langid.rejected_records() == []
    assert read.rejected_records() == [read.rejects / "file-0000.jsonl"]
    assert langid.read_marker()["key"] == "k" and read.read_marker() == {} and langid.columns() == ["id"]
