"""dev/probes/q8_gqa_ab.py without a GPU: its rule (grouped-query attention at 8 bits against the routes grouped calls
took before) on made-up rounds, the plan, and the argument checks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from _support import load_script

pytestmark = pytest.mark.dev
PROBE = Path(__file__).resolve().parent.parent / "dev/probes/q8_gqa_ab.py"


def load():
    return load_script(PROBE, "q8_gqa_ab_under_test")


def spans(ms: dict[str, list[float]]) -> dict[str, list[list[float]]]:
    """Each side's made-up per-round time as a palindrome round's two spans."""
    return {x: [[t] * 2 for t in ts] for x, ts in ms.items()}


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


def test_shared_measure_checks_sizes_and_times_in_palindrome_rounds(monkeypatch):
    """gqa_ab.measure (both probes' timing) without a GPU: the timer faked, one side failing its check is reported
    and left out of the rounds, the rest get one span a round and TFLOPS from their median span."""
    import sys
    import types

    import torch

    import importlib

    g = load()
    gqa_ab = sys.modules["gqa_ab"]
    timer = importlib.import_module("hd_variants_ab")  # what measure() imports (dev/probes is on the path)
    ms = {"a": 2.0, "b": 4.0, "bad": 1.0}
    order = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timer, "time_back_to_back", lambda call, calls, span, first=0: order.append(call(0)) or
                        ms[order[-1]])
    monkeypatch.setattr(timer, "calls_for", lambda one, target, n: 3)

    def check(x, out):
        if x == "bad":
            raise RuntimeError("relative L2 1e0 against cuDNN")

    calls = {x: (lambda x: lambda i: x)(x) for x in ms}
    result = {"flops_per_call": 4e12, "errors": {}, "calls": {}, "spans": {}, "tflops": {}}
    args = types.SimpleNamespace(rounds=8, target_ms=20.0)
    gqa_ab.measure(calls, ["a", "bad", "b"], result, args, 2, None, check)
    assert set(result["errors"]) == {"bad"} and "relative L2" in result["errors"]["bad"]
    assert set(result["spans"]) == {"a", "b"} and all(len(r) == 2 for r in result["spans"]["a"])
    assert len(result["spans"]["a"]) == 8 and result["calls"] == {"a": 3, "b": 3}
    assert result["tflops"] == {"a": 4e12 / 2e-3 / 1e12, "b": 4e12 / 4e-3 / 1e12}
    # the sizing spans (the failed side never timed), then each round forward and back, rotated a side a round
    assert order[:2] == ["a", "b"] and order[2:6] == ["a", "b", "b", "a"] and order[6:10] == ["b", "a", "a", "b"]
    assert g.gqa_ab is gqa_ab


def test_shared_finish_writes_and_prints(tmp_path, capsys):
    """gqa_ab.finish: the JSON under --out, the TFLOPS line with the errors, the verdict when there is one."""
    import sys
    import types

    load()
    gqa_ab = sys.modules["gqa_ab"]
    result = {"tflops": {"gqa8": 961.4}, "errors": {"sage2": "not installed"},
              "decision": {"why": "gqa8 vs rep8: win", "met": True}}
    gqa_ab.finish(types.SimpleNamespace(out=tmp_path / "o"), result, "r.json", head="1x32/8: ")
    assert json.loads((tmp_path / "o" / "r.json").read_text()) == result
    out = capsys.readouterr().out.splitlines()
    assert out == ["1x32/8: gqa8 961 TFLOPS per query head; errors {'sage2': 'not installed'}",
                   "gqa8 vs rep8: win -> met"]
    gqa_ab.finish(types.SimpleNamespace(out=None), {**result, "decision": None, "errors": {}}, "r.json")
    assert capsys.readouterr().out.splitlines() == ["gqa8 961 TFLOPS per query head"]
