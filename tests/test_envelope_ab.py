"""CPU tests of the envelope stage (dev/probes/envelope_ab.py, envelope_rules.py): the sign test and the verdicts,
the palindrome's drift cancellation, the routing and threshold rules on fake data, the one-line edits against the
real csrc/capi.cu, the stage's summary from fake JSONs, its dry run and argument checks, and the shell wrapper's
time budget."""
import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.dev

ROOT = Path(__file__).resolve().parent.parent


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / f"dev/probes/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rules = _load("envelope_rules")
ab = _load("envelope_ab")
CAPI_NOW = (ROOT / "csrc/capi.cu").read_text()
# The fake-data tests decide from the constants the stage first ran against (O-in-V off), not today's: the routing
# rule's outcome on the real A/B is pinned by tests/test_head_dims_variants.py instead.
CAPI = re.sub(r"(#define VIDATTN_D(192|256)_O_IN_V_KV_MAX) .*", r"\1 0", CAPI_NOW)
CAPI = re.sub(r"(#define VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D128) .*", r"\1 4096", CAPI)
CAPI = re.sub(r"(#define VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX) .*", r"\1 0", CAPI)


def test_sign_test_values():
    assert rules.sign_test_p(7, 8) == pytest.approx(9 / 256)
    assert rules.sign_test_p(10, 12) == pytest.approx(79 / 4096)
    assert rules.sign_test_p(0, 8) == 1.0
    assert [rules.min_wins(n) for n in (4, 5, 8, 10, 12, 16)] == [None, 5, 7, 9, 10, 12]
    for n in range(5, 30):  # the threshold is the smallest count reaching alpha
        k = rules.min_wins(n)
        assert rules.sign_test_p(k, n) <= rules.ALPHA < rules.sign_test_p(k - 1, n)


def test_verdicts():
    win = [1.03] * 7 + [0.99]
    assert rules.verdict(win)["verdict"] == "win"
    assert rules.verdict([1 / x for x in win])["verdict"] == "loss"
    assert rules.verdict([1.003] * 7 + [0.99])["verdict"] == "tie"  # significant but under half a percent
    assert rules.verdict([1.05] * 6 + [0.95] * 2)["verdict"] == "tie"  # 6/8: p = 0.145
    assert rules.verdict([1.05] * 7)["verdict"] == "short"
    v = rules.verdict([1.0] * 4 + [1.02] * 8)  # rounds exactly level count as neither side
    assert (v["n"], v["wins"], v["verdict"]) == (8, 8, "win")
    assert "p=0.00391" in rules.describe(v)


def test_call_v_data_is_short_of_a_decision():
    """The call V A/B (5 rounds of 2 spans) behind the routing left as it was: by this rule too few rounds, though
    O-in-V was ahead in 4 of 5 at D256 1K."""
    data = json.loads((ROOT / "bench/results/h200_2026-12-02_eve/call_v/hd/ab.json").read_text())
    row = next(r for r in data["rows"] if r["shape"] == "D256 1K")
    spans = {x: [row["ms"][x][2 * r:2 * r + 2] for r in range(len(row["ms"][x]) // 2)] for x in ("wide", "ov")}
    v = rules.verdict(rules.round_ratios(spans, "wide", "ov"))
    assert v["verdict"] == "short" and v["rounds"] == 5 and v["wins"] == 4


def test_palindrome_cancels_linear_drift():
    sides = ["wide", "ov", "fa3", "cudnn"]
    base = {"wide": 1.0, "ov": 0.97, "fa3": 1.02, "cudnn": 1.15}
    spans = {x: [] for x in sides}
    t = 0
    for r in range(6):
        order = rules.palindrome(sides, r)
        assert sorted(order) == sorted(sides * 2) and order[:4] == order[4:][::-1]
        for x in sides:
            spans[x].append([])
        for x in order:  # the clock slows 1% per span, and a span later in the round reads slower
            spans[x][r].append(base[x] * (1 + 0.01 * t))
            t += 1
    got = rules.round_ratios(spans, "wide", "ov")
    assert len(got) == 6
    assert all(x == pytest.approx(1 / 0.97, rel=1e-12) for x in got)
    assert rules.palindrome(sides, 1)[0] != rules.palindrome(sides, 0)[0]


def test_prefix_kv_max():
    assert rules.prefix_kv_max({1024: "win", 8192: "win", 32768: "win"}) == rules.ALL_KEYS
    assert rules.prefix_kv_max({1024: "win", 8192: "win", 32768: "tie"}) == 16384
    assert rules.prefix_kv_max({1024: "win", 8192: "loss", 32768: "win"}) == 4096
    assert rules.prefix_kv_max({1024: "tie", 8192: "win", 32768: "win"}) == 0


CURRENT = {"VIDATTN_D192_NARROW_KV_MAX": 2048, "VIDATTN_D192_O_IN_V_KV_MAX": 0, "VIDATTN_D256_NARROW_KV_MAX": 0,
           "VIDATTN_D256_O_IN_V_KV_MAX": 0}


def test_ov_routing_d256():
    dec = rules.ov_routing({(256, 1024): "win", (256, 8192): "win", (256, 32768): "win"}, CURRENT)
    assert dec["changed"] == {"VIDATTN_D256_O_IN_V_KV_MAX": (0, rules.ALL_KEYS)}
    dec = rules.ov_routing({(256, 1024): "win", (256, 8192): "tie", (256, 32768): "win"}, CURRENT)
    assert dec["changed"] == {"VIDATTN_D256_O_IN_V_KV_MAX": (0, 4096)} and "D=256 32768" in dec["unroutable"][0]
    # some lengths only (a --shapes run): nothing moves, even where the measured prefix would have moved it
    for part in ({(256, 1024): "tie", (256, 32768): "loss"}, {(256, 1024): "win"}, {(256, 32768): "tie"}):
        dec = rules.ov_routing(part, {**CURRENT, "VIDATTN_D256_O_IN_V_KV_MAX": rules.ALL_KEYS})
        assert dec["changed"] == {} and "the rule needs [1024, 8192, 32768]: no change" in dec["notes"][0]


def test_ov_routing_d192():
    # 1K is judged against narrow (routed up to 2048 keys), 8K and 32K against wide
    dec = rules.ov_routing({(192, 1024): "tie", (192, 8192): "win", (192, 32768): "win"}, CURRENT)
    assert dec["changed"] == {"VIDATTN_D192_O_IN_V_KV_MAX": (0, rules.ALL_KEYS)}
    dec = rules.ov_routing({(192, 1024): "win", (192, 8192): "tie", (192, 32768): "tie"}, CURRENT)
    assert dec["changed"] == {"VIDATTN_D192_NARROW_KV_MAX": (2048, 0), "VIDATTN_D192_O_IN_V_KV_MAX": (0, 4096)}
    dec = rules.ov_routing({(192, 1024): "win", (192, 8192): "win", (192, 32768): "loss"}, CURRENT)
    assert dec["constants"]["VIDATTN_D192_O_IN_V_KV_MAX"] == 16384
    assert dec["constants"]["VIDATTN_D192_NARROW_KV_MAX"] == 0


def test_capi_constants_and_edits():
    where = rules.constant_lines(CAPI)
    assert set(where) == set(rules.CONSTANTS)
    lines = CAPI.splitlines()
    for name, (no, text) in where.items():
        assert lines[no - 1] == text and text.startswith(f"#define {name} ")
    cur = rules.current_constants(CAPI)
    assert all(isinstance(v, int) and v >= 0 for v in cur.values())
    # capi.cu's order: narrow first, then O-in-V (what ov_routing assumes)
    fwd = CAPI[CAPI.index("if (a->head_dim > 128) {"):]
    assert fwd.index("pick_hd_narrow(") < fwd.index("pick_hd_o_in_v(")
    changed = {"VIDATTN_D256_O_IN_V_KV_MAX": (cur["VIDATTN_D256_O_IN_V_KV_MAX"], rules.ALL_KEYS)}
    (edit,) = rules.edit_lines(CAPI, changed)
    no, _ = where["VIDATTN_D256_O_IN_V_KV_MAX"]
    assert edit.startswith(f"csrc/capi.cu:{no} ")
    new_line = re.search(r"-> `(.*)`$", edit).group(1)
    lines[no - 1] = new_line
    assert rules.current_constants("\n".join(lines))["VIDATTN_D256_O_IN_V_KV_MAX"] == rules.ALL_KEYS


def test_causal_threshold_rule():
    assert rules.causal_threshold(4096, {1024: "win", 1536: "tie", 2048: "win", 3072: "win", 4096: "win"}) == {
        "min_sq": 2048, "moved": "down", "why": "dynamic won at every measured length from here up"}
    assert rules.causal_threshold(4096, {1024: "loss", 2048: "tie", 3072: "tie", 4096: "tie"})["min_sq"] == 4096
    assert rules.causal_threshold(2048, {1024: "win", 2048: "loss", 3072: "win", 4096: "win"})["min_sq"] == 3072
    assert rules.causal_threshold(2048, {2048: "win", 3072: "loss", 4096: "win"})["min_sq"] == 4096
    assert rules.causal_threshold(2048, {2048: "tie", 4096: "loss"})["min_sq"] == 8192
    # a tie above the threshold does not move it (the status quo needs a significant result)
    assert rules.causal_threshold(2048, {1024: "loss", 2048: "tie", 3072: "tie"})["moved"] == "none"


def test_imbalance_rule():
    assert rules.imbalance_rule([("a", 1.3, "win"), ("b", 1.4, "win"), ("c", 1.05, "loss")])["permille"] == 1100
    assert rules.imbalance_rule([("a", 1.3, "win"), ("b", 1.4, "loss")])["permille"] == 0
    assert rules.imbalance_rule([("a", 1.3, "win"), ("b", 1.4, "tie")])["permille"] == 0
    assert rules.imbalance_rule([("c", 1.05, "win")])["why"] == "nothing measured it would route"


def test_boundary_fit_and_decomposition():
    blocks = [rules.d256_blocks(k) for k in (1024, 2048, 4096, 8192)]
    assert blocks == [12.8, 25.6, 51.2, 102.4]
    assert rules.d256_blocks(1000) == 12 + 48 / 80  # 40 keys run as three 16-key steps
    fit = rules.fit_boundary([(x, 4.5 + 1.8 * x) for x in blocks])
    assert fit["a_us"] == pytest.approx(4.5) and fit["b_us"] == pytest.approx(1.8) and fit["max_resid_us"] < 1e-9
    dec = rules.d256_decomposition(4.5 + 1.8 * 12.8, fit)
    assert dec["tail_share"] == pytest.approx(1 - 1024 / 1056)
    assert dec["boundary_share"] + dec["block_share"] == pytest.approx(1.0)
    assert dec["largest"] == "tile boundary"
    with pytest.raises(ValueError):
        rules.fit_boundary([(1, 1)])


def _fake_spans(ratio, rounds=16, wins=None):
    """Per-round [span, span] of a routed side at 1.0 ms and a challenger `ratio` faster, losing the last rounds
    beyond `wins`."""
    wins = rounds if wins is None else wins
    routed = [[1.0, 1.0] for _ in range(rounds)]
    ch = [[1 / ratio] * 2 if r < wins else [ratio] * 2 for r in range(rounds)]
    return routed, ch


def _fake_ov_rows():
    rows = []
    for name, b, h, s, d in ab.OV_SHAPES:
        base = "narrow" if (d, s) == (192, 1024) else "wide"
        ratio, wins = {("D256 1K"): (1.04, 15), ("D256 8K"): (1.02, 14), ("D256 32K"): (1.01, 9)}.get(name, (1.0, 8))
        routed, ch = _fake_spans(ratio, wins=wins)
        spans = {base: routed, "ov": ch, "fa3": [[1.0, 1.0]] * 16}
        rows.append({"shape": name, "b": b, "h": h, "s": s, "d": d, "base": base, "routed": base, "spans": spans,
                     "tflops": {base: 600.0, "ov": 600.0 * ratio, "fa3": 600.0},
                     "ov_vs_base": rules.verdict(rules.round_ratios(spans, base, "ov"))})
    return rows


def test_summary_from_fake_results(tmp_path):
    (tmp_path / "ov.json").write_text(json.dumps({"fa3": "available", "rows": _fake_ov_rows()}))
    crows = []
    for kind, shapes in (("threshold", ab.CAUSAL_SHAPES), ("imbalance", ab.IMBALANCE_SHAPES)):
        for b, h, s, d in shapes:
            good = s >= 2048 or kind == "imbalance"  # dynamic wins from 2K at both builds, loses below
            ratios = [1.03] * 12 if good else [0.95] * 12
            crows.append({"shape": ab.shape_name(b, h, s, d), "kind": kind, "b": b, "h": h, "s": s, "d": d,
                          "graph_ratios": ratios, "eager_ratios": [0.9] * 12, "verdict": rules.verdict(ratios),
                          "ran_ok": True, "equal": True, "sim_static": 1.3 if kind == "imbalance" else 1.03})
    (tmp_path / "causal.json").write_text(json.dumps({"library_min_sq": {"64": 2048, "128": 4096}, "rows": crows}))
    drows = []
    for name, b, h, sq, skv in ab.D256_POINTS:
        blocks = rules.d256_blocks(skv)
        drows.append({"shape": name, "b": b, "h": h, "sq": sq, "skv": skv, "tiles": b * h * 8, "blocks": blocks,
                      "round_us": {"wide": 5.8 + 1.8 * blocks, "ov": 4.4 + 1.8 * blocks},
                      "tflops": {"wide": 590.0 * (1.031 if b == 12 else 1), "ov": 620.0}})
    (tmp_path / "d256.json").write_text(json.dumps({"sms": 132, "rows": drows}))
    text = ab.summary(tmp_path, CAPI)
    no = rules.constant_lines(CAPI)["VIDATTN_D256_O_IN_V_KV_MAX"][0]
    # D256: 1K and 8K won, 32K 9/16 a tie -> 16384
    assert f"csrc/capi.cu:{no}" in text and "#define VIDATTN_D256_O_IN_V_KV_MAX 16384" in text
    assert "VIDATTN_D192" not in text.split("decision:")[1].split("\n")[0]
    assert "D=128 threshold 4096 -> 2048 (down" in text and "D=64 threshold 2048 -> 2048 (none" in text
    assert "static-imbalance rule: 1100" in text
    causal_edits = text.split("static-imbalance rule: 1100")[1].split("\n")[1]
    where = rules.constant_lines(CAPI, rules.CAUSAL_CONSTANTS)
    assert f"csrc/capi.cu:{where['VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D128'][0]} " in causal_edits
    assert "#define VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D128 2048" in causal_edits
    assert "#define VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX 1100" in causal_edits and "_D64" not in causal_edits
    assert "wide: a 5.80 us, b 1.800 us/block" in text and "12x11/16x8 x1.031" in text
    # a part that did not run is said, not skipped
    (tmp_path / "causal.json").unlink()
    assert "causal: no causal.json" in ab.summary(tmp_path, CAPI)


def test_block_us_32k():
    row = {"shape": "D256 32K", "b": 1, "h": 8, "s": 32768, "spans": {"ov": [[11.5, 11.5]]}}
    got = ab.block_us_32k({"rows": [row]}, "ov")
    assert got == pytest.approx(11.5e3 / 16 / 409.6)


def test_dry_run_and_arguments():
    env = {"PYTHONPATH": str(ROOT), "VIDATTN_LIBRARY": "/nonexistent", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "dev/probes/envelope_ab.py", "--dry-run"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for part in ("ov:", "causal:", "d256:", "constants now: VIDATTN_D192_NARROW_KV_MAX"):
        assert part in out.stdout
    total = float(re.search(r"total ~(\d+) s", out.stdout).group(1))
    assert total + 3 * 15 <= 200  # the imports of three parts on top
    with pytest.raises(SystemExit):
        ab.parse_args(["--rounds", "5"])
    args = ab.parse_args(["--part", "causal"])
    assert args.parts == ("causal",) and args.causal_rounds >= rules.MIN_ROUNDS
    assert rules.min_wins(ab.parse_args([]).rounds) is not None


def test_shell_wrapper_budget():
    sh = (ROOT / "dev/probes/envelope_ab.sh").read_text()
    assert subprocess.run(["bash", "-n", "dev/probes/envelope_ab.sh"], cwd=ROOT).returncode == 0
    limits = [int(x) for x in re.findall(r"^\s*(?:if\s+)?timeout (\d+) ", sh, re.M)]
    limits += [int(x) for x in re.findall(r"^part \w+ (\d+)", sh, re.M)]
    assert len(limits) == 6 and sum(limits) <= 200, limits
    # the part timeouts leave room over the plan's estimate plus the imports
    args = ab.parse_args([])
    pl = ab.plan(args)
    for part, t in re.findall(r"^part (\w+) (\d+)", sh, re.M):
        assert pl[part]["est_s"] + 15 <= int(t), (part, pl[part]["est_s"], t)
    assert math.isfinite(sum(p["est_s"] for p in pl.values()))


# ---------------------------------------------------------------------------------------------------------------
# The device parts' code run on the CPU with fakes for what needs a GPU (events, graphs, the kernel library): tiny
# shapes, SDPA standing in for every side. It checks the parts run end to end, write their JSON in the shape the
# summary reads, check what each side ran, and decide; not any timing.


class _FakeSpan:
    def __init__(self, *a, **k):
        import time
        self.clock = time.perf_counter

    def lead(self):
        pass

    def start(self):
        self.t0 = self.clock()

    def stop(self):
        return (self.clock() - self.t0) * 1e3 + 1e-6


class _FakeLib:
    """The causal entry points causal_sched_ab.Policy and ran_as call, with the routing they imply."""

    def __init__(self):
        self.min_sq, self.grouping, self.last = -1, -1, 0

    def vidattn_sm90_set_causal_dynamic_min_sq(self, n):
        self.min_sq = n
        return 0

    def vidattn_sm90_set_causal_grouping(self, g):
        self.grouping = g
        return 0

    def vidattn_sm90_causal_dynamic_min_sq_for(self, d):
        return 2048 if d <= 64 else 4096

    def vidattn_sm90_causal_grouping(self):
        return 1

    def vidattn_sm90_last_causal_dynamic(self):
        return self.last

    def vidattn_sm90_last_causal_first_group(self):
        return 0


@pytest.fixture
def cpu_parts(monkeypatch):
    import contextlib
    import types

    import torch
    import torch.nn.functional as F

    import vidattn
    from vidattn import _ext

    lib = _FakeLib()
    state = {}

    def attention(q, k, v, causal=False, layout="bshd", **kw):
        state["shape"] = (q.shape[1], k.shape[1], q.shape[3])
        if causal:  # what the library's routing would have run: dynamic with a workspace at min_sq 0
            lib.last = int(_ext.workspace(lib, q.device) is not None and lib.min_sq == 0)
        o = F.scaled_dot_product_attention(*(t.transpose(1, 2).float() for t in (q, k, v)), is_causal=bool(causal))
        return o.transpose(1, 2).to(q.dtype)

    def last_block_n():
        sq, skv, d = state["shape"]
        return {192: 96 if skv <= 64 else 112, 256: 80}.get(d, 128)

    monkeypatch.setattr(vidattn, "attention", attention)
    monkeypatch.setattr(_ext, "load", lambda: lib)
    monkeypatch.setattr(_ext, "workspace", lambda lib_, dev: torch.empty(16, dtype=torch.uint8))
    monkeypatch.setattr(_ext, "last_block_n", last_block_n)
    cuda = types.SimpleNamespace(
        synchronize=lambda: None, _sleep=lambda n: None, empty_cache=lambda: None,
        get_device_properties=lambda i: types.SimpleNamespace(L2_cache_size=4096, multi_processor_count=132),
        get_device_name=lambda: "fake", Stream=lambda: types.SimpleNamespace(wait_stream=lambda s: None),
        current_stream=lambda: types.SimpleNamespace(wait_stream=lambda s: None),
        stream=lambda s: contextlib.nullcontext(), CUDAGraph=lambda: types.SimpleNamespace(replay=lambda: None),
        graph=lambda g: contextlib.nullcontext(), is_available=lambda: True,
        get_device_capability=lambda *a: (9, 0))
    monkeypatch.setattr(torch, "cuda", cuda)

    real_load = ab._load

    def load(name):
        mod = real_load(name)
        if name == "hd_variants_ab":
            mod.CudaSpan = _FakeSpan
            mod.backend_context = lambda backend: contextlib.nullcontext()
            mod.last_o_path = lambda: None
        return mod
    monkeypatch.setattr(ab, "_load", load)
    monkeypatch.setattr(ab, "DEVICE", "cpu")
    monkeypatch.setattr(ab, "OV_SHAPES", [("D192 1K", 1, 2, 64, 192), ("D256 32K", 1, 2, 96, 256)])
    monkeypatch.setattr(ab, "CAUSAL_SHAPES", [(1, 2, 64, 64), (1, 2, 96, 128)])
    monkeypatch.setattr(ab, "IMBALANCE_SHAPES", [(1, 3, 64, 128)])
    monkeypatch.setattr(ab, "D256_POINTS", [("16x8 1K", 1, 2, 32, 32), ("16x8 2K", 1, 2, 32, 64),
                                            ("12x11 1K", 1, 3, 32, 32)])
    return lib


def test_parts_run_on_cpu_with_fakes(cpu_parts, tmp_path):
    args = ab.parse_args(["--out", str(tmp_path), "--rounds", "8", "--causal-rounds", "8", "--d256-rounds", "2",
                          "--target-ms", "0.5", "--causal-target-ms", "0.5", "--preheat-ms", "1"])
    ov = ab.run_ov(args)
    assert [r["shape"] for r in ov["rows"]] == ["D192 1K", "D256 32K"]
    r192, r256 = ov["rows"]
    assert (r192["routed"], r192["base"], r256["base"]) == ("narrow", "narrow", "wide")
    assert r192["sides"][:4] == ["narrow", "ov", "wide", "cudnn"] and r256["sides"][:3] == ["wide", "ov", "cudnn"]
    assert ("fa3" in r192["sides"]) == (ov["fa3"] == "available")
    for r in ov["rows"]:
        assert not r["errors"], r["errors"]
        assert all(len(rr) == 2 for x in r["spans"] for rr in r["spans"][x]) and len(r["spans"]["ov"]) == 8
        assert r["ov_vs_base"]["rounds"] == 8 and r["ov_vs_base"]["verdict"] in ("win", "loss", "tie")
    causal = ab.run_causal(args)
    assert len(causal["rows"]) == 3
    for r in causal["rows"]:
        assert "error" not in r, r.get("error")
        assert r["ran_ok"] and r["equal"] and len(r["graph_ratios"]) == 8 and len(r["eager_ratios"]) == 8
    d256 = ab.run_d256(args)
    assert [r["shape"] for r in d256["rows"]] == ["16x8 1K", "16x8 2K", "12x11 1K"]
    assert all(not r["errors"] and set(r["round_us"]) >= {"wide", "ov"} for r in d256["rows"])
    for name in ("ov", "causal", "d256"):
        assert json.loads((tmp_path / f"{name}.json").read_text())["rows"]
    text = ab.summary(tmp_path, CAPI)
    assert "O-in-V (sign test" in text and "D=128 threshold 4096 ->" in text and "wide: a " in text
    print(text)


def _fake_hd_narrow(monkeypatch, **state):
    """_ext.hd_narrow replaced by a context that records the setting in the returned state (0 again on exit)."""
    import contextlib

    from vidattn import _ext
    state["narrow"] = 0

    @contextlib.contextmanager
    def hd_narrow(n, lib=None):
        state["narrow"] = n
        try:
            yield
        finally:
            state["narrow"] = 0
    monkeypatch.setattr(_ext, "hd_narrow", hd_narrow)
    return state


def test_ov_part_with_the_register_variant_on_cpu(cpu_parts, tmp_path, monkeypatch):
    """--with-variant: the D=256 rows time "ovr" (VIDATTN_HD_NARROW=4) as one more side and judge it against "ov";
    a library that runs something else there (O path not 3) fails the side instead of timing it."""
    state = _fake_hd_narrow(monkeypatch, o_path=3)
    fixture_load = ab._load

    def load(name):
        mod = fixture_load(name)
        if name == "hd_variants_ab":
            mod.last_o_path = lambda: state["o_path"] if state["narrow"] == 4 else None
        return mod
    monkeypatch.setattr(ab, "_load", load)
    args = ab.parse_args(["--part", "ov", "--out", str(tmp_path), "--rounds", "8", "--target-ms", "0.5",
                          "--preheat-ms", "1", "--with-variant"])
    ov = ab.run_ov(args)
    r192, r256 = ov["rows"]
    assert "ovr" not in r192["sides"] and r256["sides"][:4] == ["wide", "ov", "ovr", "cudnn"]
    assert not r256["errors"], r256["errors"]
    assert len(r256["spans"]["ovr"]) == 8 and r256["ovr_vs_ov"]["rounds"] == 8
    assert "ovr_over_cudnn" in r256
    assert "ovr (O from registers)" in ab.summary(tmp_path, CAPI)
    state["o_path"] = 2  # a library from before the variant: setting 4 refused or ran the O-in-V build
    ov = ab.run_ov(args)
    assert "ovr" in ov["rows"][1]["errors"] and "ovr_vs_ov" not in ov["rows"][1]
    plain = ab.parse_args(["--part", "ov", "--shapes", "D256 32K", "--with-variant"])
    assert ab.plan(plain)["ov"]["shapes"] == ["D256 32K"]  # the plan counts only the shapes kept


def test_ov_part_with_the_q_halves_variant_on_cpu(cpu_parts, tmp_path, monkeypatch):
    """--with-variant --variant-setting 5: the D=256 rows time "ovq" (VIDATTN_HD_NARROW=5, Q loaded per warpgroup)
    and judge it against "ov"; it shares the O-in-V build's O path, so a library that ran anything but a 64-row Q box
    under the setting (one from before the variant runs the O-in-V build) fails the side instead of timing it."""
    state = _fake_hd_narrow(monkeypatch, rows=64)
    monkeypatch.setattr(ab, "last_q_box_rows", lambda: state["rows"] if state["narrow"] == 5 else 128)
    fixture_load = ab._load

    def load(name):
        mod = fixture_load(name)
        if name == "hd_variants_ab":
            mod.last_o_path = lambda: 2 if state["narrow"] == 5 else None
        return mod
    monkeypatch.setattr(ab, "_load", load)
    args = ab.parse_args(["--part", "ov", "--out", str(tmp_path), "--rounds", "8", "--target-ms", "0.5",
                          "--preheat-ms", "1", "--with-variant", "--variant-setting", "5"])
    ov = ab.run_ov(args)
    r192, r256 = ov["rows"]
    assert "ovq" not in r192["sides"] and r256["sides"][:4] == ["wide", "ov", "ovq", "cudnn"]
    assert not r256["errors"], r256["errors"]
    assert len(r256["spans"]["ovq"]) == 8 and r256["ovq_vs_ov"]["rounds"] == 8 and "ovr_vs_ov" not in r256
    assert "ovq_over_cudnn" in r256 and "ovq_over_fa3" not in r256  # no FA3 on the CPU
    assert "ovq (Q per warpgroup)" in ab.summary(tmp_path, CAPI)
    state["rows"] = 128  # a library from before the variant: setting 5 ran the O-in-V build
    ov = ab.run_ov(args)
    assert "Q box of 128 rows" in ov["rows"][1]["errors"]["ovq"] and "ovq_vs_ov" not in ov["rows"][1]
    assert ab.variant_ran(4, 3, None) is None and ab.variant_ran(5, 2, 64) is None
    assert "O path 2" in ab.variant_ran(4, 2, 128) and "O path 3" in ab.variant_ran(5, 3, 64)
    with pytest.raises(SystemExit):
        ab.parse_args(["--part", "ov", "--with-variant", "--variant-setting", "3"])


def test_ov_part_with_the_narrowed_routed_variant_on_cpu(cpu_parts, tmp_path, monkeypatch):
    """--with-variant --variant-setting 7: the D=256 rows time "ovn" (VIDATTN_HD_NARROW=7, the routed read-late build
    with every partial block narrowed) and "ovl" (setting 6, that build as routed) in the same rounds, and judge ovn
    against ovl (ovl against ov as well); both report O path 4, so a library that refuses setting 7 (from before it)
    fails the ovn side and leaves no ovn verdict."""
    state = _fake_hd_narrow(monkeypatch)
    monkeypatch.setattr(ab, "last_q_box_rows", lambda: 128)
    fixture_load = ab._load

    def load(name):
        mod = fixture_load(name)
        if name == "hd_variants_ab":
            mod.last_o_path = lambda: 4 if state["narrow"] in (6, 7) else None
        return mod
    monkeypatch.setattr(ab, "_load", load)
    args = ab.parse_args(["--part", "ov", "--out", str(tmp_path), "--rounds", "8", "--target-ms", "0.5",
                          "--preheat-ms", "1", "--with-variant", "--variant-setting", "7"])
    ov = ab.run_ov(args)
    r192, r256 = ov["rows"]
    assert "ovn" not in r192["sides"] and "ovl" not in r192["sides"]
    assert r256["sides"][:5] == ["wide", "ov", "ovl", "ovn", "cudnn"]
    assert not r256["errors"], r256["errors"]
    assert len(r256["spans"]["ovn"]) == 8 and r256["ovn_vs_ovl"]["rounds"] == 8 and r256["ovl_vs_ov"]["rounds"] == 8
    assert "ovn_vs_ov" not in r256 and "ovn_over_cudnn" in r256 and "ovl_over_cudnn" in r256
    text = ab.summary(tmp_path, CAPI)
    assert "ovn (every partial block narrowed)" in text and "ovn vs ovl:" in text and "ovl vs ov:" in text
    assert ab.variant_ran(7, 4, 128) is None and "O path 2" in ab.variant_ran(7, 2, 128)

    import contextlib

    from vidattn import _ext

    @contextlib.contextmanager
    def older(n, lib=None):  # a library from before setting 7 refuses it (vidattn_sm90_set_hd_narrow: 0..6)
        if n > 6:
            raise ValueError("VIDATTN_HD_NARROW must be ... got 7")
        state["narrow"] = n
        try:
            yield
        finally:
            state["narrow"] = 0
    monkeypatch.setattr(_ext, "hd_narrow", older)
    ov = ab.run_ov(args)
    assert "ovn" in ov["rows"][1]["errors"] and "ovn_vs_ovl" not in ov["rows"][1]
    assert ov["rows"][1]["ovl_vs_ov"]["rounds"] == 8
    assert ab.plan(args)["ov"]["est_s"] > ab.plan(ab.parse_args(["--part", "ov", "--rounds", "8", "--target-ms",
                                                                   "0.5", "--preheat-ms", "1", "--with-variant",
                                                                   "--variant-setting", "6"]))["ov"]["est_s"]


def test_ov_part_times_the_routed_read_late_build_as_itself_on_cpu(cpu_parts, tmp_path, monkeypatch):
    """A plain D=256 call that reports O path 4 (the read-late build, routed since the seventh sitting) makes "ovl"
    the routed side: it is timed under setting 6 (the same kernel) and the routed columns are its own, not setting
    3's plain O-in-V build, which stays the "ov" side (call D of the seventh sitting printed ov's figures as routed)."""
    import contextlib

    from vidattn import _ext
    state = _fake_hd_narrow(monkeypatch)
    fixture_load = ab._load

    def load(name):
        mod = fixture_load(name)
        if name == "hd_variants_ab":
            mod.last_o_path = lambda: {0: 4, 6: 4, 3: 2, 2: 1}.get(state["narrow"])
            # the library's settings behind the sides the fixture runs plainly: wide 2, ov 3
            mod.backend_context = lambda backend: _ext.hd_narrow({"wide": 2, "ov": 3}[backend]) \
                if backend in ("wide", "ov") else contextlib.nullcontext()
        return mod
    monkeypatch.setattr(ab, "_load", load)
    monkeypatch.setattr(ab, "last_q_box_rows", lambda: 128)
    args = ab.parse_args(["--part", "ov", "--out", str(tmp_path), "--rounds", "8", "--target-ms", "0.5",
                          "--preheat-ms", "1", "--shapes", "D256 32K"])
    (row,) = ab.run_ov(args)["rows"]
    assert row["routed"] == "ovl" and row["base"] == "wide"
    assert row["sides"][:4] == ["wide", "ov", "ovl", "cudnn"], row["sides"]
    assert not row["errors"], row["errors"]
    assert row["ovl_vs_ov"]["rounds"] == 8 and "ovl_over_cudnn" in row and "ov_over_cudnn" in row
    table = ab.summary(tmp_path, CAPI)
    line = next(x for x in table.splitlines() if x.startswith("  D256 32K"))
    assert line.split("|")[1].strip() == "ovl" and line.split("|")[2].strip() == f"{row['tflops']['ovl']:.0f}"
