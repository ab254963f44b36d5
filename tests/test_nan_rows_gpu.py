"""NaN inputs give NaN where SDPA gives NaN, on every launch shape (a Hopper GPU): a NaN query makes its row's output
and LSE NaN, a NaN key every row of its head; the other rows stay finite. Both the plain launch and the tail launch,
whose merge (csrc/sm90/combine.cuh) once turned such rows into zeros with an LSE of -inf: each key range's row max
drops the NaN (-inf), its row sum keeps it, and the merge skipped rows whose maxima were all -inf as rows without
keys (call P45 of the twenty-second sitting, 8-bit at 1500 keys). The exact path (bf16) and the 8-bit path."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("the kernels need an sm_90 (Hopper) GPU", allow_module_level=True)

import vidattn  # noqa: E402
from vidattn import _ext, quant8  # noqa: E402

DEV = torch.device("cuda")
NAN_HEAD, NAN_ROW, NAN_KEY = 1, 37, 300


@pytest.fixture(autouse=True)
def eight_bit_kernel_at_every_length(monkeypatch):
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    yield
    quant8.set_tail(-1)


def inputs(skv, seed, where):
    g = torch.Generator(device=DEV).manual_seed(seed)
    q, k, v = (torch.randn(1, n, 4, 128, device=DEV, dtype=torch.bfloat16, generator=g) for n in (1500, skv, skv))
    if where == "query":
        q[0, NAN_ROW, NAN_HEAD, 5] = float("nan")
    else:
        k[0, NAN_KEY, NAN_HEAD, 5] = float("nan")
    return q, k, v


def check(out, lse, where):
    """NaN exactly where SDPA has it: the query's row of its head, or every row of the key's head."""
    nan_rows = torch.isnan(out[0, :, NAN_HEAD]).any(-1)  # (Sq,)
    want = torch.zeros_like(nan_rows)
    if where == "query":
        want[NAN_ROW] = True
    else:
        want[:] = True
    assert torch.equal(nan_rows, want), f"NaN rows {int(nan_rows.sum())}, zero rows " \
        f"{int((out[0, :, NAN_HEAD] == 0).all(-1).sum())}"
    assert torch.isnan(out[0, want, NAN_HEAD]).all()  # the whole row, not a column
    assert torch.equal(torch.isnan(lse[0, NAN_HEAD]), want)
    others = [h for h in range(4) if h != NAN_HEAD]
    assert torch.isfinite(out[0, :, others]).all() and torch.isfinite(lse[0, others]).all()
    assert torch.isfinite(out[0, ~want, NAN_HEAD]).all() and torch.isfinite(lse[0, NAN_HEAD, ~want]).all()


@pytest.mark.parametrize("where", ["query", "key"])
@pytest.mark.parametrize("skv,tail", [(700, False), (1500, True)])  # 6 key blocks: no tail; 12: two ranges a tile
def test_exact(where, skv, tail):
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = inputs(skv, seed, where)
    out, lse = vidattn.attention(q, k, v, return_lse=True)
    torch.cuda.synchronize()
    assert (_ext.last_tail_splits() >= 2) == tail, _ext.last_tail_splits()
    check(out, lse, where)


@pytest.mark.parametrize("where", ["query", "key"])
@pytest.mark.parametrize("tail", [0, 1])
def test_8bit(where, tail):
    """At 1500 keys the 8-bit tail launch (mode 1) splits each of the 32 tiles in three; mode 0 keeps the plain
    launch. A NaN key reaches every key block's scale of its head (its channel mean is NaN), so every range of the
    head's tiles holds it."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = inputs(1500, seed, where)
    quant8.set_tail(tail)
    out, lse = vidattn.attention(q, k, v, return_lse=True, precision="8bit")
    torch.cuda.synchronize()
    assert vidattn.explain(q, k, v, precision="8bit") is None
    assert (quant8.last_tail_splits() >= 2) == bool(tail), quant8.last_tail_splits()
    check(out, lse, where)
