"""domain_tier as an ordered category for the keeper (#34): tier1 < tier2 < ... < none, not text order."""

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from gpupipe.io.parts import part_paths
from gpupipe.stages.dedup.fuzzy import choose_keepers
from gpupipe.stages.dedup.fuzzy.components import tier_rank
from tests.helpers import run_config


def test_tier_rank_is_an_ordered_category():
    assert tier_rank(["none", "tier2", "tier10", "tier1", None, "tier2"]).tolist() == [3, 1, 2, 0, 3, 1]
    m = pd.DataFrame({"doc_index": [1, 2, 3, 4, 5], "cluster": [1, 1, 1, 4, 4],
                      "domain_tier": ["none", "tier2", "tier1", None, "tier3"]})
    assert choose_keepers(m, ["domain_tier"])["keep"].tolist() == [False, False, True, False, True]
    assert choose_keepers(m, ["-domain_tier"])["keep"].tolist() == [True, False, False, True, False]
    assert m["domain_tier"].fillna("null").tolist() == ["none", "tier2", "tier1", "null", "tier3"]  # untouched


def test_fuzzy_dedup_keeps_the_tier1_copy(tmp_path):
    """url_filter labels the pages (seed tiers: wikipedia.org is tier1); the untiered near copy comes first in
    the input, yet the Wikipedia page is the one kept."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(3000)]
    article = " ".join(rng.choice(words, size=200))
    near = article.split()
    near[100] = "changed"
    others = [" ".join(rng.choice(words, size=200)) for _ in range(6)]
    rows = [("https://copycat.example.com/a", " ".join(near)), ("https://en.wikipedia.org/wiki/A", article)]
    rows += [(f"https://site{i}.example.org/p", t) for i, t in enumerate(others)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "url": u, "text": t}) + "\n" for i, (u, t) in enumerate(rows)))
    out = run_config(tmp_path, "run", src, [{"url_filter": {}}, {"fuzzy_dedup": {"priority": ["domain_tier"]}}],
                     partition_docs=3, workers=1)
    kept = pd.concat([pq.read_table(p).to_pandas() for p in part_paths(out / "stages" / "02-fuzzy_dedup")])
    assert "https://en.wikipedia.org/wiki/A" in kept["url"].tolist()
    assert "https://copycat.example.com/a" not in kept["url"].tolist()
    assert len(kept) == len(rows) - 1
