"""CPU tests of the anchor harness (scripts/anchor_impls.py, scripts/bench_anchors.py): importing without the
anchors, the shape tables, the FLOP count, the budget, the e4m3 prequantization, and a whole run on CPU with fake
implementations, down to its JSON."""
from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import anchor_impls  # noqa: E402
import bench_anchors as ba  # noqa: E402


@pytest.fixture
def no_anchors(monkeypatch, tmp_path):
    """anchor_impls with an empty anchors folder and its import caches cleared (and restored after)."""
    monkeypatch.setenv("VIDATTN_ANCHORS_DIR", str(tmp_path / "none"))
    for name in ("flash_attn_interface", "sageattention"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules makes `import name` fail
    monkeypatch.setattr(anchor_impls, "_loaded", {})
    monkeypatch.setattr(anchor_impls, "_errors", {})
    return anchor_impls


def test_import_in_a_fresh_process_never_fails():
    code = ("import sys; sys.path.insert(0, 'scripts'); import anchor_impls, bench_anchors; "
            "print(sorted(anchor_impls.available()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"VIDATTN_ANCHORS_DIR": "/nonexistent", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "['fa3', 'fa3_fp8', 'sage2']" in out.stdout


def test_available_gives_a_reason_per_missing_anchor(no_anchors):
    av = no_anchors.available()
    assert set(av) == {"fa3", "fa3_fp8", "sage2"}
    for name, reason in av.items():
        assert reason and "not installed" in reason and "device_anchors.sh" in reason, (name, reason)


def test_calling_a_missing_anchor_raises_with_the_reason(no_anchors):
    q = torch.zeros(1, 4, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="anchor fa3 unavailable"):
        no_anchors.fa3(q, q, q)
    with pytest.raises(RuntimeError, match="anchor sage2 unavailable"):
        no_anchors.sage2(q, q, q)


def test_site_folder_goes_on_the_path(monkeypatch, tmp_path):
    (tmp_path / "site").mkdir()
    monkeypatch.setenv("VIDATTN_ANCHORS_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    anchor_impls._ensure_path()
    assert sys.path[0] == str(tmp_path / "site")


def test_versions_reads_the_packed_description(monkeypatch, tmp_path):
    (tmp_path / "anchors.json").write_text(json.dumps({"fa3": {"commit": "abc"}}))
    monkeypatch.setenv("VIDATTN_ANCHORS_DIR", str(tmp_path))
    assert anchor_impls.versions()["fa3"] == {"commit": "abc"}
    monkeypatch.setenv("VIDATTN_ANCHORS_DIR", str(tmp_path / "none"))
    assert "fa3" not in anchor_impls.versions()


def test_supports_and_fa3_build_dims(monkeypatch, tmp_path):
    monkeypatch.setenv("VIDATTN_ANCHORS_DIR", str(tmp_path))
    assert anchor_impls.supports("fa3", 112, 8, 8) is None
    assert anchor_impls.supports("fa3_fp8", 256, 32, 8) is None
    assert "multiple of 8" in anchor_impls.supports("fa3", 100, 8, 8)
    assert "256" in anchor_impls.supports("fa3", 264, 8, 8)
    assert "D <= 128" in anchor_impls.supports("sage2", 192, 8, 8)
    assert anchor_impls.supports("sage2", 96, 8, 8) is None
    assert "multiple" in anchor_impls.supports("fa3", 128, 12, 8)
    assert [anchor_impls.fa3_build_dim(d) for d in (64, 72, 80, 96, 112, 128, 160, 256)] == \
        [64, 96, 96, 96, 128, 128, 192, 256]
    with pytest.raises(ValueError):
        anchor_impls.fa3_build_dim(264)
    with pytest.raises(KeyError):
        anchor_impls.supports("fa2", 64, 1, 1)
    # kernels the packed build lists as not compiled are refused up front, by the build dim they would run on
    (tmp_path / "anchors.json").write_text(json.dumps({"fa3": {"kernels_missing": ["96_e4m3", "256_bf16"]}}))
    assert "hdim96 e4m3" in anchor_impls.supports("fa3_fp8", 80, 8, 8)
    assert anchor_impls.supports("fa3", 80, 8, 8) is None
    assert "hdim256 bf16" in anchor_impls.supports("fa3", 200, 8, 8)
    assert anchor_impls.supports("fa3_fp8", 200, 8, 8) is None


def test_prequantize_per_batch_and_kv_head():
    g = torch.Generator().manual_seed(0)
    b, s, h, h_kv, d = 2, 16, 4, 2, 32
    q = torch.randn(b, s, h, d, generator=g).bfloat16()
    k = torch.randn(b, s, h_kv, d, generator=g).bfloat16()
    v = torch.randn(b, s, h_kv, d, generator=g).bfloat16()
    q[1, :, 3] *= 10  # one loud query head: it sets the scale of its (batch, kv head) group only
    p = anchor_impls.prequantize(q, k, v)
    assert p.q.dtype == p.k.dtype == p.v.dtype == torch.float8_e4m3fn
    assert p.q.shape == q.shape and p.k.shape == k.shape
    for desc in (p.q_descale, p.k_descale, p.v_descale):
        assert desc.shape == (b, h_kv) and desc.dtype == torch.float32
    assert p.q_descale[1, 1] > 5 * p.q_descale[1, 0]
    assert math.isclose(float(p.q_descale[0, 0]), float(q[0, :, :2].float().abs().max()) / 448, rel_tol=1e-6)
    # dequantized back within e4m3's relative step (2^-3) of each value's magnitude, plus the subnormal floor
    g_of_head = torch.arange(h) // (h // h_kv)
    deq = p.q.float() * p.q_descale[:, None, g_of_head, None]
    assert ((deq - q.float()).abs() <= q.float().abs() / 8 + p.q_descale[:, None, g_of_head, None]).all()
    assert p.k.float().abs().max() <= 448


def test_group_tables():
    fp8 = {s.name: s for s in ba.GROUPS["fp8"]}
    assert [(s.b, s.h, s.sq, s.skv, s.d) for s in fp8.values()] == [
        (4, 16, 8192, 8192, 128), (1, 12, 32760, 32760, 128), (1, 12, 32760, 512, 128),
        (1, 48, 17776, 17776, 64), (1, 32, 24576, 24576, 64)]
    hd = ba.GROUPS["headdims"]
    for d in (96, 192, 256):
        assert sorted(s.sq for s in hd if s.d == d) == ([1024, 8192, 32768, 79200] if d == 96 else [1024, 8192, 32768])
    assert any((s.b, s.h, s.sq, s.d) == (1, 24, 79200, 96) for s in hd)
    assert {s.d for s in hd} >= {72, 80, 96, 112, 192, 256}
    for s in hd:  # the card is filled: >= 16K query tokens per head group across the batch, H*D about 2048
        assert s.b * s.sq >= 16384 and (s.h * s.d >= 1900 or s.name.startswith("Allegro"))
    gqa = ba.GROUPS["gqa"]
    assert (gqa[0].h, gqa[0].kv_heads, gqa[0].sq, gqa[0].d) == (32, 8, 32768, 128)
    assert gqa[1].kv_heads == gqa[1].h == 32
    causal = ba.GROUPS["causal"]
    assert all(s.causal and s.sq == s.skv for s in causal)
    assert {(s.sq, s.d) for s in causal} == {(n, d) for n in (8192, 32768) for d in (64, 128, 192, 256)}
    assert not any(s.causal for g in ("fp8", "headdims", "gqa") for s in ba.GROUPS[g])


def test_select_groups():
    everything = ba.select_groups(["all"])
    assert len(everything) == sum(len(v) for v in ba.GROUPS.values())
    assert len({s.name for s in everything}) == len(everything)
    assert ba.select_groups(["causal", "fp8"]) == ba.GROUPS["fp8"] + ba.GROUPS["causal"]
    with pytest.raises(ValueError, match="unknown group"):
        ba.select_groups(["fp9"])


def test_flops_and_tflops():
    s = ba.BenchShape("x", 2, 4, 1024, 512, 64)
    assert s.flops == 4 * 2 * 4 * 1024 * 512 * 64
    c = ba.BenchShape("c", 2, 4, 1024, 1024, 64, causal=True)
    assert c.flops == 4 * 2 * 4 * 1024 * 1024 * 64 // 2
    g = ba.BenchShape("g", 1, 32, 100, 100, 128, h_kv=8)
    assert g.flops == 4 * 32 * 100 * 100 * 128 and g.kv_heads == 8
    assert g.bytes_bf16() == 2 * 128 * (2 * 32 * 100 + 2 * 8 * 100)
    assert ba.tflops(10**12, 1000.0) == pytest.approx(1.0)
    assert ba.tflops(10**12, None) is None and ba.tflops(10**12, 0.0) is None


class FakeClock:
    def __init__(self, step=0.0):
        self.t = 0.0
        self.step = step

    def __call__(self):
        self.t += self.step
        return self.t


def test_budget():
    clock = FakeClock()
    b = ba.Budget(10.0, clock)
    assert b.allows(9.0, "a") and b.stopped is None
    clock.t = 6.0
    assert b.left() == pytest.approx(4.0)
    assert not b.allows(5.0, "shape X")
    assert "shape X" in b.stopped and "10 s" in b.stopped
    first = b.stopped
    assert not b.allows(50.0, "shape Y") and b.stopped == first  # the first refusal is the one recorded
    unlimited = ba.Budget(None, clock)
    clock.t = 1e9
    assert unlimited.allows(1e12, "anything") and unlimited.left() == math.inf


def test_n_rotating_sets():
    small = ba.BenchShape("s", 1, 1, 128, 128, 64)
    big = ba.BenchShape("b", 1, 12, 32760, 32760, 128)
    assert ba.n_rotating_sets(small, 50 * 2**20) == ba.MAX_ROTATING_SETS
    assert ba.n_rotating_sets(big, 50 * 2**20) == 1


def test_reference_and_rel_l2():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 5, 4, 8, generator=g)
    k = torch.randn(1, 7, 2, 8, generator=g)
    v = torch.randn(1, 7, 2, 8, generator=g)
    ref = ba.reference_fp64(q, k, v, 0.3)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double().transpose(1, 2), k.double().transpose(1, 2), v.double().transpose(1, 2), scale=0.3,
        enable_gqa=True).transpose(1, 2)
    assert ref.dtype == torch.float64 and torch.allclose(ref, want, atol=1e-12)
    assert ba.rel_l2(ref, ref) == 0.0
    assert ba.rel_l2(ref * 1.01, ref) == pytest.approx(0.01)
    bad = ref.clone()
    bad[0, 0, 0, 0] = float("nan")
    assert ba.rel_l2(bad, ref) == math.inf
    assert ba.rel_l2(ref, ref, chunk=2) == 0.0


def test_accuracy_inputs():
    gen = torch.Generator().manual_seed(0)
    q, k, v, sc = ba.accuracy_inputs("plain", 64, gen, "cpu")
    assert q.shape == (1, 4096, 8, 64) and sc == pytest.approx(1 / 8)
    _, k_off, _, _ = ba.accuracy_inputs("key offset", 64, gen, "cpu")
    # one offset shared by every key and head: the per-channel mean moves far from zero
    assert k_off.float().mean(dim=(0, 1, 2)).abs().max() > 3
    _, _, _, sharp = ba.accuracy_inputs("sharpened", 128, gen, "cpu")
    assert sharp == pytest.approx(4 / math.sqrt(128))
    with pytest.raises(ValueError):
        ba.accuracy_inputs("dull", 64, gen, "cpu")


def _sdpa(q, k, v, causal=False, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(), is_causal=causal,
        scale=scale, enable_gqa=k.shape[2] != q.shape[2]).transpose(1, 2).to(q.dtype)


def _fake_impls():
    def exact(shape, sets):
        return ba._rotating(sets, lambda q, k, v: _sdpa(q, k, v, shape.causal))

    def noisy(shape, sets):
        return ba._rotating(sets, lambda q, k, v: _sdpa(q, k, v, shape.causal) * 1.5)

    def never(shape, sets):
        raise ba.Skip("cannot take this shape")

    def broken(shape, sets):
        raise RuntimeError("boom")

    def noted(shape, sets):
        fn = ba._rotating(sets, lambda q, k, v: _sdpa(q, k, v, shape.causal))
        fn.note = "ran the exact path"
        return fn
    return [ba.Impl("cudnn", exact, ba.CHECK_EXACT), ba.Impl("fa3", noisy, ba.CHECK_EXACT),
            ba.Impl("sage2", never, ba.CHECK_8BIT), ba.Impl("fa3_fp8", broken, ba.CHECK_8BIT),
            ba.Impl("vidattn", noted, ba.CHECK_EXACT)]


class FakeTimer:
    method = "fake"

    def __init__(self):
        self.calls = 0

    def __call__(self, fn):
        fn()
        self.calls += 1
        return 2.0 if self.calls % 2 else 1.0


def _args(tmp_path, extra=()):
    args = ba.parse_args(["--group", "causal", "--rounds", "2", "--out", str(tmp_path / "a.json"), *extra])
    args.shapes = [ba.BenchShape("tiny", 1, 4, 64, 64, 16, h_kv=2, group="t"),
                   ba.BenchShape("tiny causal", 1, 2, 32, 32, 16, causal=True, group="t")]
    return args


def _accuracy_calls():
    return {"cudnn": lambda q, k, v, s: _sdpa(q, k, v, scale=s),
            "fa3": lambda q, k, v, s: _sdpa(q, k, v, scale=s) * 1.1}


def test_tiny_cpu_run_and_json_schema(tmp_path, monkeypatch):
    monkeypatch.setattr(ba, "ACCURACY_SHAPE", (1, 2, 64))
    args = _args(tmp_path)
    doc = ba.run(args, impls=_fake_impls(), timer=FakeTimer(), l2=1 << 20, device="cpu",
                 accuracy=_accuracy_calls(), meta={"gpu": "cpu", "commit": "test"})
    on_disk = json.loads((tmp_path / "a.json").read_text())
    assert set(on_disk) >= {"meta", "config", "accuracy", "results", "stopped_early", "elapsed_s"}
    assert on_disk["meta"] == {"gpu": "cpu", "commit": "test"}
    assert on_disk["stopped_early"] is None
    assert list(on_disk["config"]["impls"]) == ["cudnn", "fa3", "sage2", "fa3_fp8", "vidattn"]
    assert len(on_disk["results"]) == 2
    r = on_disk["results"][0]
    assert (r["h"], r["h_kv"], r["flops"]) == (4, 2, 4 * 4 * 64 * 64 * 16)
    cud, fa3, sage, fp8, vid = (r["impls"][n] for n in ("cudnn", "fa3", "sage2", "fa3_fp8", "vidattn"))
    assert cud["check_ref"] and cud["check_passed"] and cud["check_rel_l2"] == 0.0
    assert fa3["check_passed"] is False and fa3["check_rel_l2"] == pytest.approx(0.5, rel=1e-2)
    assert sage == {"skipped": "cannot take this shape"}
    assert "boom" in fp8["error"]
    assert vid["note"] == "ran the exact path" and vid["check_passed"]
    for i in (cud, fa3, vid):
        assert len(i["ms_rounds"]) == 2 and i["ms"] == pytest.approx(1.5)
        assert i["tflops"] == pytest.approx(r["flops"] / 1.5e-3 / 1e12)
    assert r["ratios"]["vidattn/fa3"] == pytest.approx(1.0) and "fa3_fp8/fa3" not in r["ratios"]
    assert on_disk["results"][1]["causal"] is True
    assert on_disk["results"][1]["flops"] == 4 * 2 * 32 * 32 * 16 // 2
    # the fidelity table: every case at both head dims, rel L2 per implementation
    acc = on_disk["accuracy"]
    assert [(a["d"], a["case"]) for a in acc] == [(d, c) for d in ba.ACCURACY_DIMS for c in ba.ACCURACY_CASES]
    for a in acc:
        assert a["rel_l2"]["cudnn"] < 1e-2 and a["rel_l2"]["fa3"] == pytest.approx(0.1, rel=0.05)
    table = ba.results_table(doc["results"], list(doc["config"]["impls"]))
    assert "FA3 bf16" in table and "!" in table and "†" in table and "| tiny |" in table
    assert "plain" in ba.accuracy_table(doc["accuracy"], ["cudnn", "fa3"])


def test_budget_stops_cleanly_and_keeps_what_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(ba, "ACCURACY_SHAPE", (1, 2, 64))
    args = _args(tmp_path, ["--budget-s", "30", "--no-accuracy"])
    args.shapes = args.shapes * 50
    doc = ba.run(args, impls=_fake_impls(), timer=FakeTimer(), l2=1 << 20, device="cpu", accuracy={},
                 meta={}, clock=FakeClock(step=0.5))
    on_disk = json.loads((tmp_path / "a.json").read_text())
    assert on_disk["stopped_early"] and on_disk["stopped_early"].startswith("budget:")
    assert 0 < len(on_disk["results"]) < 100
    assert on_disk["accuracy"] == []
    assert doc["elapsed_s"] <= 31


def test_dry_run_lists_every_group(capsys):
    assert ba.main(["--group", "all", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for s in ba.select_groups(["all"]):
        assert f"| {s.name} |" in out
    assert "Allegro D96" in out and "GQA 32q/8kv 32K" in out


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        ba.parse_args(["--impls", "fa2"])
    with pytest.raises(SystemExit):
        ba.parse_args(["--group", "everything"])


def test_main_without_cuda_says_so(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ba.main(["--group", "fp8"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_reload_keeps_the_interface():
    mod = importlib.reload(anchor_impls)
    for name in ("available", "fa3", "fa3_fp8", "sage2", "prequantize", "versions", "supports"):
        assert callable(getattr(mod, name))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fa3", "fa3_fp8", "sage2"])
@pytest.mark.parametrize("causal", [False, True])
def test_anchor_against_fp64_on_gpu(name, causal):
    """On the GPU machine after `source /tmp/anchors/env.sh`: each anchor's output against fp64 on a small grouped
    shape (bf16 bound for FA3, the 8-bit methods' for the others). Skipped where the anchor is not installed."""
    reason = anchor_impls.available()[name]
    if reason:
        pytest.skip(reason)
    gen = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(2, 1000, 8, 128, dtype=torch.bfloat16, device="cuda", generator=gen)
    k = torch.randn(2, 1000, 2, 128, dtype=torch.bfloat16, device="cuda", generator=gen)
    v = torch.randn(2, 1000, 2, 128, dtype=torch.bfloat16, device="cuda", generator=gen)
    out = anchor_impls.IMPLS[name](q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == torch.bfloat16
    qd, kd, vd = (x.double().transpose(1, 2).repeat_interleave(8 // x.shape[2], dim=1) for x in (q, k, v))
    s = qd @ kd.transpose(-1, -2) / math.sqrt(128)
    if causal:
        s = s.masked_fill(torch.ones(1000, 1000, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    ref = (s.softmax(-1) @ vd).transpose(1, 2)
    assert ba.rel_l2(out, ref) < (1e-2 if name == "fa3" else 8e-2)


def test_run_times_with_the_shared_timer_and_l2_size(tmp_path, monkeypatch):
    """Without an injected timer, run() takes bench/timing.py's Timer (--quick windows) and the device's L2 size."""
    made = []

    class SharedTimer(FakeTimer):
        method = "shared"

        def __init__(self, quick):
            super().__init__()
            made.append(quick)

    monkeypatch.setattr(ba, "Timer", SharedTimer)
    monkeypatch.setattr(ba, "l2_bytes", lambda: 1 << 20)
    args = _args(tmp_path, ["--quick", "--no-accuracy"])
    doc = ba.run(args, impls=_fake_impls(), device="cpu", accuracy={}, meta={})
    assert made == [True] and doc["config"]["timing"] == "shared"
    assert all(i["ms"] == pytest.approx(1.5) for i in doc["results"][0]["impls"].values() if "ms" in i)


def test_shapes_filter_keeps_named_shapes_in_group_order_and_refuses_unknown_names():
    """--shapes narrows the groups to the named shapes (group order kept); a name not in the groups is an error that
    lists the names it could have been, not an empty run."""
    args = ba.parse_args(["--group", "headdims,gqa", "--shapes", "GQA 32q/8kv 32K", "D256 1K", "MHA 32 heads 32K"])
    assert [s.name for s in args.shapes] == ["D256 1K", "GQA 32q/8kv 32K", "MHA 32 heads 32K"]
    assert ba.parse_args(["--group", "gqa"]).shapes == ba.select_groups(["gqa"])
    with pytest.raises(SystemExit):
        ba.parse_args(["--group", "headdims", "--shapes", "D256 2K"])
    with pytest.raises(SystemExit):
        ba.parse_args(["--group", "fp8", "--shapes", "D256 1K"])  # in another group
