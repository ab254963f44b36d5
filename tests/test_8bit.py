"""CPU tests of the 8-bit path's Python side: the precision argument and its default, fallback reasons, the custom
op's fake, the per-model PrecisionPolicy, the generated 8-bit wgmma header and the bench backend. The kernel's own
tests need a Hopper GPU: tests/test_8bit_gpu.py."""
from __future__ import annotations

import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
from _support import FakeQ8Lib, check_q8_selector, load_script

import vidattn
from vidattn import ops, precision, quant8

REPO = Path(__file__).resolve().parent.parent


def qkv(b=1, sq=5, skv=7, h=2, d=64, dtype=torch.float32):
    return torch.randn(b, sq, h, d, dtype=dtype), torch.randn(b, skv, h, d, dtype=dtype), \
        torch.randn(b, skv, h, d, dtype=dtype)


@pytest.fixture
def fresh_warnings():
    saved = set(ops._warned)
    ops._warned.clear()
    yield
    ops._warned.clear()
    ops._warned.update(saved)


@pytest.mark.parametrize("bad", ["fp8", "8-bit", "EXACT", 8, True, ""])
def test_bad_precision_raises(bad):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="precision"):
        vidattn.attention(q, k, v, precision=bad)
    with pytest.raises(ValueError, match="precision"):
        vidattn.explain(q, k, v, precision=bad)
    with pytest.raises(ValueError, match="precision"):
        with vidattn.use_precision(bad):
            pass


def test_use_precision_nests_and_restores():
    assert precision.current_precision() == "exact"
    with vidattn.use_precision("8bit"):
        assert precision.resolve_precision(None) == "8bit"
        assert precision.resolve_precision("exact") == "exact"
        with vidattn.use_precision("exact"):
            assert precision.resolve_precision(None) == "exact"
        assert precision.resolve_precision(None) == "8bit"
    assert precision.resolve_precision(None) == "exact"
    with pytest.raises(RuntimeError):
        with vidattn.use_precision("8bit"):
            raise RuntimeError("boom")
    assert precision.current_precision() == "exact"


def test_8bit_on_cpu_falls_back_to_the_exact_path(fresh_warnings):
    q, k, v = qkv()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = vidattn.attention(q, k, v, precision="8bit")
    msgs = [str(x.message) for x in w]
    assert any("8-bit path unavailable" in m for m in msgs), msgs
    torch.testing.assert_close(out, vidattn.attention(q, k, v, precision="exact"))
    reason = vidattn.explain(q, k, v, precision="8bit")
    assert reason.startswith("8-bit path unavailable") and "runs instead" in reason
    with vidattn.use_precision("8bit"):
        assert vidattn.explain(q, k, v) == reason
    assert vidattn.explain(q, k, v) == ops.explain(q, k, v, precision="exact")


def test_8bit_lse_and_layouts_on_fallback(fresh_warnings):
    q, k, v = qkv(b=2, sq=9, skv=11)
    out, lse = vidattn.attention(q, k, v, precision="8bit", return_lse=True)
    ref, ref_lse = vidattn.attention(q, k, v, precision="exact", return_lse=True)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse)
    qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    torch.testing.assert_close(vidattn.attention(qh, kh, vh, layout="bhsd", precision="8bit"),
                               ref.transpose(1, 2))


def test_grad_runs_sdpa_and_explain_says_what_the_call_warns(fresh_warnings):
    """A differentiable 8-bit call runs SDPA; explain gives the reason its warning gives (the exact call's: here the
    missing GPU, on a Hopper GPU autograd), not another one."""
    q, k, v = (t.requires_grad_() for t in qkv())
    exact = vidattn.explain(q, k, v)
    assert exact == ops._grad_fallback_reason(q, k, v)
    assert vidattn.explain(q, k, v, precision="8bit") == f"8-bit path unavailable: {exact}; PyTorch SDPA runs instead"
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = vidattn.attention(q, k, v, precision="8bit")
    assert [str(x.message) for x in w if exact in str(x.message)], [str(x.message) for x in w]
    out.sum().backward()
    assert q.grad is not None


def test_8bit_fallback_warning_names_what_runs(fresh_warnings):
    """The warning of an 8-bit call the 8-bit path does not take says what runs it, as explain does: on this machine
    SDPA (no GPU), not "the exact path"."""
    q, k, v = qkv()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        vidattn.attention(q, k, v, precision="8bit")
    reason = vidattn.explain(q, k, v, precision="8bit")
    assert "PyTorch SDPA runs instead" in reason
    first = [str(x.message) for x in w if "8-bit path unavailable" in str(x.message)]
    assert first and first[0].startswith(f"vidattn: {reason}. "), (first, reason)  # the warning is explain's text
    gpu = vidattn.explain(q, k, v, precision="exact")  # no GPU here: the one reason, said once
    assert reason == f"8-bit path unavailable: {gpu}; PyTorch SDPA runs instead" and first[0].count(gpu) == 1


def test_8bit_reason_names_the_missing_gpu_before_the_shape(fresh_warnings):
    """Without a GPU that is the reason given, before anything about head dims (docs/install.md), on the 8-bit path
    as on the exact one."""
    gpu = vidattn.explain(*qkv(), precision="exact")
    for q, k, v in (qkv(d=96), (torch.randn(1, 5, 4, 128),) + qkv(d=128)[1:]):  # head dim 96; grouped query
        assert vidattn.explain(q, k, v, precision="8bit") == f"8-bit path unavailable: {gpu}; PyTorch SDPA runs instead"


def test_envelope_reasons():
    q, k, v = qkv(d=96)
    assert "head dim 96" in quant8.envelope_reason_8bit(q, k, v, None, 0.1)
    q, k, v = qkv(d=128)
    assert quant8.envelope_reason_8bit(q, k, v, None, 0.1) is None
    q = torch.randn(1, 5, 4, 128)  # four query heads on two key/value heads: grouped-query K/V run as they are
    assert quant8.envelope_reason_8bit(q, k, v, None, 0.1) is None
    q = torch.randn(1, 5, 3, 128)  # three on two (ops.attention refuses it first; the 8-bit envelope says so too)
    assert "3 query heads on 2 key and 2 value heads" in quant8.envelope_reason_8bit(q, k, v, None, 0.1)


class _Lib:
    """A kernel library's exported names, as hasattr sees them."""

    def __init__(self, *names):
        for name in names:
            setattr(self, name, lambda *a: 0)


def test_a_library_older_than_grouped_query_8bit_says_so():
    """A library built before the 8-bit path took grouped-query K/V (no vidattn_q8_workspace_bytes_kv) still runs
    equal head counts at 8 bits; grouped ones get a reason to rebuild, and the exact kernel runs them."""
    old = _Lib("vidattn_q8_fwd", "vidattn_q8_workspace_bytes", "vidattn_sm90_last_error")
    new = _Lib("vidattn_q8_fwd", "vidattn_q8_workspace_bytes", "vidattn_q8_workspace_bytes_kv",
               "vidattn_sm90_last_error")
    q, k = torch.randn(1, 5, 4, 128), torch.randn(1, 7, 2, 128)
    assert quant8.library_reason_8bit(old, q, q) is None
    assert "predates the 8-bit path's grouped-query attention" in quant8.library_reason_8bit(old, q, k)
    assert quant8.library_reason_8bit(new, q, k) is None
    assert "predates the 8-bit path (rebuild" in quant8.library_reason_8bit(_Lib("vidattn_sm90_fwd"), q, q)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("lse", [False, True])
def test_fake_shapes(layout, lse):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 33, 3, 128, dtype=torch.bfloat16)
        k = torch.empty(2, 50, 3, 128, dtype=torch.bfloat16)
        if layout == "bhsd":
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        out, l = torch.ops.vidattn.attention_8bit(q, k, k, layout, None, None, lse)
        assert tuple(out.shape) == tuple(q.shape) and out.dtype == torch.bfloat16
        assert tuple(l.shape) == ((2, 3, 33) if lse else (0,)) and l.dtype == torch.float32


def test_compile_fullgraph_on_cpu(fresh_warnings):
    q, k, v = qkv()
    f = torch.compile(lambda q, k, v: vidattn.attention(q, k, v, precision="8bit"), fullgraph=True, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(f(q, k, v), vidattn.attention(q, k, v, precision="exact"))


# ---- PrecisionPolicy ------------------------------------------------------------------------------------------

class _Proc:
    def __init__(self):
        self.precision = None


class _Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.processor = _Proc()


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn1, self.attn2 = _Attn(), _Attn()


class _Model(torch.nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block() for _ in range(n))
        self.seen = []

    def forward(self, x, timestep=None):
        self.seen.append([(b.attn1.processor.precision, b.attn2.processor.precision) for b in self.blocks])
        return x


def test_policy_blocks_and_steps():
    m = _Model()
    h = vidattn.PrecisionPolicy("8bit", exact_blocks=(0, 3), exact_first_steps=2).install(m)
    for t in (999, 999, 800, 800, 600, 400):  # classifier-free guidance: two calls per step
        m(torch.zeros(1), timestep=torch.tensor([t]))
    per_call = [[p[0] for p in call] for call in m.seen]
    assert per_call[0] == per_call[1] == per_call[2] == per_call[3] == ["exact"] * 4  # steps 0, 1
    assert per_call[4] == per_call[5] == ["exact", "8bit", "8bit", "exact"]  # steps 2, 3
    assert h.step == 3
    m(torch.zeros(1), timestep=torch.tensor([999]))  # a larger timestep: a new generation
    assert h.step == 0 and m.seen[-1][1] == ("exact", "exact")
    h.remove()
    assert all(p.processor.precision is None for b in m.blocks for p in (b.attn1, b.attn2))
    m(torch.zeros(1), timestep=torch.tensor([5]))
    assert m.seen[-1][0] == (None, None)


def test_policy_counts_positional_and_per_token_timesteps():
    """The timestep is found where the forward takes it (positionally too: guidance's two calls stay one step), and a
    per-token timestep counts as a whole (Wan 2.2 TI2V holds its image frame's tokens at 0: its first element never
    moves)."""
    m = _Model(2)
    h = vidattn.PrecisionPolicy("8bit", exact_first_steps=2).install(m)
    for t in (999, 999, 800, 800, 600, 600):
        m(torch.zeros(1), torch.tensor([t]))
    assert [c[0][0] for c in m.seen] == ["exact"] * 4 + ["8bit"] * 2 and h.step == 2
    h.remove()
    m = _Model(2)
    h = vidattn.PrecisionPolicy("8bit", exact_first_steps=1).install(m)
    for t in (999, 800, 600):
        m(torch.zeros(1), timestep=torch.tensor([[0.0] * 4 + [float(t)] * 12]))
    assert [c[0][0] for c in m.seen] == ["exact", "8bit", "8bit"] and h.step == 2


def test_policy_on_a_pipeline_counts_once_across_its_transformers():
    """Installed on a pipeline, the policy hooks each transformer with one shared count: Wan 2.2 A14B's second
    transformer, which takes over mid-generation, continues the count instead of starting at step 0."""
    high, low = _Model(2), _Model(2)
    pipe = types.SimpleNamespace(components={"transformer": high, "transformer_2": low, "vae": None})
    h = vidattn.PrecisionPolicy("8bit", exact_first_steps=1).install(pipe)
    for model, t in ((high, 999), (high, 999), (high, 800), (low, 400), (low, 400), (low, 200)):
        model(torch.zeros(1), timestep=torch.tensor([t]))
    assert [c[0][0] for c in high.seen] == ["exact", "exact", "8bit"]
    assert [c[0][0] for c in low.seen] == ["8bit", "8bit", "8bit"] and h.step == 3
    h.remove()
    with pytest.raises(TypeError, match="transformer .torch.nn.Module. or a diffusers pipeline"):
        vidattn.PrecisionPolicy().install(object())


def test_policy_without_timestep_counts_forwards():
    m = _Model(2)
    h = vidattn.PrecisionPolicy(exact_first_steps=1).install(m)
    m(torch.zeros(1))
    m(torch.zeros(1))
    assert m.seen[0][0] == ("exact", "exact") and m.seen[1][0] == ("8bit", "8bit") and h.step == 1
    h.reset()
    m(torch.zeros(1))
    assert h.step == 0


class _StockProc:
    """A stock diffusers processor as vidattn.apply's backend route leaves it: only `_attention_backend` changed."""

    def __init__(self, backend):
        self._attention_backend = backend


class _BackendAttn(torch.nn.Module):
    def __init__(self, seen, backend):
        super().__init__()
        self.processor = _StockProc(backend)
        self.seen = seen

    def forward(self, x, fail=False):
        from vidattn.precision import current_precision

        self.seen.append(current_precision())  # what the vidattn backend would run this module's calls at
        if fail:
            raise RuntimeError("a forward that raises")
        return x


class _BackendModel(torch.nn.Module):
    def __init__(self, n=3, backend="vidattn"):
        super().__init__()
        self.seen = []
        self.blocks = torch.nn.ModuleList(_BackendAttn(self.seen, backend) for _ in range(n))

    def forward(self, x, timestep=None, fail_at=None):
        for i, b in enumerate(self.blocks):
            b(x, fail=i == fail_at)
        return x


def test_policy_on_backend_routed_modules():
    """Modules whose stock processor attends through the vidattn diffusers backend (no `precision` attribute: the
    backend reads the context precision) run inside use_precision blocks the policy opens per module: per block and
    per step as for processors, innermost over the caller's own use_precision, closed even when a forward raises,
    and gone after remove(). A processor on another backend is not the policy's."""
    from vidattn import precision as prec

    m = _BackendModel(3)
    h = vidattn.PrecisionPolicy("8bit", exact_blocks=(0,), exact_first_steps=1).install(m)
    for t in (999, 999, 800):
        m(torch.zeros(1), timestep=torch.tensor([t]))
    assert m.seen == ["exact"] * 6 + ["exact", "8bit", "8bit"] and h.step == 1
    m.seen.clear()
    with vidattn.use_precision("exact"):
        m(torch.zeros(1), timestep=torch.tensor([600]))
    assert m.seen == ["exact", "8bit", "8bit"]
    m.seen.clear()
    with pytest.raises(RuntimeError, match="a forward that raises"):
        m(torch.zeros(1), timestep=torch.tensor([400]), fail_at=1)
    assert m.seen == ["exact", "8bit"] and prec._active == []  # the raising module's block was closed
    h.remove()
    m.seen.clear()
    m(torch.zeros(1), timestep=torch.tensor([200]))
    assert m.seen == ["exact"] * 3  # no hooks left: the default
    enum_like = types.SimpleNamespace(value="vidattn")  # diffusers' AttentionBackendName member
    assert prec._on_vidattn_backend(_StockProc(enum_like)) and not prec._on_vidattn_backend(_StockProc("flex"))
    with pytest.raises(RuntimeError, match="no vidattn attention on this model"):
        vidattn.PrecisionPolicy().install(_BackendModel(2, backend="flex"))


def test_policy_checks():
    with pytest.raises(ValueError):
        vidattn.PrecisionPolicy("fp8")
    with pytest.raises(ValueError):
        vidattn.PrecisionPolicy(exact_blocks=(-1,))
    with pytest.raises(ValueError):
        vidattn.PrecisionPolicy(exact_first_steps=-2)
    with pytest.raises(RuntimeError, match="no vidattn attention on this model"):
        vidattn.PrecisionPolicy().install(torch.nn.Linear(2, 2))
    p = vidattn.PrecisionPolicy()
    assert p.precision_for(5, 0) == "8bit" and p.precision_for(None, 100) == "8bit"  # neutral default


# ---- sources ----------------------------------------------------------------------------------------------------

def test_generated_wgmma8_header_is_current():
    out = subprocess.run([sys.executable, str(REPO / "csrc/tools/gen_wgmma8.py")], capture_output=True, text=True,
                         check=True).stdout
    assert out == (REPO / "csrc/sm90/wgmma8_ops.cuh").read_text()


def test_capi_includes_the_8bit_abi():
    text = (REPO / "csrc/capi.cu").read_text()
    assert '#include "capi_8bit.cuh"' in text
    assert "vidattn_q8_fwd" in (REPO / "csrc/capi_8bit.cuh").read_text()


def test_v_permutation_matches_the_fragments():
    """q8_vperm_pos (q8_quant.cuh): the keys a thread holds in P's accumulator fragment, 2t, 2t+1, 8+2t, 9+2t of
    each 16, sit at the A fragment's k = 4t .. 4t+3 (PTX ISA, 8-bit A in registers)."""
    src = (REPO / "csrc/sm90/q8_quant.cuh").read_text()
    assert "4 * ((k & 7) >> 1) + (k & 1) + 2 * (k >> 3)" in src
    pos = [4 * ((k & 7) >> 1) + (k & 1) + 2 * (k >> 3) for k in range(16)]
    assert sorted(pos) == list(range(16))
    for t in range(4):
        assert [pos[2 * t], pos[2 * t + 1], pos[8 + 2 * t], pos[9 + 2 * t]] == [4 * t, 4 * t + 1, 4 * t + 2, 4 * t + 3]


def test_exp2_polynomial_emulated():
    """q8_exp2_poly (q8_fwd.cuh), emulated in float32 step by step from the header's own constants: relative error
    under 1e-4 from -126 to P's largest exponent 8 (e4m3 rounds P by 2^-4), exact powers of two at integers, -inf and
    anything under -126 to 2^-126 (0 once P is rounded to e4m3), and no discontinuity worse than the cubic's error
    where floor(x) steps."""
    import re

    src = (REPO / "csrc/sm90/q8_fwd.cuh").read_text()
    body = src[src.index("float q8_exp2_poly(float x)"):]
    body = body[:body.index("\n}\n")]
    c3, c2, c1 = (float(x) for x in re.search(
        r"fmaf\(fmaf\(fmaf\(([-0-9.e]+)f, f, ([-0-9.e]+)f\), f, ([-0-9.e]+)f\), f, 1.f\)", body).groups())
    assert "fmaxf(x, -126.f)" in body and "__fadd_rd(x, kShifter)" in body and "<< 23" in body
    f32 = torch.float32
    x = torch.cat([torch.linspace(-140.0, 8.0, 400001, dtype=torch.float64).to(f32),
                   torch.tensor([float("-inf"), -126.0, 0.0, 1.0, 7.0, 8.0], dtype=f32)])
    xc = torch.clamp_min(x, -126.0)
    shifter = torch.tensor(12582912.0, dtype=f32)
    t = (shifter.double() + torch.floor(xc.double())).to(f32)  # x + 1.5 * 2^23 rounded down (ulp 1 there)
    frac = xc - (t - shifter)
    assert float(frac.min()) >= 0.0 and float(frac.max()) < 1.0
    poly = ((torch.tensor(c3, dtype=f32) * frac + c2) * frac + c1) * frac + 1.0
    bits = (poly.view(torch.int32).long() + (t.view(torch.int32).long() << 23)) & 0xFFFFFFFF
    y = bits.to(torch.int64).apply_(lambda b: b - (1 << 32) if b >= 1 << 31 else b).to(torch.int32).view(f32)
    ref = torch.exp2(xc.double())
    assert float((y.double() / ref - 1).abs().max()) < 1e-4
    assert y[-6].item() == 2.0 ** -126 and y[-5].item() == 2.0 ** -126  # -inf, -126
    assert [y[i].item() for i in (-4, -3, -2, -1)] == [1.0, 2.0, 128.0, 256.0]
    assert torch.isfinite(y).all() and (y > 0).all()


def test_bench_has_the_8bit_backend():
    mod = load_script(REPO / "scripts/bench_kernel.py")
    assert "8bit" in mod.ALL_BACKENDS and "8bit" not in mod.BACKENDS
    args = mod.parse_args(["--backends", "vidattn,cudnn,8bit", "--dry-run"])
    assert args.backends == ["vidattn", "cudnn", "8bit"]


def test_routing_knobs(monkeypatch):
    """Where the exact kernel measured faster, precision="8bit" runs it without a warning and explain says so."""
    q, k, v = qkv(sq=5, skv=300, d=64)
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    assert quant8.route_reason(q, k) is None
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 512)
    assert "300 keys" in quant8.route_reason(q, k)
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    monkeypatch.setattr(quant8, "EXACT_HEAD_DIMS", (64,))
    assert "head dim 64" in quant8.route_reason(q, k)
    q, k, v = qkv(sq=5, skv=300, d=128)
    assert quant8.route_reason(q, k) is None


def test_grouped_kv_at_d64_routes_exact():
    """Grouped K/V at D=64 run the exact kernel at precision="8bit" (measured as fast there: GROUPED_EXACT_HEAD_DIMS),
    at D=128 the 8-bit kernel; equal heads at D=64 stay on the 8-bit kernel."""
    assert quant8.GROUPED_EXACT_HEAD_DIMS == (64,)
    g = torch.Generator().manual_seed(0)
    for d, hkv, routed in ((64, 2, True), (64, 1, True), (64, 8, False), (128, 2, False)):
        q, k = torch.randn(1, 5, 8, d, generator=g), torch.randn(1, 20000, hkv, d, generator=g)
        reason = quant8.route_reason(q, k)
        assert (reason is not None) == routed, (d, hkv)
        if routed:
            assert reason.startswith(f"grouped-query K/V (8 query heads on {hkv}) at head dim 64")


def test_routed_calls_run_exact_silently(monkeypatch, fresh_warnings):
    monkeypatch.setattr(quant8._ext, "kernel_reason", lambda *a: None)
    monkeypatch.setattr(quant8._ext, "device_reason", lambda device: None)  # as on a Hopper GPU
    monkeypatch.setattr(quant8._ext, "load", lambda: None)  # explain asks for the library: never build it here
    monkeypatch.setattr(quant8, "_entry", lambda lib: object())
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 8192)
    ran = []
    monkeypatch.setattr(ops, "_attention_impl", lambda *a: ran.append(a) or (torch.zeros(1), None))
    q, k, v = qkv(sq=5, skv=300, d=128)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quant8._attention_8bit_impl(q, k, v, "bshd", None, None, False)
    assert len(ran) == 1
    monkeypatch.setattr(ops, "_grad_reason", lambda *a: None)
    assert vidattn.explain(q, k, v, precision="8bit").startswith("8-bit path not used: 300 keys")


def test_short_kv_default_is_measured():
    """The shipped thresholds per head dim (12288 keys at D=64, 7680 at D=128: dev/NOTES_8bit.md, "Where
    precision="8bit" starts to pay") are the measured ones; the environment variable sets one for every head dim,
    and a value that is not an integer is ignored with a warning naming it (a setting never makes a call raise)."""
    import os

    code = "import vidattn.quant8 as q; print(q.SHORT_KV_EXACT_MAX, q.short_kv_exact_max(64), q.short_kv_exact_max(128))"
    env = {k: v for k, v in os.environ.items() if k != "VIDATTN_Q8_SHORT_KV_EXACT_MAX"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.split() == ["None", "12288", "7680"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "VIDATTN_Q8_SHORT_KV_EXACT_MAX": "0"}).stdout
    assert out.split() == ["0", "0", "0"]
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "VIDATTN_Q8_SHORT_KV_EXACT_MAX": "8k"})
    assert bad.stdout.split() == ["None", "12288", "7680"]
    assert "VIDATTN_Q8_SHORT_KV_EXACT_MAX must be an integer" in bad.stderr and "ignored" in bad.stderr


def test_short_kv_threshold_is_per_head_dim(monkeypatch):
    """10000 keys: exact at D=64 (under its 12288), the 8-bit kernel at D=128 (over its 7680); the reason names the
    head dim's threshold."""
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", None)
    q, k, v = qkv(sq=5, skv=10000, d=64)
    assert "10000 keys: up to 12288 keys at head dim 64" in quant8.route_reason(q, k)
    q, k, v = qkv(sq=5, skv=10000, d=128)
    assert quant8.route_reason(q, k) is None
    q, k, v = qkv(sq=5, skv=12289, d=64)
    assert quant8.route_reason(q, k) is None
    q, k, v = qkv(sq=5, skv=7680, d=128)
    assert "7680 keys: up to 7680 keys at head dim 128" in quant8.route_reason(q, k)
    q, k, v = qkv(sq=5, skv=7681, d=128)
    assert quant8.route_reason(q, k) is None


def test_compile_fullgraph_reads_the_default(fresh_warnings):
    """The default is read off a module-level list, which Dynamo traces and guards (ContextVar.get is Unsupported
    under fullgraph); changing it recompiles, so the compiled call follows use_precision."""
    seen = []
    real = quant8.attention_8bit

    def spy(*a):
        seen.append("8bit")
        return real(*a)

    q, k, v = qkv()
    f = torch.compile(lambda q, k, v: vidattn.attention(q, k, v), fullgraph=True, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quant8.attention_8bit = spy
        try:
            f(q, k, v)
            assert seen == []
            with vidattn.use_precision("8bit"):
                f(q, k, v)
            assert seen == ["8bit"]
            f(q, k, v)
            assert seen == ["8bit"]
        finally:
            quant8.attention_8bit = real


def test_compile_fullgraph_traces_a_block_inside(fresh_warnings):
    """A use_precision block inside the compiled function (fullgraph): the call in it runs the 8-bit path, and the
    default is "exact" again after the call."""
    seen = []
    real = quant8.attention_8bit

    def spy(*a):
        seen.append("8bit")
        return real(*a)

    def f(q, k, v):
        with vidattn.use_precision("8bit"):
            return vidattn.attention(q, k, v)

    q, k, v = qkv()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quant8.attention_8bit = spy
        try:
            torch._dynamo.reset()
            torch.compile(f, fullgraph=True, backend="eager")(q, k, v)
        finally:
            quant8.attention_8bit = real
    assert seen == ["8bit"]
    assert precision.current_precision() == "exact" and precision._active == []


def _load_q8_check(monkeypatch, exclude=""):
    monkeypatch.setenv("Q8_EXCLUDE", exclude)
    return load_script(REPO / "dev/q8_check.py", "q8_check_under_test")


def test_q8_check_ab_excludes_and_picks(monkeypatch, tmp_path):
    """dev/q8_check.py's A/B bookkeeping: a variant a smoke run saw fail is left out (never the default, which runs
    first), and the pick is the best geometric mean of the two passes per head dim."""
    mod = _load_q8_check(monkeypatch, ",seq=0")
    assert mod.VARIANTS == {128: [(0, 3, 3), (0, 3, 1)], 64: [(1, 3, 1)]}
    # The default runs first and is never left out, even when its key matches.
    assert _load_q8_check(monkeypatch, ",seq=").VARIANTS == {128: [(0, 3, 3)], 64: [(1, 3, 1)]}
    mod = _load_q8_check(monkeypatch)
    # Only built variants are timed: modes 2-5 and the D=128 ping-pong schedule are refused by the launch.
    assert all(sm in (0, 1) and wgs == 3 for vs in mod.VARIANTS.values() for sm, wgs, _ in vs)
    # (Schedules 1 and 3 at D=128; the ping-pong and schedule 1 at D=64: schedule 2 is no longer built.)
    assert {seq for _, _, seq in mod.VARIANTS[128]} == {1, 3} and all(seq <= 1 for _, _, seq in mod.VARIANTS[64])
    for name, _b, _h, _sq, _skv, d in mod.SHAPES:
        row = {"shape": name, "variants": {mod.vkey(*vt): [800.0, 810.0] for vt in mod.VARIANTS[d]}}
        row["variants"][mod.vkey(0, 3, 1) if d == 128 else mod.vkey(1, 3, 0)] = [900.0, 880.0]
        mod.results["timing"].append(row)
    monkeypatch.setenv("Q8_BEST_ENV", str(tmp_path / "best.env"))
    mod.pick_best()
    assert mod.results["best"][128]["variant"] == "mode=0 wgs=3 seq=1"
    assert mod.results["best"][64]["variant"] == "mode=1 wgs=3 seq=0"
    assert abs(mod.results["best"][128]["default_gmean"] - 805.0) < 1e-6
    assert (tmp_path / "best.env").read_text() == "export VIDATTN_Q8_SUM_MMA=0 VIDATTN_Q8_SEQ=1\n"


def test_set_cvt_validates_and_reaches_the_library():
    check_q8_selector("cvt", quant8.set_cvt, quant8.last_cvt)


def test_cvt_selector_in_the_c_abi():
    """capi_8bit.cuh: the setter's range, the environment variable, the defaults each head dim's A/B chose
    (bench/results/h200_2026-12-02_pm/call_g/q8/: D=128 sequential + conversion 2, D=64 sequential + conversion 1),
    and only those two conversions instantiated, on the sequential schedule (a forced other one is an error, not a
    silent fallback)."""
    src = (REPO / "csrc/capi_8bit.cuh").read_text()
    assert 'extern "C" int vidattn_q8_set_cvt(int cvt)' in src and "if (cvt < -1 || cvt > 2) return 1;" in src
    assert 'env_default("VIDATTN_Q8_CVT"' in src
    assert "constexpr bool kCvtBuilt = kSeq && !kTurns;" in src
    assert "constexpr int kCvtWon = kD == 128 ? 2 : 1;" in src
    assert "#define VIDATTN_Q8_CVT_D128 2" in src and "#define VIDATTN_Q8_CVT_D64 1" in src
    assert "#define VIDATTN_Q8_SEQ_D128 3" in src and "#define VIDATTN_Q8_SEQ_D64 1" in src
    assert "kSeq, kTurns, 2>(a, l, s)" in src and "kSeq, false, 1>(a, l, s)" in src
    assert "kSeq, kTurns, 1>(a, l, s)" not in src and "kSeq, false, 2>(a, l, s)" not in src  # the losers
    assert ", 1, 2>(a, l, s)" not in src and "if (mode >= 2)\n" in src  # mode 4 with conversion 1: gone too
    assert 'if (g_q8_cvt > 0)\n      return fail("8-bit path: score conversion "' in src


def test_prep_selector_in_the_c_abi():
    """The pre-pass choice: fused by default, the three launches whenever the LSE is asked for (Q's LSE term reads
    the statistics) or forced, Q in the kernel (2) when forced (with LSE too: no Q pass at all, the statistics alone
    before the K/V pass), a setter with its range, the environment variable."""
    src = (REPO / "csrc/capi_8bit.cuh").read_text()
    assert "#define VIDATTN_Q8_PREP 1" in src and 'env_default("VIDATTN_Q8_PREP", VIDATTN_Q8_PREP, 0, 2)' in src
    assert "const bool fused = prep == 1 && !pp.want_lse &&" in src
    assert 'extern "C" int vidattn_q8_set_prep(int prep)' in src and "if (prep < -1 || prep > 2) return 1;" in src
    assert "g_q8_last_prep = prep == 2 ? 2 : (fused ? 1 : 0);" in src
    # Mode 2: the kernel gets the caller's Q, and the LSE term's inputs only when the LSE is asked for.
    branch = src[src.index("if (prep == 2) {  // Q quantized in the kernel"):]
    branch = branch[:branch.index("cudaError_t e")]
    assert "p.q_in = a.q;" in branch and "p.q_scale_out = pp.ws.q_scale;" in branch
    assert "p.lse_corr_out = a.lse != nullptr ? pp.ws.lse_corr : nullptr;" in branch
    launch = src[src.index("  if (prep == 2) {\n    q8_kv_stats_kernel"):src.index("} else if (fused) {")]
    assert "q8_q_kernel" not in launch and "q8_stats_q_kernel" not in launch
    assert "q8_stats_q_kernel<kD, kFp16><<<" in src and "q8_kv_stats_kernel<kD, kFp16>\n" in src
    quant = (REPO / "csrc/sm90/q8_quant.cuh").read_text()
    body = quant[quant.index("q8_stats_q_kernel(const Q8PrepParams p"):]
    assert "if (blk < stat_blocks) q8_kv_stats_block<kD, kFp16>(p, blk % stat_key_blocks, blk / stat_key_blocks);" \
        in body and "else q8_q_block<kD, kFp16>(p, blk - stat_blocks);" in body
    # The separate kernels run the same bodies (one definition of each pass).
    assert "q8_kv_stats_block<kD, kFp16>(p, blockIdx.x, blockIdx.y);" in quant
    assert "q8_q_block<kD, kFp16>(p, blockIdx.x);" in quant


def test_set_prep_validates_and_reaches_the_library():
    lib = FakeQ8Lib()
    calls = []

    def set_prep(v):
        calls.append(v)
        return 0 if -1 <= v <= 2 else 1

    lib.vidattn_q8_set_prep = set_prep
    lib.vidattn_q8_last_prep = lambda: 1
    for mode in (0, 1, 2, -1):
        quant8.set_prep(mode, lib=lib)
    for bad in (3, -2, 1.0, True, "1", None):
        with pytest.raises(ValueError, match="set_prep: mode must be one of"):
            quant8.set_prep(bad, lib=lib)
    assert calls == [0, 1, 2, -1] and quant8.last_prep(lib=lib) == 1
    # A library that predates mode 2 (its setter refuses 2) raises instead of silently keeping another pre-pass.
    lib.vidattn_q8_set_prep = lambda v: 0 if -1 <= v <= 1 else 1
    with pytest.raises(ValueError, match="vidattn_q8_set_prep: invalid value 2"):
        quant8.set_prep(2, lib=lib)
    del lib.vidattn_q8_set_prep, lib.vidattn_q8_last_prep
    with pytest.raises(RuntimeError, match="lacks vidattn_q8_set_prep"):
        quant8.set_prep(1, lib=lib)
    assert quant8.last_prep(lib=lib) == -1


def test_magic_number_scores_emulated():
    """q8_fwd.cuh's kCvt 1/2, emulated in float32 from the header's own constants: the bits of 1.5 * 2^23 plus an
    integer score x, read as a float, are exactly 1.5 * 2^23 + x for every |x| <= D * 127^2 at D = 128 (and 128^3, were
    a -128 to occur); and the exponent (1.5 * 2^23 + x) c + fma(-1.5 * 2^23, c, 8 - m), each step rounded as the FFMA
    rounds, stays within 0.75 c + 2 ulp of the I2F path's x c + (8 - m)."""
    src = (REPO / "csrc/sm90/q8_fwd.cuh").read_text()
    assert "constexpr int32_t kQ8MagicBits = 0x4B400000;" in src and "constexpr float kQ8Magic = 12582912.f;" in src
    assert "neg[r] = fmaf(-kQ8Magic, c[r], kQ8POffset - mx);" in src
    magic_bits, magic = 0x4B400000, 12582912.0
    assert torch.tensor([magic_bits], dtype=torch.int32).view(torch.float32).item() == magic
    bound = 128 * 127 * 127
    assert 128 ** 3 < 2 ** 22 and bound < 2 ** 21 and 64 * 127 * 127 < 2 ** 20
    x = torch.cat([torch.arange(-bound, bound + 1, 997, dtype=torch.int32),
                   torch.tensor([-bound, bound, 0, 1, -1, -(128 ** 3), 128 ** 3], dtype=torch.int32)])
    f = (x + magic_bits).view(torch.float32)
    assert torch.equal(f.double(), x.double() + magic)
    assert (f > 0).all()  # positive floats: integer and float order agree, so IMNMX on the bits is FMNMX's max

    def fma32(a, b, c):  # float32 fma: the product exact in float64 (24 + 24 bits), one rounding to float32
        return (a.double() * b.double() + c.double()).float()

    g = torch.Generator().manual_seed(5)
    for log_c in (-14.0, -10.0, -6.0, -3.0):  # one integer unit of score: 6e-5 .. 0.125 in log2 units
        c = torch.full_like(f, 2.0 ** log_c) * (1 + torch.rand(f.shape, generator=g)).float()
        m = (x.double() * c.double()).max().float() + 0.25
        old = fma32(x.float(), c, (8.0 - m).expand_as(c))
        neg = fma32(torch.full_like(c, -magic), c, (8.0 - m).expand_as(c))
        new = fma32(f, c, neg)
        ulp = torch.finfo(torch.float32).eps * old.abs().clamp_min(1.0)
        assert float(((new - old).abs() - (0.75 * c + 2 * ulp)).max()) <= 0.0


def test_q8_prep_ab_plan_and_table(capsys):
    """dev/q8_selector_ab.py's plan prep (the defaults and pre-pass A/B): the new default first per head dim (every
    selector -1), the same kernel with the three-launch pre-pass, the old default with it; the four shapes; a table
    with each variant's ratios to the new default, synced and queued."""
    mod = load_script(REPO / "dev/q8_selector_ab.py", "q8_selector_ab_under_test")
    plan = mod.PLANS["prep"]
    assert plan.checks is mod.checks_fp64 and (plan.passes, plan.budget) == (2, 40.0)
    for d in (128, 64):
        vs = [vt for vt in plan.variants if vt[1] == d]
        assert vs[0][2:] == (-1, -1, -1, -1) and vs[1][2:] == (-1, -1, -1, 0)
        assert vs[2][2:] == ((1, 0, 0, 0) if d == 128 else (0, 1, 0, 0))  # the old defaults, I2F, three launches
    assert mod.EXPECT[128][-1] == 2 and mod.EXPECT[64][-1] == 1
    assert mod.EXPECT_SEQ == {128: 3, 64: 1}  # the default schedules the checks hold the launches to
    assert [s[0] for s in mod.SHAPES] == ["Wan 1.3B self", "seed 8K", "CogVideoX", "LTX"]
    res = {"checks": [{"variant": "a", "ok": True}], "timing": [{
        "shape": "Wan 1.3B self", "flops": 8.0e12, "synced": {"a": [800.0, 810.0], "b": [880.0, 872.0]},
        "queued": {"a": [850.0, 850.0], "b": [900.0, 900.0]}, "kernel_ms": {"a": [9.0, 9.0], "b": [8.0, 8.0]},
        "prep_ms": {"a": [0.2, 0.2], "b": [0.24, 0.24]}, "rel_l2": {"a": 3.7e-2, "b": 3.7e-2}}]}
    plan.table(res)
    out = capsys.readouterr().out
    assert "(synced 1.088x, queued 1.059x)" in out and "1000 | prep 0.240 ms" in out
    assert "checks: all ok" in out


def test_q8_check_kernel_names_keep_the_kernel(monkeypatch):
    """The kernel-only figures find q8_fwd_kernel by name: the name keeps every template argument and the kernel's
    own name (a fixed-length tail lost "q8_fwd" at nine template arguments)."""
    mod = _load_q8_check(monkeypatch)
    raw = ("void vidattn::sm90::q8_fwd_kernel<128, 3, false, false, false, true, 2, false, 1>"
           "(vidattn::sm90::Q8FwdParams)")
    assert mod.kernel_name(raw) == "q8_fwd_kernel<128, 3, false, false, false, true, 2, false, 1>"
    assert mod.kernel_name("void vidattn::sm90::q8_kv_kernel<64, true>(vidattn::sm90::Q8PrepParams)") == \
        "q8_kv_kernel<64, true>"
    assert mod.kernel_name("Memset (Device)") == "Memset"


def test_in_kernel_q_quantization_shares_the_pre_pass_code():
    """Prep mode 2 (q8_fwd.cuh's q8_quantize_q_tile): the same row code as the pre-pass's Q kernel (q8_q_row_codes,
    q8_q_row_scale, q8_q_row_ksum_dot: one definition, so the codes and scales agree bit for bit), run by every
    thread before the CTA's barrier with the K/V ring filled first, the stores fenced for wgmma's async proxy, and the
    producer skipping the Q TMA in that mode."""
    quant = (REPO / "csrc/sm90/q8_quant.cuh").read_text()
    fwd = (REPO / "csrc/sm90/q8_fwd.cuh").read_text()
    qblock = quant[quant.index("__device__ __forceinline__ void q8_q_block("):quant.index("q8_q_kernel(const")]
    tile = fwd[fwd.index("__device__ __forceinline__ void q8_quantize_q_tile("):fwd.index("q8_producer_fill(const")]
    for body in (qblock, tile):
        assert "q8_q_row_codes<kLanesPerRow>(x, codes)" in body and "q8_q_row_scale(m, p.scale)" in body
        assert "q8_q_row_ksum_dot<kLanesPerRow>(x, in ? " in body
    assert "ptx::fence_proxy_async_smem();" in tile
    assert "constexpr uint32_t kSwizzleMask = T::kSwizzle == 128 ? 7 : 3;" in tile
    assert "(off ^ (((off >> 7) & kSwizzleMask) << 4))" in tile
    kernel = fwd[fwd.index("q8_fwd_kernel(const __grid_constant__ Q8FwdParams p)"):]
    hook = kernel.index("if (threadIdx.x == 0) q8_producer_fill<kD, kWGs>(p, s, "
                        "q8_kv_row(b, h, p.kv_heads, p.kv_group), n_blocks);")
    assert kernel.index("ptx::fence_barrier_init();") < hook < kernel.index("q8_quantize_q_tile<kD, kWGs, kFp16>(")
    assert kernel.index("q8_quantize_q_tile<kD, kWGs, kFp16>(") < kernel.index("__syncthreads();")
    prod = fwd[fwd.index("void q8_producer(const Q8FwdParams& p"):]
    assert prod.index("if (p.q_in != nullptr) {") < prod.index("tma_load_2d(s.q, &p.tm_q")
    assert "for (int j = j0; j < n_blocks; ++j) {" in prod


@pytest.mark.parametrize("d", [128, 64])
def test_in_kernel_q_swizzle_emulated(d):
    """The offsets q8_quantize_q_tile stores each row's 8-byte pieces at, emulated: within every row the 16-byte
    chunks are a permutation (no two pieces collide, nothing leaves the row), and they are TMA's swizzle patterns,
    chunk c of row r at c ^ (r % 8) with 128-byte rows (D=128) and at c ^ ((r / 2) % 4) with 64-byte rows (D=64),
    the layouts the S wgmma's descriptor (swizzle mode 1 or 2) reads."""
    mask = 7 if d == 128 else 3
    for r in range(192):
        got = []
        for vec in range(d // 8):
            off = r * d + vec * 8
            sw = off ^ (((off >> 7) & mask) << 4)
            assert r * d <= sw < (r + 1) * d and sw % 8 == 0
            chunk, half = (off % d) // 16, (off % 16) // 8
            want = (chunk ^ (r % 8)) if d == 128 else (chunk ^ ((r // 2) % 4))
            assert sw == r * d + want * 16 + half * 8
            got.append(sw)
        assert len(set(got)) == d // 8


# ---- GPU: prep mode 2 (Q quantized in the kernel) against fp64 and against the fused pre-pass ------------------

def _prep_gpu_ready():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the 8-bit kernel needs an sm_90 (Hopper) GPU")


@pytest.fixture
def prep_modes(monkeypatch):
    _prep_gpu_ready()
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)  # the 8-bit kernel at every length
    # Prep mode 2 keeps the plain launch; the tail launch splits a row's keys and so quantizes P against other row
    # maxima (call P30: 2.5-2.8e-2 from the plain launch, each as close to fp64): the modes meet on the plain launch.
    quant8.set_tail(0)
    yield
    quant8.set_tail(-1)
    quant8.set_prep(-1)
    quant8.set_d64_warpgroups(0)


def _ref64(q, k, v, scale, kv_lens=None):
    """fp64 attention of (B, S, H, D) views: (out (B, S, H, D), lse (B, H, S))."""
    qh, kh, vh = (t.transpose(1, 2).double() for t in (q, k, v))
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if kv_lens is not None:
        keep = torch.arange(k.shape[1], device=q.device)[None, :] < kv_lens[:, None]
        s = s.masked_fill(~keep[:, None, None, :], float("-inf"))
    return torch.matmul(torch.softmax(s, -1), vh).transpose(1, 2), torch.logsumexp(s, -1)


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def _prep_inputs(b, h, sq, skv, d, dtype, layout, strided, seed):
    """q, k, v in `layout`; strided: views of one packed (B, S, 3, H, D) tensor (sequence stride 3 H D), Q with
    more rows than K/V taken from its own packed tensor."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = torch.device("cuda")
    if strided:
        qp = torch.randn(b, sq, 3, h, d, device=dev, generator=g).to(dtype)
        kvp = torch.randn(b, skv, 3, h, d, device=dev, generator=g).to(dtype)
        q, k, v = qp[:, :, 1], kvp[:, :, 0], kvp[:, :, 2]
    else:
        q = torch.randn(b, sq, h, d, device=dev, generator=g).to(dtype)
        k = torch.randn(b, skv, h, d, device=dev, generator=g).to(dtype)
        v = torch.randn(b, skv, h, d, device=dev, generator=g).to(dtype)
    k.add_(0.5)  # a shared key offset (in place: a strided view stays one) that the smoothing and the LSE term carry
    assert not strided or k.stride(1) == 3 * h * d
    if layout == "bhsd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return q, k, v


def _run_prep(mode, q, k, v, layout, kv_lens, lse):
    quant8.set_prep(mode)
    r = vidattn.attention(q, k, v, layout=layout, kv_lens=kv_lens, return_lse=lse, precision="8bit")
    torch.cuda.synchronize()
    out, l = r if lse else (r, None)
    if layout == "bhsd":
        out = out.transpose(1, 2)
    return out, l, quant8.last_prep()


# (b, h, sq, skv, d, dtype, layout, kv_lens, lse, strided)
PREP_CASES = [
    (1, 2, 1, 77, 128, torch.bfloat16, "bshd", None, False, False),
    (1, 2, 113, 113, 64, torch.bfloat16, "bshd", None, True, False),
    (2, 3, 1023, 517, 64, torch.bfloat16, "bshd", [517, 37], True, False),
    (1, 2, 300, 4097, 128, torch.float16, "bshd", None, True, False),
    (2, 2, 777, 1000, 128, torch.float16, "bhsd", [1000, 129], False, False),
    (1, 3, 2049, 2048, 128, torch.bfloat16, "bshd", None, True, True),
    (2, 2, 1500, 1100, 64, torch.float16, "bhsd", None, False, True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", PREP_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}x{c[3]}-d{c[4]}-"
                         f"{str(c[5])[6:]}-{c[6]}{'-kvlens' if c[7] else ''}{'-lse' if c[8] else ''}"
                         f"{'-strided' if c[9] else ''}")
def test_prep_in_kernel_matches_fp64_and_the_fused_pre_pass(prep_modes, case):
    b, h, sq, skv, d, dtype, layout, lens, lse, strided = case
    q, k, v = _prep_inputs(b, h, sq, skv, d, dtype, layout, strided, seed=sq * 7 + skv)
    kv_lens = torch.tensor(lens, device="cuda", dtype=torch.int32) if lens else None
    qb, kb, vb = ((t.transpose(1, 2) if layout == "bhsd" else t) for t in (q, k, v))
    o_ref, lse_ref = _ref64(qb, kb, vb, d ** -0.5, kv_lens)
    o2, l2, ran2 = _run_prep(2, q, k, v, layout, kv_lens, lse)
    o1, l1, ran1 = _run_prep(1, q, k, v, layout, kv_lens, lse)
    assert ran2 == 2 and ran1 == (0 if lse else 1)  # mode 2 takes LSE calls too; the fused one falls back to 0
    assert not torch.isnan(o2).any()
    assert _rel(o2, o_ref) <= 5e-2 and float((o2.double() - o_ref).abs().max()) <= 0.25
    # The same Q codes and scales (one row code): the two differ only where the K sums' atomics round differently.
    assert _rel(o2, o1) <= 2e-3, _rel(o2, o1)
    if lse:
        fin = torch.isfinite(lse_ref)
        assert float((l2.double() - l1.double())[fin].abs().max()) <= 1e-3
        assert float((l2.double() - lse_ref)[fin].abs().max()) <= 0.05
        assert torch.equal(torch.isfinite(l2), fin)


@pytest.mark.gpu
@pytest.mark.parametrize("wgs", [2, 3])
def test_prep_in_kernel_on_the_d64_ping_pong_builds(prep_modes, wgs):
    """The ping-pong builds (two warpgroups: 384 threads, 128-row tiles, a partial last pass of the tile's rows;
    three: 192-row tiles) with Q quantized in the kernel, against the fused pre-pass on the same build."""
    quant8.set_d64_warpgroups(wgs)
    q, k, v = _prep_inputs(1, 3, 1100, 900, 64, torch.bfloat16, "bshd", False, seed=wgs)
    o2, _, ran2 = _run_prep(2, q, k, v, "bshd", None, False)
    assert ran2 == 2 and quant8.last_variant()[0] == wgs
    o1, _, _ = _run_prep(1, q, k, v, "bshd", None, False)
    assert _rel(o2, o1) <= 2e-3 and _rel(o2, _ref64(q, k, v, 64 ** -0.5)[0]) <= 5e-2


@pytest.mark.gpu
@pytest.mark.parametrize("d", [128, 64])
def test_prep_in_kernel_fresh_scales_each_call(prep_modes, d):
    """Back-to-back calls of one shape reuse the workspace's addresses (the caching allocator): the row scales the
    kernel writes and its consumers read must be this call's, never a previous call's (a stale cached line would
    show as the previous draw's scales). Draws of different magnitudes make any mix-up visible; an all-zero row and a
    row holding a NaN behave as with the fused pre-pass."""
    outs = []
    for i, mag in enumerate((0.3, 1.0, 2.5)):
        q, k, v = _prep_inputs(1, 2, 640, 700, d, torch.bfloat16, "bshd", False, seed=100 + i)
        q = q * mag
        q[0, 5] = 0
        q[0, 9, 1, 3] = float("nan")
        o2, _, _ = _run_prep(2, q, k, v, "bshd", None, False)
        o1, _, _ = _run_prep(1, q, k, v, "bshd", None, False)
        assert torch.equal(torch.isnan(o2), torch.isnan(o1)) and not torch.isnan(o2[0, :9]).any()
        fin = ~torch.isnan(o1)
        assert float((o2 - o1)[fin].abs().max()) <= 2e-2  # another call's scales would be 2.5-3.3x off
        if mag <= 1.0:  # (sharper rows leave the INT8 scores' error less averaged: fp64 is the other tests' job)
            assert _rel(o2[:, :9], _ref64(q[:, :9], k, v, d ** -0.5)[0]) <= 5e-2
        outs.append(o2)
    assert not torch.equal(outs[0], outs[1])


def test_q8_prep2_ab_plan_and_table(capsys):
    """dev/q8_selector_ab.py's plan prep2 (mode 2's device A/B): the default first per head dim, then the same kernel
    with Q in the kernel; the four shapes; a table with the device total (kernel + pre-pass) and the ratios to the
    default."""
    mod = load_script(REPO / "dev/q8_selector_ab.py", "q8_selector_ab_under_test")
    plan = mod.PLANS["prep2"]
    assert plan.checks is mod.checks_vs_default and (plan.passes, plan.budget) == (3, 35.0)
    for d in (128, 64):
        vs = [vt for vt in plan.variants if vt[1] == d]
        assert [vt[2:] for vt in vs] == [(-1, -1, -1, -1), (-1, -1, -1, 2)]
    assert [s[0] for s in mod.SHAPES] == ["Wan 1.3B self", "seed 8K", "CogVideoX", "LTX"]
    res = {"checks": [{"variant": "a", "ok": True}, {"variant": "b", "ok": False}], "timing": [{
        "shape": "Wan 1.3B self", "flops": 8.0e12, "synced": {"a": [800.0, 810.0], "b": [808.0, 818.0]},
        "queued": {"a": [850.0, 850.0], "b": [860.0, 860.0]}, "kernel_ms": {"a": [8.0, 8.0], "b": [8.02, 8.02]},
        "prep_ms": {"a": [0.24, 0.24], "b": [0.18, 0.18]}, "rel_l2": {"a": 3.7e-2, "b": 3.7e-2}}]}
    plan.table(res)
    out = capsys.readouterr().out
    assert "ms 8.020 + 0.180 = 8.200" in out and "device 0.995x" in out and "(synced 1.010x, queued 1.012x" in out
    assert "checks: FAILED: ['b']" in out
