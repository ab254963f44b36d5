"""Shared test setup: `gpu`-marked tests are skipped without CUDA; the developer's tooling is marked `dev` and left
out of a plain run; tiny Wan models built offline."""
import pytest
import torch

# Modules that test the kernel developer's tooling (dev/probes, dev/tools, dev/experiments, the guide's lineage and
# its diffs, the A/B and ncu scripts) or compile with nvcc: marked `dev` here rather than in each file. A plain
# `pytest` run leaves them out (the library and the user's scripts, fast); `pytest -m dev` runs them, and any other
# `-m` expression (e.g. `-m gpu` on the device) selects among all tests as written.
DEV_MODULES = {
    "test_dev_probes", "test_clock_probe_cpu", "test_ncu_stalls_cpu", "test_kernel_ab_cpu", "test_experiment_patches",
    "test_lineage_cpu", "test_lineage_diffs", "test_lineage_gpu", "test_guide", "test_fill_guide_results",
    "test_ceiling_probes_cpu", "test_q8_family_table",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "dev: tests of the developer's tooling and nvcc-heavy checks (pytest -m dev)")


def pytest_collection_modifyitems(config, items):
    dev = pytest.mark.dev
    for item in items:
        if item.module is not None and item.module.__name__.rpartition(".")[2] in DEV_MODULES:
            item.add_marker(dev)
    if not config.option.markexpr:
        kept = [item for item in items if "dev" not in item.keywords]
        if len(kept) != len(items):
            config.hook.pytest_deselected(items=[item for item in items if "dev" in item.keywords])
            items[:] = kept
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marked gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def is_hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def hopper_skip_reason() -> str | None:
    """Why the kernel's GPU tests cannot run on this machine (None: a Hopper GPU is here), for a module-level skip."""
    if not torch.cuda.is_available():
        return "CUDA is not available"
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        return f"the vidattn kernel needs an sm_90 (Hopper) GPU; this one is sm_{major}{minor}"
    return None


@pytest.fixture
def fresh_warnings():
    """Forget which fallback reasons have already warned, so a test sees its own warnings."""
    from vidattn import ops

    saved = set(ops._warned)
    ops._warned.clear()
    yield ops._warned
    ops._warned.clear()
    ops._warned.update(saved)


@pytest.fixture(autouse=True)
def no_precision_block_left_open():
    """A test that leaves a `vidattn.use_precision` block open fails (at teardown), and the next test starts at the
    "exact" default: a leaked "8bit" block would turn every later test's calls 8-bit (an ExitStack never closed after
    a failed enter_context did exactly that once)."""
    from vidattn import precision

    yield
    left, precision._active[:] = list(precision._active), []
    assert not left, f"use_precision blocks left open: {left}"


@pytest.fixture
def launch_refusal_fails_its_test():
    """A launch the library refuses turns the kernel off for the rest of the process (_ext.forward), and every later
    call runs SDPA, with last_block_n/last_o_path still naming the refused build (before capi.cu reset them on a
    refusal) or an earlier call's: on the H200 the first refused O-in-V launch passed its own test and failed the 59
    after it. With this fixture the test whose launch was refused fails (at teardown), and each test starts with the
    kernel on. The selectors come back on their own: the context managers restore them in a `finally`. For the
    head-dim variants' GPU modules, through `pytest.mark.usefixtures`."""
    from vidattn import _ext

    _ext._launch_error = None
    yield
    refused, _ext._launch_error = _ext._launch_error, None
    assert refused is None, refused


@pytest.fixture
def tail_kv_lens_off():
    """The exact kernel's calls with kv_lens on the plain schedule for the test (csrc/capi.cu, tail_kv_lens): for the
    D=256 A/B variants' modules, whose kv_lens tests were written for the variant's own schedule (the tail launch
    runs the O-in-V build's split kernel). Used through `pytest.mark.usefixtures`."""
    from vidattn import _ext

    _ext.set_tail_kv_lens(0)
    yield
    _ext.set_tail_kv_lens(-1)


# A Wan transformer small enough for CPU tests: 2 layers, 2 heads x 64 (a kernel head dim; RoPE splits 64 into
# t/h/w = 24/20/20 channels), text_dim 32.
TINY_WAN = dict(
    patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64, in_channels=16, out_channels=16,
    text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, rope_max_seq_len=32,
)
# I2V variant: image embeddings (image_dim) go through added K/V projections in every cross-attention.
TINY_WAN_I2V = dict(TINY_WAN, image_dim=24, added_kv_proj_dim=128)


def tiny_wan(seed: int = 0, **overrides):
    # A test that builds the tiny model skips, not fails, where diffusers is absent (the device has no diffusers
    # until .whl is installed; tests/test_compile.py's GPU test failed there on 2026-11-30).
    WanTransformer3DModel = pytest.importorskip("diffusers").WanTransformer3DModel

    torch.manual_seed(seed)
    return WanTransformer3DModel(**{**TINY_WAN, **overrides}).eval()


def tiny_wan_inputs(batch: int = 1, frames: int = 3, size: int = 8, text: int = 10, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 16, frames, size, size, generator=g)
    t = torch.full((batch,), 500, dtype=torch.long)
    ctx = torch.randn(batch, text, TINY_WAN["text_dim"], generator=g)
    return x, t, ctx


def tiny_wan_pipeline(two_transformers: bool = False):
    """A WanPipeline from tiny random components; no tokenizer/text encoder (pass prompt_embeds)."""
    diffusers = pytest.importorskip("diffusers")
    AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline = (
        diffusers.AutoencoderKLWan, diffusers.FlowMatchEulerDiscreteScheduler, diffusers.WanPipeline)

    torch.manual_seed(0)
    vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True]).eval()
    extra = dict(transformer_2=tiny_wan(seed=1), boundary_ratio=0.5) if two_transformers else {}
    return WanPipeline(tokenizer=None, text_encoder=None, transformer=tiny_wan(seed=0), vae=vae,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), **extra)
