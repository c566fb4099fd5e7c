"""The per-phase, per-group token share table of a shard folder's manifest (#34): planned (the mixture ledger)
against packed (the manifest's phases; a mixture without phases is one phase, "all"), in percent of the phase,
with the largest gap.

    gpupipe run configs/curriculum_mixture.yaml && python profiling/mixture_table.py runs/curriculum/shards
"""
import sys

from gpupipe.tokens.manifest import read_manifest


def main(shard_dir: str) -> float:
    m = read_manifest(shard_dir)
    if not m.get("phases"):   # one mix: one phase "all" of the run's tokens per group
        m["phases"] = [{"name": "all", "tokens_by_group": m["tokens_per_group"], "stream_tokens": m["stream_tokens"],
                        "shards": [s["file"] for s in m["shards"]]}]
        m["mixture"]["phases"] = [{"name": "all", "share": 1.0, "sources": m["mixture"]["sources"]}]
    ledger = {p["name"]: p for p in m["mixture"]["phases"]}
    worst = 0.0
    print(f"{'phase':<10}{'group':<30}{'planned %':>10}{'packed %':>10}{'tokens':>12}{'shards':>8}")
    for p in m["phases"]:
        stream = sum(p["tokens_by_group"].values())
        for g, r in ledger[p["name"]]["sources"].items():
            got = 100 * p["tokens_by_group"].get(g, 0) / stream
            worst = max(worst, abs(got - 100 * r["target_share"]))
            print(f"{p['name']:<10}{g:<30}{100 * r['target_share']:>10.2f}{got:>10.2f}"
                  f"{p['tokens_by_group'].get(g, 0):>12}{len(p['shards']):>8}")
        print(f"{p['name']:<10}{'(phase share of all tokens)':<30}{100 * ledger[p['name']]['share']:>10.2f}"
              f"{100 * p['stream_tokens'] / m['stream_tokens']:>10.2f}{p['stream_tokens']:>12}")
    print(f"largest gap: {worst:.3f} percentage points")
    return worst


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1]) <= 0.5 else 1)
