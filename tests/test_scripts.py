"""scripts/generate_video.py and scripts/e2e_report.py on the tiny preset (CPU), plus their error messages."""
import json
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _support import cpu_only as _cpu_only, load_script, one_thread  # noqa: E402,F401 - an autouse fixture


def _load(name):
    return load_script(ROOT / "scripts" / f"{name}.py", importable=True)


gen = _load("generate_video")
e2e = _load("e2e_report")


def test_generate_tiny_writes_playable_mp4(tmp_path, monkeypatch, capsys):
    import imageio.v3 as iio

    _cpu_only(monkeypatch)
    out = tmp_path / "sub" / "v.mp4"
    res = gen.main(["--prompt", "a fox", "--out", str(out), "--steps", "2", "--no-progress"])
    log = capsys.readouterr().out
    assert "tiny preset" in log and "falls back to SDPA" in log  # the CPU switch is announced
    assert "transformer:" in log and "total" in log
    frames = iio.imread(out)
    assert frames.shape == (9, 64, 96, 3)
    assert res["frames"] == 9 and res["transformer_ms"] > 0 and len(res["forward_ms"]) == 4


def test_generate_sdpa_custom_size(tmp_path, monkeypatch):
    import imageio.v3 as iio

    _cpu_only(monkeypatch)
    out = tmp_path / "v.mp4"
    gen.main(["--preset", "tiny", "--attn", "sdpa", "--height", "48", "--width", "64", "--frames", "5",
              "--steps", "1", "--guidance", "1.0", "--out", str(out), "--no-progress"])
    assert iio.imread(out).shape == (5, 48, 64, 3)


@pytest.mark.parametrize("argv,msg", [
    (["--height", "50"], "multiple of 16"),
    (["--width", "100"], "multiple of 16"),
    (["--frames", "10"], "4k+1"),
    (["--steps", "0"], "--steps"),
    (["--preset", "1.3b"], "needs a CUDA GPU"),
    (["--preset", "14b", "--device", "cpu"], "needs a CUDA GPU"),
    (["--device", "cuda"], "CUDA is not available"),
    (["--model", "/nonexistent/wan"], "no such directory"),
])
@pytest.mark.parametrize("script", ["generate", "e2e"])
def test_clean_errors(argv, msg, script, monkeypatch, tmp_path, capsys):
    _cpu_only(monkeypatch)
    main = gen.main if script == "generate" else e2e.main
    extra = ["--out", str(tmp_path / "x.mp4")] if script == "generate" else ["--out-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as exc:
        main(argv + extra)
    # the script's own one-line error, or argparse's (exit code 2, the message on stderr)
    assert msg in (capsys.readouterr().err if exc.value.code == 2 else str(exc.value.code))
    assert not list(tmp_path.glob("*.mp4"))


def test_model_dir_not_wan(tmp_path, monkeypatch):
    _cpu_only(monkeypatch)
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    with pytest.raises(SystemExit) as exc:
        gen.main(["--model", str(tmp_path), "--out", str(tmp_path / "x.mp4")])
    assert "FluxPipeline, not a video pipeline" in str(exc.value.code)


def _finite_pos(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_e2e_report_tiny(tmp_path, monkeypatch, capsys):
    _cpu_only(monkeypatch)
    out = tmp_path / "rep"
    e2e.main(["--preset", "tiny", "--steps", "3", "--out-dir", str(out), "--sample-frames", "5"])
    log = capsys.readouterr().out
    assert "FELL BACK TO SDPA" in log
    for f in ("report.json", "report.md", "latency.png", "first_frames.png", "sdpa.mp4", "vidattn.mp4"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    rep = json.loads((out / "report.json").read_text())
    for key in ("metadata", "results", "speedup", "fidelity", "profiles", "attention_paths", "fallback"):
        assert key in rep, key
    assert rep["metadata"]["git_commit"] and rep["metadata"]["command"] and rep["metadata"]["date_utc"]
    assert rep["mode"] == "generation" and rep["tokens"] == 72 and rep["timing_method"] == "time.perf_counter"
    for path in ("sdpa", "vidattn"):
        r = rep["results"][path]
        assert len(r["forward_ms"]) == 6 and r["forwards_per_step"] == [2, 2, 2]
        assert all(_finite_pos(x) for x in r["forward_ms"] + r["step_ms"])
        assert r["step_stats_ms"]["n"] == 2  # step 0 excluded as warm-up
        assert _finite_pos(r["denoise_ms"]) and _finite_pos(r["decode_ms"]) and r["latents_finite"]
        prof = rep["profiles"][path]
        assert 0 < prof["attention_share"] <= 1 and prof["matched_ops"]
    # Both runs are SDPA on the CPU: no speedup (the ratio of the two SDPA timings is kept apart, for the record).
    assert set(rep["speedup"]) >= {"per_forward_median"} and all(v is None for v in rep["speedup"].values())
    assert _finite_pos(rep["sdpa_vs_sdpa_timing"]["speedup"]["per_forward_median"])
    assert all(r["speedup"] is None for r in rep["attention_per_call"].values())
    assert "both paths ran SDPA" in (out / "report.md").read_text()
    # The outputs agree exactly (or to float noise).
    fi = rep["fidelity"]
    assert fi["psnr_db"] == "inf" or fi["psnr_db"] > 60
    assert fi["latent_rel_l2"] < 1e-5 and 0.99 <= fi["ssim"] <= 1.0
    assert rep["fallback"]["all_fallback"] is True
    assert all(v["path"] == "sdpa-fallback" and v["reason"] for v in rep["attention_paths"].values())
    per_call = rep["attention_per_call"]
    assert set(per_call) == set(rep["attention_paths"])
    assert all(r["sdpa"]["calls"] > 0 and r["vidattn"]["calls"] == r["sdpa"]["calls"] for r in per_call.values())
    md = (out / "report.md").read_text()
    assert "FELL BACK TO SDPA" in md and "| sdpa |" in md and "PSNR" in md


def test_e2e_forward_only_tiny(tmp_path, monkeypatch):
    _cpu_only(monkeypatch)
    out = tmp_path / "fwd"
    rep = e2e.main(["--preset", "tiny", "--forward-only", "--iters", "3", "--warmup", "1", "--out-dir", str(out)])
    assert (out / "report.json").is_file() and (out / "latency.png").is_file() and (out / "report.md").is_file()
    assert not list(out.glob("*.mp4"))
    assert rep["mode"] == "forward-only"
    for path in ("sdpa", "vidattn"):
        assert len(rep["results"][path]["forward_ms"]) == 3
        assert _finite_pos(rep["results"][path]["forward_stats_ms"]["median"])
    assert rep["fidelity"]["output_rel_l2"] < 1e-5


@pytest.mark.parametrize("argv", [
    ["--preset", "tiny", "--forward-only", "--iters", "2", "--warmup", "1"],  # the Wan report
    ["--family", "cogvideox", "--tiny", "--iters", "1", "--warmup", "0", "--no-profile"],  # a family's forwards
    ["--family", "cogvideox", "--generate", "--tiny", "--steps", "1", "--no-video"],  # a family's generation
], ids=["wan", "family", "generate"])
def test_e2e_tiny_report_defaults_outside_the_results(argv, tmp_path, monkeypatch):
    # A tiny run is a CPU smoke test: without --out-dir it goes to the git-ignored out/, never beside the committed
    # results in bench/results/ (where a measurement's report still goes by default).
    _cpu_only(monkeypatch)
    monkeypatch.setattr(e2e, "ROOT", tmp_path)
    rep = e2e.main(argv)
    out = Path(rep["out_dir"])
    assert out.parent == tmp_path / "out" and (out / "report.json").is_file()
    assert not (tmp_path / "bench").exists()
    assert e2e.default_out_dir("forward_wan_x", tiny=False) == tmp_path / "bench" / "results" / "forward_wan_x"


@pytest.mark.gpu
def test_e2e_report_gpu_small(tmp_path):
    """On a GPU: a reduced-size 1.3B-architecture report in bf16 (kernel path on Hopper)."""
    out = tmp_path / "gpu"
    rep = e2e.main(["--preset", "1.3b", "--height", "240", "--width", "416", "--frames", "21", "--steps", "3",
                    "--out-dir", str(out), "--no-video"])
    assert rep["timing_method"] == "cuda events"
    assert rep["fidelity"]["latent_rel_l2"] < 0.1
    for path in ("sdpa", "vidattn"):
        assert rep["profiles"][path]["total_ms"] > 0
        prof = rep["profiles"][path]
        assert prof["attention_share"] and prof["attention_share"] > 0.05, prof
    if torch.cuda.get_device_capability()[0] == 9:
        assert not rep["fallback"]["all_fallback"], rep["fallback"]["summary"]
        # the per-call times find both kinds of call under both paths, as many under each (no speed asserted: at
        # this size a call is bound by its host-side launch path, not by the kernel)
        for kind, row in rep["attention_per_call"].items():
            assert row["sdpa"]["calls"] > 0 and row["vidattn"]["calls"] == row["sdpa"]["calls"], (kind, row)
            assert _finite_pos(row["sdpa"]["ms_per_call"]) and _finite_pos(row["vidattn"]["ms_per_call"]), (kind, row)


def test_e2e_attention_per_call_matches_calls_by_shape():
    """The report's per-call table: each attention call of the model is found in each path's profile by its q and
    k shapes whatever their layout (SDPA's (B, H, S, D) against the model's (B, S, H, D)); a path without a match
    has no time and no ratio."""
    paths = {"self_attn": {"shape_q": [1, 64, 12, 128], "shape_kv": [1, 64, 12, 128]},
             "cross_attn": {"shape_q": [1, 64, 12, 128], "shape_kv": [1, 8, 12, 128]}}
    sdpa = [{"q_shape": [1, 12, 64, 128], "k_shape": [1, 12, 64, 128], "calls": 4, "ms": 40.0},
            {"q_shape": [1, 12, 64, 128], "k_shape": [1, 12, 8, 128], "calls": 4, "ms": 2.0}]
    vid = [{"q_shape": [1, 64, 12, 128], "k_shape": [1, 64, 12, 128], "calls": 4, "ms": 32.0}]
    rows = e2e.attention_per_call(paths, {"sdpa": sdpa, "vidattn": vid})
    assert rows["self_attn"]["sdpa"]["ms_per_call"] == pytest.approx(10.0)
    assert rows["self_attn"]["vidattn"]["ms_per_call"] == pytest.approx(8.0)
    assert rows["self_attn"]["speedup"] == pytest.approx(1.25)
    assert rows["cross_attn"]["vidattn"] == {"calls": 0, "ms_per_call": None}
    assert rows["cross_attn"]["speedup"] is None
    lines = e2e.per_call_lines({"attention_per_call": rows})
    assert any(line.startswith("| self_attn | 10.000 | 8.000 | 4 / 4 | 1.250x |") for line in lines)
    assert e2e.per_call_lines({"attention_per_call": {}}) == []


def test_git_commit_prefers_the_launcher_supplied_commit(monkeypatch):
    """On the device machine the copied tree carried a .git of an older base commit; the commit the launcher names
    must win over what git there says."""
    from vidattn import envinfo

    monkeypatch.setenv("VIDATTN_GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567")
    assert envinfo.git_commit() == "0123456789abcdef0123456789abcdef01234567"
    assert envinfo.run_metadata([])["git_commit"].startswith("0123456")
    monkeypatch.delenv("VIDATTN_GIT_COMMIT")
    assert envinfo.git_commit() != "0123456789abcdef0123456789abcdef01234567"


def test_short_commit_keeps_dirty_and_unknown():
    from vidattn import envinfo

    assert envinfo.short_commit("0123456789abcdef") == "0123456"
    assert envinfo.short_commit("0123456789abcdef-dirty") == "0123456-dirty"
    assert envinfo.short_commit("unknown") == "unknown"


def test_run_metadata_names_a_prebuilt_kernel_library(monkeypatch):
    from vidattn import envinfo

    monkeypatch.setenv("VIDATTN_LIBRARY", "/some/where/lib_pf0.so")
    monkeypatch.setenv("VIDATTN_LIBRARY_FLAGS", "-DVIDATTN_Q_L2_PREFETCH=0")
    meta = envinfo.run_metadata([])
    assert "gpu_uuid" in meta  # None without a GPU; on one, which physical card ran
    assert meta["kernel_library"] == "lib_pf0.so" and meta["kernel_build_flags"] == "-DVIDATTN_Q_L2_PREFETCH=0"


@pytest.mark.parametrize("block,symbol,env,valid,forced,load_time,invalid", [
    ("d64_warpgroups", "vidattn_sm90_set_d64_warpgroups", "VIDATTN_D64_WARPGROUPS", (0, 2, 3), 3, 2, 4),
    ("d128_block_n", "vidattn_sm90_set_d128_block_n", "VIDATTN_D128_BLOCK_N", (0, 128, 176), 128, 176, 96),
])
def test_forced_build_block_restores_the_load_time_setting(monkeypatch, block, symbol, env, valid, forced, load_time,
                                                            invalid):
    """_ext.d64_warpgroups / d128_block_n force a build for a block, then put back what the library loaded with (its
    environment variable, else 0: the launcher's choice); a value the library refuses raises ValueError."""
    from vidattn import _ext

    calls = []
    lib = type("FakeLib", (), {symbol: staticmethod(lambda n: calls.append(n) or (0 if n in valid else 1))})()
    monkeypatch.delenv(env, raising=False)
    with getattr(_ext, block)(forced, lib):
        assert calls == [forced]
    assert calls == [forced, 0]
    monkeypatch.setenv(env, str(load_time))
    with getattr(_ext, block)(forced, lib):
        pass
    assert calls == [forced, 0, forced, load_time]
    with pytest.raises(ValueError):
        getattr(_ext, "set_" + block)(invalid, lib)


# ------------------------------------------------------------------------ LTX-2 and any pipeline folder
def _streams(path):
    import subprocess

    import imageio_ffmpeg

    err = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-i", str(path)], capture_output=True, text=True).stderr
    return [line for line in err.splitlines() if "Stream #" in line]


@pytest.mark.parametrize("argv,msg", [
    (["--family", "nosuch"], "unknown --family 'nosuch'"),
    (["--family", "ltx2", "--device", "cpu", "--preset", "1.3b"], "needs a CUDA GPU"),
])
def test_generate_family_errors(argv, msg, monkeypatch, tmp_path):
    _cpu_only(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        gen.main(argv + ["--out", str(tmp_path / "x.mp4")])
    assert msg in str(exc.value.code)


@pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")
def test_ltx2_generation_and_any_pipeline_folder(tmp_path, monkeypatch, capsys):
    """--family ltx2 writes an mp4 with the audio track; the same tiny pipeline saved to a folder runs through
    --model DIR in both scripts (model_index.json picks LTX2Pipeline; no text encoder: seeded embeddings)."""
    _cpu_only(monkeypatch)
    out = tmp_path / "ltx2.mp4"
    res = gen.main(["--family", "ltx2", "--tiny", "--steps", "1", "--out", str(out)])
    assert res["audio"] and res["apply"] == {"kernel": 14, "backend": 0, "stock": 0}
    streams = _streams(out)
    assert any("Video:" in s for s in streams) and any("Audio:" in s for s in streams), streams
    text = capsys.readouterr().out
    assert text.count("the vidattn kernel cannot run here") == 1 and "speedup" not in text

    from pipelines.ltx2 import build_ltx2_pipeline

    folder = tmp_path / "pipe"
    build_ltx2_pipeline("tiny", dtype=torch.float32).save_pretrained(str(folder))
    small = ["--height", "32", "--width", "32", "--frames", "9", "--steps", "1"]
    res = gen.main(["--model", str(folder), "--out", str(tmp_path / "m.mp4")] + small)
    assert res["pipeline"] == "LTX2Pipeline" and res["audio"] and res["apply"]["kernel"] == 14

    rep = e2e.main(["--model", str(folder), "--out-dir", str(tmp_path / "rep")] + small)
    assert rep["pipeline"] == "LTX2Pipeline" and rep["all_fallback"] and rep["speedup"] is None
    assert rep["fidelity"]["psnr_db"] == float("inf")  # both paths are SDPA on the CPU: identical videos
    assert rep["results"]["vidattn"]["attention_calls"]["fallback"] > 0
    for f in ("report.json", "report.md", "first_frames.png", "sdpa.mp4", "vidattn.mp4"):
        assert (tmp_path / "rep" / f).is_file()
    assert "no speedup is reported" in (tmp_path / "rep" / "report.md").read_text()
    text = capsys.readouterr().out
    assert "speedup (SDPA" not in text and "no speedup to report" in text


def test_zoo_forward_smoke(tmp_path, monkeypatch):
    """scripts/zoo_forward.py's plumbing on the CPU: build, both paths, census, no speedup without a kernel call."""
    _cpu_only(monkeypatch)
    zoo = _load("zoo_forward")
    rows = zoo.main(["--smoke", "--only", "chronoedit", "--iters", "1", "--warmup", "0",
                     "--out", str(tmp_path / "zoo.json")])
    (row,) = rows
    assert row["apply"]["kernel"] == 8 and row["fallback_calls"] > 0 and row["kernel_calls"] == 0
    assert row["speedup"] is None and row["rel_l2"] == 0.0 and row["blocks"] == "4 of 40"
    assert json.loads((tmp_path / "zoo.json").read_text())[0]["family"] == "chronoedit"
    with pytest.raises(SystemExit, match="need a CUDA GPU"):
        zoo.main(["--only", "chronoedit"])


def test_model_dir_route_keeps_a_saved_text_encoder(tmp_path):
    """--model DIR: a Wan folder saved with its text encoder and tokenizer (a Hub snapshot), or with a second
    transformer (Wan 2.2 A14B), takes the pipeline path, which loads every component and encodes the prompt; only a
    Wan folder without a text encoder takes the Wan path (prompt hashed into embeddings). e2e_report keeps every Wan
    folder on its Wan path."""
    def folder(name, **entries):
        d = tmp_path / name
        d.mkdir()
        info = {"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"],
                "vae": ["diffusers", "AutoencoderKLWan"], "text_encoder": [None, None], "tokenizer": [None, None],
                "transformer_2": [None, None]}
        info.update(entries)
        for key, value in info.items():
            if isinstance(value, list) and value[0] is not None:
                (d / key).mkdir()
        (d / "model_index.json").write_text(json.dumps(info))
        return str(d)

    bare = folder("bare")
    full = folder("full", text_encoder=["transformers", "UMT5EncoderModel"], tokenizer=["transformers", "T5Tokenizer"])
    half = folder("half", text_encoder=["transformers", "UMT5EncoderModel"])
    moe = folder("moe", transformer_2=["diffusers", "WanTransformer3DModel"])
    other = folder("ltx", _class_name="LTXPipeline")
    assert gen._wan_path_for_model(bare) and gen._wan_path_for_model(half)
    assert not gen._wan_path_for_model(full) and not gen._wan_path_for_model(moe)
    assert not gen._wan_path_for_model(other)
    assert gen._wan_path_for_model(str(tmp_path / "missing"))  # the Wan path's checks name the problem
    assert all(gen._is_wan_dir(d) for d in (bare, full, half, moe)) and not gen._is_wan_dir(other)


@pytest.mark.parametrize("dtype", ["uint8", "float"])
def test_written_video_reads_back_with_its_colours(tmp_path, dtype):
    """write_video's mp4 holds the frames' colours (within H.264's rounding), from uint8 or float frames: diffusers'
    export_to_video multiplies every numpy frame by 255, which inverted uint8 frames (x -> 256 - x)."""
    import imageio.v3 as iio
    import numpy as np

    from pipelines import write_video

    levels = np.array([51, 128, 230], dtype=np.uint8)
    frames = np.zeros((5, 32, 48, 3), dtype=np.uint8)
    for i, level in enumerate(levels):
        frames[:, :, 16 * i:16 * (i + 1)] = level
    given = frames if dtype == "uint8" else frames.astype(np.float32) / 255.0
    back = iio.imread(write_video(given, tmp_path / "bars.mp4", fps=8))
    assert back.shape == frames.shape
    for i, level in enumerate(levels):
        got = float(back[:, 4:28, 16 * i + 4:16 * (i + 1) - 4].mean())
        assert abs(got - int(level)) < 6, (dtype, int(level), got)


@pytest.mark.parametrize("argv,msg", [
    (["--height", "0"], "--height: must be >= 1"),
    (["--steps", "0", "--family", "ltx2", "--tiny"], "--steps: must be >= 1"),
    (["--fps", "0"], "--fps: must be >= 1"),
    (["--flow-shift", "0"], "--flow-shift: must be > 0"),
])
def test_zero_is_refused_not_read_as_the_default(argv, msg, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        gen.main(argv + ["--out", str(tmp_path / "x.mp4")])
    assert exc.value.code == 2 and msg in capsys.readouterr().err


@pytest.mark.parametrize("out,msg", [("x.avi", "must name an .mp4 file"), ("folder", "is a folder")])
def test_bad_out_path_is_refused_before_any_model_is_built(out, msg, tmp_path, monkeypatch):
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        gen.main(["--out", out])
    assert msg in str(exc.value.code)


def test_flow_shift_is_refused_where_the_pipeline_keeps_its_scheduler(tmp_path, monkeypatch):
    _cpu_only(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        gen.main(["--family", "cogvideox", "--tiny", "--flow-shift", "2", "--out", str(tmp_path / "x.mp4")])
    assert "--flow-shift sets the Wan path's scheduler" in str(exc.value.code)


def test_e2e_out_dir_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(SystemExit) as exc:
        e2e.main(["--preset", "tiny", "--out-dir", str(f)])
    assert "is a file, not a folder" in str(exc.value.code)


@pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")
def test_family_generation_shows_its_steps_unless_asked_not_to(tmp_path, monkeypatch, capsys):
    _cpu_only(monkeypatch)
    gen.main(["--family", "cogvideox", "--tiny", "--steps", "2", "--out", str(tmp_path / "a.mp4")])
    assert "/2 [" in capsys.readouterr().err  # tqdm's bar over the 2 steps (leave=False clears it at the end)
    gen.main(["--family", "cogvideox", "--tiny", "--steps", "2", "--no-progress", "--out", str(tmp_path / "b.mp4")])
    assert "/2 [" not in capsys.readouterr().err


def test_a_size_the_pipeline_refuses_ends_in_its_reason(tmp_path, monkeypatch):
    """--family ltx2 --height 50: LTX-2's own check_inputs refuses it before the generation, as one line."""
    _cpu_only(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        gen.main(["--family", "ltx2", "--tiny", "--height", "50", "--out", str(tmp_path / "x.mp4")])
    assert "LTX2Pipeline refuses the call" in str(exc.value.code) and "divisible by 32" in str(exc.value.code)


def test_tiny_with_another_preset_is_refused(tmp_path):
    with pytest.raises(SystemExit) as exc:
        gen.main(["--tiny", "--preset", "1.3b", "--out", str(tmp_path / "x.mp4")])
    assert "ask for two sizes" in str(exc.value.code)
