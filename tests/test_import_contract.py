"""The import contract of gpupipe's own modules, read from the source with `ast` (nothing is imported): no import
circle (imports inside functions count: a late import only hides a circle), stations never reach into the
engine (stages → run), the engine knows no view of its results (run → report), the io layer knows no station nor run config, and the config vocabulary
(config_base) imports no station."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module_files() -> dict[str, Path]:
    """Module name → file; kernels/ is installed as gpupipe.kernels."""
    out = {}
    for base, prefix in ((ROOT / "gpupipe", "gpupipe"), (ROOT / "kernels", "gpupipe.kernels")):
        for f in base.rglob("*.py"):
            parts = list(f.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = f
    return out


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """The gpupipe modules `name` imports, anywhere in its file (a `from X import y` names X.y when that is a
    module, else X)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:   # `import gpupipe.x.y` where y is a name: its module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    files = _module_files()
    return {name: _imports(name, path, set(files)) for name, path in files.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _edges(graph: dict[str, set[str]], src: str, dst: tuple[str, ...]) -> list[str]:
    def under(m: str, p: str) -> bool:
        return m == p or m.startswith(p + ".")
    return sorted(f"{a} -> {b}" for a, bs in graph.items() if under(a, src) for b in bs
                  if any(under(b, d) for d in dst))


def test_the_walk_sees_the_imports():
    """The reader itself: known imports are found (a walk that saw nothing would pass every rule below)."""
    g = _graph()
    assert "gpupipe.stages" in g["gpupipe.config"] and "gpupipe.config_base" in g["gpupipe.stages.read"]
    assert "gpupipe.io.records" in g["gpupipe.io.warc"] and "gpupipe.kernels.text_hash" in g["gpupipe.stages.dedup.exact"]   # inside a function
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    assert _cycles(_graph()) == []


def test_layers():
    g = _graph()
    assert _edges(g, "gpupipe.stages", ("gpupipe.run",)) == []             # stations declare, the engine runs
    assert _edges(g, "gpupipe.run", ("gpupipe.report",)) == []             # the runner knows no view of its results
    assert _edges(g, "gpupipe.io", ("gpupipe.stages", "gpupipe.config", "gpupipe.run")) == []
    assert _edges(g, "gpupipe.config_base", ("gpupipe.stages", "gpupipe.config", "gpupipe.run")) == []
    assert _edges(g, "gpupipe.kernels", ("gpupipe.stages", "gpupipe.run", "gpupipe.io")) == []
