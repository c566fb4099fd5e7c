"""Transformer models for the model-based stations: shared loading, tokenizing, length-sorted batching and pooling
(`encoder`), and fine-tuning (`train`, `gpupipe train-classifier`).

torch and transformers (the `[models]` extra) are imported inside the functions that need them, never at import
time: `import gpupipe.stages` stays free of both.
"""
