"""Helpers shared by test modules (no test module imports another): configs and runs through the CLI, JSONL
inputs, texts with near copies, langid stages on a loaded model, a Megatron tokenize + pack run. The bigger
ones have their own modules: interleave.py (phases' hooks run interleaved), kernel_text.py (random text buffers
for the kernels), range_http.py (an HTTP server with ranges), tokens.py (tokenizer corpora and hand-made BPEs)."""

from __future__ import annotations

import json
from pathlib import Path

# numpy, pandas and yaml are imported where used: profiling/gpu_check.sh runs the kernel tests, which import
# tests.helpers.kernel_text, with no more than numpy and the kernels' own packages.
ROOT = Path(__file__).resolve().parents[2]   # the repository


def bag_of_words_encoder(folder: Path, words: list[str], **kw) -> Path:
    """A random-weight encoder with no layers and zeroed position/type embeddings (gpupipe.models.tiny): its
    embedding of a text is its bag of words, so shuffled copies embed alike (semantic dedup's tests)."""
    import torch
    from transformers import BertForSequenceClassification

    from gpupipe.models.tiny import make_encoder

    path = make_encoder(folder, size="small", words=words, seed=1, **kw)
    model = BertForSequenceClassification.from_pretrained(path, num_hidden_layers=0)
    with torch.no_grad():
        model.bert.embeddings.position_embeddings.weight.zero_()
        model.bert.embeddings.token_type_embeddings.weight.zero_()
    model.save_pretrained(path)
    return path


def set_up(stage):
    """A stage as a worker holds it: set up (models, tables loaded)."""
    stage.setup()
    return stage


def stage_dir(out: Path):
    """The StageDir of a stage whose folder is `out` (its run directory: the folder above)."""
    from gpupipe.run.rundir import StageDir

    return StageDir(Path(out), Path(out).parent)


def run_stage(stage, inputs: list[Path], out: Path, executor=None, prev: Path | None = None):
    """One stage over its input parts through the engine (`run/phases.run_stage`), into `out`: its StageStats."""
    from gpupipe.run.executors import LocalExecutor
    from gpupipe.run.phases import run_stage as engine_run_stage

    return engine_run_stage(stage, executor or LocalExecutor(), list(inputs), stage_dir(out),
                            stage_dir(prev) if prev is not None else None)


def write_config(path: Path, **overrides) -> Path:
    """configs/default.yaml with top-level keys replaced: a test's own config on disk."""
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    cfg.update(overrides)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def write_jsonl(path: Path, texts: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"doc-{i}", "text": t}, ensure_ascii=False) + "\n")
    return path


def run_config(tmp: Path, name: str, input_path: Path, stages: list, partition_docs: int = 100,
               kind: str = "local", workers: int = 2) -> Path:
    """`gpupipe run` on a config of `stages` over `input_path` on the CPU; the run directory."""
    import yaml

    from gpupipe.cli import main

    cfg = {"input": {"path": str(input_path)}, "output": str(tmp / name), "device": "cpu",
           "executor": {"kind": kind, "workers": workers, "partition_docs": partition_docs}, "stages": stages}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path)]) == 0
    return tmp / name


def near_copy_texts(n: int, seed: int) -> list[str]:
    """n documents of 150 random words: the first n // 2 distinct, the rest near copies (one word changed) of
    them, so that a near copy lands in another partition than its original."""
    import numpy as np

    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(3000)])
    base_texts = [" ".join(rng.choice(words, size=150)) for _ in range(n // 2)]
    out = []
    for i in range(n):
        t = base_texts[i % len(base_texts)].split()
        if i >= len(base_texts):
            t[75] = "changed"      # a near copy of an earlier document, in another partition
        out.append(" ".join(t))
    return out


def doc_frame(texts):
    """A partition of `texts` as stages get it (a pandas DataFrame: id, doc_index, text)."""
    import pandas as pd

    return pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))], "doc_index": range(len(texts)), "text": texts})


def langid_with(stage, **params):
    """A LangId stage with `params`, sharing the model already loaded by `stage` (conftest's `model_stage`)."""
    from gpupipe.stages.base import RunContext
    from gpupipe.stages.filters.langid import LangId, LangIdConfig

    s = LangId(LangIdConfig(**params), RunContext())
    s._model = stage._model
    return s


def megatron_run(tmp: Path, texts: list[str], executor: dict | None = None, **pack) -> Path:
    """`gpupipe run` of tokenize (vocab 300) + pack (seq_len 32, megatron: true, `pack` on top) on `texts` as
    JSONL, on the CPU; the shard directory (RUN/shards, with megatron/data.bin|.idx)."""
    import yaml

    from gpupipe.cli import main

    src = tmp / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    cfg = {"input": {"path": str(src)}, "output": str(tmp / "run"), "device": "cpu",
           "stages": [{"tokenize": {"vocab_size": 300, "min_frequency": 0}},
                      {"pack": {"seq_len": 32, "megatron": True, **pack}}]}
    if executor is not None:
        cfg["executor"] = executor
    (tmp / "c.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True))
    assert main(["run", str(tmp / "c.yaml")]) == 0
    return tmp / "run" / "shards"
