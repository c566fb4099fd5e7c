"""Near dedup's configuration and LSH shape (bands × rows, given or chosen from the threshold)."""

from __future__ import annotations

from pydantic import Field, model_validator

from gpupipe.config_base import Fraction, KeyProblem, Strict
from gpupipe.kernels.minhash import MAX_PERM

# Choosing bands × rows from the threshold scores every b·r ≤ num_perm (lsh.optimal_params): ~num_perm·ln(num_perm)
# shapes, 3 s and 0.7 GB per worker at 4096. Beyond that, bands and rows must be given.
SEARCH_MAX_PERM = 4096


class FuzzyDedupConfig(Strict):
    num_perm: int = Field(128, ge=1, le=MAX_PERM)
    word_k: int = Field(5, ge=1)    # 5-word shingles (the user's spec)
    char_k: int = Field(3, ge=1)    # 3-character shingles for Chinese
    threshold: float = Field(0.8, gt=0.0, le=1.0)
    bands: int | None = Field(None, ge=1)   # bands × rows given, or chosen from the threshold (FP/FN areas)
    rows: int | None = Field(None, ge=1)
    # Recall-leaning (12 x 10 at 0.8 / 128): the exact Jaccard check below removes the extra candidates this
    # admits. Without `verify`, datasketch's equal weights (9 x 13, also the spec's setting) are the usual pick.
    fp_weight: Fraction = 0.2
    fn_weight: Fraction = 0.8
    cjk_langs: list[str] = ["zh", "ja", "ko"]   # `lang` values shingled by characters
    verify: bool = True             # cut candidate pairs whose true shingle Jaccard is below threshold
    priority: list[str] = []        # columns deciding the keeper ("-col" = largest first); then input order
    band_groups: int = Field(1, ge=1)   # exchange the bands in this many rounds (bounds the exchange on disk)
    sample_clusters: int = Field(20, ge=0)  # clusters written side by side to clusters_sample.jsonl for review

    @model_validator(mode="after")
    def _lsh_shape(self) -> "FuzzyDedupConfig":
        if (self.bands is None) != (self.rows is None):
            missing = "rows" if self.rows is None else "bands"
            raise KeyProblem(missing, "give bands and rows together, or neither (then the threshold chooses them)")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise KeyProblem("bands", f"bands × rows = {self.bands} × {self.rows} = {self.bands * self.rows} "
                                      f"exceeds num_perm {self.num_perm}")
        if self.bands is None and self.num_perm > SEARCH_MAX_PERM:
            raise KeyProblem("num_perm", f"num_perm {self.num_perm} > {SEARCH_MAX_PERM} needs bands and rows: "
                                         "choosing them from the threshold would take minutes and GBs "
                                         "(`gpupipe minhash-params` shows the S-curve of a choice)")
        if self.bands is None and self.fp_weight + self.fn_weight == 0:
            raise KeyProblem("fp_weight", "fp_weight and fn_weight cannot both be 0")
        return self


def lsh_shape(cfg: FuzzyDedupConfig) -> tuple[int, int]:
    if cfg.bands and cfg.rows:
        if cfg.bands * cfg.rows > cfg.num_perm:
            raise ValueError(f"fuzzy_dedup: bands × rows = {cfg.bands * cfg.rows} exceeds num_perm {cfg.num_perm}")
        return cfg.bands, cfg.rows
    from gpupipe.stages.dedup.lsh import optimal_params

    return optimal_params(cfg.threshold, cfg.num_perm, cfg.fp_weight, cfg.fn_weight)
