"""Audit samples and reviews (the user's quality spot-check process): a person reads a random sample of what each
stage kept and
removed, marks each pass or fail, and the pass rate gates the batch (min_pass_rate 0.95; below the escalation
threshold 0.90 someone is alerted).

Files, per stage folder NN-name (a stage may appear twice in a config, so the folder name is the key):
  RUN/audit/NN-name.jsonl          the sample: {sample_id, stage, status kept|removed, reason, id, url, lang, text},
                                   then up to 20 kept documents the reader flagged (`mojibake_suspect`: the encoding
                                   the bytes look like), sample_id ...:mN
  RUN/audit/NN-name.reviews.jsonl  every review as it was made: {sample_id, pass, note, reviewer}; the last wins
  RUN/audit/NN-name.review.json    the verdict: pass rate against the thresholds, by status and by reason
  RUN/audit/index.json             what each sample was drawn from (stage key, seed, size), to reuse it

A review judges the stage's decision: a kept document passes when it deserves to be in the corpus, a removed one
when it deserved removal (its reason is right).

Sampling reads the stage's Parquet parts and rejects in batches, only the rows drawn and only a prefix of their
text, so memory stays bounded whatever the run size. Rows are numbered in input order (parts sort in input order),
so the sample depends on the seed and the counts, not on the partitioning.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import zlib
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpupipe.io.parts import atomic_write_text
from gpupipe.run.rundir import NAMES, RunLayout, StageDir

SAMPLE_SIZE = 1000            # documents a reviewer reads per stage (kept and removed together)
MIN_PASS_RATE = 0.95          # a stage passes its audit at this share of passes
ESCALATION_THRESHOLD = 0.90   # below this share, the audit escalates (the stage's rules need a fix)
TEXT_PREFIX_CHARS = 1000      # as much as rejects keep (stages/base.py REJECT_TEXT_CHARS)
EXIT_ESCALATE = 3
_BATCH_ROWS = 1024            # rows per Parquet batch while picking sampled rows
_FIELDS = ("id", "url", "lang", "reason", "mojibake_suspect")
FLAGGED_EXAMPLES = 20         # kept documents the reader flagged as likely mojibake, added to a stage's sample


# -- sampling --------------------------------------------------------------------------------------------------


def sample_counts(kept: int, removed: int, size: int) -> tuple[int, int]:
    """How many kept and removed documents to draw: half each, the other side filling what one side lacks."""
    k = min(kept, size // 2)
    r = min(removed, size - k)
    return min(kept, size - r), r


def stage_rng(seed: int, folder: str) -> np.random.Generator:
    """One stream per (seed, stage folder); crc32, not hash(), so it is stable across processes."""
    return np.random.default_rng([seed, zlib.crc32(folder.encode("utf-8"))])


def _parquet_rows(paths: list[Path]) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


def _jsonl_rows(paths: list[Path]) -> int:
    n = 0
    for p in paths:
        with open(p, "rb") as f:
            n += sum(1 for line in f if line.strip())
    return n


def _pick_parquet(paths: list[Path], wanted: np.ndarray) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, row) of the wanted rows (sorted row numbers over all parts in order), reading in batches."""
    base, j = 0, 0
    for p in paths:
        if j >= len(wanted):
            return
        pf = pq.ParquetFile(p)
        n = pf.metadata.num_rows
        if wanted[j] >= base + n:      # nothing drawn in this part: skip it without reading
            base += n
            continue
        names = pf.schema_arrow.names
        body = "text" if "text" in names else ("html" if "html" in names else None)
        cols = [c for c in _FIELDS if c in names] + ([body] if body else [])
        for batch in pf.iter_batches(batch_size=_BATCH_ROWS, columns=cols):
            hi = base + batch.num_rows
            k = j + int(np.searchsorted(wanted[j:], hi))
            if k > j:
                rows = batch.take(pa.array(wanted[j:k] - base))
                if body:
                    prefix = pc.utf8_slice_codeunits(rows.column(body), 0, TEXT_PREFIX_CHARS)
                    rows = rows.drop_columns([body]).append_column("text", prefix)
                for i, row in enumerate(rows.to_pylist()):
                    yield int(wanted[j + i]), row
            base, j = hi, k


def _pick_in_input_order(paths: list[Path], wanted: np.ndarray) -> Iterator[tuple[int, dict[str, Any]]]:
    """_pick_parquet with row numbers in input order (doc_index). A stage that ran fused has its kept documents in
    several sources (the chain's last parts, later stages' rejects), so their concatenation is not in input order;
    numbering by doc_index gives the sample a stage would have drawn from its own parts."""
    if len(paths) < 2 or not all("doc_index" in pq.ParquetFile(p).schema_arrow.names for p in paths):
        yield from _pick_parquet(paths, wanted)
        return
    doc_index = np.concatenate([pq.read_table(p, columns=["doc_index"])["doc_index"].to_numpy() for p in paths])
    order = np.argsort(doc_index, kind="stable")   # order[rank] = position in the concatenation
    if np.array_equal(order, np.arange(len(order))):
        yield from _pick_parquet(paths, wanted)
        return
    rank_of = {int(order[r]): int(r) for r in wanted}
    picked = sorted((rank_of[pos], row) for pos, row in _pick_parquet(paths, np.sort(order[wanted])))
    yield from picked


def _pick_jsonl(paths: list[Path], wanted: np.ndarray) -> Iterator[tuple[int, dict[str, Any]]]:
    """The read stage's rejects: records that never became documents (file position and what was wrong)."""
    row, j = 0, 0
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                if j < len(wanted) and row == wanted[j]:
                    r = json.loads(line)
                    yield row, {"id": f"{r.get('file')}@{r.get('position')}", "reason": r.get("reason"),
                                "text": str(r.get("detail", ""))[:TEXT_PREFIX_CHARS]}
                    j += 1
                row += 1


def draw_sample(folder: Path, size: int = SAMPLE_SIZE, seed: int = 0) -> tuple[list[dict[str, Any]], dict]:
    """The audit sample of one stage folder, in a seeded random order, and what it was drawn from."""
    sd = StageDir.of(folder)
    stage = sd.station
    kept, rej_parts, rej_jsonl = sd.kept_parts(), sd.reject_parts(), sd.rejected_records()
    n_kept, n_rej_pq, n_rej_js = _parquet_rows(kept), _parquet_rows(rej_parts), _jsonl_rows(rej_jsonl)
    k_kept, k_removed = sample_counts(n_kept, n_rej_pq + n_rej_js, size)
    rng = stage_rng(seed, folder.name)
    kept_rows = np.sort(rng.choice(n_kept, size=k_kept, replace=False)) if k_kept else np.zeros(0, np.int64)
    rem_rows = (np.sort(rng.choice(n_rej_pq + n_rej_js, size=k_removed, replace=False)) if k_removed
                else np.zeros(0, np.int64))
    samples = []
    for status, rows in (("kept", _pick_in_input_order(kept, kept_rows)),
                         ("removed", _pick_parquet(rej_parts, rem_rows[rem_rows < n_rej_pq]))):
        samples += [_sample(folder.name, stage, status, i, r) for i, r in rows]
    samples += [_sample(folder.name, stage, "removed", n_rej_pq + i, r)
                for i, r in _pick_jsonl(rej_jsonl, rem_rows[rem_rows >= n_rej_pq] - n_rej_pq)]
    order = rng.permutation(len(samples))     # mixed, so the first N a reviewer reads are both kinds
    info = {"kept": n_kept, "removed": n_rej_pq + n_rej_js, "kept_sampled": k_kept, "removed_sampled": k_removed}
    flagged = _flagged_rows(kept, "mojibake_suspect")
    if len(flagged):   # what the decoder suspects it still got wrong: a reviewer should see some of it
        picked = np.sort(rng.choice(flagged, size=min(FLAGGED_EXAMPLES, len(flagged)), replace=False))
        extra = [_sample(folder.name, stage, "kept", i, r, "m") for i, r in _pick_parquet(kept, picked)]
        info.update(mojibake_suspect=len(flagged), mojibake_sampled=len(extra))
        return [samples[i] for i in order] + extra, info
    return [samples[i] for i in order], info


def _flagged_rows(paths: list[Path], column: str) -> np.ndarray:
    """Row numbers (over the parts in order) where `column` is set (not null)."""
    out, base = [], 0
    for p in paths:
        pf = pq.ParquetFile(p)
        if column in pf.schema_arrow.names:
            col = pf.read(columns=[column]).column(column)
            out.append(base + np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False)))
        base += pf.metadata.num_rows
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _sample(folder: str, stage: str, status: str, row: int, r: dict[str, Any], kind: str = "") -> dict[str, Any]:
    # sample_id names the document's place: stage folder, kept (k) or removed (r) or a flagged example (m), row
    # number in input order (flagged examples: in part order)
    out = {"sample_id": f"{folder}:{kind or status[0]}{row}", "stage": stage, "status": status,
           "reason": r.get("reason") if status == "removed" else None, "id": r.get("id"), "url": r.get("url"),
           "lang": r.get("lang"), "text": r.get("text") or ""}
    if r.get("mojibake_suspect"):
        out["mojibake_suspect"] = r["mojibake_suspect"]
    return out


def audit_stage_folders(run_dir: Path) -> list[Path]:
    """Stage folders that hold documents to audit (parts or rejects; pack has neither)."""
    return [s.root for s in RunLayout(run_dir).stage_dirs() if s.kept_parts() or s.rejects.is_dir()]


def write_samples(run_dir: str | os.PathLike, size: int = SAMPLE_SIZE, seed: int | None = None) -> dict[str, Any]:
    """RUN/audit/NN-name.jsonl for every stage; a sample drawn before from the same stage output is reused."""
    run = Path(run_dir)
    seed = _run_seed(run) if seed is None else seed
    out = RunLayout(run).audit
    out.mkdir(exist_ok=True)
    index_path = out / "index.json"
    old = json.loads(index_path.read_text(encoding="utf-8")) if index_path.is_file() else {}
    index: dict[str, Any] = {"seed": seed, "size": size, "stages": {}}
    todo = []
    for folder in audit_stage_folders(run):
        key = _stage_key(folder)
        prev = old.get("stages", {}).get(folder.name)
        file = out / f"{folder.name}.jsonl"
        if prev and file.is_file() and prev.get("key") == key and old.get("seed") == seed \
                and old.get("size") == size:
            index["stages"][folder.name] = prev
            continue
        index["stages"][folder.name] = None    # the stages' order, filled in below
        todo.append((folder, key, file))

    def draw(job) -> None:
        folder, key, file = job
        samples, info = draw_sample(folder, size, seed)
        atomic_write_text(file, "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in samples))
        index["stages"][folder.name] = {"key": key, "file": file.name, **info}

    # one stage folder a thread: most of a draw is Parquet decoding, which runs without the GIL
    with concurrent.futures.ThreadPoolExecutor(max(1, min(len(todo), os.cpu_count() or 1, 4))) as pool:
        list(pool.map(draw, todo))
    atomic_write_text(index_path, json.dumps(index, indent=2) + "\n")
    return index


def _stage_key(folder: Path) -> str | None:
    return StageDir.of(folder).read_marker().get("key")


def _run_seed(run: Path) -> int:
    import yaml

    f = RunLayout(run).config
    cfg = yaml.safe_load(f.read_text(encoding="utf-8")) if f.is_file() else {}
    return int((cfg or {}).get("seed", 0))


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if limit is not None and len(out) >= limit:
                break
            if line.strip():
                out.append(json.loads(line))
    return out


# -- reviews and the pass-rate gate ----------------------------------------------------------------------------


def verdict(passed: int, reviewed: int, min_pass_rate: float = MIN_PASS_RATE,
            escalation_threshold: float = ESCALATION_THRESHOLD) -> str:
    """PASS at or above min_pass_rate, WARN at or above escalation_threshold, else ESCALATE.

    Compared as exact fractions (the thresholds as the decimals they are written as), so 19/20 against 0.95 is
    PASS and 9/10 against 0.90 is WARN, without float rounding deciding a boundary."""
    if not 0 <= escalation_threshold <= min_pass_rate <= 1:
        raise ValueError(f"need 0 <= escalation_threshold ({escalation_threshold}) <= min_pass_rate "
                         f"({min_pass_rate}) <= 1")
    if reviewed <= 0:
        raise ValueError("nothing reviewed yet: no pass rate")
    rate = Fraction(passed, reviewed)
    if rate >= Fraction(str(min_pass_rate)):
        return "PASS"
    if rate >= Fraction(str(escalation_threshold)):
        return "WARN"
    return "ESCALATE"


def latest_reviews(path: Path) -> dict[str, dict[str, Any]]:
    """sample_id → its last review (a reviewer may change their mind; the log keeps every answer)."""
    return {r["sample_id"]: r for r in read_jsonl(path)} if path.is_file() else {}


def check_review_lines(lines: list[dict[str, Any]], sample_ids: set[str]) -> list[str]:
    problems = []
    for i, r in enumerate(lines, 1):
        if not isinstance(r, dict) or "sample_id" not in r:
            problems.append(f"line {i}: no sample_id")
        elif r["sample_id"] not in sample_ids:
            problems.append(f"line {i}: unknown sample_id {r['sample_id']!r}")
        elif not isinstance(r.get("pass"), bool):
            problems.append(f"line {i}: 'pass' must be true or false, got {r.get('pass')!r}")
        elif r.get("note") is not None and not isinstance(r["note"], str):
            problems.append(f"line {i}: 'note' must be a string")
    return problems


def summarize(samples: list[dict[str, Any]], reviews: dict[str, dict[str, Any]], folder: str,
              min_pass_rate: float = MIN_PASS_RATE, escalation_threshold: float = ESCALATION_THRESHOLD) -> dict:
    """The review.json content: pass rate overall, by status and by reason, and the failures with their notes."""
    by_id = {s["sample_id"]: s for s in samples}
    done = [(by_id[i], r) for i, r in reviews.items() if i in by_id]

    def rate(group):
        n, p = len(group), sum(1 for _, r in group if r["pass"])
        return {"reviewed": n, "passed": p, "pass_rate": round(p / n, 6) if n else None}

    groups: dict[str, dict[str, list]] = {"by_status": {}, "by_reason": {}}
    for s, r in done:
        groups["by_status"].setdefault(s["status"], []).append((s, r))
        if s["status"] == "removed":
            groups["by_reason"].setdefault(s["reason"] or "?", []).append((s, r))
    overall = rate(done)
    return {
        "stage": folder, "samples": len(samples), **overall,
        "failed": overall["reviewed"] - overall["passed"], "complete": overall["reviewed"] == len(samples),
        "min_pass_rate": min_pass_rate, "escalation_threshold": escalation_threshold,
        "verdict": verdict(overall["passed"], overall["reviewed"], min_pass_rate, escalation_threshold)
        if done else None,
        "by_status": {k: rate(v) for k, v in sorted(groups["by_status"].items())},
        "by_reason": {k: rate(v) for k, v in sorted(groups["by_reason"].items())},
        "failures": [{"sample_id": s["sample_id"], "status": s["status"], "reason": s["reason"], "id": s["id"],
                      "note": r.get("note")} for s, r in done if not r["pass"]],
    }


def interactive_review(samples: list[dict[str, Any]], reviewed: set[str], record: Callable[[dict], None],
                       ask: Callable[[str], str] = input, show: Callable[[str], None] = print,
                       reviewer: str | None = None) -> int:
    """Show each unreviewed sample and ask p(ass) / f(ail) / s(kip) / q(uit); record each answer at once."""
    todo = [s for s in samples if s["sample_id"] not in reviewed]
    n = 0
    for i, s in enumerate(todo, 1):
        what = "kept" if s["status"] == "kept" else f"removed: {s['reason']}"
        show(f"\n--- [{i}/{len(todo)}] {s['sample_id']}  ({what})  id={s['id']}  lang={s.get('lang')}"
             f"\n{s.get('url') or ''}\n{s['text']}\n---")
        while True:
            a = ask("right decision? [p]ass [f]ail [s]kip [q]uit: ").strip().lower()
            if a in ("p", "f", "s", "q"):
                break
        if a == "q":
            break
        if a == "s":
            continue
        note = ask("note (optional): ").strip() if a == "f" else ""
        record({"sample_id": s["sample_id"], "pass": a == "p", "note": note or None, "reviewer": reviewer})
        n += 1
    return n


def _append(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())   # a review is a person's time: keep each one even if the process dies next


def find_stage_folder(run: Path, name: str) -> Path:
    """A stage folder by name ('langid') or folder name ('03-langid')."""
    folders = audit_stage_folders(run)
    hits = [f for f in folders if name in (f.name, StageDir.of(f).station)]
    if len(hits) != 1:
        names = ", ".join(f.name for f in folders)
        raise LookupError(f"{'no' if not hits else 'more than one'} stage '{name}' with documents in {run} "
                          f"(stages: {names}){'; use the NN-name form' if hits else ''}")
    return hits[0]


def cmd_audit(args) -> int:
    from rich.console import Console

    from gpupipe.report.location import RunLocation
    from gpupipe.run.rundir import RunDirBusy

    err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    try:
        with RunLocation(args.run_dir) as loc:   # a URL: through a local copy, audit/ uploaded back
            return _audit(args, loc)
    except (ValueError, OSError, RunDirBusy) as e:
        err.print(f"error: {e}")
        return 2


def _audit(args, loc) -> int:
    from rich.console import Console

    # soft_wrap: messages unwrapped, so a long path or URL stays whole
    out = Console(highlight=False, markup=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    run = loc.local
    try:
        folder = find_stage_folder(run, args.stage)
        verdict(1, 1, args.min_pass_rate, args.escalation_threshold)   # thresholds sane?
    except (LookupError, ValueError) as e:
        err.print(f"error: {str(e).replace(str(run), loc.where(run))}")
        return 2
    index = write_samples(run, args.size, args.seed)
    audit = RunLayout(run).audit
    samples = read_jsonl(audit / index["stages"][folder.name]["file"])
    log = audit / f"{folder.name}.reviews.jsonl"
    reviewer = args.reviewer or os.environ.get("USER")
    if args.review:
        lines = read_jsonl(Path(args.review))
        problems = check_review_lines(lines, {s["sample_id"] for s in samples})
        if problems:
            err.print(f"error: {args.review}:\n  " + "\n  ".join(problems[:20]))
            return 2
        _append(log, [{"sample_id": r["sample_id"], "pass": r["pass"], "note": r.get("note"),
                       "reviewer": r.get("reviewer", reviewer)} for r in lines])
    elif sys.stdin.isatty():
        def record(r: dict) -> None:
            _append(log, [r])
            loc.push(log.relative_to(run).as_posix())   # in the bucket at once: a review is a person's time

        n = interactive_review(samples, set(latest_reviews(log)), record, reviewer=reviewer)
        out.print(f"recorded {n} reviews in {loc.where(log)}")
    loc.push(NAMES.audit)
    reviews = latest_reviews(log)
    if not reviews:
        err.print(f"no reviews yet for {folder.name}: {len(samples)} samples in "
                  f"{loc.where(audit / (folder.name + '.jsonl'))}; review them with --review FILE (JSONL "
                  f"{{sample_id, pass, note}}) or interactively on a terminal")
        return 2
    summary = summarize(samples, reviews, folder.name, args.min_pass_rate, args.escalation_threshold)
    atomic_write_text(audit / f"{folder.name}.review.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    loc.push(NAMES.audit / f"{folder.name}.review.json")
    out.print(f"{summary['verdict']}: {folder.name} pass rate {summary['pass_rate']:.4f} "
              f"({summary['passed']}/{summary['reviewed']} reviewed of {summary['samples']} samples"
              f"{'' if summary['complete'] else ', review incomplete'}; min_pass_rate {args.min_pass_rate}, "
              f"escalation_threshold {args.escalation_threshold})")
    for status, r in summary["by_status"].items():
        out.print(f"  {status:<8} {r['passed']}/{r['reviewed']} pass")
    out.print(f"results: {loc.where(audit / (folder.name + '.review.json'))}")
    return EXIT_ESCALATE if summary["verdict"] == "ESCALATE" else 0


def add_audit_parser(subparsers) -> None:
    a = subparsers.add_parser("audit", help="review a stage's audit sample and gate on the pass rate", description=(
        "Record a reviewer's pass/fail for the audit sample of one stage (RUN/audit/NN-name.jsonl, drawn if "
        "missing) from a review file or, on a terminal, interactively (p/f/s/q); then compute the pass rate. "
        "Prints PASS (>= --min-pass-rate), WARN (>= --escalation-threshold) or ESCALATE (exit 3); "
        "results in RUN/audit/NN-name.review.json."))
    a.add_argument("run_dir", help="a run directory, or its URL (s3://bucket/runs/r1)")
    a.add_argument("--stage", required=True, help="stage name (langid) or folder (03-langid)")
    a.add_argument("--review", help="JSONL review file: {sample_id, pass: true|false, note} per line")
    a.add_argument("--reviewer", help="who reviewed (default: $USER)")
    a.add_argument("--size", type=int, default=SAMPLE_SIZE, help=f"sample size per stage (default {SAMPLE_SIZE})")
    a.add_argument("--seed", type=int, default=None, help="sample seed (default: the run's seed)")
    a.add_argument("--min-pass-rate", dest="min_pass_rate", type=float, default=MIN_PASS_RATE)
    a.add_argument("--escalation-threshold", dest="escalation_threshold", type=float, default=ESCALATION_THRESHOLD)
    a.set_defaults(fn=cmd_audit)


__all__ = ["ESCALATION_THRESHOLD", "MIN_PASS_RATE", "SAMPLE_SIZE", "add_audit_parser", "cmd_audit", "draw_sample",
           "interactive_review", "latest_reviews", "sample_counts", "summarize", "verdict", "write_samples"]
