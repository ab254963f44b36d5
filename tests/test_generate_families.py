"""pipelines/generate.py: every family with an offline pipeline adapter generates a tiny video end to end on the CPU
(tiny transformer from the registry, tiny VAE of the same compression, 2 steps) with vidattn applied; the families
left out say why. CPU, about a second per family after the imports."""
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import generate_video as gen  # noqa: E402
from pipelines import generate as G  # noqa: E402
from pipelines import registry  # noqa: E402
from pipelines.census import AttentionCensus  # noqa: E402

ADAPTED = sorted(G.ADAPTERS)


from _support import one_thread  # noqa: E402,F401 - an autouse fixture


def test_registry_and_adapters_agree():
    assert set(registry.GENERATES) == set(G.generating())
    assert tuple(gen.GENERATE_FAMILIES) == registry.GENERATES
    for name in registry.names():
        e = registry.entry(name)
        assert (e.generate is None) == (name in registry.GENERATES), name
        if name not in registry.GENERATES:
            assert G.why_not(name), name  # a stated reason, never a silent gap
    assert not set(G.LEFT_OUT) & set(G.ADAPTERS)
    assert G.why_not("nosuch").startswith("unknown family")


@pytest.mark.parametrize("name", ADAPTED)
def test_family_generates_a_tiny_video_through_vidattn(name):
    import vidattn

    pipe = G.build_family_pipeline(name, "tiny", device="cpu", dtype=torch.float32, seed=0)
    for part in ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2"):
        assert getattr(pipe, part, None) is None, part
    assert type(pipe).__name__ == registry.entry(name).pipeline
    call = G.family_call(name, pipe, "a red fox in the snow", "", preset="tiny", device="cpu", dtype=torch.float32)
    size = G.default_size(name, "tiny")
    handle = vidattn.apply(pipe)
    counts = handle.counts()
    assert counts["kernel"] + counts["backend"] > 0, counts
    try:
        with AttentionCensus() as census, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = G.generate_family(pipe, call, fps=8.0, generator=torch.Generator().manual_seed(0))
    finally:
        vidattn.restore(pipe)
    v = out.frames
    assert v.ndim == 4 and v.shape[1:] == (size.height, size.width, 3), v.shape
    assert v.shape[0] >= 1 and np.isfinite(v).all() and v.min() >= 0.0 and v.max() <= 1.0
    assert v.std() > 0  # not a constant frame (a decode path that silently gave zeros)
    s = census.summary()
    # every transformer attention call went through vidattn's processors or backend (SDPA on the CPU: fallback)
    assert s["kernel"] + s["fallback"] > 0, s
    via = {r["via"] for r in census.records if r["kind"] != "stock"}
    assert via, s


def test_embeddings_are_seeded_and_shaped():
    pipe = G.build_family_pipeline("hunyuan_video", "tiny", device="cpu", dtype=torch.float32, seed=0)
    a = G.family_call("hunyuan_video", pipe, "a cat", "", preset="tiny", device="cpu", dtype=torch.float32)
    b = G.family_call("hunyuan_video", pipe, "a cat", "", preset="tiny", device="cpu", dtype=torch.float32)
    c = G.family_call("hunyuan_video", pipe, "a dog", "", preset="tiny", device="cpu", dtype=torch.float32)
    cfg = pipe.transformer.config
    n = registry.entry("hunyuan_video").tiny_text
    assert a["prompt_embeds"].shape == (1, n, cfg.text_embed_dim)
    assert a["pooled_prompt_embeds"].shape == (1, cfg.pooled_projection_dim)
    assert a["prompt_attention_mask"].shape == (1, n) and a["prompt_attention_mask"][0, 0] == 1
    assert torch.equal(a["prompt_embeds"], b["prompt_embeds"]) and not torch.equal(a["prompt_embeds"],
                                                                                    c["prompt_embeds"])
    assert "negative_prompt_embeds" not in a  # true CFG is off by default: the pipeline takes no negatives


def test_default_configs_are_the_release_ones():
    # VAE classes at the released configs: only the keys that differ from the class defaults are stated
    assert G.vae_config("cogvideox") == {"scaling_factor": 0.7}
    assert G.vae_config("latte")["block_out_channels"] == (128, 256, 512, 512)
    assert G.vae_config("hunyuan_video") == {}
    for name in ADAPTED:
        assert G.default_size(name) == registry.size_for(name)


@pytest.mark.parametrize("name", sorted(G.LEFT_OUT))
def test_left_out_family_names_its_reason_and_the_alternative(name, tmp_path):
    with pytest.raises(SystemExit) as exc:
        gen.main(["--family", name, "--out", str(tmp_path / "x.mp4")])
    msg = str(exc.value.code)
    assert G.LEFT_OUT[name] in msg and registry.entry(name).pipeline in msg
    assert "e2e_report.py --family" in msg or "not built either" in msg
    with pytest.raises(G.PipelineError, match="--family"):
        G.build_family_pipeline(name, "tiny")


def test_default_size_needs_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        gen.main(["--family", "mochi", "--device", "cpu", "--preset", "1.3b"])


def test_cli_writes_an_mp4(tmp_path):
    pytest.importorskip("imageio_ffmpeg", reason="mp4 writing needs imageio-ffmpeg")
    out = tmp_path / "ltx.mp4"
    r = gen.main(["--family", "ltx", "--tiny", "--steps", "1", "--out", str(out), "--no-progress"])
    assert out.is_file() and out.stat().st_size > 0
    assert (r["frames"], r["height"], r["width"]) == (9, 128, 128) and r["pipeline"] == "LTXPipeline"
    assert r["apply"]["kernel"] > 0
    assert out.read_bytes()[4:8] == b"ftyp"  # an MP4 container


def test_e2e_report_generates_a_family_on_both_paths(tmp_path):
    """e2e_report.py --family NAME --generate: the same generation under SDPA and vidattn, timed and compared."""
    import e2e_report as e2e

    rep = e2e.main(["--family", "cogvideox", "--generate", "--tiny", "--steps", "1", "--no-video",
                    "--out-dir", str(tmp_path)])
    assert rep["pipeline"] == "CogVideoXPipeline" and rep["model"] == "cogvideox" and rep["preset"] == "tiny"
    assert (rep["height"], rep["width"], rep["frames"], rep["steps"]) == (64, 64, 9, 1)
    assert rep["apply"]["kernel"] > 0 and rep["results"]["vidattn"]["attention_calls"]["fallback"] > 0
    assert rep["results"]["sdpa"]["attention_calls"]["fallback"] == 0
    assert rep["all_fallback"] and rep["speedup"] is None  # no kernel on the CPU: both paths ran SDPA
    assert rep["fidelity"]["psnr_db"] == float("inf")
    for f in ("report.json", "report.md", "first_frames.png"):
        assert (tmp_path / f).is_file()


@pytest.mark.parametrize("name", ADAPTED)
def test_default_pipeline_builds_on_meta(name):
    """The default preset (what the GPU runs) builds on the meta device, nothing allocated: the release-sized VAE
    and image encoder (tens of millions of parameters and more, not a CPU-sized stand-in), and a call at the
    default size whose embeddings have the real encoders' widths."""
    pipe = G.build_family_pipeline(name, "default", device="meta", dtype=torch.bfloat16)
    assert sum(p.numel() for p in pipe.vae.parameters()) > 5e7, name
    for part in ("image_encoder",):
        m = getattr(pipe, part, None)
        if m is not None:
            assert sum(p.numel() for p in m.parameters()) > 3e8, (name, part)
    call = G.family_call(name, pipe, "a fox", "", device="meta", dtype=torch.bfloat16)
    # every seeded tensor on the pipeline's device, but those the pipeline's own steps keep on the CPU (MiniMax-H3's
    # text tags on the GPU failed its layout step with "Expected all tensors to be on the same device")
    host = G.HOST_INPUTS.get(name, ())
    assert set(host) <= set(call), (name, host)
    for key, value in call.items():
        for t in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(t, torch.Tensor):
                assert t.device.type == ("cpu" if key in host else "meta"), (name, key, t.device)
    size = registry.size_for(name)
    if not G.ADAPTERS[name].sized:  # the refiner's size is its stage-1 latent's: LTX-2's VAE, 32x spatial, 8x time
        assert call["sana_latent"].shape == (1, 128, (size.frames - 1) // 8 + 1, size.height // 32, size.width // 32)
    else:
        assert (call["height"], call["width"]) == (size.height, size.width)
    if G.ADAPTERS[name].prompt:  # the pipeline tokenizes the prompt; the transformer embeds the ids itself
        assert isinstance(call["prompt"], str)  # its stand-in text path: the tests above
        return
    emb = call.get("prompt_embeds", call.get("prompt_embeds_qwen"))
    assert emb.shape[0] == 1 and emb.shape[1] == (512 if name in ("chronoedit", "wan_animate") else
                                                  registry.entry(name).text)
    assert emb.shape[2] >= 1024  # a real text encoder's width (T5/UMT5/Llama/Qwen/Gemma), not the tiny one


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cogvideox", "hunyuan_video", "ltx"])
def test_family_generates_on_the_kernel_gpu(name):
    """On a Hopper GPU: the real architecture (bf16, random weights) at a reduced size, 2 steps; the transformer's
    attention runs the kernel and the decoded video is finite. (The default size: scripts/generate_video.py.)"""
    import vidattn
    from pipelines.families import Size

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs a Hopper (sm_90) GPU")
    pipe = G.build_family_pipeline(name, "default", device="cuda", dtype=torch.bfloat16, seed=0)
    size = {"cogvideox": Size(480, 720, 13), "hunyuan_video": Size(320, 512, 17), "ltx": Size(512, 704, 25)}[name]
    call = G.family_call(name, pipe, "a fox", "", device="cuda", dtype=torch.bfloat16, size=size, steps=2)
    vidattn.apply(pipe)
    try:
        with AttentionCensus() as census:
            out = G.generate_family(pipe, call, fps=8.0, generator=torch.Generator().manual_seed(0))
    finally:
        vidattn.restore(pipe)
    assert out.frames.shape[1:] == (size.height, size.width, 3) and np.isfinite(out.frames).all()
    assert census.summary()["kernel"] > 0, census.summary()["fallback_reasons"]


def test_guidance_reaches_guider_pipelines():
    """--guidance on a pipeline that guides through its guider component (no guidance_scale keyword)."""
    pipe = G.build_family_pipeline("motif_video", "tiny", device="cpu", dtype=torch.float32)
    call = G.family_call("motif_video", pipe, "a cat", "", preset="tiny", device="cpu", dtype=torch.float32,
                         guidance=3.5)
    assert "guidance_scale" not in call and pipe.guider.guidance_scale == 3.5
    call = G.family_call("cogvideox", G.build_family_pipeline("cogvideox", "tiny", device="cpu",
                                                              dtype=torch.float32),
                         "a cat", "", preset="tiny", device="cpu", dtype=torch.float32, guidance=3.5)
    assert call["guidance_scale"] == 3.5


def test_too_few_steps_is_a_clear_error():
    pipe = G.build_family_pipeline("mochi", "tiny", device="cpu", dtype=torch.float32)
    with pytest.raises(G.PipelineError, match="at least 2"):
        G.family_call("mochi", pipe, "a", "", preset="tiny", device="cpu", dtype=torch.float32, steps=1)


def test_bad_size_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="multiple of 16"):
        gen.main(["--family", "cogvideox", "--tiny", "--height", "72", "--out", str(tmp_path / "x.mp4")])


@pytest.mark.parametrize("name", ["latte", "easyanimate", "mochi"])
def test_bf16_pipeline_decodes_without_a_dtype_clash(name):
    # Latte, EasyAnimate and Mochi pass the transformer-dtype latents to the VAE uncast: with the VAE left in fp32 a
    # bf16 build failed at the decode ("Input type (BFloat16) and bias type (float)"), as on the GPU sweep.
    pipe = G.build_family_pipeline(name, "tiny", device="cpu", dtype=torch.bfloat16, seed=0)
    assert pipe.vae.dtype == pipe.transformer.dtype == torch.bfloat16
    call = G.family_call(name, pipe, "a fox", "", preset="tiny", device="cpu", dtype=torch.bfloat16,
                         steps=G.ADAPTERS[name].min_steps[0])
    out = G.generate_family(pipe, call, fps=8.0, generator=torch.Generator().manual_seed(0))
    assert np.isfinite(np.asarray(out.frames, dtype=np.float32)).all()


def test_byte_tokenizer_stands_in_for_qwen2():
    """Cosmos3's stand-in tokenizer: one id per UTF-8 byte, Qwen2's special tokens as single ids after the bytes,
    the ChatML turns the pipeline's chat template call expects; the tiny transformer's vocabulary covers every id."""
    tok = G.byte_chat_tokenizer()
    ids = tok.apply_chat_template([{"role": "user", "content": "a fox é"}], tokenize=True,
                                  add_generation_prompt=True, return_dict=True).input_ids
    start, end = tok.convert_tokens_to_ids("<|im_start|>"), tok.eos_token_id
    assert ids[0] == start and ids.count(end) == 1 and ids.count(start) == 2
    assert len(ids) == len("user\na fox é".encode()) + len("\nassistant\n".encode()) + 3  # 3 specials
    assert max(ids) < G.BYTE_VOCAB == G.ADAPTERS["cosmos3"].tiny_transformer["vocab_size"]
    assert tok.decode(ids, skip_special_tokens=True) == "user\na fox é\nassistant\n"
    assert tok.convert_tokens_to_ids("<|vision_start|>") < G.BYTE_VOCAB


def test_refiner_text_stand_in_runs_the_pipelines_connectors():
    """SANA-WM refiner: the Gemma-3 stand-in is seeded by the prompt and left-padded as its tokenizer pads; the
    connectors (the pipeline's own module) turn it into the transformer's text tokens; a fixed-schedule pipeline
    refuses --steps with the reason."""
    pipe = G.build_family_pipeline("sana_wm_refiner", "tiny", device="cpu", dtype=torch.float32, seed=0)
    a, ma = pipe._encode_prompt("a red fox", device="cpu", dtype=torch.float32)
    b, _ = pipe._encode_prompt("a red fox", device="cpu", dtype=torch.float32)
    c, _ = pipe._encode_prompt("a blue car on a road", device="cpu", dtype=torch.float32)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape[:2] == (1, registry.entry("sana_wm_refiner").tiny_text) and torch.isfinite(a).all()
    assert a.shape[-1] == pipe.transformer.config.caption_channels
    with pytest.raises(G.PipelineError, match="fixed schedule"):
        G.family_call("sana_wm_refiner", pipe, "a", "", preset="tiny", device="cpu", dtype=torch.float32, steps=2)
