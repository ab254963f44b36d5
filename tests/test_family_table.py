"""The family registry (pipelines/registry.py) and what drives it, on the CPU: every routed family's tiny config
through `e2e_report.py --family NAME --tiny` and `scripts/family_table.py --tiny` (both paths SDPA here: the census
counts the calls vidattn routes), `--list` of all three entry points, generate_video.py's reasons for the families it
does not generate, the two device groups against the budget, the budget guard and a failing family in the runner."""
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

pytest.importorskip("diffusers")
from _support import cpu_one_thread, load_script  # noqa: E402,F401 - an autouse fixture
from pipelines import registry  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]


def _load(name):
    return load_script(ROOT / "scripts" / f"{name}.py", f"_ft_{name}")


ft = _load("family_table")
e2e = _load("e2e_report")
gen = _load("generate_video")

# The diffusers classes the family registry builds (docs/support.md lists them as running on the kernel or partly;
# Kandinsky 6 SR, a super-resolution stage, and SANA-WM's GDN model have no registry family).
ROUTED_CLASSES = {
    "WanTransformer3DModel", "WanVACETransformer3DModel", "WanAnimateTransformer3DModel",
    "WanAnimate2Transformer3DModel", "SkyReelsV2Transformer3DModel", "ChronoEditTransformer3DModel",
    "HeliosTransformer3DModel", "AnyFlowTransformer3DModel", "AnyFlowFARTransformer3DModel",
    "HunyuanVideoTransformer3DModel", "HunyuanVideoFramepackTransformer3DModel", "HunyuanVideo15Transformer3DModel",
    "CogVideoXTransformer3DModel", "ConsisIDTransformer3DModel", "LTXVideoTransformer3DModel",
    "LTX2VideoTransformer3DModel", "MochiTransformer3DModel", "AllegroTransformer3DModel", "LatteTransformer3DModel",
    "EasyAnimateTransformer3DModel", "SanaVideoTransformer3DModel", "SanaWMLTX2RefinerTransformer3DModel",
    "Kandinsky5Transformer3DModel", "Kandinsky6Transformer3DModel", "CosmosTransformer3DModel",
    "Cosmos3OmniTransformer", "MotifVideoTransformer3DModel", "MiniMaxH3Transformer3DModel",
}
BUILDABLE = [n for n in registry.names() if registry.entry(n).make is not None or registry.in_families(n)]
MEASURED = [n for n in BUILDABLE if not registry.entry(n).measure]  # what the GPU runner times
NEW = [n for n in BUILDABLE if not registry.in_families(n)]  # the families.py ones: tests/test_cross_model.py


def test_registry_covers_every_routed_class():
    import diffusers

    classes = {registry.entry(n).cls_name for n in registry.names()}
    assert classes == ROUTED_CLASSES
    for n in registry.names():
        e = registry.entry(n)
        assert hasattr(diffusers, e.cls_name), n
        assert e.size.height > 0 and e.size.width > 0 and e.size.frames > 0 and e.text > 0, n
        # a family without a forward says why
        assert (e.make is not None or registry.in_families(n)) or e.measure, n
    with pytest.raises(registry.FamilyError, match="unknown model family 'nope'"):
        registry.entry("nope")


def test_real_configs_construct_on_meta():
    """Every real config is accepted by its class (meta device; as the 1-block copy the GPU runner warms up on: the
    same keys, one block); the default sizes pass the size check."""
    for n in registry.names():
        if registry.in_families(n):
            continue  # tests/test_cross_model.py
        cfg = {**registry.config_for(n), **registry.one_block_overrides(n)}
        with torch.device("meta"):
            registry.model_class(n)(**cfg)
        if registry.entry(n).make is not None:
            registry.check_size(n, registry.size_for(n))


def test_flop_counts_cover_every_family():
    flops = registry.load_flops()
    assert set(flops) == set(registry.names())
    for n in MEASURED:
        est = registry.estimate(n, flops)
        assert est["forward_s"] and est["forward_s"] > 0 and est["runner_s"] > est["forward_s"], n


@pytest.mark.parametrize("name", NEW)
def test_e2e_report_tiny_every_family(name, tmp_path):
    rep = e2e.main(["--family", name, "--tiny", "--iters", "1", "--warmup", "0", "--no-profile",
                    "--out-dir", str(tmp_path)])
    assert rep["status"] == "ok" and rep["model_family"] == name and rep["preset"] == "tiny"
    saved = json.loads((tmp_path / "report.json").read_text())
    census = saved["attention_calls"]["vidattn"]
    # On the CPU every call vidattn routes runs its SDPA fallback: counted, none left to a stock module unnoticed.
    assert census["fallback"] > 0 and census["kernel"] == 0, census
    assert saved["fidelity"]["output_rel_l2"] < 1e-5  # both SDPA (AnyFlow-FAR: flex against SDPA)
    assert saved["class"] == registry.entry(name).cls_name


def test_runner_tiny_all_families_json_and_table(tmp_path, capsys):
    recs = ft.main(["--tiny", "--device", "cpu", "--only", *BUILDABLE, "--out-dir", str(tmp_path)])
    assert {r["family"] for r in recs} == set(BUILDABLE)
    for n in BUILDABLE:
        r = json.loads((tmp_path / f"{n}.json").read_text())
        assert r["status"] == "ok", (n, r.get("error"))
        assert r["sdpa"]["forward_ms"] > 0 and r["vidattn"]["forward_ms"] > 0
        assert r["vidattn"]["census"]["fallback"] > 0 and r["all_fallback"] and r["speedup"] is None
        assert r["output_rel_l2"] < 1e-5  # both SDPA; Mochi's batched calls differ from its per-sample loop
        assert set(r["warmup_one_block"]) == {"sdpa", "vidattn"}
        assert "one timed forward per path" in r["timing"]
    md = (tmp_path / "table.md").read_text()
    for n in BUILDABLE:
        assert f"| {n} |" in md
    assert "n/a (SDPA both)" in md
    data = json.loads((tmp_path / "table.json").read_text())
    assert {r["family"] for r in data["rows"]} == set(BUILDABLE)


def test_runner_records_a_failure_and_goes_on(tmp_path, monkeypatch):
    real = registry.build

    def broken(name, *a, **k):
        if name == "latte":
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(name, *a, **k)

    monkeypatch.setattr(registry, "build", broken)
    recs = ft.main(["--tiny", "--device", "cpu", "--only", "latte", "ltx", "--out-dir", str(tmp_path)])
    assert [r["status"] for r in recs] == ["failed", "ok"]
    assert recs[0]["oom"] and recs[0]["failed_at"] == "build" and "simulated" in recs[0]["error"]
    assert "latte (failed): failed at build" in (tmp_path / "table.md").read_text()


def test_runner_budget_guard_skips_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(ft, "estimate_for", lambda name, tiny: {"runner_s": 1e6 if name == "ltx" else 1.0,
                                                                "forward_s": 1.0})
    recs = ft.main(["--only", "ltx", "latte", "--tiny", "--device", "cpu", "--budget-s", "600",
                    "--out-dir", str(tmp_path)])
    assert [r["status"] for r in recs] == ["skipped", "ok"]
    assert "estimated 1000000 s for this family" in recs[0]["reason"] and "--budget-s left" in recs[0]["reason"]
    assert "ltx (skipped)" in (tmp_path / "table.md").read_text()


def test_groups_cover_the_families_and_fit_the_budget():
    g1, g2, g3 = ft.GROUPS[1], ft.GROUPS[2], ft.GROUPS[3]
    assert not set(g1) & set(g2) and not (set(g1) | set(g2)) & set(g3)
    assert set(g1) | set(g2) | set(g3) | set(ft.NOT_RUN) == set(registry.names())
    assert set(ft.NOT_RUN) == set(registry.names()) - set(MEASURED)
    assert set(g3) == {"wan_animate2", "sana_wm_refiner"}
    for g in (1, 2, 3):
        assert ft.group_estimate(g) <= 480, (g, ft.group_estimate(g))


@pytest.mark.parametrize("argv,msg", [
    (["--only", "nope", "--out-dir", "X"], "unknown family nope"),
    (["--group", "1", "--only", "ltx", "--out-dir", "X"], "not both"),
    (["--group", "1"], "--out-dir DIR is required"),
    (["--group", "1", "--out-dir", "X"], "need a CUDA GPU"),
    (["--tiny", "--device", "cpu", "--budget-s", "0", "--out-dir", "X"], "--budget-s must be > 0"),
])
def test_runner_errors(argv, msg, tmp_path):
    argv = [str(tmp_path / a) if a == "X" else a for a in argv]
    with pytest.raises(SystemExit) as exc:
        ft.main(argv)
    assert msg in str(exc.value)


def test_list_of_every_entry_point(capsys):
    registry.main(["--list"])
    e2e.main(["--list"])
    gen.main(["--list"])
    out = capsys.readouterr().out
    for n in registry.names():
        assert out.count(f"\n{n} ") + out.startswith(f"{n} ") >= 3, n
    assert "720x1280x129" in out  # HunyuanVideo's default size


@pytest.mark.parametrize("name", [n for n in registry.names() if n not in gen.GENERATE_FAMILIES])
def test_generate_video_names_the_reason_and_the_alternative(name, tmp_path):
    with pytest.raises(SystemExit) as exc:
        gen.main(["--family", name, "--out", str(tmp_path / "x.mp4")])
    msg = str(exc.value.code)
    assert "is not built offline here" in msg and registry.entry(name).pipeline in msg
    if name in BUILDABLE:
        assert f"e2e_report.py --family {name}" in msg
    else:
        assert "not built either" in msg


@pytest.mark.parametrize("name", ["wan_animate2", "sana_wm_refiner"])
def test_kv_cached_rows_fill_then_time_the_cached_pass(name, tmp_path):
    """The two KV-cached families through `--families`: the filling pass runs once at build (its time recorded),
    the timed forwards read the cache (both paths the same output on the CPU), Wan-Animate-2's SDPA column is the
    stated baseline."""
    recs = ft.main(["--tiny", "--device", "cpu", "--families", f"{name},", "--out-dir", str(tmp_path)])
    (r,) = recs
    assert r["status"] == "ok", r.get("error")
    assert r["fill_pass_ms"] > 0 and r["output_rel_l2"] < 1e-5
    assert r["vidattn"]["census"]["fallback"] > 0
    if name == "wan_animate2":
        assert "flex" in r["sdpa_path"]
        fns = {g["fn"] for g in r["sdpa"]["attention_calls"]}
        assert "SDPA with LSE (cached.sdpa_lse)" in fns  # the baseline's attentions are timed
    else:
        assert "sdpa_path" not in r
        # the inject call's keys: [sink + history + current] of the tiny window (1 + 1 + 1 frames of 4 tokens)
        shapes = {tuple(g["k_shape"]) for g in r["sdpa"]["attention_calls"]}
        assert any(k[2] == 12 for k in shapes), shapes  # (B, H, S, D)


def test_families_flag_errors(tmp_path):
    with pytest.raises(SystemExit, match="not both"):
        ft.main(["--families", "ltx", "--only", "ltx", "--out-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="unknown family nope"):
        ft.main(["--families", "ltx,nope", "--tiny", "--device", "cpu", "--out-dir", str(tmp_path)])


def test_predicted_speedup_and_rel_l2():
    assert ft.predicted_speedup(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert ft.predicted_speedup(None, 2.0) is None
    a = torch.tensor([3.0, 4.0])
    assert ft._rel_l2(a, a) == 0.0 and ft._rel_l2(a * 1.1, a) == pytest.approx(0.1)


def test_wan_animate2_sdpa_baseline_equals_the_stock_flex_pass():
    """The baseline the SDPA column runs (two dense SDPA attentions merged by LSE) computes what stock's flex call
    with the in-context block mask computes, on the tiny config with a filled cache."""
    from pipelines import cached

    built = registry.build("wan_animate2", "tiny", device="cpu", dtype=torch.float32)
    stock = built.forward()
    restore = cached.install_sdpa_baseline(built.model)
    try:
        base = built.forward()
        procs = {type(m.processor).__name__ for m in built.model.modules() if hasattr(m, "processor")}
        assert "WanAnimate2SdpaBaseline" in procs
    finally:
        restore()
    assert cached.fill_ms(built.inputs) > 0
    torch.testing.assert_close(base, stock, rtol=1e-4, atol=1e-4)
    assert not torch.equal(built.forward(), torch.zeros_like(stock))
    procs = {type(m.processor).__module__ for m in built.model.modules() if hasattr(m, "processor")}
    assert all(p.startswith("diffusers.") for p in procs)  # restored


def test_wan_animate2_block_mask_prebuilt_eagerly_is_the_models():
    """The generation sweep builds Wan-Animate-2's in-context block mask before its timed paths (the model compiles it
    on first use, ~47 s of the first timed step on an H200): eagerly where the grid is small, the same BlockMask
    under the key the forward looks up, accepted by vidattn's check; a second call builds nothing."""
    from pipelines import cached
    from vidattn.diffusers.wan_animate_2 import cached_mask_reason

    built = registry.build("wan_animate2", "tiny", device="cpu", dtype=torch.float32)
    m, inp = built.model, built.inputs
    ((key, compiled),) = m.block_masks.items()  # the fill built it as the forward does (compiled)
    m.block_masks.clear()
    rec = cached.prebuild_block_mask(m, inp["origin_len"], *inp["origin_area"])
    assert rec["built"] and rec["eager"] and tuple(rec["key"]) == key
    mask = m.block_masks[key]
    assert torch.equal(mask.to_dense(), compiled.to_dense())
    assert cached_mask_reason(mask, key[0] + 1, key[1], key[0], key[1], *key) is None
    assert cached.prebuild_block_mask(m, inp["origin_len"], *inp["origin_area"]) == {"key": list(key),
                                                                                      "built": False}
    built.forward()
    assert list(m.block_masks) == [key] and m.block_masks[key] is mask  # the forward found it


def test_empty_families_list_is_refused_not_read_as_every_family():
    for value in ("", ","):
        with pytest.raises(SystemExit, match="names no family"):
            ft.main(["--families", value, "--out-dir", "unused"])


@pytest.mark.parametrize("device", ["foo", "mps"])
def test_a_device_the_runners_cannot_use_is_refused(device):
    with pytest.raises(SystemExit, match="--device"):
        registry.pick_device(device, True, "the default sizes")
