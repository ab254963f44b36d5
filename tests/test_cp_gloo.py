"""Context parallelism through the "vidattn" diffusers backend: two gloo processes on the CPU (loopback only).

A tiny Wan with `enable_parallelism(ContextParallelConfig(ring_degree=2))` and with `ulysses_degree=2` must give
the one-process output. On the CPU `vidattn.attention` runs its SDPA fallback (with an fp32 LSE), so this checks
the plumbing: diffusers' templates call the backend's forward op, the LSE leaves it as (B, S, H), the ring merge
and the Ulysses all-to-all give the unsharded answer. The kernel's own LSE and the merge on a GPU are
tests/test_backend_gpu.py's.

Two workarounds for a CPU-only host, both inside the spawned workers only:
- diffusers' `_resolve_parallel_config` computes `rank % torch.accelerator.device_count()`, which is 0 without an
  accelerator (ZeroDivisionError); the workers report one device and the CPU as the accelerator, so each rank's
  device is `cpu:0` and the device mesh is a CPU (gloo) mesh.
- diffusers' context-parallel hook splits only the tensors of a `return_dict=False` call (hooks/context_parallel.py).
"""
import os
import socket
import sys
import tempfile

import pytest
import torch

pytest.importorskip("diffusers")
from diffusers import ContextParallelConfig  # noqa: E402,F401  (imported before the fork)
from diffusers.models.transformers.transformer_wan import WanTransformer3DModel  # noqa: E402,F401

import vidattn.diffusers  # noqa: E402,F401

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

WORLD = 2
TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out_dir: str, modes: tuple):
    import datetime

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    torch.set_num_threads(1)
    # See the module docstring. On a host with a GPU the same run stays on the CPU: diffusers would otherwise build
    # the device mesh (and pick each rank's device) on the accelerator.
    torch.accelerator.device_count = lambda: 1
    torch._C._get_accelerator = lambda: torch.device("cpu")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    try:
        from diffusers import ContextParallelConfig

        import vidattn.diffusers  # noqa: F401  (registers the backend)
        from vidattn import ops
        from vidattn.diffusers import backend

        from conftest import tiny_wan, tiny_wan_inputs

        calls = []
        real = ops.attention

        def spy(q, k, v, **kw):
            calls.append((tuple(q.shape), tuple(k.shape), bool(kw.get("return_lse")), kw.get("kv_lens")))
            return real(q, k, v, **kw)

        ops.attention = spy
        x, t, ctx = tiny_wan_inputs(frames=2, size=8)  # 2 * 4 * 4 = 32 video tokens: splits in two
        results = {}
        with torch.no_grad():
            reference = tiny_wan(seed=0)(x, t, ctx, return_dict=False)[0]
            for mode in modes:
                model = tiny_wan(seed=0)
                model.set_attention_backend("vidattn")
                model.enable_parallelism(config=ContextParallelConfig(**{f"{mode}_degree": WORLD}))
                calls.clear()
                backend.reset_route_counts()
                out = model(x, t, ctx, return_dict=False)[0]
                results[mode] = dict(diff=(out - reference).abs().max().item(), calls=list(calls),
                                     routes=backend.route_counts())
            calls.clear()
            results["masked"] = _masked_calls(rank, backend)
            results["masked"]["calls"] = list(calls)
            backend.reset_route_counts()
            results["block"] = _block_mask_calls(rank, backend)
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _masked_calls(rank: int, backend) -> dict:
    """Direct backend calls with a key-padding mask under real collectives, each rank holding its half of the
    queries, keys and mask (as diffusers' CP hook splits them): Ulysses gathers the mask and runs kv_lens; ring must
    refuse on every rank when one rank's half drops keys (rank 0's half here keeps all of them), and drop a mask
    that keeps every key everywhere."""
    from diffusers import ContextParallelConfig, ParallelConfig
    from torch.distributed.device_mesh import init_device_mesh

    g = torch.Generator().manual_seed(5)
    b, s, h, d = 2, 16, 4, 64
    q, k, v = (torch.randn(b, s, h, d, generator=g) for _ in range(3))
    keep = torch.arange(s)[None, :] < torch.tensor([s, 11])[:, None]  # batch 1 drops keys 11-15: rank 1's half
    full = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=keep[:, None, None, :]).transpose(1, 2)
    plain = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    mine = slice(rank * s // WORLD, (rank + 1) * s // WORLD)
    out = {}
    for mode in ("ulysses", "ring"):
        cp = ContextParallelConfig(**{f"{mode}_degree": WORLD})
        config = ParallelConfig(context_parallel_config=cp)
        config.setup(rank, WORLD, torch.device("cpu"),
                     mesh=init_device_mesh("cpu", cp.mesh_shape, mesh_dim_names=cp.mesh_dim_names))
        for name, mask, expected in (("padded", keep, full), ("all kept", torch.ones_like(keep), plain)):
            try:
                o = backend.vidattn_attention(q[:, mine], k[:, mine], v[:, mine], attn_mask=mask[:, mine],
                                              _parallel_config=config)
                out[f"{mode} {name}"] = (o - expected[:, mine]).abs().max().item()
            except ValueError as exc:
                out[f"{mode} {name}"] = str(exc)
        # is_causal: a clear refusal (diffusers' templates have no causal path).
        causal = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
        try:
            o = backend.vidattn_attention(q[:, mine], k[:, mine], v[:, mine], is_causal=True, _parallel_config=config)
            out[f"{mode} causal"] = (o - causal[:, mine]).abs().max().item()
        except ValueError as exc:
            out[f"{mode} causal"] = str(exc)
    return out


def _block_mask_calls(rank: int, backend) -> dict:
    """A flex BlockMask of one head built for the whole sequence (whole 64 x 64 blocks, as NABLA's), each rank holding
    its half of the queries, keys and values: Ulysses gathers every key for half of the heads and each shard runs the
    block-sparse op with the mask; ring, and a mask built for the local keys, are refused on every rank."""
    from diffusers import ContextParallelConfig, ParallelConfig
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.attention.flex_attention import BlockMask

    g = torch.Generator().manual_seed(6)
    b, s, h, d, n = 1, 256, 4, 64, 4
    q, k, v = (torch.randn(b, s, h, d, generator=g) for _ in range(3))
    dense = (torch.rand(1, 1, n, n, generator=g) < 0.4) | torch.eye(n, dtype=torch.bool)

    def block_mask(blocks):
        nb = blocks.sum(-1).to(torch.int32)
        idx = blocks.to(torch.int8).argsort(dim=-1, descending=True, stable=True).to(torch.int32)
        return BlockMask.from_kv_blocks(torch.zeros_like(nb), idx, nb, idx, BLOCK_SIZE=64, mask_mod=None)

    keep = dense.repeat_interleave(64, -2).repeat_interleave(64, -1)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=keep).transpose(1, 2)
    unmasked = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    mine = slice(rank * s // WORLD, (rank + 1) * s // WORLD)
    out = {"mask matters": (expected - unmasked).abs().max().item()}
    for mode in ("ulysses", "ring"):
        cp = ContextParallelConfig(**{f"{mode}_degree": WORLD})
        config = ParallelConfig(context_parallel_config=cp)
        config.setup(rank, WORLD, torch.device("cpu"),
                     mesh=init_device_mesh("cpu", cp.mesh_shape, mesh_dim_names=cp.mesh_dim_names))
        for name, mask in (("whole", block_mask(dense)), ("local", block_mask(dense[..., :2, :2]))):
            try:
                o = backend.vidattn_attention(q[:, mine], k[:, mine], v[:, mine], attn_mask=mask,
                                              _parallel_config=config)
                out[f"{mode} {name}"] = (o - expected[:, mine]).abs().max().item()
            except ValueError as exc:
                out[f"{mode} {name}"] = str(exc)
    out["routes"] = backend.route_counts()
    return out


@pytest.fixture(scope="module")
def cp_results():
    with tempfile.TemporaryDirectory() as out_dir:
        # fork: the workers inherit this process's imports (torch, diffusers, the Wan model class), which take
        # most of a spawned worker's time; each worker runs single-threaded (set_num_threads(1) first), so
        # OpenMP's thread pool is not used across the fork.
        # A process that has initialised CUDA cannot fork safely: spawn there (slower, the same test).
        ctx = mp.get_context("spawn" if torch.cuda.is_initialized() else "fork")
        port = _free_port()
        procs = [ctx.Process(target=_worker, args=(r, port, out_dir, ("ring", "ulysses")), daemon=True)
                 for r in range(WORLD)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(TIMEOUT_S)
        alive = [p for p in procs if p.is_alive()]
        for p in alive:
            p.kill()
        assert not alive, f"context-parallel workers still running after {TIMEOUT_S} s"
        codes = [p.exitcode for p in procs]
        assert codes == [0] * WORLD, f"worker exit codes {codes}"
        yield [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(WORLD)]


# Tiny Wan: 2 layers, 2 heads x 64; 32 video tokens (16 per rank), 10 text tokens.
LAYERS, HEADS, D, TOKENS, TEXT = 2, 2, 64, 32, 10


def test_ring_matches_one_process(cp_results):
    for rank, res in enumerate(cp_results):
        r = res["ring"]
        assert r["diff"] < 1e-5, (rank, r["diff"])
        # Self-attention: each layer once per key chunk, local queries against a 16-key chunk, LSE requested.
        ring = [c for c in r["calls"] if c[2]]
        assert [c[:2] for c in ring] == [((1, TOKENS // WORLD, HEADS, D), (1, TOKENS // WORLD, HEADS, D))] * (
            LAYERS * WORLD), r["calls"]
        # Cross-attention runs without context parallelism (Wan's plan splits the video tokens only): direct calls.
        direct = [c for c in r["calls"] if not c[2]]
        assert [c[:2] for c in direct] == [((1, TOKENS // WORLD, HEADS, D), (1, TEXT, HEADS, D))] * LAYERS
        assert r["routes"] == {"vidattn": LAYERS * WORLD + LAYERS}


def test_ulysses_matches_one_process(cp_results):
    for rank, res in enumerate(cp_results):
        u = res["ulysses"]
        assert u["diff"] < 1e-5, (rank, u["diff"])
        # After the all-to-all: all 32 tokens, one of the two heads, no LSE.
        heads = [c for c in u["calls"] if c[1][1] == TOKENS]
        assert [c[:3] for c in heads] == [((1, TOKENS, HEADS // WORLD, D), (1, TOKENS, HEADS // WORLD, D), False)] \
            * LAYERS, u["calls"]
        assert len(u["calls"]) == 2 * LAYERS
        assert u["routes"] == {"vidattn": 2 * LAYERS}


def test_masks_under_real_collectives(cp_results):
    for rank, res in enumerate(cp_results):
        m = res["masked"]
        assert m["ulysses padded"] < 1e-5 and m["ulysses all kept"] < 1e-5, (rank, m)
        # Both ranks refuse (rank 0's own half keeps every key: the decision is all-reduced).
        assert "ring attention" in m["ring padded"] and "one mask to every rotated key chunk" in m["ring padded"]
        assert m["ring all kept"] < 1e-5, (rank, m)
        ulysses = [c for c in m["calls"] if not c[2]]
        assert [c[3].tolist() if c[3] is not None else None for c in ulysses] == [[16, 11], [16, 16]], ulysses
        # Causal: refused on every rank with the reason, before any collective (diffusers' templates refuse it too).
        for mode in ("ulysses", "ring"):
            assert "is_causal=True under context parallelism" in m[f"{mode} causal"], (rank, m)


def test_block_mask_under_real_collectives(cp_results):
    for rank, res in enumerate(cp_results):
        r = res["block"]
        assert r["mask matters"] > 1e-2
        assert r["ulysses whole"] < 1e-5, (rank, r)
        assert r["routes"] == {"vidattn": 1}, (rank, r)  # the shard's call: the block-sparse op
        assert "BlockMask over this rank's shard of the keys" in r["ulysses local"], (rank, r)
        for name in ("whole", "local"):
            assert "ring attention" in r[f"ring {name}"] and "a flex BlockMask" in r[f"ring {name}"], (rank, r)
