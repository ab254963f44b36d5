"""scripts/fidelity_8bit.py and the --precision paths of scripts/e2e_report.py on the CPU: the metrics against known
values, the attention-path plumbing with a fake SageAttention2, Q/K/V capture, the budget, and tiny end-to-end runs
(their JSON). The kernels themselves cannot run here: on the CPU every vidattn path is SDPA, so a fake outside
implementation that perturbs its output stands in where a difference must show."""
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import fidelity_8bit as fid  # noqa: E402
from _support import cpu_one_thread  # noqa: E402,F401 - an autouse fixture


def fake_sage(noise=0.02, calls=None):
    """SDPA plus a seeded relative perturbation: an 'implementation' whose error is known to be nonzero."""
    def sage2(q, k, v, scale=None):
        if calls is not None:
            calls.append((tuple(q.shape), scale))
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           scale=scale).transpose(1, 2)
        g = torch.Generator().manual_seed(0)
        return o + noise * o.abs().mean() * torch.randn(o.shape, generator=g).to(o.dtype)
    return sage2


# ------------------------------------------------------------------------------------------------ metrics
def test_psnr_known_values():
    ref = np.zeros((2, 8, 8, 3), np.uint8)
    test = ref.copy()
    test[...] = 1  # mse 1 on 0..255
    assert fid.psnr(test, ref) == pytest.approx(20 * math.log10(255), abs=1e-9)
    assert fid.psnr(ref, ref) == float("inf")
    test[0, 0, 0, 0] = 17  # one pixel off by 17, the rest by 1
    n = ref.size
    assert fid.psnr(test, ref) == pytest.approx(10 * math.log10(255 ** 2 / ((n - 1 + 17 ** 2) / n)), abs=1e-9)
    # float frames are rounded as the mp4 writer rounds them
    assert fid.psnr(np.full((1, 4, 4, 3), 1 / 255, np.float32), ref[:1, :4, :4]) == pytest.approx(48.1308, abs=1e-3)
    with pytest.raises(ValueError, match="shapes differ"):
        fid.psnr(ref, ref[:1])


def test_ssim_matches_skimage_gaussian():
    from skimage.metrics import structural_similarity

    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
    b = np.clip(a.astype(np.int16) + rng.integers(-30, 31, a.shape), 0, 255).astype(np.uint8)
    want = structural_similarity(a, b, data_range=255, channel_axis=-1, gaussian_weights=True, sigma=1.5,
                                 use_sample_covariance=False)
    assert fid.ssim(b, a) == pytest.approx(want, abs=1e-9)
    assert 0.2 < want < 0.99  # a case where the number means something
    # a video is the mean over its frames
    v1, v2 = np.stack([a, a]), np.stack([b, a])
    assert fid.ssim(v2, v1) == pytest.approx((want + 1.0) / 2, abs=1e-9)
    assert fid.ssim(a, a) == pytest.approx(1.0, abs=1e-12)


def test_ssim_orders_noise_and_refuses_tiny_frames():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (1, 32, 32, 3)).astype(np.uint8)
    small = np.clip(a + rng.normal(0, 3, a.shape), 0, 255).astype(np.uint8)
    big = np.clip(a + rng.normal(0, 40, a.shape), 0, 255).astype(np.uint8)
    assert 1.0 > fid.ssim(small, a) > fid.ssim(big, a)
    assert fid.ssim(a[:, :5, :5], a[:, :5, :5]) == pytest.approx(1.0)  # window shrinks to 5
    with pytest.raises(ValueError, match="3x3"):
        fid.ssim(a[:, :2, :2], a[:, :2, :2])


def test_rel_l2_cosine_and_fp64_reference():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 37, 3, 16, generator=g) for _ in range(3))
    ref = fid.reference_fp64(q, k, v, chunk_rows=8)
    want = F.scaled_dot_product_attention(*(t.double().transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
    assert torch.allclose(ref, want, atol=1e-12)
    ref2 = fid.reference_fp64(q, k, v, scale=0.3)
    want2 = F.scaled_dot_product_attention(*(t.double().transpose(1, 2) for t in (q, k, v)), scale=0.3)
    assert torch.allclose(ref2, want2.transpose(1, 2), atol=1e-12)
    assert fid.rel_l2(ref * 1.01, ref) == pytest.approx(0.01, rel=1e-9)
    assert fid.cosine(ref * 3, ref) == pytest.approx(1.0, abs=1e-12)
    assert fid.cosine(-ref, ref) == pytest.approx(-1.0, abs=1e-12)


def test_query_rows():
    assert torch.equal(fid.query_rows(10, 0), torch.arange(10))
    assert torch.equal(fid.query_rows(10, 50), torch.arange(10))
    idx = fid.query_rows(1000, 64)
    assert len(idx) == 64 and idx.min() == 0 and idx.max() == 999
    assert torch.equal(idx, torch.unique(idx))


# ----------------------------------------------------------------------------------------- attention paths
def test_impl_route_sends_plain_calls_and_keeps_the_rest_exact():
    calls = []
    route = fid.ImplRoute(fake_sage(calls=calls))
    seen = []

    def original(q, k, v, **kw):
        seen.append(kw)
        return torch.zeros_like(q)

    q = torch.randn(1, 2, 8, 16)  # bhsd: B, H, S, D
    out = route(original, q, q, q, layout="bhsd")
    assert out.shape == q.shape and out.dtype == q.dtype and calls == [((1, 8, 2, 16), None)]  # as BSHD, bf16
    assert route.summary()["fp32_cast_to_bf16"] == 1
    route(original, q, q, q, layout="bhsd", scale=0.5)
    assert calls[-1][1] == 0.5
    route(original, q, q, q, layout="bhsd", causal=True)
    route(original, torch.randn(1, 8, 2, 160), torch.randn(1, 8, 2, 160), torch.randn(1, 8, 2, 160))
    assert len(seen) == 2 and all(kw["precision"] == "exact" for kw in seen)
    s = route.summary()
    assert s["impl_calls"] == 2 and s["exact_calls"] == 2 and s["split_kv_lens"] == 0
    assert set(s["exact_reasons"]) == {"causal mask", "head dim 160 > 128"}


def test_impl_route_passes_grouped_kv_and_says_what_ran():
    """Grouped-query K/V reach SageAttention2 as they are (it reads them in place), and the sdpa route's torch SDPA
    with enable_gqa; an implementation built without that runs them exact under its own reason. The report's
    SageAttention2 line says how many of the model's calls the route ran, and that a route which ran none has the
    exact kernel's (b) and (c) columns."""
    calls = []

    def impl(q, k, v, scale=None):
        calls.append((tuple(q.shape), tuple(k.shape)))
        return fid.sdpa_bshd(q, k, v, scale)

    def original(q, k, v, **kw):
        return torch.zeros_like(q)

    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(1, 6, 8, 16, generator=g), torch.randn(1, 9, 2, 16, generator=g)  # BSHD, 8 on 2 heads
    route = fid.ImplRoute(impl)
    out = route(original, q, k, k)
    want = fid.reference_fp64(q, k, k)
    assert calls == [((1, 6, 8, 16), (1, 9, 2, 16))] and torch.allclose(out.double(), want, atol=3e-2)
    strict = fid.ImplRoute(impl, takes_grouped=False)
    strict(original, q, k, k)
    assert strict.summary()["exact_reasons"] == {"grouped K/V heads": 1} and len(calls) == 1
    assert fid._route_note(route.summary()) == "; in the model it ran all 1 attention calls of its path"
    note = fid._route_note(strict.summary())
    assert "ran 0 of the 1" in note and "grouped K/V heads 1" in note and "the exact kernel's" in note
    assert fid._route_note(None) == ""


def test_impl_route_runs_key_padded_calls_per_batch_element_on_their_keys():
    calls, sdpa = [], fake_sage(noise=0.0)

    def impl(q, k, v, scale=None):
        calls.append((tuple(q.shape), tuple(k.shape)))
        return sdpa(q, k, v, scale)

    route = fid.ImplRoute(impl)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 9, 16, generator=g) for _ in range(3))  # bhsd
    k[1, :, 5:] = 40.0  # padded keys that would swamp the softmax if they were attended
    lens = torch.tensor([9, 5])

    def original(*a, **kw):
        raise AssertionError("a key-padded call must not fall back to the exact op")

    out = route(original, q, k, v, layout="bhsd", kv_lens=lens)
    assert calls == [((1, 9, 3, 16), (1, 9, 3, 16)), ((1, 9, 3, 16), (1, 5, 3, 16))]  # BSHD, each on its own keys
    want = fid.reference_fp64(*(t.transpose(1, 2) for t in (q, k, v)), kv_lens=lens).transpose(1, 2)
    assert out.shape == q.shape and torch.allclose(out.double(), want, atol=3e-2)  # bf16 inside the route
    assert route.summary()["split_kv_lens"] == 1 and route.summary()["impl_calls"] == 1


def test_fp64_reference_keeps_each_elements_first_keys():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 7, 2, 8, generator=g) for _ in range(3))
    lens = torch.tensor([3, 7])
    ref = fid.reference_fp64(q, k, v, kv_lens=lens, chunk_rows=4)
    assert torch.allclose(ref[0:1], fid.reference_fp64(q[0:1], k[0:1, :3], v[0:1, :3]), atol=1e-12)
    assert torch.allclose(ref[1:2], fid.reference_fp64(q[1:2], k[1:2], v[1:2]), atol=1e-12)
    assert not torch.allclose(ref[0:1], fid.reference_fp64(q[0:1], k[0:1], v[0:1]), atol=1e-3)


def test_per_layer_errors_take_key_padded_records():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 6, 2, 8, generator=g) for _ in range(3))
    k[0, 4:] = 50.0
    rec = {"module": "blocks.0.attn1", "block": 0, "step": 0, "timestep": 1.0, "scale": None, "q": q, "k": k,
           "v": v, "seq_q": 6, "kv_lens": torch.tensor([4, 6])}
    seen = []

    def masked(q, k, v, sc, lens):
        seen.append(lens)
        return fid.reference_fp64(q, k, v, sc, kv_lens=lens)

    rows = fid.per_layer_errors([rec], {"exact": masked, "unmasked": lambda q, k, v, sc, lens:
                                        fid.reference_fp64(q, k, v, sc)})
    assert rows[0]["kv_lens"] == [4, 6] and torch.equal(seen[0], rec["kv_lens"])
    assert rows[0]["exact"]["rel_l2"] < 1e-12 and rows[0]["unmasked"]["rel_l2"] > 0.1
    summ = fid.summarize_layers(rows, ["exact"])
    assert summ["exact"]["self"]["key_padded_calls"] == 1


def test_op_override_restores():
    from vidattn import ops

    before = ops.attention
    with fid.OpOverride(lambda orig, q, k, v, **kw: "patched"):
        assert ops.attention(1, 2, 3) == "patched"
    assert ops.attention is before


def _tiny_wan():
    from diffusers import WanTransformer3DModel
    from pipelines.wan import TINY_TRANSFORMER

    torch.manual_seed(0)
    m = WanTransformer3DModel(**TINY_TRANSFORMER).eval()
    g = torch.Generator().manual_seed(1)
    inputs = dict(hidden_states=torch.randn(1, 16, 3, 8, 8, generator=g), timestep=torch.tensor([500.0]),
                  encoder_hidden_states=torch.randn(1, 512, TINY_TRANSFORMER["text_dim"], generator=g),
                  return_dict=False)
    return m, inputs


def test_attention_path_sage_exact_and_restore():
    m, inputs = _tiny_wan()
    with torch.no_grad():
        ref = m(**inputs)[0]
        with fid.attention_path("exact", m):
            exact = m(**inputs)[0]
        with fid.attention_path("sage2", m, sage=fake_sage(0.05)) as info:
            sage = m(**inputs)[0]
        with fid.attention_path("8bit", m):
            eight = m(**inputs)[0]
    assert torch.allclose(exact, ref, atol=1e-5)  # CPU: the vidattn path is SDPA
    assert torch.allclose(eight, ref, atol=1e-5)
    assert fid.rel_l2(sage, ref) > 1e-4
    assert info["route"]["impl_calls"] == 4 and info["route"]["exact_calls"] == 0  # 2 blocks x (self, cross)
    assert all(type(mod.processor).__module__.startswith("diffusers") for _, mod in m.named_modules()
               if getattr(mod, "processor", None) is not None)  # restored
    with pytest.raises(ValueError, match="needs the SageAttention2"):
        with fid.attention_path("sage2", m):
            pass
    with pytest.raises(ValueError, match="unknown attention path"):
        with fid.attention_path("fp8", m):
            pass


def test_policy_applies_inside_the_path():
    import vidattn

    m, inputs = _tiny_wan()
    seen = []

    def spy(orig, q, k, v, **kw):
        seen.append(kw.get("precision"))
        return orig(q, k, v, **kw)

    label, policy = fid.parse_policy(fid._sweep_spec("blocks=last"), 2)
    assert policy.exact_blocks == frozenset({1}) and label == "blocks=last"
    with torch.no_grad(), fid.attention_path("8bit", m, policy=policy, extra_override=spy):
        m(**inputs)
    assert seen == ["8bit", "8bit", "exact", "exact"]
    assert vidattn.precision.current_precision() == "exact"


def test_step_tracker_and_capture():
    m, inputs = _tiny_wan()
    tracker = fid.StepTracker(m, record_inputs=True)
    cap = fid.QKVCapture(m, tracker, blocks=[1], rows=5)
    with torch.no_grad(), fid.attention_path("exact", m, extra_override=cap):
        for t in (900.0, 900.0, 500.0, 500.0):  # two steps with CFG's two calls each
            m(**{**inputs, "timestep": torch.tensor([t])})
    tracker.remove()
    cap.remove()
    assert tracker.step == 1 and tracker.calls == 4 and tracker.timesteps == [900.0, 500.0]
    assert len(tracker.inputs) == 2 and tracker.inputs[1][1]["timestep"].item() == 500.0
    mods = sorted((r["module"], r["step"]) for r in cap.records)
    assert mods == [("blocks.1.attn1", 0), ("blocks.1.attn1", 1), ("blocks.1.attn2", 0), ("blocks.1.attn2", 1)]
    r = cap.records[0]
    assert r["q"].shape[1] == 5 and r["k"].shape[1] in (48, 512) and r["seq_q"] == 48  # 3 x 8/2 x 8/2 tokens
    rows = fid.per_layer_errors(cap.records, {"exact": lambda q, k, v, sc, lens: fid.reference_fp64(q, k, v, sc),
                                              "noisy": lambda q, k, v, sc, lens: fake_sage(0.1)(q, k, v)})
    assert all(r["exact"]["rel_l2"] < 1e-12 and r["noisy"]["rel_l2"] > 1e-3 for r in rows)
    summ = fid.summarize_layers(rows, ["exact", "noisy"])
    assert summ["noisy"]["self"]["calls"] == 2 and summ["noisy"]["cross"]["calls"] == 2


def test_budget_with_fake_clock():
    now = [0.0]
    b = fid.Budget(10.0, clock=lambda: now[0])
    assert b.fits(9.9) and not b.fits(10.1)
    now[0] = 7.0
    assert b.left() == pytest.approx(3.0) and not b.fits(3.5)
    b.skip("sweep steps=1", 3.5)
    assert b.skipped == [{"what": "sweep steps=1", "estimate_s": 3.5, "left_s": 3.0}]
    assert fid.Budget(None).fits(1e9)


def test_policy_parsing_and_suggestion():
    assert fid.capture_block_indices("first,mid,last", 30) == [0, 15, 29]
    assert fid.capture_block_indices("-1,3,99", 10) == [3, 9]
    assert fid._sweep_spec("steps=1&blocks=first+last") == "steps=1+blocks=first,last"
    _, p = fid.parse_policy("steps=2+blocks=first,-1", 30)
    assert p.exact_first_steps == 2 and p.exact_blocks == frozenset({0, 29})
    with pytest.raises(ValueError):
        fid.parse_policy("layers=3", 30)
    with pytest.raises(ValueError, match="out of range"):
        fid.parse_policy("blocks=40", 30)
    sweep = [{"policy": "steps=2", "exact_share": 0.5, "video": {"psnr_db": 30.0, "ssim": 0.95}},
             {"policy": "steps=1", "exact_share": 0.25, "video": {"psnr_db": 28.0, "ssim": 0.93}},
             {"policy": "blocks=first,last", "exact_share": 0.07, "video": {"psnr_db": 25.0, "ssim": 0.96}}]
    assert fid.suggest_policy(sweep, {"psnr_db": 27.0, "ssim": 0.92})["policy"] == "steps=1"
    assert fid.suggest_policy(sweep, {"psnr_db": 31.0, "ssim": 0.9})["policy"] is None
    assert fid.suggest_policy(sweep, None)["policy"] is None


def test_suggestion_weighs_the_plain_8bit_path():
    # the device run's pattern: every swept policy and the plain 8-bit path above Sage2, all within noise of each
    # other; exceptions buy nothing there, so no exceptions is the suggestion
    sage = {"psnr_db": 45.67, "ssim": 0.9986}
    sweep = [{"policy": "steps=1", "exact_share": 0.25, "video": {"psnr_db": 49.91, "ssim": 0.9994}},
             {"policy": "blocks=first+last", "exact_share": 0.067, "video": {"psnr_db": 49.91, "ssim": 0.9994}}]
    got = fid.suggest_policy(sweep, sage, {"psnr_db": 49.90, "ssim": 0.9994})
    assert got["policy"] == "none" and got["exact_share"] == 0.0
    # a tie in fidelity goes to fewer exact calls, and a policy better than the plain path still loses to it
    assert fid.suggest_policy(sweep, sage, {"psnr_db": 49.91, "ssim": 0.9994})["policy"] == "none"
    # the plain path below Sage2: the cheapest policy that reaches it
    assert fid.suggest_policy(sweep, sage, {"psnr_db": 44.0, "ssim": 0.9994})["policy"] == "blocks=first+last"
    assert fid.suggest_policy(sweep, sage, {"psnr_db": 49.9, "ssim": 0.998})["policy"] == "blocks=first+last"
    # the plain path alone (no sweep run), and a plain path without a video (a family with no decoder)
    assert fid.suggest_policy([], sage, {"psnr_db": 46.0, "ssim": 0.999})["policy"] == "none"
    assert fid.suggest_policy([], sage, {"latent_rel_l2": 0.01})["policy"] is None


# ------------------------------------------------------------------------------------------ end to end
def test_fidelity_tiny_run_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fid, "sage2_impl", lambda: (fake_sage(0.05), None))
    out = tmp_path / "fid"
    rep = fid.main(["--tiny", "--steps", "2", "--capture-rows", "16", "--sweep", "steps=1", "--out-dir", str(out)])
    data = json.loads((out / "fidelity.json").read_text())
    assert data["schema"] == fid.SCHEMA and data["paths"] == ["sdpa", "exact", "8bit", "sage2"]
    for key in ("date_utc", "git_commit", "command", "torch", "gpu"):
        assert key in data["metadata"]
    assert data["family"] == "wan" and data["steps"] == 2 and data["blocks"] == 2
    # (c) video: exact and 8bit are SDPA on the CPU (identical), sage2 differs
    assert data["video"]["exact"]["psnr_db"] == "inf" and data["video"]["8bit"]["ssim"] == 1.0
    assert isinstance(data["video"]["sage2"]["psnr_db"], float) and data["video"]["sage2"]["ssim"] < 1.0
    # (b) one step per denoising step, each path against SDPA
    assert [r["step"] for r in data["one_step"]] == [0, 1]
    assert data["one_step"][0]["exact"]["rel_l2"] == 0.0 and data["one_step"][0]["sage2"]["rel_l2"] > 0
    # (a) first, mid and last of 2 blocks = both blocks, self and cross, both steps
    rows = data["per_layer"]["calls"]
    assert len(rows) == 8 and {r["step"] for r in rows} == {0, 1}
    assert all(r["exact"]["rel_l2"] < 1e-5 < r["sage2"]["rel_l2"] for r in rows)
    assert data["per_layer"]["summary"]["sage2"]["self"]["calls"] == 4
    assert data["routes"]["sage2"]["impl_calls"] > 0
    assert [s["policy"] for s in data["sweep"]] == ["steps=1"] and data["sweep"][0]["exact_share"] == 0.5
    # 8-bit is SDPA on the CPU (identical), so already above the fake Sage2 with no exceptions
    assert data["suggested_policy"]["policy"] == "none" and data["suggested_policy"]["exact_share"] == 0.0
    assert data["budget"]["skipped"] == [] and data["failures"] == {}
    text = capsys.readouterr().out.rstrip().splitlines()
    assert any(line.startswith("| none (the 8bit row above) | 0.000 | inf |") for line in text)
    assert text[-1].startswith("Suggested policy: none, all 8-bit")
    assert any(line.startswith("| sdpa / fp64 | sage2") for line in text)
    assert rep["out_dir"] == str(out)


def test_fidelity_budget_leaves_stages_out(tmp_path, monkeypatch):
    monkeypatch.setattr(fid, "sage2_impl", lambda: (None, "not installed here"))
    out = tmp_path / "fid"
    fid.main(["--tiny", "--steps", "1", "--budget-s", "0.001", "--out-dir", str(out)])
    data = json.loads((out / "fidelity.json").read_text())
    assert data["paths"] == ["sdpa", "exact", "8bit"] and data["sage2"]["reason"] == "not installed here"
    skipped = [s["what"] for s in data["budget"]["skipped"]]
    assert skipped[:2] == ["exact generation", "8bit generation"]
    assert data["sweep_note"] == "not run: the 8-bit path did not run (left out for the budget)"
    assert data["video"] == {} and data["per_layer"]["calls"] == [] and data["sweep"] == []


def test_fidelity_records_a_failing_path(tmp_path, monkeypatch):
    monkeypatch.setattr(fid, "sage2_impl", lambda: (None, "not installed here"))
    real = fid.attention_path

    def path_that_fails(path, *a, **kw):
        if path == "8bit":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(path, *a, **kw)

    monkeypatch.setattr(fid, "attention_path", path_that_fails)
    out = tmp_path / "fid"
    fid.main(["--tiny", "--steps", "1", "--capture-rows", "8", "--out-dir", str(out)])
    data = json.loads((out / "fidelity.json").read_text())
    assert "simulated" in data["failures"]["8bit"] and "8bit" not in data["video"] and data["sweep"] == []
    assert "simulated" in data["sweep_note"]
    assert "exact" in data["video"] and "8bit FAILED" in (out / "fidelity.md").read_text()


def test_fidelity_refuses_bad_paths_and_full_size_on_cpu(tmp_path):
    with pytest.raises(SystemExit, match="--paths"):
        fid.main(["--tiny", "--paths", "fp8", "--out-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="CUDA"):
        fid.main(["--out-dir", str(tmp_path)])


def test_e2e_report_precision_both(tmp_path, monkeypatch):
    import e2e_report as e2e

    calls = []
    monkeypatch.setattr(fid, "sage2_impl", lambda: (fake_sage(0.05, calls), None))
    rep = e2e.main(["--preset", "tiny", "--forward-only", "--iters", "1", "--warmup", "0", "--no-profile",
                    "--precision", "both", "--out-dir", str(tmp_path / "e2e")])
    data = json.loads((tmp_path / "e2e" / "report.json").read_text())
    assert data["paths"] == ["sdpa", "vidattn", "vidattn_8bit", "sage2"] and data["precision"] == "both"
    # every vidattn call fell back on the CPU: the fields keep their keys, the ratios are kept apart
    assert set(data["speedup_by_path"]) == {"vidattn", "vidattn_8bit", "sage2"}
    assert all(v is None for row in data["speedup_by_path"].values() for v in row.values())
    assert set(data["sdpa_vs_sdpa_timing"]["speedup_by_path"]) == {"vidattn", "vidattn_8bit", "sage2"}
    assert data["fidelity_by_path"]["vidattn"]["output_rel_l2"] == 0.0
    assert data["fidelity_by_path"]["sage2"]["output_rel_l2"] > 0 and calls
    assert data["sage2_route"]["impl_calls"] > 0
    assert set(data["attention_per_call"]["self_attn"]["speedup_by_path"]) == {"vidattn", "vidattn_8bit", "sage2"}
    md = (tmp_path / "e2e" / "report.md").read_text()
    assert "| SageAttention2 |" in md and "SageAttention2 inside the model" in md
    assert rep["speedup"] == data["speedup"]  # the single-valued fields describe exact vidattn, as before


def test_e2e_report_precision_8bit_family_without_sage(tmp_path, monkeypatch):
    import e2e_report as e2e

    monkeypatch.setattr(fid, "sage2_impl", lambda: (None, "SageAttention2 unavailable: not installed"))
    e2e.main(["--family", "wan", "--tiny", "--forward-only", "--iters", "1", "--warmup", "1", "--no-profile",
              "--precision", "8bit", "--out-dir", str(tmp_path / "fam")])
    data = json.loads((tmp_path / "fam" / "report.json").read_text())
    assert data["paths"] == ["sdpa", "vidattn_8bit"] and data["status"] == "ok"
    assert data["sage2"] == {"in_run": False, "reason": "SageAttention2 unavailable: not installed"}
    assert "speedup_by_path" not in data and data["fidelity"]["output_rel_l2"] == 0.0
    assert "vidattn_8bit" in data["attention_calls"]
    with pytest.raises(SystemExit, match="--precision 8bit is for Wan runs"):
        e2e.main(["--family", "ltx2", "--generate", "--tiny", "--precision", "8bit", "--out-dir", str(tmp_path)])


def test_fidelity_forward_family_without_pipeline(tmp_path, monkeypatch):
    """A family with no offline pipeline (cosmos3 made to look so: grouped K/V heads, the backend route): the registry
    forward per step, no video, (a) against the grouped fp64 reference, and the policy sweep on its backend-routed
    attention."""
    import pipelines.generate as pg

    real = pg.generating
    monkeypatch.setattr(pg, "generating", lambda: [n for n in real() if n != "cosmos3"])
    monkeypatch.setattr(fid, "sage2_impl", lambda: (fake_sage(0.05), None))
    out = tmp_path / "c3"
    fid.main(["--family", "cosmos3", "--tiny", "--steps", "1", "--capture-rows", "8", "--sweep", "steps=1",
              "--out-dir", str(out)])
    data = json.loads((out / "fidelity.json").read_text())
    assert "no offline pipeline" in data["video_note"] and set(data["video"]["sage2"]) == {"latent_rel_l2"}
    rows = data["per_layer"]["calls"]
    assert rows and all(r["kv_heads"] < r["heads"] and r["exact"]["rel_l2"] < 1e-5 for r in rows)
    # The policy installs on the backend route too (its modules' forwards run inside use_precision blocks): one step
    # with the first step exact is all exact.
    entry = data["sweep"][0]
    assert entry["policy"] == "steps=1" and "error" not in entry and entry["exact_share"] == 1.0, entry


def test_impl_route_counts_an_implementation_error():
    def broken(q, k, v, scale=None):
        raise RuntimeError("no kernel image for this device")

    route = fid.ImplRoute(broken)
    q = torch.randn(1, 8, 2, 16, dtype=torch.bfloat16)
    out = route(lambda q, k, v, **kw: torch.ones_like(q), q, q, q)
    assert torch.equal(out, torch.ones_like(q))
    s = route.summary()
    assert s["impl_calls"] == 0 and s["exact_calls"] == 1
    assert list(s["exact_reasons"]) == ["sage2 raised RuntimeError: no kernel image for this device"]


def test_e2e_report_processor_baseline(tmp_path, monkeypatch):
    """--processor-baseline adds 'SDPA in vidattn's processors': vidattn.apply with every plain attention call sent to
    torch SDPA (counted by the route), so the report can tell the processors' own change from the kernels'."""
    import e2e_report as e2e

    seen = []
    real = fid.sdpa_bshd

    def spy(q, k, v, scale=None):
        seen.append(tuple(q.shape))
        return real(q, k, v, scale=scale)

    monkeypatch.setattr(fid, "sdpa_bshd", spy)
    monkeypatch.setattr(fid, "sage2_impl", lambda: (None, "SageAttention2 unavailable: not installed"))
    rep = e2e.main(["--preset", "tiny", "--forward-only", "--iters", "1", "--warmup", "0", "--no-profile",
                    "--precision", "8bit", "--processor-baseline", "--out-dir", str(tmp_path / "e2e")])
    data = json.loads((tmp_path / "e2e" / "report.json").read_text())
    assert data["paths"] == ["sdpa", "sdpa_proc", "vidattn_8bit"]
    assert set(data["sdpa_vs_sdpa_timing"]["speedup_by_path"]) == {"sdpa_proc", "vidattn_8bit"} and seen
    # on the CPU every path computes SDPA's arithmetic: the processors around it must not move the output
    assert data["fidelity_by_path"]["sdpa_proc"]["output_rel_l2"] < 1e-5
    assert rep["speedup"] == data["speedup_by_path"]["vidattn_8bit"]  # the primary path is never the baseline
    assert "| SDPA in vidattn's processors |" in (tmp_path / "e2e" / "report.md").read_text()


def test_sdpa_bshd_matches_sdpa_on_bhsd():
    q, k, v = (torch.randn(2, 37, 3, 16, dtype=torch.float64) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), scale=0.3)
    torch.testing.assert_close(fid.sdpa_bshd(q, k, v, scale=0.3), ref.transpose(1, 2))


def test_capture_keeps_key_padded_calls_and_skips_causal_ones():
    m, _ = _tiny_wan()
    tracker = fid.StepTracker(m)
    tracker.step, tracker.first_in_step, tracker.timesteps = 0, True, [900.0]
    cap = fid.QKVCapture(m, tracker, blocks=[0], rows=3)
    cap.current = "blocks.0.attn1"
    q = torch.randn(2, 6, 2, 8)
    lens = torch.tensor([4, 6])
    out = cap(lambda q, k, v, **kw: q, q, q, q, kv_lens=lens)
    assert out is q
    cap(lambda q, k, v, **kw: q, q, q, q, causal=True)
    tracker.remove()
    cap.remove()
    assert len(cap.records) == 1 and torch.equal(cap.records[0]["kv_lens"], lens)
    assert cap.records[0]["q"].shape[1] == 3 and cap.records[0]["k"].shape[1] == 6


def test_a_bad_sweep_entry_stops_before_any_model_is_built(monkeypatch):
    monkeypatch.setattr(fid, "make_subject", lambda *a: pytest.fail("built a model before checking --sweep"))
    with pytest.raises(SystemExit, match="--sweep 'first1'"):
        fid.main(["--tiny", "--device", "cpu", "--sweep", "steps=1,first1"])


def test_attention_blind_only_on_a_gpu_with_every_step_bit_equal():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    same = [{"step": 0, "exact": {"rel_l2": 0.0}, "8bit": {"rel_l2": 0.0}},
            {"step": 1, "exact": {"rel_l2": 0.0}, "8bit": {"rel_l2": 0.0}}]
    assert "does not depend on its attention" in fid.attention_blind(same, cuda)
    assert fid.attention_blind(same, cpu) is None  # the CPU paths run SDPA: equal by construction
    moved = [same[0], {"step": 1, "exact": {"rel_l2": 1e-7}}]
    assert fid.attention_blind(moved, cuda) is None and fid.attention_blind([], cuda) is None


def test_model_dir_loads_trained_wan_weights(tmp_path, monkeypatch):
    """--model DIR: the Wan folder's transformer and VAE replace the random weights (the subject is built from it, and
    the report says the weights are trained); a folder that is not Wan, or a family other than Wan, is refused before
    any model is built."""
    import json as _json

    from pipelines.wan import build_pipeline

    tiny = build_pipeline("tiny", dtype=torch.float32, seed=7)
    folder = tmp_path / "wan_folder"
    tiny.transformer.save_pretrained(folder / "transformer")
    tiny.vae.save_pretrained(folder / "vae")
    (folder / "model_index.json").write_text(_json.dumps({"_class_name": "WanPipeline"}))
    seen = []
    real_make = fid.make_subject

    def spy(args, device, dtype):
        subj = real_make(args, device, dtype)
        seen.append(next(subj.transformer.parameters()).detach().clone())
        return subj

    monkeypatch.setattr(fid, "make_subject", spy)
    rep = fid.main(["--family", "wan", "--model", str(folder), "--tiny", "--device", "cpu", "--steps", "1",
                    "--capture-rows", "8", "--sweep", "", "--paths", "exact", "--out-dir", str(tmp_path / "out")])
    assert rep["weights"].startswith("trained, from") and rep["preset"] == "model"
    assert torch.equal(seen[0], next(tiny.transformer.parameters()).detach())  # the folder's, not seed 0's
    monkeypatch.setattr(fid, "make_subject", lambda *a: pytest.fail("built a model before checking --model"))
    with pytest.raises(SystemExit, match="Wan folders only"):
        fid.main(["--family", "cogvideox", "--model", str(folder), "--tiny"])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "model_index.json").write_text(_json.dumps({"_class_name": "FluxPipeline"}))
    with pytest.raises(SystemExit, match="not a Wan pipeline"):
        fid.main(["--family", "wan", "--model", str(tmp_path / "other"), "--tiny"])


@pytest.mark.parametrize("argv,msg", [
    (["--frames", "10"], "4k+1"),
    (["--height", "64", "--width", "96", "--frames", "10"], "4k+1"),
    (["--capture-blocks", "foo"], "not a block index"),
    (["--device", "foo"], "no device torch knows"),
])
def test_bad_arguments_stop_before_the_run(argv, msg, tmp_path):
    with pytest.raises(SystemExit) as exc:
        fid.main(["--tiny", "--out-dir", str(tmp_path)] + argv)
    assert msg in str(exc.value.code)
