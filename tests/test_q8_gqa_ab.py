"""dev/probes/q8_gqa_ab.py without a GPU: its rule (grouped-query attention at 8 bits against the routes grouped calls
took before) on made-up rounds, the plan, and the argument checks."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.dev
ROOT = Path(__file__).resolve().parent.parent


def load():
    spec = importlib.util.spec_from_file_location("q8_gqa_ab_under_test", ROOT / "dev/probes/q8_gqa_ab.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def spans(ms: dict[str, list[float]]) -> dict[str, list[list[float]]]:
    return {x: [[t, t] for t in ts] for x, ts in ms.items()}


def test_rule_on_made_up_rounds():
    g = load()
    even = [1.0, 1.001] * 4
    # faster than both earlier routes in every round, level with the equal-head call per query head: met
    d = g.decide(spans({"gqa8": even, "rep8": [1.1] * 8, "gqa": [1.3] * 8, "mha8": [1.001, 1.0] * 4,
                        "fa3_fp8": [1.02] * 8}))
    assert d["met"] and d["gqa8_vs_rep8"]["verdict"] == "win" and d["gqa8_vs_mha8"]["verdict"] == "tie"
    assert abs(d["gqa8_over_fa3_fp8"] - 1.02) < 1e-3 and d["gqa8_over_sage2"] is None
    assert "sage2 not measured" in d["why"]
    # a tie with the repeated route is not a win: not met
    d = g.decide(spans({"gqa8": even, "rep8": [1.001, 1.0] * 4, "gqa": [1.3] * 8, "mha8": even}))
    assert d["gqa8_vs_rep8"]["verdict"] == "tie" and not d["met"]
    # 3% behind the equal-head call in every round: a loss, not met
    d = g.decide(spans({"gqa8": [1.03] * 8, "rep8": [1.2] * 8, "gqa": [1.4] * 8, "mha8": even}))
    assert d["gqa8_vs_mha8"]["verdict"] == "loss" and not d["met"]


def test_dry_run_and_arguments(capsys):
    g = load()
    assert g.main(["--dry-run", "--seq", "8192", "--d", "64", "--hkv", "1"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert (p["hq"], p["hkv"], p["d"], p["s"]) == (32, 1, 64, 8192)
    assert p["flops_per_call"] == 4.0 * 32 * 8192 * 8192 * 64
    assert p["sides"] == ["gqa8", "rep8", "gqa", "mha8", "fa3_fp8", "sage2"]
    assert g.main(["--dry-run", "--rounds", "4"]) == 2
    assert g.main(["--dry-run", "--hkv", "5"]) == 2
