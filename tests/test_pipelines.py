"""pipelines/: offline Wan pipelines (configs, seeded weights, embeddings, latents, validation). CPU, fast."""
import json
import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `pipelines` is not an installed package

from pipelines import (PRESETS, PipelineError, build_pipeline, decode_latents, denoise, initial_latents,
                       prompt_pair, text_embeddings, token_count, validate_size)
from pipelines.measure import ForwardTimer, attention_share, jsonable, rel_l2, spread, video_fidelity
from pipelines.wan import check_model_dir


from _support import one_thread  # noqa: E402,F401 - an autouse fixture


@pytest.fixture(scope="module")
def tiny():
    return build_pipeline("tiny", device="cpu", dtype=torch.float32, seed=0)


def test_real_configs():
    small, big = PRESETS["1.3b"].transformer, PRESETS["14b"].transformer
    assert (small["num_layers"], small["num_attention_heads"], small["attention_head_dim"], small["ffn_dim"]) == \
        (30, 12, 128, 8960)
    assert (big["num_layers"], big["num_attention_heads"], big["attention_head_dim"], big["ffn_dim"]) == \
        (40, 40, 128, 13824)
    for cfg in (small, big):
        assert cfg["text_dim"] == 4096 and cfg["in_channels"] == cfg["out_channels"] == 16
        assert list(cfg["patch_size"]) == [1, 2, 2] and cfg["qk_norm"] == "rms_norm_across_heads"
    assert token_count(480, 832, 81) == 32760  # ANCHORS' Wan 2.1 sequence length


def test_1_3b_parameter_count_on_meta():
    from diffusers import WanTransformer3DModel

    with torch.device("meta"):
        model = WanTransformer3DModel(**PRESETS["1.3b"].transformer)
    n = sum(p.numel() for p in model.parameters())
    assert 1.3e9 < n < 1.5e9, n


def test_tiny_pipeline_runs_and_is_seeded(tiny):
    again = build_pipeline("tiny", device="cpu", dtype=torch.float32, seed=0)
    other = build_pipeline("tiny", device="cpu", dtype=torch.float32, seed=1)
    a, b, c = (next(p.transformer.parameters()) for p in (tiny, again, other))
    assert torch.equal(a, b) and not torch.equal(a, c)
    pe, ne = prompt_pair(tiny, "a cat")
    assert pe.shape == (1, 512, PRESETS["tiny"].transformer["text_dim"])
    lat = initial_latents(tiny, 64, 96, 9, seed=0)
    assert lat.shape == (1, 16, 3, 8, 12)
    out = denoise(tiny, prompt_embeds=pe, negative_prompt_embeds=ne, latents=lat, height=64, width=96, frames=9,
                  steps=2, guidance=5.0, progress=False)
    assert out.shape == lat.shape and torch.isfinite(out).all() and 0.05 < out.std() < 20
    video = decode_latents(tiny, out)
    assert video.shape == (1, 9, 64, 96, 3) and video.min() >= 0 and video.max() <= 1


def test_bf16_cast_keeps_fp32_modules():
    pipe = build_pipeline("tiny", device="cpu", dtype=torch.bfloat16, seed=0)
    tr = pipe.transformer
    assert tr.blocks[0].attn1.to_q.weight.dtype == torch.bfloat16
    assert tr.blocks[0].scale_shift_table.dtype == torch.float32
    assert tr.rope.freqs_cos.dtype != torch.bfloat16
    assert pipe.vae.dtype == torch.float32


def test_embeddings_deterministic():
    a = text_embeddings("hello world", 16)
    assert torch.equal(a, text_embeddings("hello world", 16))
    assert not torch.equal(a, text_embeddings("hello world!", 16))
    assert a.shape == (1, 512, 16) and a[:, 100:].abs().sum() == 0 and a[:, 0].abs().sum() > 0


@pytest.mark.parametrize("h,w,f,msg", [(480, 830, 81, "multiple of 16"), (0, 832, 81, "multiple of 16"),
                                       (480, 832, 80, "4k+1"), (480, 832, 0, "4k+1")])
def test_validate_size(h, w, f, msg):
    with pytest.raises(PipelineError, match=re.escape(msg)):
        validate_size(h, w, f)
    validate_size(480, 832, 81)


def test_check_model_dir(tmp_path):
    with pytest.raises(PipelineError, match="no such directory"):
        check_model_dir(tmp_path / "missing")
    with pytest.raises(PipelineError, match="model_index.json"):
        check_model_dir(tmp_path)
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    with pytest.raises(PipelineError, match="not a Wan pipeline"):
        check_model_dir(tmp_path)
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "WanPipeline"}))
    with pytest.raises(PipelineError, match="transformer/config.json"):
        check_model_dir(tmp_path)


def test_local_folder_roundtrip(tmp_path, tiny):
    tiny.transformer.save_pretrained(tmp_path / "transformer")
    tiny.vae.save_pretrained(tmp_path / "vae")
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "WanPipeline"}))
    pipe = build_pipeline(model_dir=tmp_path, device="cpu", dtype=torch.float32)
    a, b = next(pipe.transformer.parameters()), next(tiny.transformer.parameters())
    assert torch.equal(a, b)


def test_measure_helpers(tiny):
    s = spread([3.0, 1.0, 2.0, float("nan")])
    assert s["median"] == 2.0 and s["min"] == 1.0 and s["max"] == 3.0 and s["n"] == 3
    assert spread([])["median"] is None
    assert rel_l2(torch.ones(4), torch.ones(4)) == 0.0
    assert abs(rel_l2(torch.ones(4) * 1.1, torch.ones(4)) - 0.1) < 1e-6
    v = torch.rand(3, 16, 16, 3).numpy()
    same = video_fidelity(v, v)
    assert same["psnr_db"] == float("inf") and same["identical"]
    noisy = video_fidelity((v + 0.01).clip(0, 1), v)
    assert 30 < noisy["psnr_db"] < 60 and 0.5 < noisy["ssim"] <= 1.0
    assert json.loads(json.dumps(jsonable({"x": float("inf"), "y": [float("nan")]}))) == {"x": "inf", "y": ["nan"]}

    timer = ForwardTimer(tiny.transformer, "cpu")
    x = torch.randn(1, 16, 1, 8, 8)
    t = torch.tensor([500.0])
    e = torch.randn(1, 512, PRESETS["tiny"].transformer["text_dim"])
    with torch.no_grad():
        for _ in range(2):
            tiny.transformer(x, t, e)
            tiny.transformer(x, t, e)
            timer.mark_step()
    timer.close()
    assert len(timer.forward_ms()) == 4 and timer.forwards_per_step() == [2, 2]
    assert all(ms > 0 for ms in timer.step_ms())

    def fwd():
        with torch.no_grad():
            tiny.transformer(x, t, e)

    prof = attention_share(fwd, torch.device("cpu"))
    assert 0 < prof["attention_share"] <= 1
    assert any("scaled_dot_product" in m["name"] or "vidattn" in m["name"] for m in prof["matched_ops"])


def test_attention_call_times_wraps_both_functions_and_restores_them(fresh_warnings):
    """attention_call_times: every attention call the model makes is timed once, grouped by (function, q shape,
    k shape), the outermost call only where vidattn.attention falls back to SDPA inside; both functions are
    restored afterwards, also when the forward raises."""
    import torch.nn.functional as F

    import vidattn
    from pipelines.measure import attention_call_times
    from vidattn import ops as vops

    sdpa, vattn = F.scaled_dot_product_attention, vops.attention
    q = torch.randn(1, 2, 16, 8)
    k = torch.randn(1, 2, 4, 8)

    def fwd():
        F.scaled_dot_product_attention(q, q, q)
        F.scaled_dot_product_attention(q, k, k)
        F.scaled_dot_product_attention(query=q, key=k, value=k)
        with pytest.warns(UserWarning):
            vops.attention(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2), layout="bshd")  # falls back

    groups = attention_call_times(fwd, torch.device("cpu"))
    by = {(g["fn"], tuple(g["k_shape"])): g for g in groups}
    assert by[("F.scaled_dot_product_attention", (1, 2, 16, 8))]["calls"] == 1
    assert by[("F.scaled_dot_product_attention", (1, 2, 4, 8))]["calls"] == 2
    assert by[("vidattn.attention", (1, 4, 2, 8))]["calls"] == 1 and len(groups) == 3
    assert all(g["ms"] >= 0 and g["ms_per_call"] == pytest.approx(g["ms"] / g["calls"]) for g in groups)
    assert F.scaled_dot_product_attention is sdpa and vops.attention is vattn

    def boom():
        raise RuntimeError("forward failed")

    with pytest.raises(RuntimeError, match="forward failed"):
        attention_call_times(boom, torch.device("cpu"))
    assert F.scaled_dot_product_attention is sdpa and vops.attention is vattn and vidattn.attention is vattn


def test_device_kernels_leave_out_annotation_mirrors():
    """The profiler mirrors a record_function range onto the device timeline; attention_share must not count it as
    a kernel (flagged is_user_annotation where torch says so, or named like a CPU event of the same profile)."""
    from types import SimpleNamespace as NS

    from pipelines.measure import device_kernels

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [NS(name="vidattn::attention", device_type=cpu),
              NS(name="vidattn::attention", device_type=cuda),  # mirror, unflagged (older torch)
              NS(name="my_range", device_type=cuda, is_user_annotation=True),
              NS(name="void vidattn::sm90::flash_fwd_kernel<128, 2, 176, false, false>(vidattn::sm90::FwdParams)",
                 device_type=cuda, is_user_annotation=False),
              NS(name="cudnn_generated_fort_native_sdpa_sm90_flash_fprop", device_type=cuda)]
    assert [e.name[:12] for e in device_kernels(events)] == ["void vidattn", "cudnn_genera"]


def test_attention_names():
    """Which profiler rows count as attention: the kernels of every path (vidattn's kernel and pre-pass, cuDNN,
    FlashAttention, SageAttention2's kernel and pre-passes), not the fused RoPE, GEMMs or elementwise kernels."""
    from pipelines.measure import is_attention_name

    yes = ["void vidattn::sm90::q8_fwd_kernel<128, 3>(vidattn::sm90::Q8FwdParams)",
           "void vidattn::sm90::q8_stats_q_kernel<128, false>(vidattn::sm90::Q8PrepParams, int, int)",
           "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
           "void qk_int8_sv_f8_attn_kernel<64u, 128u, 128u, 128u>(CUtensorMap_st, float*)",
           "quant_query_per_thread_int8_kernel", "void TransposePadPermuteKernel<128u, 64u, true, __nv_bfloat16>()",
           "vidattn::attention", "aten::scaled_dot_product_attention"]
    no = ["void vidattn::rope::rope_kernel<__nv_bfloat16, float, 0, false>(vidattn::rope::RopeParams)",
          "nvjet_sm90_tst_256x152_64x4_1x2_h_bz_coopA_bias_TNT", "void flash_bwd_dq_kernel<128>()",
          "void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl>()"]
    assert all(is_attention_name(n) for n in yes), [n for n in yes if not is_attention_name(n)]
    assert not any(is_attention_name(n) for n in no), [n for n in no if is_attention_name(n)]


def test_top_kernels_sums_per_name_and_ranks_by_device_time():
    """attention_share's top_kernels: one row per kernel name with its summed device time and launch count, longest
    first, at most n rows, names cut at 160 characters."""
    from types import SimpleNamespace as NS

    from pipelines.measure import top_kernels

    long = "void gemm_" + "x" * 300
    evs = [NS(name="ln", device_time_total=5.0), NS(name=long, device_time_total=400.0),
           NS(name="ln", device_time_total=7.0), NS(name="rope", cuda_time_total=9.0), NS(name="copy")]
    rows = top_kernels(evs, n=3)
    assert [r["name"] for r in rows] == [long[:160], "ln", "rope"]
    assert [r["calls"] for r in rows] == [1, 2, 1]
    assert rows[0]["ms"] == pytest.approx(0.4) and rows[1]["ms"] == pytest.approx(0.012)
    assert len(top_kernels(evs)) == 4


@pytest.mark.gpu
def test_cached_sdpa_lse_on_cuda_matches_the_math_path():
    """pipelines.cached.sdpa_lse (the Wan-Animate-2 SDPA column's attention): FlashAttention's output and LSE on the
    GPU against the fp32 math path, at the frames-as-batch and the long shape's layout (BSHD views)."""
    from pipelines.cached import sdpa_lse
    from vidattn.ops import sdpa_fallback

    g = torch.Generator(device="cpu").manual_seed(3)
    q, k, v = (torch.randn(2, n, 4, 128, generator=g).cuda().bfloat16() for n in (300, 517, 517))
    out, lse = sdpa_lse(q, k, v)
    ref, ref_lse = sdpa_fallback(*(t.float().transpose(1, 2) for t in (q, k, v)), 128 ** -0.5, None, True)
    assert out.shape == q.shape and lse.shape == (2, 4, 300) and lse.dtype == torch.float32
    torch.testing.assert_close(out.float(), ref.transpose(1, 2), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, ref_lse, atol=1e-2, rtol=1e-3)


def test_cast_keeps_the_class_fp32_list_and_only_wan_falls_back():
    """pipelines.wan's cast (Wan's transformer and VAE) and pipelines.families' (every other family): both keep the
    class's `_keep_in_fp32_modules` in fp32 (modules by name, parameters by their last name); without one, Wan's
    falls back to its list (norms, RoPE, time embedder, scale-shift tables), the families' keeps nothing."""
    from pipelines import families, wan

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = torch.nn.LayerNorm(4)
            self.proj = torch.nn.Linear(4, 4)
            self.scale_shift_table = torch.nn.Parameter(torch.zeros(2, 4))

    class ToyKeep(Toy):
        _keep_in_fp32_modules = ["proj"]

    def dtypes(m):
        return (m.norm1.weight.dtype, m.proj.weight.dtype, m.scale_shift_table.dtype)

    bf, f32 = torch.bfloat16, torch.float32
    assert dtypes(wan._cast_like_from_pretrained(Toy(), bf)) == (f32, bf, f32)
    assert dtypes(families._cast(Toy(), bf)) == (bf, bf, bf)
    for cast in (wan._cast_like_from_pretrained, families._cast):
        assert dtypes(cast(ToyKeep(), bf)) == (bf, f32, bf)
        assert dtypes(cast(ToyKeep().to(bf), f32)) == (f32, f32, f32)


def test_video_pipelines_that_name_their_frame_count_otherwise_are_taken(tmp_path):
    """--model DIR takes any diffusers video pipeline: Latte names its frame count `video_length`, Sana-Video `frames`
    (both used to be refused as "not a video pipeline"); an image pipeline is still refused."""
    import json

    import diffusers

    from pipelines import PipelineError
    from pipelines.generic import call_defaults, check_pipeline_dir, frames_param

    assert frames_param(diffusers.LattePipeline) == "video_length"
    assert frames_param(diffusers.SanaVideoPipeline) == "frames"
    assert frames_param(diffusers.WanPipeline) == "num_frames"
    for name, ok in (("LattePipeline", True), ("SanaVideoPipeline", True), ("FluxPipeline", False)):
        d = tmp_path / name
        d.mkdir()
        (d / "model_index.json").write_text(json.dumps({"_class_name": name, "transformer": ["diffusers", "X"]}))
        if ok:
            assert check_pipeline_dir(d)[1] == name
        else:
            with pytest.raises(PipelineError, match="not a video pipeline"):
                check_pipeline_dir(d)
    fake = type("P", (), {"__call__": lambda self, video_length=16, height=512: None})()
    assert call_defaults(fake)["num_frames"] == 16 and call_defaults(fake)["height"] == 512
