"""Real, labelled code and prose from the installed packages (site-packages and the standard library): what the code
detector (code_detect.py) is fitted on and measured against, built on any machine without a download.

- code: source files by extension (.py .pyi .pyx .pxd .c .h .cc .cpp .hpp .cu .cuh .js .sh .java .go .rs .rb);
- prose: documents written for people: .md and .rst files, packages' METADATA (their README), LICENSE / COPYING /
  NOTICE / AUTHORS / README / CHANGELOG files, and the docstrings (module, class, function) of the code files read,
  cleaned as `inspect.cleandoc` does. Prose keeps its code blocks, doctests and parameter lists: docs are like that.
  Plain .txt files are left out: in site-packages they are mostly data (word lists, tables, CMake scripts, TLD
  lists), not prose of either kind.

Files are picked by name (size 300 B to 1 MB), ordered by the sha256 of their path below their root, and the first
`per_kind` of each kind read; identical texts are kept once; a sample is held out (`held_out`) when the first byte
of the sha256 of its file's text is odd (a file's docstrings go where the file goes), so about half of each kind
measures what the other half fitted. Samples shorter than `min_chars` characters are skipped.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

CODE_EXTENSIONS = frozenset({".py", ".pyi", ".pyx", ".pxd", ".c", ".h", ".cc", ".cpp", ".hpp", ".cu", ".cuh",
                             ".js", ".sh", ".java", ".go", ".rs", ".rb"})
PROSE_EXTENSIONS = frozenset({".md", ".rst"})
PROSE_NAMES = ("METADATA", "LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS", "README", "CHANGELOG", "CHANGES")
MIN_BYTES, MAX_BYTES = 300, 1 << 20


@dataclass(frozen=True, slots=True)
class Sample:
    text: str
    label: int          # 1 code, 0 prose
    kind: str           # the extension (".py"), METADATA, LICENSE..., "docstring"
    path: str           # the file, relative to its root
    held_out: bool


def default_roots() -> list[Path]:
    """site-packages (purelib, platlib) and the standard library of the running Python."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(Path(paths[k]) for k in ("purelib", "platlib", "stdlib") if paths.get(k)))


def file_kind(name: str) -> tuple[int, str] | None:
    """(label, kind) of a file by its name, or None when it is neither code nor prose."""
    suffix = os.path.splitext(name)[1].lower()
    if suffix in CODE_EXTENSIONS:
        return 1, suffix
    if suffix in PROSE_EXTENSIONS:
        return 0, suffix
    stem = name.split(".")[0].upper()
    for prefix in PROSE_NAMES:
        if stem.startswith(prefix) and suffix in ("", ".txt", ".md", ".rst"):
            return 0, prefix
    return None


def _candidates(roots: list[Path]) -> list[tuple[str, Path, int, str]]:
    """(sha256 of the relative path, path, label, kind) of every file of the roots a kind names, sized in range."""
    seen, out = set(), []
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in files:
                kind = file_kind(name)
                if kind is None:
                    continue
                path = Path(folder) / name
                try:
                    real, size = os.path.realpath(path), path.stat().st_size
                except OSError:
                    continue
                if real in seen or not MIN_BYTES <= size <= MAX_BYTES:
                    continue
                seen.add(real)
                rel = path.relative_to(root).as_posix()
                out.append((hashlib.sha256(rel.encode()).hexdigest(), path, *kind))
    out.sort(key=lambda c: (c[0], str(c[1])))
    return out


def docstrings(text: str) -> list[str]:
    """The module, class and function docstrings of Python source (cleaned); [] when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                out.append(doc)
    return out


def labelled_samples(roots: list[Path] | None = None, per_kind: int = 1500, min_chars: int = 300,
                     docstrings_per_file: int = 3) -> list[Sample]:
    """Code and prose samples (see the module docstring): at most `per_kind` code files and `per_kind` prose
    files, plus up to `docstrings_per_file` docstrings (the longest) of each .py file read."""
    taken = {0: 0, 1: 0}
    texts: set[str] = set()
    out: list[Sample] = []

    def add(text: str, label: int, kind: str, rel: str, held: bool) -> None:
        if len(text.strip()) >= min_chars and text not in texts:
            texts.add(text)
            out.append(Sample(text, label, kind, rel, held))

    roots = [Path(r) for r in (roots or default_roots())]
    for _, path, label, kind in _candidates(roots):
        if taken[label] >= per_kind:
            if all(v >= per_kind for v in taken.values()):
                break
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "\x00" in text or text in texts:
            continue
        held = hashlib.sha256(text.encode("utf-8")).digest()[0] % 2 == 1
        before = len(out)
        add(text, label, kind, str(path), held)
        taken[label] += len(out) > before
        if kind == ".py" and docstrings_per_file:
            for doc in sorted(docstrings(text), key=len, reverse=True)[:docstrings_per_file]:
                add(doc, 0, "docstring", str(path), held)
    return out


__all__ = ["CODE_EXTENSIONS", "PROSE_EXTENSIONS", "Sample", "default_roots", "docstrings", "file_kind",
           "labelled_samples"]
