"""dev/probes/gqa_ab.py without a GPU: the rule (issue 26's grouped-query bar) on made-up rounds, and the plan."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.dev
ROOT = Path(__file__).resolve().parent.parent


def load():
    spec = importlib.util.spec_from_file_location("gqa_ab_under_test", ROOT / "dev/probes/gqa_ab.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def spans(ms: dict[str, list[float]]) -> dict[str, list[list[float]]]:
    return {x: [[t, t] for t in ts] for x, ts in ms.items()}


def test_rule_on_made_up_rounds():
    g = load()
    even = [1.0, 1.001] * 8
    # a tie with MHA and 2% ahead of FA3: met
    d = g.decide(spans({"gqa": [1.0, 1.001] * 8, "mha": [1.001, 1.0] * 8, "fa3": [1.02] * 16, "cudnn": [1.15] * 16}))
    assert d["gqa_vs_mha"]["verdict"] == "tie" and d["met"] and abs(d["gqa_over_fa3"] - 1.02) < 1e-3
    # 3% behind MHA in every round: a loss, not met whatever FA3 reads
    d = g.decide(spans({"gqa": [1.03] * 16, "mha": even, "fa3": [1.1] * 16}))
    assert d["gqa_vs_mha"]["verdict"] == "loss" and not d["met"]
    # behind FA3: not met; without FA3: not met, and it says so
    d = g.decide(spans({"gqa": even, "mha": even, "fa3": [0.98] * 16}))
    assert not d["met"] and d["gqa_over_fa3"] < 1.0
    d = g.decide(spans({"gqa": even, "mha": even}))
    assert d["gqa_over_fa3"] is None and not d["met"] and "no FA3" in d["why"]


def test_dry_run_and_round_floor(capsys):
    g = load()
    assert g.main(["--dry-run", "--seq", "8192"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert (p["hq"], p["hkv"], p["d"], p["s"]) == (32, 8, 128, 8192)
    assert p["flops_per_call"] == 4.0 * 32 * 8192 * 8192 * 128 and p["sides"] == ["gqa", "mha", "fa3", "cudnn"]
    assert g.main(["--dry-run", "--rounds", "4"]) == 2
