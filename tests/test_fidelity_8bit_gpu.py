"""scripts/fidelity_8bit.py on the GPU: a reduced-size Wan 1.3B (480x832 at 21 frames: 6 latent frames of 30x52
patches, 9360 tokens, past the 7680 keys up to which the 8-bit path runs exact at D=128) through every path, its per-layer
errors inside the bounds the kernel tests state, the SageAttention2 route where the anchor is installed. About 30 s
on an H200 (the library already built)."""
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

pytestmark = pytest.mark.gpu

from conftest import hopper_skip_reason  # noqa: E402

if hopper_skip_reason() is not None:
    pytest.skip(hopper_skip_reason(), allow_module_level=True)

import fidelity_8bit as fid  # noqa: E402
from vidattn import quant8  # noqa: E402

HEIGHT, WIDTH, FRAMES = 480, 832, 21
# Wan's VAE: 8x in space, 4x in time (plus the first frame); its patches 1x2x2.
TOKENS = ((FRAMES - 1) // 4 + 1) * (HEIGHT // 16) * (WIDTH // 16)


def test_geometry_reaches_the_8bit_kernel():
    assert TOKENS == 9360 and TOKENS > quant8.short_kv_exact_max(128)


def test_wan_reduced_all_paths(tmp_path):
    out = tmp_path / "fid"
    rep = fid.main(["--family", "wan", "--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES),
                    "--steps", "2", "--capture-rows", "512", "--sweep", "steps=1", "--out-dir", str(out)])
    data = json.loads((out / "fidelity.json").read_text())
    assert data["metadata"]["gpu"] and rep["paths"][:3] == ["sdpa", "exact", "8bit"]
    rows = data["per_layer"]["calls"]
    self_rows = [r for r in rows if r["seq_kv"] == r["seq_q"] == TOKENS]
    cross_rows = [r for r in rows if r["seq_kv"] == 512]
    assert self_rows and cross_rows, sorted({(r["seq_q"], r["seq_kv"]) for r in rows})
    for r in self_rows:
        assert r["explain_8bit"] is None  # the 8-bit kernel ran these
        assert r["exact"]["rel_l2"] < 5e-3
        assert r["exact"]["rel_l2"] < r["8bit"]["rel_l2"] < 8e-2
    for r in cross_rows:  # 512 keys: the 8-bit path runs the exact kernel, and says so
        assert "exact kernel" in r["explain_8bit"] and r["8bit"]["rel_l2"] < 5e-3
    for step in data["one_step"]:
        assert step["exact"]["cosine"] > 0.999 and step["8bit"]["cosine"] > 0.99
    assert data["video"]["exact"]["psnr_db"] == "inf" or data["video"]["exact"]["psnr_db"] > 20
    if data["sage2"]["available"]:
        assert data["routes"]["sage2"]["impl_calls"] > 0
        assert all(r["sage2"]["rel_l2"] < 8e-2 for r in self_rows)
    assert data["sweep"][0]["exact_first_steps"] == 1 and "video" in data["sweep"][0]
