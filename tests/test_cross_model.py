"""The cross-model end-to-end pieces on the CPU: every family's tiny config through
`e2e_report.py --model-family NAME --preset tiny --forward-only` (both paths are SDPA here), the real configs'
parameter counts and default-size inputs (meta device: nothing allocated), the attention census, the
cross-model table from synthetic reports, and the device stage's wiring."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

pytest.importorskip("diffusers")
from pipelines import families as fams  # noqa: E402

from _support import cpu_one_thread, load_script  # noqa: E402,F401 - an autouse fixture

pytestmark = [pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning"),
              pytest.mark.filterwarnings("ignore:In CPU autocast:UserWarning")]


e2e = load_script(ROOT / "scripts" / "e2e_report.py", "_cm_e2e_report")
table = load_script(ROOT / "scripts" / "cross_model_table.py", "_cm_cross_model_table")

# Attention calls of one tiny forward under vidattn: (all calls, calls in modules vidattn leaves stock).
# HunyuanVideo and 1.5: the token refiner; Mochi: the attention pool of its time embedding.
TINY_CALLS = {"wan": (4, 0), "wan14b": (4, 0), "skyreels_v2": (4, 0), "hunyuan_video": (3, 1),
              "hunyuan_video15": (3, 1), "cogvideox": (2, 0), "ltx": (4, 0), "mochi": (3, 1), "allegro": (4, 0),
              "ltx2": (12, 0)}
# Under the stock processors the calls are the same, except Mochi's: one SDPA per sample (batch 2) per layer.
TINY_SDPA_CALLS = {**{k: v[0] for k, v in TINY_CALLS.items()}, "mochi": 5}


def test_registry_lists_every_family():
    assert list(fams.FAMILIES) == table.FAMILY_ORDER
    assert set(fams.DEVICE_ORDER) == set(fams.FAMILIES) == set(fams.DEVICE_ITERS) == set(fams.TINY)


@pytest.mark.parametrize("name", list(fams.FAMILIES))
def test_tiny_forward_report_both_paths(name, tmp_path):
    out = tmp_path / name
    rep = e2e.main(["--model-family", name, "--preset", "tiny", "--forward-only", "--iters", "1", "--warmup", "1",
                    "--out-dir", str(out)])
    assert rep["status"] == "ok" and rep["model_family"] == name and rep["preset"] == "tiny"
    for f in ("report.json", "report.md", "latency.png"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0
    saved = json.loads((out / "report.json").read_text())
    assert saved["model_family"] == name and saved["mode"] == "forward-only"
    assert saved["batch"] == fams.FAMILIES[name].batch and saved["tokens"] > 0 and saved["params"] > 0
    for path in ("sdpa", "vidattn"):
        r = saved["results"][path]
        assert len(r["forward_ms"]) == 1 and r["forward_ms"][0] > 0 and r["output_finite"]
        assert 0 < saved["profiles"][path]["attention_share"] <= 1
    # both paths are SDPA on the CPU: same output
    assert saved["fidelity"]["output_rel_l2"] < 1e-5
    calls, stock = TINY_CALLS[name]
    sd, va = saved["attention_calls"]["sdpa"], saved["attention_calls"]["vidattn"]
    assert sd["calls"] == sd["stock"] == TINY_SDPA_CALLS[name] and sd["kernel"] == sd["fallback"] == 0
    assert va["calls"] == calls and va["stock"] == stock and va["kernel"] == 0
    assert va["fallback"] == calls - stock
    assert list(va["fallback_reasons"]) in (["dtype torch.float32 is not supported by the kernel (bf16 or fp16 only)"],
                                            ["no CUDA GPU (torch.cuda.is_available() is False); the kernel runs "
                                             "on Hopper GPUs only"])  # explain() names the device first
    assert saved["fallback"]["all_fallback"] is True and "FELL BACK" in (out / "report.md").read_text()
    assert saved["apply"]["replaced"] == calls - stock
    # the stock call is a skipped processor module (the Hunyuan token refiner) or none (Mochi's pooling)
    assert len(saved["apply"]["skipped"]) == (1 if name.startswith("hunyuan") else 0)


def test_a_path_out_of_memory_is_a_failure_report_and_the_other_path_still_runs(tmp_path, monkeypatch):
    real_run = e2e.AttnSwitch.run

    def run(self, path, fn):
        if path == "sdpa":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.20 TiB")
        return real_run(self, path, fn)

    monkeypatch.setattr(e2e.AttnSwitch, "run", run)
    out = tmp_path / "results" / "forward_ltx_20261201"
    rep = e2e.main(["--model-family", "ltx", "--preset", "tiny", "--forward-only", "--iters", "1", "--warmup", "1",
                    "--out-dir", str(out)])
    assert rep["status"] == "failed" and rep["failure"]["failed_at"] == "sdpa" and rep["failure"]["oom"]
    assert "sdpa" not in rep["results"] and rep["results"]["vidattn"]["forward_ms"]
    assert "FAILED at sdpa" in (out / "report.md").read_text()
    saved = json.loads((out / "report.json").read_text())
    saved["preset"] = "default"  # as the device run would write it
    (out / "report.json").write_text(json.dumps(saved))
    data = table.main(["--results", str(tmp_path / "results"), "--out-dir", str(tmp_path)])
    assert not data["rows"] and [r["model_family"] for r in data["failed"]] == ["ltx"]
    md = Path(data["md"]).read_text()
    assert "out of GPU memory in the sdpa forward" in md and "the vidattn path ran:" in md


# Real configs: parameters counted on the meta device, in the published sizes' range.
PARAMS_B = {"wan": (1.3, 1.5), "wan14b": (13.5, 15.0), "skyreels_v2": (1.3, 1.5), "hunyuan_video": (12.5, 13.2),
            "hunyuan_video15": (8.0, 8.6), "cogvideox": (5.3, 5.8), "ltx": (1.8, 2.1), "mochi": (9.8, 10.3),
            "allegro": (2.6, 3.0), "ltx2": (18.5, 19.5)}
# Video tokens at each family's default size (ANCHORS.md and the pipelines' defaults).
TOKENS = {"wan": 32760, "wan14b": 32760, "skyreels_v2": 51000, "hunyuan_video": 118800, "hunyuan_video15": 49290,
          "cogvideox": 17550, "ltx": 7392, "mochi": 44520, "allegro": 79200,
          "ltx2": 16 * 16 * 24}  # LTX-2: 121 frames -> 16 latent frames, 512x768 / 32


@pytest.mark.parametrize("name", list(fams.FAMILIES))
def test_real_config_params_and_tokens(name):
    lo, hi = PARAMS_B[name]
    n = fams.param_count(name)
    assert lo * 1e9 <= n <= hi * 1e9, n
    assert fams.video_tokens(name, fams.size_for(name, "default")) == TOKENS[name]
    est = fams.estimate(name, params=n)
    assert est["fits_h200"] and est["forward_s"] > 0


def _one_layer(name):
    return {"num_layers": 1, **({"num_single_layers": 1} if name == "hunyuan_video" else {})}


@pytest.mark.parametrize("name", ["wan", "wan14b", "skyreels_v2", "hunyuan_video", "cogvideox", "ltx", "allegro"])
def test_real_config_default_size_inputs_on_meta(name):
    """The real widths and the default size's inputs go through the real model class (1 layer, meta device)."""
    built = fams.build(name, "default", device="meta", dtype=torch.bfloat16, overrides=_one_layer(name))
    out = built.forward()
    hs = built.inputs["hidden_states"]
    expected = list(hs.shape)
    if name == "hunyuan_video15":
        expected[1] = built.model.config.out_channels
    assert list(out.shape) == expected and out.dtype == torch.bfloat16
    info = built.info()
    assert info["tokens"] == TOKENS[name] and info["batch"] == fams.FAMILIES[name].batch


@pytest.mark.parametrize("name,size,overrides,text", [
    ("hunyuan_video15", fams.Size(64, 64, 5), {"num_layers": 1, "num_refiner_layers": 1},
     {"encoder_hidden_states": [1, 1000, 3584], "encoder_attention_mask": [1, 1000],
      "encoder_hidden_states_2": [1, 256, 1472], "encoder_attention_mask_2": [1, 256],
      "image_embeds": [1, 729, 1152], "hidden_states": [1, 65, 31, 30, 53]}),
    ("mochi", fams.Size(32, 32, 7), {"num_layers": 1},
     {"encoder_hidden_states": [2, 256, 4096], "encoder_attention_mask": [2, 256],
      "hidden_states": [2, 12, 28, 60, 106]}),
])
def test_real_width_inputs(name, size, overrides, text):
    """The two families whose forward does not run on meta (data-dependent text packing, autocast): the default
    size's inputs have the pipeline's shapes (built against the meta model), and the real widths run through one
    real-width layer on the CPU (short text, small video, fast random init: built on meta, then materialised)."""
    config = {**fams.config_for(name, "default"), **overrides}
    with torch.device("meta"):
        model = fams.model_class(name)(**config)
    full = fams.make_inputs(name, model, fams.size_for(name, "default"), dtype=torch.bfloat16)
    assert {k: list(full[k].shape) for k in text} == text
    assert not list(model.named_buffers())  # nothing computed at init that to_empty would lose
    model = model.to_empty(device="cpu").eval().requires_grad_(False)
    for p in model.parameters():
        p.normal_(0, 0.02)
    inputs = fams.make_inputs(name, model, size, dtype=torch.float32, seed=1, tiny=True)
    with torch.no_grad():
        out = model(**inputs)[0]
    assert torch.isfinite(out).all() and out.shape[0] == fams.FAMILIES[name].batch


def test_census_counts_processor_fallback_and_stock(monkeypatch):
    """A processor-level fallback (warn_fallback, then SDPA) counts as fallback with its reason."""
    import torch.nn.functional as F

    from pipelines.census import AttentionCensus
    from vidattn import ops

    q = torch.randn(1, 2, 8, 64)
    with AttentionCensus() as c:
        ops.attention(q, q, q, layout="bhsd")        # the op: fallback (CPU)
        ops.warn_fallback("mask is not a key prefix")
        F.scaled_dot_product_attention(q, q, q)      # what the processor then runs
        F.scaled_dot_product_attention(q, q, q)      # a stock module
    s = c.summary()
    assert (s["calls"], s["kernel"], s["fallback"], s["stock"]) == (3, 0, 2, 1)
    assert s["fallback_reasons"]["mask is not a key prefix"] == 1
    assert ops.attention is not c._attention and F.scaled_dot_product_attention is c._saved["sdpa"]


@pytest.mark.parametrize("argv,msg", [
    (["--model-family", "nope"], "unknown --model-family"),
    (["--model-family", "ltx", "--preset", "default"], "needs a CUDA GPU"),
    (["--model-family", "ltx", "--preset", "540p"], "has no preset"),
    (["--model-family", "ltx", "--preset", "1.3b"], "Wan preset"),
    (["--model-family", "ltx", "--preset", "tiny", "--height", "100"], "multiple of 32"),
    (["--preset", "default"], "for --model-family runs"),
])
def test_family_arg_errors(argv, msg, tmp_path):
    with pytest.raises(SystemExit) as exc:
        e2e.main(argv + ["--out-dir", str(tmp_path)])
    assert msg in str(exc.value)


# ------------------------------------------------------------------------------------------- the table
def _report(family, *, sdpa=100.0, vid=90.0, kernel=40, fallback=0, stock=0, reasons=None, status="ok",
            preset="default", date="2026-12-01T10:00:00+00:00", failure=None, model=None):
    rep = {"metadata": {"date_utc": date, "gpu": "NVIDIA H200", "git_commit": "abcdef123", "torch": "2.11.0"},
           "mode": "forward-only", "model_family": family, "model": model or family.upper(), "preset": preset,
           "checkpoint": "x/y", "height": 480, "width": 832, "frames": 81, "batch": 1, "tokens": 32760, "heads": 12,
           "head_dim": 128, "layers": "30", "params": 1_418_996_800, "device": "cuda", "dtype": "bf16",
           "timing_method": "cuda events", "iters": 5, "warmup": 2, "status": status}
    if status == "ok":
        rep.update(results={p: {"forward_stats_ms": {"median": v}, "peak_mem_gib": 5.0}
                            for p, v in (("sdpa", sdpa), ("vidattn", vid))},
                   profiles={"sdpa": {"attention_share": 0.56}, "vidattn": {"attention_share": 0.52}},
                   speedup={"per_forward_median": sdpa / vid}, fidelity={"output_rel_l2": 1.5e-3},
                   attention_calls={"sdpa": {"calls": kernel + fallback + stock},
                                    "vidattn": {"calls": kernel + fallback + stock, "kernel": kernel,
                                                "fallback": fallback, "stock": stock,
                                                "fallback_reasons": reasons or {}}})
    else:
        rep.update(results={}, profiles={}, attention_calls={}, failure=failure)
    return rep


def _write(results, name, rep):
    d = results / name
    d.mkdir(parents=True)
    (d / "report.json").write_text(json.dumps(rep))


def test_table_from_synthetic_reports(tmp_path):
    res = tmp_path / "results"
    _write(res, "forward_wan_20261201", _report("wan", model="Wan2.1-T2V-1.3B", sdpa=618.25, vid=586.5, kernel=60))
    _write(res, "forward_wan_20261130", _report("wan", sdpa=999.0, vid=1.0, date="2026-11-30T10:00:00+00:00"))
    _write(res, "forward_allegro_20261201",
           _report("allegro", model="Allegro (2.8B)", sdpa=12000.0, vid=12010.0, kernel=0, fallback=64,
                   reasons={"head dim 96 is not supported": 64}))
    _write(res, "forward_hunyuan_video_20261201",
           _report("hunyuan_video", model="HunyuanVideo-13B", status="failed",
                   failure={"failed_at": "sdpa", "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate",
                            "oom": True, "peak_mem_gib": 130.5}))
    _write(res, "forward_ltx-tiny_20261201", _report("ltx", preset="tiny"))          # tiny: ignored
    legacy = _report("wan")
    del legacy["model_family"]
    _write(res, "forward_1.3b_20261130", legacy)                                      # Wan-only report: ignored
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Results\n\n{table.BEGIN}\nnot measured yet\n{table.END}\n\nafter\n")

    out = table.main(["--results", str(res), "--out-dir", str(tmp_path / "o"), "--readme", str(readme)])
    md = (tmp_path / "o" / "cross_model_20261201.md").read_text()
    data = json.loads((tmp_path / "o" / "cross_model_20261201.json").read_text())
    assert out["md"].endswith("cross_model_20261201.md")
    assert [r["model_family"] for r in data["rows"]] == ["wan", "allegro"]   # family order; newest wan report
    wan = data["rows"][0]
    assert wan["sdpa_ms"] == 618.25 and wan["vidattn_ms"] == 586.5 and wan["kernel_calls"] == 60
    assert ("| Wan2.1-T2V-1.3B | 480×832×81 | 32760 | 1 | 12×128 | 1.42B | 618.2 | 586.5 | **1.054×** | "
            "56.0 % |") in md
    assert "999.0" not in md                                                          # the older report lost
    assert "| 0 / 64 |" in md and "head dim 96 is not supported" in md
    assert "HunyuanVideo-13B" in md and "out of GPU memory in the sdpa forward" in md and "130.5 GiB" in md
    assert [r["model_family"] for r in data["failed"]] == ["hunyuan_video"]
    assert "ltx" in data["not_measured"] and "wan14b" in data["not_measured"] and "wan" not in data["not_measured"]
    text = readme.read_text()
    assert "not measured yet\n" not in text and text.endswith(f"{table.END}\n\nafter\n")
    block = text[text.index(table.BEGIN):text.index(table.END)]
    assert "| Wan2.1-T2V-1.3B |" in block and "out of GPU memory" in block and "Not measured yet: wan14b" in block
    # filling again replaces the block (idempotent)
    table.main(["--results", str(res), "--out-dir", str(tmp_path / "o"), "--readme", str(readme)])
    assert readme.read_text() == text


def test_table_with_no_reports_writes_no_numbers(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    table.main(["--results", str(res), "--out-dir", str(tmp_path), "--date", "20261201"])
    md = (tmp_path / "cross_model_20261201.md").read_text()
    assert "No cross-model forward report has been measured yet." in md and "| model |" not in md
    assert "×" not in md and " ms" not in md and "GiB" not in md


def test_table_missing_readme_markers(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="cross-model:begin"):
        table.main(["--results", str(res), "--out-dir", str(tmp_path), "--readme", str(readme)])


def test_results_page_has_the_cross_model_block():
    text = (ROOT / "docs" / "results.md").read_text()
    assert text.count(table.BEGIN) == 1 and text.count(table.END) == 1
    assert text.index("## Across models") < text.index(table.BEGIN) < text.index(table.END)


# ------------------------------------------------------------------------------------------- the device stage
def test_device_run_has_cross_model_stage_outside_the_default_set():
    sh = (ROOT / "dev" / "probes" / "device_run.sh").read_text()
    assert "ALL_STAGES=(build smoke gpu-tests sanitizer bench e2e forward cross-model)" in sh
    assert "DEFAULT_STAGES=(build gpu-tests sanitizer bench e2e forward)" in sh
    assert subprocess.run(["bash", "-n", str(ROOT / "dev" / "probes" / "device_run.sh")]).returncode == 0
    r = subprocess.run(["bash", str(ROOT / "dev" / "probes" / "device_run.sh"), "nope"], capture_output=True, text=True)
    assert r.returncode == 2 and "cross-model" in r.stderr


def test_plan_lines_for_the_stage(tmp_path, capsys):
    path = tmp_path / "plan"
    fams.main(["--timeouts-file", str(path), "ltx", "hunyuan_video:540p"])
    lines = [ln.split() for ln in path.read_text().splitlines()]
    assert [ln[:2] for ln in lines] == [["ltx", "default"], ["hunyuan_video", "540p"]]
    for ln in lines:
        tmo, w, i, est = map(int, ln[2:])
        assert tmo >= 2 * est and w >= 1 and i >= 1 and est > 0
    assert "estimates for budgeting" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="unknown preset"):
        fams.main(["ltx:540p"])


def test_gpu_family_table_sizes_are_valid():
    """Every run scripts/gpu_family_table.sh makes names a family, a preset and a frame count the family accepts,
    so the device run does not die on an argument error."""
    import re

    text = (ROOT / "scripts" / "gpu_family_table.sh").read_text()
    runs = re.findall(r"\b([a-z0-9_]+):(default|short|540p|tiny):(\d*)", text)
    assert {r[0] for r in runs} == set(fams.FAMILIES)
    for name, preset, frames in runs:
        base = fams.size_for(name, preset)
        size = fams.Size(base.height, base.width, int(frames) if frames else base.frames)
        fams.check_size(name, size, fams.config_for(name, preset))
