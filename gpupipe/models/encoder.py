"""A Hugging Face encoder as the model-based stations use it: loaded once per worker, texts tokenized with the
model's own (fast) tokenizer, truncated (head, or head + tail), batched by length, results in input order.

  Encoder.logits(texts)   sequence-classification outputs, (n, num_labels) float32: the `classifier` stage
  Encoder.embed(texts)    mean-pooled, L2-normalised last hidden states, (n, hidden) float32: `semantic_dedup`

Tokens. Each text is encoded without special tokens by the tokenizer's Rust backend (`tokenizers`), cut to the
content budget (`max_length` minus the special tokens), and framed by the special tokens of the tokenizer's own
template (probed once: `[CLS] … [SEP]` for BERT, `<s> … </s>` for RoBERTa). Head truncation gives the ids of
`tokenizer(text, truncation=True, max_length=max_length)`. Only a prefix (and for head + tail a suffix) of a long
text is tokenized: `CHARS_PER_TOKEN` characters per kept token, cut at whitespace so the words kept tokenize as
in the whole text; when a cut piece yields too few tokens (long runs of spaces, say) the whole text is used.

Batches. Documents are sorted by token count (longest first, so the largest batch runs, and fails, first), cut
into batches of `batch_size` documents or of at most `batch_tokens` padded tokens, padded to their longest
member, and the outputs put back in input order. With the attention mask, padding does not change a document's
output, so results do not depend on batch size, document order or partitioning, up to floating-point rounding:
fp32 on the CPU agrees to ~1e-6 (different batch shapes take different GEMM blockings); bf16/fp16 autocast on the
GPU agrees with the CPU to ~1e-2 on probabilities (bf16 keeps 8 mantissa bits), and across batch sizes to about
the same.

Devices. `device` "cpu", "gpu"/"cuda" (the worker's current CUDA device: under dask-cuda each worker sees its
own GPU as device 0) or "cuda:N"; "gpu" without a CUDA build of torch falls back to the CPU with a warning.
`dtype` "auto" is float32 on the CPU and bfloat16 autocast on the GPU (float16 where bf16 is unsupported).
"""

from __future__ import annotations

import logging
import os
import re
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Sequence

import numpy as np

log = logging.getLogger("gpupipe.models")

HEAD, HEAD_TAIL = "head", "head_tail"
CHARS_PER_TOKEN = 24     # characters tokenized per kept token before the cut (typical text: 3-6 per token)
CUT_MARGIN = 16          # a cut piece must give this many tokens beyond those kept, or the whole text is used
_SPACE = re.compile(r"\s")


def require_models() -> None:
    """A clear error where torch or transformers is missing."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise RuntimeError(f"transformer models need torch and transformers ({e}): "
                           "pip install 'gpupipe[models]'") from None


def torch_device(device: str) -> str:
    """A torch device name for a gpupipe device ("cpu", "gpu") or a torch one ("cuda", "cuda:1")."""
    import torch

    if device == "cpu":
        return "cpu"
    name = "cuda" if device == "gpu" else device
    if name.startswith("cuda") and not torch.cuda.is_available():
        log.warning("device %s asked for, but this torch has no CUDA device: running the model on the CPU", device)
        return "cpu"
    return name


def torch_dtype(dtype: str, device: str):
    """The compute dtype: "auto" is float32 on the CPU, bfloat16 on a GPU that has it (else float16)."""
    import torch

    if dtype == "auto":
        if device == "cpu":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


@contextmanager
def quiet_transformers():
    """transformers' load reports and progress bars off for the duration (a stage loads models in workers)."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def model_source(model: str) -> str:
    """A local folder as given; anything else is a hub id (loaded where the machine reaches the hub)."""
    return os.fspath(model)


def length_batches(lengths: Sequence[int], batch_size: int, batch_tokens: int | None = None) -> list[np.ndarray]:
    """Row numbers in batches: longest first (ties in input order), `batch_size` rows a batch, or with
    `batch_tokens` as many rows as fit rows × longest ≤ batch_tokens (at least one)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    if batch_tokens is None:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    out, start = [], 0
    while start < len(order):
        longest = max(int(lengths[order[start]]), 1)
        n = max(1, min(batch_tokens // longest, len(order) - start))
        out.append(order[start:start + n])
        start += n
    return out


def _head_piece(text: str, chars: int) -> str:
    """A prefix of about `chars` characters that ends before a whitespace (so no word is cut)."""
    if len(text) <= chars:
        return text
    cut = max((m.start() for m in _SPACE.finditer(text, chars // 2, chars)), default=chars)
    return text[:cut]


def _tail_piece(text: str, chars: int) -> str:
    """A suffix of about `chars` characters that starts at a whitespace."""
    if len(text) <= chars:
        return text
    start = len(text) - chars
    m = _SPACE.search(text, start, len(text) - chars // 2)
    return text[m.start() if m else start:]


class Encoder:
    """A loaded encoder with its tokenizer. Holds the model and settings only (nothing per call), so one instance
    serves two threads at once."""

    def __init__(self, model: str, *, head: str = "classify", device: str = "cpu", dtype: str = "auto",
                 max_length: int = 512, truncation: str = HEAD, loaded=None):
        """`loaded`: a model object to use instead of loading one from `model` (training: a new head)."""
        require_models()
        import torch
        from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

        src = model_source(model)
        self.device = torch_device(device)
        self.dtype = torch_dtype(dtype, self.device)
        self.truncation = truncation
        with quiet_transformers():
            self.tokenizer = AutoTokenizer.from_pretrained(src)
            cls = AutoModelForSequenceClassification if head == "classify" else AutoModel
            self.model = (loaded if loaded is not None else cls.from_pretrained(src).eval()).to(self.device)
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ValueError(f"{model}: the tokenizer has no fast (Rust) backend; save it with a tokenizer.json")
        self._backend = backend
        self._backend.no_truncation()
        self._backend.no_padding()
        self.config = self.model.config
        limit = getattr(self.config, "max_position_embeddings", None)
        offset = 2 if getattr(self.config, "model_type", "") in ("roberta", "xlm-roberta", "camembert") else 0
        if limit is not None and max_length > limit - offset:
            raise ValueError(f"{model}: max_length {max_length} exceeds the model's {limit - offset} positions")
        self.max_length = max_length
        self._prefix, self._suffix, self._prefix_types, self._suffix_types, self._type = self._template()
        self.budget = max_length - len(self._prefix) - len(self._suffix)   # content tokens kept per document
        if self.budget < 1:
            raise ValueError(f"max_length {max_length} leaves no room beside {len(self._prefix) + len(self._suffix)} "
                             f"special tokens")
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.type_ids = "token_type_ids" in self.tokenizer.model_input_names
        self._autocast = (torch.autocast(device_type="cuda", dtype=self.dtype)
                          if self.device != "cpu" and self.dtype != torch.float32 else None)
        if self.device == "cpu" and self.dtype != torch.float32:
            self.model = self.model.to(self.dtype)

    def _template(self) -> tuple[list[int], list[int], list[int], list[int], int]:
        """The special tokens the tokenizer puts before and after one sequence (and their type ids)."""
        probe = self._backend.encode("a", add_special_tokens=False)
        framed = self._backend.post_process(probe)
        ids, types, n = framed.ids, framed.type_ids, len(probe.ids)
        for i in range(len(ids) - n + 1):
            if ids[i:i + n] == probe.ids:
                return ids[:i], ids[i + n:], types[:i], types[i + n:], (types[i] if n else 0)
        raise ValueError("cannot tell where the tokenizer's template puts the text")

    # -- tokens ---------------------------------------------------------------------------------------------------
    def _content(self, texts: list[str]) -> tuple[list[list[int]], np.ndarray]:
        """Per text: its content ids (without special tokens) after truncation, and whether it was truncated."""
        budget = self.budget
        head_n = budget if self.truncation == HEAD else (budget + 1) // 2
        tail_n = budget - head_n
        chars = CHARS_PER_TOKEN * budget
        encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
        long = [i for i, t in enumerate(texts) if len(t) > chars]
        heads = [_head_piece(texts[i], chars) for i in long]
        tails = [_tail_piece(texts[i], chars) for i in long] if tail_n else []
        pieces = [t if len(t) <= chars else "" for t in texts]
        whole = [e.ids for e in encode(pieces, add_special_tokens=False)]
        head_ids = [e.ids for e in encode(heads, add_special_tokens=False)] if heads else []
        tail_ids = [e.ids for e in encode(tails, add_special_tokens=False)] if tails else []
        redo = [k for k, i in enumerate(long) if len(head_ids[k]) < head_n + CUT_MARGIN
                or (tail_n and len(tail_ids[k]) < tail_n + CUT_MARGIN)]
        if redo:  # a cut piece too short in tokens: tokenize the whole text
            for k, e in zip(redo, encode([texts[long[k]] for k in redo], add_special_tokens=False)):
                whole[long[k]] = e.ids
        redone = set(redo)
        cut = {i for k, i in enumerate(long) if k not in redone}
        out, truncated = [], np.zeros(len(texts), dtype=bool)
        pos = {i: k for k, i in enumerate(long)}
        for i, ids in enumerate(whole):
            if i in cut:
                k = pos[i]
                out.append(head_ids[k][:head_n] + (tail_ids[k][-tail_n:] if tail_n else []))
                truncated[i] = True
            elif len(ids) > budget:
                out.append(ids[:head_n] + (ids[-tail_n:] if tail_n else []))
                truncated[i] = True
            else:
                out.append(ids)
        return out, truncated

    def encode(self, texts: Sequence[str | None]) -> tuple[list[list[int]], np.ndarray]:
        """Per text: the model's input ids (special tokens included), and whether the text was truncated."""
        content, truncated = self._content(["" if t is None else str(t) for t in texts])
        return [self._prefix + c + self._suffix for c in content], truncated

    # -- forward --------------------------------------------------------------------------------------------------
    def batch_inputs(self, ids: list[list[int]]) -> dict[str, Any]:
        """Model inputs (on the device) of a batch of `encode` results, padded to the longest."""
        import torch

        n, longest = len(ids), max(len(x) for x in ids)
        input_ids = np.full((n, longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((n, longest), dtype=np.int64)
        types = np.zeros((n, longest), dtype=np.int64) if self.type_ids else None
        p, s = len(self._prefix), len(self._suffix)
        for r, x in enumerate(ids):
            input_ids[r, :len(x)] = x
            mask[r, :len(x)] = 1
            if types is not None:
                types[r, :p] = self._prefix_types
                types[r, p:len(x) - s] = self._type
                types[r, len(x) - s:len(x)] = self._suffix_types
        out = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask)}
        if types is not None:
            out["token_type_ids"] = torch.from_numpy(types)
        return {k: v.to(self.device, non_blocking=True) for k, v in out.items()}

    def run(self, ids: list[list[int]], head: Callable, batch_size: int = 64,
            batch_tokens: int | None = None) -> np.ndarray:
        """head(model outputs, attention mask) → (rows, k) tensor, per length-sorted batch; (n, k) float32 in input
        order."""
        import torch

        if not ids:
            return np.zeros((0, 0), dtype=np.float32)
        rows: list[np.ndarray] = [None] * len(ids)  # type: ignore[list-item]
        training = self.model.training
        self.model.eval()
        with torch.inference_mode(), (self._autocast or nullcontext()):
            for batch in length_batches([len(x) for x in ids], batch_size, batch_tokens):
                inputs = self.batch_inputs([ids[i] for i in batch])
                res = head(self.model(**inputs), inputs["attention_mask"]).float().cpu().numpy()
                for r, i in enumerate(batch):
                    rows[i] = res[r]
        self.model.train(training)
        return np.stack(rows).astype(np.float32, copy=False)

    def logits(self, texts: Sequence[str | None], batch_size: int = 64,
               batch_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """(logits (n, num_labels), truncated per text, tokens fed to the model)."""
        ids, truncated = self.encode(texts)
        out = self.run(ids, lambda o, m: o.logits, batch_size, batch_tokens)
        return out.reshape(len(ids), -1), truncated, sum(map(len, ids))

    def embed(self, texts: Sequence[str | None], batch_size: int = 64,
              batch_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """(embeddings (n, hidden): mean over the real tokens of the last hidden state, L2-normalised; truncated
        per text; tokens fed)."""
        ids, truncated = self.encode(texts)
        out = self.run(ids, mean_pool, batch_size, batch_tokens)
        return out.reshape(len(ids), -1), truncated, sum(map(len, ids))


def mean_pool(outputs, mask):
    """Mean of the last hidden state over the attended tokens, L2-normalised (fp32)."""
    import torch

    hidden = outputs.last_hidden_state.float()
    m = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
    return torch.nn.functional.normalize(pooled, dim=-1)


def label_index(config, label: int | str) -> int:
    """The output index of `label`: an index, or a name in the model's id2label (a digit string is an index)."""
    n = int(getattr(config, "num_labels", 0) or len(getattr(config, "id2label", {}) or {}))
    if isinstance(label, str) and not label.isdigit():
        names = {str(v): int(k) for k, v in (getattr(config, "id2label", None) or {}).items()}
        if label not in names:
            raise ValueError(f"the model has no label {label!r} (its labels: {', '.join(names) or 'none'})")
        return names[label]
    i = int(label)
    if not 0 <= i < n:
        raise ValueError(f"label {i} is out of range: the model has {n} labels")
    return i


__all__ = ["Encoder", "HEAD", "HEAD_TAIL", "label_index", "length_batches", "mean_pool", "require_models",
           "torch_device", "torch_dtype"]
