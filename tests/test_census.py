"""pipelines.census.AttentionCensus's classification on the CPU, with vidattn.explain faked: what the kernel ran, what
fell back to SDPA, and an 8-bit call the exact kernel takes instead (a kernel call, its reason kept)."""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from pipelines.census import AttentionCensus  # noqa: E402


def test_8bit_call_on_the_exact_kernel_is_a_kernel_call(monkeypatch):
    from vidattn import ops

    short = "8-bit path not used: 512 keys: ...; the exact kernel runs instead"

    def explain(q, k, v, precision=None, **kw):
        if k.shape[1] == 7:
            return "head dim 300 > 256"  # the op runs SDPA whatever the precision
        return short if precision == "8bit" and k.shape[1] < 100 else None

    monkeypatch.setattr(ops, "explain", explain)
    monkeypatch.setattr(ops, "attention", lambda q, k, v, **kw: q)
    q = torch.zeros(1, 4, 2, 8)
    with AttentionCensus() as census:
        ops.attention(q, torch.zeros(1, 512, 2, 8), q, precision="8bit")   # the 8-bit kernel
        ops.attention(q, torch.zeros(1, 16, 2, 8), q, precision="8bit")    # 8-bit not used: the exact kernel
        ops.attention(q, torch.zeros(1, 16, 2, 8), q)                      # exact
        ops.attention(q, torch.zeros(1, 7, 2, 8), q, precision="8bit")     # SDPA
    s = census.summary()
    assert (s["kernel"], s["fallback"], s["stock"]) == (3, 1, 0)
    assert s["fallback_reasons"] == {"head dim 300 > 256": 1}
    assert any(g["kind"] == "kernel" and g["reason"] == short for g in s["shapes"])


def test_routed_paths_say_routed_not_kernel():
    import e2e_report as e2e

    c = {"kernel": 78, "fallback": 2, "stock": 1}
    assert e2e.calls_cell("vidattn_8bit", c) == "78 / 2 / 1"
    assert e2e.calls_cell("sdpa_proc", c) == "80 routed to SDPA in vidattn's processors / 1 stock"
    assert e2e.calls_cell("sage2", c).startswith("80 routed to SageAttention2")
