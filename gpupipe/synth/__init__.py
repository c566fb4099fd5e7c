"""Deterministic synthetic web crawl with ground truth (the project's default input)."""

from gpupipe.synth.crawl import write_synthetic_crawl

__all__ = ["write_synthetic_crawl"]
