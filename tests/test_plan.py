"""`gpupipe plan` (seed 002 资源估算): the arithmetic on a real run, the CLI table and --json, the built-in table."""

import json

import pytest

from gpupipe.cli import main
from gpupipe.plan import GROUPS, parse_tokens, plan_builtin, plan_from_run


@pytest.fixture(scope="module")
def run(tmp_path_factory, synth_crawl):
    from tests.helpers import write_config

    tmp = tmp_path_factory.mktemp("plan")
    cfg = write_config(tmp / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp / "run"))
    assert main(["run", str(cfg)]) == 0
    root = tmp / "run"
    return root, json.loads((root / "stats.json").read_text()), json.loads((root / "shards/manifest.json").read_text())


def test_parse_tokens():
    assert [parse_tokens(t) for t in ("1T", "500B", "2.5M", "10k", "123", "1e3")] == \
        [10**12, 5 * 10**11, 2_500_000, 10_000, 123, 1000]
    for bad in ("", "x", "1Q", "0", "-5"):
        with pytest.raises(ValueError):
            parse_tokens(bad)


def test_plan_arithmetic_on_a_known_run(run):
    root, stats, manifest = run
    target = 10 * manifest["stream_tokens"]                       # ten times what the run produced
    plan = plan_from_run(root, target, cpus=4, gpus=2)
    assert plan["measured_tokens"] == manifest["stream_tokens"] and plan["scale"] == 10
    assert stats["device"] == "cpu" and plan["cores_measured"] == stats["workers"]
    for i, (p, s) in enumerate(zip(plan["stages"], stats["stages"])):
        assert p["name"] == s["name"]
        assert p["cpu_core_hours"] == pytest.approx(s["extra"]["cpu_s"] * 10 / 3600)   # driver + workers
        assert p["gpu_hours"] is None   # a CPU run measured no GPU time
        assert p["target_docs_in"] == s["docs_in"] * 10
        assert p["survival"] == pytest.approx(s["docs_out"] / s["docs_in"], abs=1e-6)
        parquet = sum(f.stat().st_size for f in (root / "stages" / f"{i:02d}-{s['name']}").rglob("*.parquet"))
        assert p["temp_bytes"] == pytest.approx(parquet * 10)
    shard_bytes = sum((root / "shards" / s["file"]).stat().st_size for s in manifest["shards"])
    t = plan["total"]
    assert plan["final_bytes"] == t["final_bytes"] == pytest.approx(shard_bytes * 10)
    assert t["raw_crawl_bytes"] == pytest.approx(stats["stages"][0]["bytes_in"] * 10)
    assert plan["input_records"] == stats["input_records"] * 10
    assert t["cpu_core_hours"] == pytest.approx(sum(s["extra"]["cpu_s"] for s in stats["stages"]) * 10 / 3600)
    assert t["storage_bytes"] == pytest.approx(t["temp_bytes"] + t["final_bytes"])
    assert t["wall_hours_cpu"] == pytest.approx(t["cpu_core_hours"] / 4)
    assert t["gpu_hours"] is None and "wall_hours_gpu" not in t and not plan["gpu_measured"]
    assert plan["warnings"] == []   # x10: no warning
    groups = {g["group"]: g for g in plan["groups"]}
    assert groups[GROUPS[2][0]]["stages"] == ["exact_dedup", "fuzzy_dedup"]
    dedup = [p for p in plan["stages"] if p["name"].endswith("dedup")]
    assert groups[GROUPS[2][0]]["cpu_core_hours"] == pytest.approx(sum(p["cpu_core_hours"] for p in dedup))


def test_plan_cli_table_and_json(run, capsys):
    root, stats, manifest = run
    assert main(["plan", str(root), "--tokens", "1T", "--cpus", "1000", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["target_tokens"] == 10**12 and plan["scale"] == pytest.approx(1e12 / manifest["stream_tokens"])
    assert plan["total"]["wall_hours_cpu"] == pytest.approx(plan["total"]["cpu_core_hours"] / 1000)
    assert main(["plan", str(root), "--tokens", "1T"]) == 0
    out = capsys.readouterr().out
    assert "总计" in out and "CPU 核·时" in out and "raw crawl needed" in out
    assert main(["plan", str(root / "nope"), "--tokens", "1T"]) == 2
    assert main(["plan", "--tokens", "lots"]) == 2


def test_builtin_table_is_seed_002s(capsys):
    plan = plan_builtin(10**12, gpus=8)
    assert [round(g["cpu_core_hours"]) for g in plan["groups"]] == [50_000, 10_000, 100_000, 20_000, 10_000]
    assert plan["total"]["cpu_core_hours"] == 190_000 and plan["total"]["gpu_hours"] == 2_000
    assert plan["total"]["storage_bytes"] == pytest.approx(80e12) and plan["total"]["wall_hours_gpu"] == 250
    assert plan_builtin(5 * 10**11)["total"]["cpu_core_hours"] == 95_000
    assert main(["plan", "--tokens", "1T"]) == 0
    out = capsys.readouterr().out
    assert "~190K" in out and "~2.0K" in out


def test_a_cpu_run_claims_no_gpu_hours(run, capsys):
    """#28 (7b): a run on the CPU gives no GPU estimate: no "8 GPUs: 0.0 h", no 0 GPU-hours in the table."""
    root, stats, manifest = run
    assert stats["device"] == "cpu"
    plan = plan_from_run(root, 10 * manifest["stream_tokens"], gpus=8)
    assert plan["total"]["gpu_hours"] is None and all(g["gpu_hours"] is None for g in plan["groups"])
    assert main(["plan", str(root), "--tokens", str(10 * manifest["stream_tokens"]), "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "8 GPUs: 0.0 h" not in out and "wall clock on 8 GPUs: not estimated" in out
    assert "measured on the CPU (device cpu): no GPU-hours estimated" in out
    total = next(line for line in out.splitlines() if "总计" in line)
    assert [c.strip() for c in total.split("│")][3] == "- (CPU run)"   # the GPU-hours column
    # the builtin table (seed 002's, measured on GPUs) still gives GPU wall-clock hours
    assert main(["plan", "--tokens", "1T", "--gpus", "8"]) == 0
    assert "wall clock on 8 GPUs: 250.0 h" in capsys.readouterr().out


def test_a_huge_extrapolation_is_warned_about(run, capsys):
    """#28 (7b): scaling a tiny run a million-fold says the measurement is too small to extrapolate reliably."""
    root, stats, manifest = run
    assert main(["plan", str(root), "--tokens", "1T"]) == 0
    scale = 10**12 / manifest["stream_tokens"]
    assert scale > 1000
    err = capsys.readouterr().err
    assert "warning:" in err and f"{scale:,.4g}x" in err and "unreliable" in err
    assert main(["plan", str(root), "--tokens", "1T", "--json"]) == 0
    captured = capsys.readouterr()
    assert "unreliable" in json.loads(captured.out)["warnings"][0] and "warning:" in captured.err
    assert main(["plan", str(root), "--tokens", str(1000 * manifest["stream_tokens"])]) == 0
    assert "warning" not in capsys.readouterr().err   # x1000 is the limit


def test_stages_are_grouped_as_seed_002_groups_them():
    """#35 part 4: seed 002's Stage 4 (quality) holds the transformer classifier and semantic dedup, Stage 5
    (post-processing) PII redaction; SimHash is a dedup. Every stage gpupipe has is in a group of its own name."""
    from gpupipe.plan import group_of
    from gpupipe.stages import STAGES

    collect, basic, dedup, quality, post = (g for g, _ in GROUPS)
    assert [group_of(s) for s in ("classifier", "semantic_dedup", "quality_classifier", "perplexity")] == [quality] * 4
    assert [group_of(s) for s in ("pii", "tokenize", "pack")] == [post] * 3
    assert group_of("simhash_dedup") == group_of("fuzzy_dedup") == dedup and group_of("langid") == basic
    named = set().union(*(names for _, names in GROUPS))
    assert set(STAGES) - {"llm_judge"} <= named | {"read"}, set(STAGES) - named   # no stage falls into "other"


def test_the_plan_prices_its_hours(capsys):
    """The cost: core-hours x $/core-hour + GPU-hours x $/GPU-hour, defaults stated; seed 002's table (190K
    core-hours, 2K GPU-hours per 1T) at the defaults falls in its own "$2,000-5,000"."""
    from gpupipe.plan import USD_PER_CORE_HOUR, USD_PER_GPU_HOUR, add_cost

    plan = add_cost(plan_builtin(10**12))
    assert plan["cost"]["usd"] == pytest.approx(190_000 * USD_PER_CORE_HOUR + 2_000 * USD_PER_GPU_HOUR)
    assert 2_000 <= plan["cost"]["usd"] <= 5_000
    assert sum(g["cost"]["usd"] for g in plan["groups"]) == pytest.approx(plan["cost"]["usd"])
    assert plan["groups"][3]["cost"]["gpu_usd"] == pytest.approx(2_000 * USD_PER_GPU_HOUR)
    mine = add_cost(plan_builtin(10**12), usd_per_core_hour=0.05, usd_per_gpu_hour=2.5)
    assert mine["cost"]["usd"] == pytest.approx(190_000 * 0.05 + 2_000 * 2.5)
    assert mine["cost"]["defaults"] == {"usd_per_core_hour": False, "usd_per_gpu_hour": False}
    assert main(["plan", "--tokens", "1T"]) == 0
    out = capsys.readouterr().out
    assert f"${USD_PER_CORE_HOUR:g}/core-hour (default)" in out and f"${USD_PER_GPU_HOUR:g}/GPU-hour (default)" in out
    assert f"cost: ${plan['cost']['usd']:,.0f}" in out and "成本 cost (USD)" in out
    assert main(["plan", "--tokens", "1T", "--usd-per-core-hour", "0.05", "--usd-per-gpu-hour", "2.5",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost"]["usd"] == pytest.approx(14_500)
    assert main(["plan", "--tokens", "1T", "--usd-per-core-hour", "-1"]) == 2


def test_a_cpu_run_is_priced_without_a_gpu_cost(run, capsys):
    root, stats, manifest = run
    assert main(["plan", str(root), "--tokens", str(10 * manifest["stream_tokens"]), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["cost"]["gpu_usd"] is None
    assert plan["cost"]["usd"] == pytest.approx(plan["total"]["cpu_core_hours"] * plan["cost"]["usd_per_core_hour"])


def test_nsfw_filter_and_simhash_dedup_have_their_seed_002_groups():
    from gpupipe.plan import group_of

    assert group_of("nsfw_filter") == group_of("url_filter") == "基础过滤 (basic filters)"
    assert group_of("simhash_dedup") == group_of("fuzzy_dedup") == "去重 (dedup)"
