"""Reliability on the GPU: worker threads with no CUDA context, many threads and streams at once, one stream
shared by threads, CUDA graphs captured and replayed concurrently, kv_lens views, scale edge cases, NaN and huge
inputs. Results must be bitwise equal to single-threaded calls and memory must not grow. About a minute on an H200.

Run: python3 -m pytest -q -m gpu tests/test_reliability_gpu.py"""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
import torch.nn.functional as F

import vidattn
from vidattn import _ext, ops
from conftest import is_hopper

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not is_hopper(), reason="the kernel path needs a Hopper GPU")]

# (name, batch, heads, sq, skv, d, with kv_lens). "tail": 16 query tiles x 9 heads = 144 tiles on 132 SMs, 16 key
# blocks: the last round runs as a split tail launch with its workspace (asserted below).
SHAPES = [("tail", 1, 9, 2048, 2048, 128, False), ("d64", 2, 3, 1000, 777, 64, False),
          ("lens", 2, 4, 512, 600, 128, True)]


def make(name, b, h, sq, skv, d, lens, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, skv, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(b, skv, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
    kv_lens = torch.tensor([skv, skv // 3] * (b // 2) + [skv] * (b % 2), device="cuda", dtype=torch.int32) \
        if lens else None
    return q, k, v, kv_lens


def sdpa_bshd(q, k, v, kv_lens=None, scale=None):
    mask = ops._key_mask(kv_lens, k.shape[1], q.device) if kv_lens is not None else None
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale).transpose(1, 2)


@pytest.fixture(scope="module")
def cases():
    out = []
    for i, s in enumerate(SHAPES):
        q, k, v, kv_lens = make(*s, seed=i)
        assert vidattn.explain(q, k, v, kv_lens=kv_lens) is None
        ref = vidattn.attention(q, k, v, kv_lens=kv_lens)
        if s[0] == "tail":
            assert _ext.last_tail_splits() > 0, "the tail shape no longer takes the tail launch: pick another"
        torch.testing.assert_close(ref.float(), sdpa_bshd(q, k, v, kv_lens).float(), atol=2e-2, rtol=2e-2)
        out.append((s[0], q, k, v, kv_lens, ref))
    torch.cuda.synchronize()
    return out


def run_threads(fn, n):
    errors = []

    def wrap(i):
        try:
            fn(i)
        except BaseException as exc:  # noqa: BLE001 - reported below with the thread's index
            errors.append((i, repr(exc)))

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors


def test_first_cuda_work_of_a_thread_is_a_kernel_call(cases):
    """A worker thread (web server, UI) whose first CUDA work is vidattn.attention: no context is current there."""
    results = {}

    def work(i):
        name, q, k, v, kv_lens, _ = cases[i % len(cases)]
        # (No warnings.catch_warnings here: it is not thread-safe. Bitwise equality with the kernel's own answer
        # below, and no launch error recorded, show the kernel ran.)
        results[i] = vidattn.attention(q, k, v, kv_lens=kv_lens)
        torch.cuda.current_stream().synchronize()

    run_threads(work, len(cases))
    for i, (name, *_, ref) in enumerate(cases):
        assert torch.equal(results[i], ref), name
    assert _ext.runtime_reason() is None


@pytest.mark.parametrize("streams", ["own stream", "one shared stream", "default stream"])
@pytest.mark.parametrize("prior_cuda_call", [False, True])
def test_many_threads_are_bitwise_equal_to_one_and_do_not_grow_memory(cases, streams, prior_cuda_call):
    n_threads, rounds = 8, 12
    shared = torch.cuda.Stream()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    mismatches = []

    def work(i):
        if prior_cuda_call:
            torch.zeros(1, device="cuda").add_(1)
        stream = {"own stream": torch.cuda.Stream(), "one shared stream": shared,
                  "default stream": torch.cuda.default_stream()}[streams]
        outs = []
        with torch.cuda.stream(stream):
            for r in range(rounds):
                name, q, k, v, kv_lens, ref = cases[(i + r) % len(cases)]
                outs.append((name, vidattn.attention(q, k, v, kv_lens=kv_lens), ref))
        stream.synchronize()
        mismatches.extend((i, name) for name, out, ref in outs if not torch.equal(out, ref))

    run_threads(work, n_threads)
    torch.cuda.synchronize()
    assert not mismatches, mismatches
    assert torch.cuda.memory_allocated() == before  # every workspace and output went back
    assert _ext.runtime_reason() is None


def test_cuda_graphs_captured_and_replayed_concurrently(cases):
    graphs = []
    for name, q, k, v, kv_lens, ref in cases:
        sq, sk, sv = q.clone(), k.clone(), v.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            vidattn.attention(sq, sk, sv, kv_lens=kv_lens)  # warm-up outside capture
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = vidattn.attention(sq, sk, sv, kv_lens=kv_lens)
        if name == "tail":
            assert _ext.last_tail_splits() > 0, "the captured call did not take the tail launch"
        # The graph holds raw pointers to its inputs: they must outlive it (freed, the next case's clones took their
        # memory and the first graph read another case's data).
        graphs.append((name, g, out, ref, (sq, sk, sv)))
    torch.cuda.synchronize()
    for name, g, out, ref, _ in graphs:
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, ref), f"{name}: replay differs from the eager call"
    before = torch.cuda.memory_allocated()
    bad = []

    def replay(i):
        name, g, out, ref, _ = graphs[i % len(graphs)]
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            for _ in range(20):
                g.replay()
        s.synchronize()

    # One graph per thread at a time (a graph's output buffer is its own: two replays of one graph at once race
    # on it by construction, as any CUDA graph's would).
    run_threads(replay, len(graphs))
    torch.cuda.synchronize()
    for name, g, out, ref, _ in graphs:
        if not torch.equal(out, ref):
            bad.append(name)
    assert not bad, bad
    assert torch.cuda.memory_allocated() == before


def test_kv_lens_views_on_the_gpu_are_read_right(cases):
    name, q, k, v, kv_lens, ref = next(c for c in cases if c[4] is not None)
    table = torch.stack([kv_lens, torch.zeros_like(kv_lens)], dim=1)  # a column: stride 2
    column = table[:, 0]
    assert column.stride() == (2,)
    assert vidattn.explain(q, k, v, kv_lens=column) is None
    assert torch.equal(vidattn.attention(q, k, v, kv_lens=column), ref)
    scalar = torch.tensor([kv_lens[1].item()], device="cuda", dtype=torch.int32).expand(q.shape[0])  # stride 0
    expected = vidattn.attention(q, k, v, kv_lens=scalar.contiguous())
    assert torch.equal(vidattn.attention(q, k, v, kv_lens=scalar), expected)
    assert torch.equal(vidattn.attention(q, k, v, kv_lens=column.to(torch.int64)), ref)


def test_out_of_range_kv_lens_on_the_gpu():
    """Values are not checked on the GPU (that would cost a sync): above Skv reads as Skv, as SDPA's mask does; 0
    gives zero rows and an LSE of -inf (SDPA: NaN), as documented in vidattn.attention."""
    q, k, v, _ = make("x", 2, 2, 300, 257, 64, False)
    big = torch.tensor([10_000, 257], device="cuda", dtype=torch.int32)
    torch.testing.assert_close(vidattn.attention(q, k, v, kv_lens=big), vidattn.attention(q, k, v))
    zero = torch.tensor([0, 257], device="cuda", dtype=torch.int32)
    out, lse = vidattn.attention(q, k, v, kv_lens=zero, return_lse=True)
    assert torch.equal(out[0], torch.zeros_like(out[0])) and bool(torch.isneginf(lse[0]).all())
    assert torch.equal(out[1], vidattn.attention(q, k, v)[1])


@pytest.mark.parametrize("scale", [1e-46, 1e-40, 0.0, -0.5, 3e38, 1e-30, 0.125, 1e30])
def test_scale_edges_explain_agrees_with_the_call(scale, fresh_warnings):
    q, k, v, _ = make("x", 1, 2, 256, 256, 64, False)
    reason = vidattn.explain(q, k, v, scale=scale)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = vidattn.attention(q, k, v, scale=scale)  # never raises
    fell_back = any(issubclass(w.category, vidattn.VidattnFallbackWarning) for w in caught)
    assert fell_back is (reason is not None), (reason, [str(w.message) for w in caught])
    assert _ext.runtime_reason() is None  # an edge case never disables the kernel for later calls
    torch.testing.assert_close(out.float(), sdpa_bshd(q, k, v, scale=scale).float(), atol=3e-2, rtol=3e-2,
                               equal_nan=True)


def test_nan_in_q_gives_sdpa_nan_rows():
    q, k, v, _ = make("x", 1, 2, 256, 300, 128, False)
    q[0, 7, 1, 3] = float("nan")
    out = vidattn.attention(q, k, v)
    ref = sdpa_bshd(q, k, v)
    assert torch.equal(out.isnan(), ref.isnan())
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2, equal_nan=True)


def test_million_tokens():
    q, k, v, _ = make("x", 1, 1, 1 << 20, 1 << 20, 64, False)
    assert vidattn.explain(q, k, v) is None
    out = vidattn.attention(q, k, v)
    rows = torch.randint(0, 1 << 20, (64,), device="cuda")
    ref = F.scaled_dot_product_attention(q[:, rows].transpose(1, 2).float(), k.transpose(1, 2).float(),
                                         v.transpose(1, 2).float()).transpose(1, 2)
    torch.testing.assert_close(out[:, rows].float(), ref, atol=1e-2, rtol=1e-2)


def test_autocast_mixed_dtypes_run_the_kernel(cases):
    name, q, k, v, kv_lens, ref = cases[0]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert vidattn.explain(q.float(), k.float(), v) is None
        out = vidattn.attention(q.float(), k.float(), v)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)


# ------------------------------------------------------------------------------------------------ bad input on the GPU
def _math_ref(q, k, v, scale=None):
    """Attention in float64 with every score kept (no fused kernel's own NaN handling): what SDPA's math means."""
    qh, kh, vh = (t.transpose(1, 2).double() for t in (q, k, v))
    s = qh @ kh.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    return (torch.softmax(s, -1) @ vh).transpose(1, 2)


@pytest.mark.parametrize("where", ["nan q", "nan k", "nan v", "+inf q", "+inf k", "-inf k"])
def test_non_finite_inputs_give_sdpa_nan_pattern(where):
    """NaN or Inf in an input: the NaN rows/columns are SDPA's (float64 math on the same inputs), the finite values
    agree with it; nothing finite where SDPA has NaN, nothing NaN where it is finite."""
    q, k, v, _ = make("x", 1, 2, 300, 700, 128, False, seed=5)
    t = {"q": q, "k": k, "v": v}[where.split()[1]]
    t[0, 150 if t is q else 600, 1, 7] = float(where.split()[0])
    assert vidattn.explain(q, k, v) is None
    out = vidattn.attention(q, k, v)
    ref = _math_ref(q, k, v)
    assert torch.equal(out.isnan(), ref.isnan()), (int(out.isnan().sum()), int(ref.isnan().sum()))
    fin = ~ref.isnan()
    torch.testing.assert_close(out.double()[fin], ref[fin], atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("where", ["nan q", "nan k", "nan v", "+inf k"])
def test_non_finite_inputs_on_the_8bit_path_are_never_silently_finite(where, monkeypatch):
    """The 8-bit path quantizes with per-row, per-block and per-channel statistics, so a non-finite value spreads
    further than in exact attention; what it must not do is hide one: every row that is NaN in SDPA's answer has a
    NaN here too."""
    from vidattn import quant8

    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    q, k, v, _ = make("x", 1, 2, 300, 700, 128, False, seed=6)
    t = {"q": q, "k": k, "v": v}[where.split()[1]]
    t[0, 150 if t is q else 600, 1, 7] = float(where.split()[0])
    assert vidattn.explain(q, k, v, precision="8bit") is None
    out = vidattn.attention(q, k, v, precision="8bit")
    ref_rows = _math_ref(q, k, v).isnan().any(-1)
    assert bool(ref_rows.any())
    assert bool((out.isnan().any(-1) | ~ref_rows).all()), "a row SDPA gives as NaN came out finite"


def test_int64_kv_lens_past_int32_on_the_gpu_read_as_skv():
    q, k, v, _ = make("x", 2, 2, 300, 257, 64, False)
    huge = torch.tensor([2 ** 32 + 7, 257], device="cuda", dtype=torch.int64)
    torch.testing.assert_close(vidattn.attention(q, k, v, kv_lens=huge), vidattn.attention(q, k, v))


def test_negative_kv_lens_on_the_gpu_read_as_zero():
    q, k, v, _ = make("x", 2, 2, 300, 257, 64, False)
    neg = torch.tensor([-5, 257], device="cuda", dtype=torch.int32)
    zero = torch.tensor([0, 257], device="cuda", dtype=torch.int32)
    out, lse = vidattn.attention(q, k, v, kv_lens=neg, return_lse=True)
    ref, ref_lse = vidattn.attention(q, k, v, kv_lens=zero, return_lse=True)
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse)


def test_devices_and_host_kv_lens():
    q, k, v, _ = make("x", 2, 2, 300, 257, 64, False)
    with pytest.raises(ValueError, match="one device"):
        vidattn.attention(q, k.cpu(), v)
    host = torch.tensor([100, 257])  # on the CPU: value-checked, then copied to q's device
    dev = host.to("cuda", torch.int32)
    assert torch.equal(vidattn.attention(q, k, v, kv_lens=host), vidattn.attention(q, k, v, kv_lens=dev))
    with pytest.raises(ValueError, match=r"\[1, 257\]"):
        vidattn.attention(q, k, v, kv_lens=torch.tensor([0, 257]))


@pytest.mark.parametrize("d", [64, 128])
def test_8bit_million_tokens(d, monkeypatch):
    """1M queries and keys on the 8-bit path (a 400 MB workspace at D=128), sampled rows against fp32 SDPA: a right
    answer (the path's error, with a margin for rows of a million keys), not garbage."""
    q, k, v, _ = make("x", 1, 1, 1 << 20, 1 << 20, d, False, seed=7)
    assert vidattn.explain(q, k, v, precision="8bit") is None
    out = vidattn.attention(q, k, v, precision="8bit")
    rows = torch.randint(0, 1 << 20, (32,), device="cuda")
    ref = F.scaled_dot_product_attention(q[:, rows].transpose(1, 2).float(), k.transpose(1, 2).float(),
                                         v.transpose(1, 2).float()).transpose(1, 2)
    err = (out[:, rows].float() - ref).norm() / ref.norm()
    assert err < 0.1, float(err)


# ------------------------------------------------------------------------------------------------ workspace figures
def test_documented_workspace_figures_are_the_librarys():
    """docs/reliability.md's per-call workspace (dev/stress/budget.py) is what the library asks for."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from dev.stress import budget
    from vidattn import quant8

    lib = _ext.load()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert int(lib.vidattn_sm90_workspace_bytes()) == budget.exact_workspace_bytes(sms)
    for shape in [(1, 1, 1, 1, 64), (2, 3, 129, 777, 128), (1, 12, 32760, 32760, 128), (1, 40, 75600, 75600, 128),
                  (2, 24, 4224, 226, 64), (1, 1, 385, 129, 64)]:
        assert quant8.workspace_bytes(*shape) == budget.q8_workspace_bytes(*shape, sms=sms), shape
    for shape, h_kv in [((1, 32, 32768, 32768, 128), 8), ((2, 6, 129, 777, 64), 1), ((1, 4, 385, 129, 128), 2)]:
        assert quant8.workspace_bytes(*shape, h_kv=h_kv) == budget.q8_workspace_bytes(*shape, sms=sms, h_kv=h_kv)
    quant8.set_tail(0)
    try:  # the tail launch off: no ranges' partials
        assert quant8.workspace_bytes(1, 12, 32760, 32760, 128) == budget.q8_workspace_bytes(
            1, 12, 32760, 32760, 128, sms=2052)  # (as many SMs as tiles: no partial round)
    finally:
        quant8.set_tail(-1)


def test_a_call_allocates_its_documented_figure_and_frees_the_workspace():
    """Peak allocation of one call over its inputs = output + LSE + the documented workspace (rounded by the caching
    allocator to 512 bytes per block; a cached block of over 1 MiB is handed out whole when less than 1 MiB of it would
    be left); afterwards only the output and LSE remain."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from dev.stress import budget
    from vidattn import quant8

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for precision in ("exact", "8bit"):
        torch.cuda.empty_cache()  # the exact call's cached workspace would serve the 8-bit one's, whole
        q, k, v, _ = make("x", 1, 3, 1000, 9000, 128, False)
        vidattn.attention(q, k, v, precision=precision)  # warm: the library's lazy state
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out, lse = vidattn.attention(q, k, v, precision=precision, return_lse=True)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        documented = budget.call_bytes(1, 3, 1000, 9000, 128, precision, sms=sms, lse=True)
        assert documented <= peak <= documented + (1 << 20) + 8 * 512, (precision, peak, documented)
        rounded = lambda n: -(-n // 512) * 512  # noqa: E731 - the caching allocator's block granularity
        assert torch.cuda.memory_allocated() - before == rounded(out.numel() * 2) + rounded(lse.numel() * 4)
        assert precision == "exact" or quant8.route_reason(q, k) is None  # 9000 keys: the 8-bit kernel ran
        del out, lse  # else the next pass's reassignment frees them inside its measurement
