#!/usr/bin/env bash
# On a Hopper GPU machine: build a wheel from this checkout, install it into a temporary folder, and from outside
# the source tree run one kernel call, checking that vidattn.explain says the kernel runs (None) and that the output
# matches SDPA. The first call builds the kernel library from the wheel's sources into VIDATTN_CACHE_DIR (default
# here: /tmp/vidattn-wheel-cache), so a later test run given the same cache folder does not build again.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
export VIDATTN_CACHE_DIR="${VIDATTN_CACHE_DIR:-/tmp/vidattn-wheel-cache}"
python3 -m pip wheel . --no-deps --no-build-isolation -q -w "$work/dist"
python3 -m pip install --no-deps --no-index -q --target "$work/site" "$work"/dist/vidattn-*.whl
echo "gpu_wheel_check: wheel $(basename "$work"/dist/vidattn-*.whl), installed into $work/site"
cd /tmp
PYTHONPATH="$work/site" python3 - "$work/site" <<'PY'
import sys
import time

import torch
import torch.nn.functional as F

import vidattn
from vidattn import _ext

site = sys.argv[1]
assert vidattn.__file__.startswith(site), f"imported {vidattn.__file__}, not the installed wheel"
assert str(_ext.CSRC).startswith(site), f"kernel sources from {_ext.CSRC}, not the wheel"
q, k, v = (torch.randn(2, 4096, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
t0 = time.perf_counter()
reason = vidattn.explain(q, k, v)  # builds the library on first use
print(f"gpu_wheel_check: explain -> {reason!r} after {time.perf_counter() - t0:.1f} s; "
      f"nvcc build time {_ext.last_build_seconds}")
assert reason is None, reason
assert vidattn.kernel_available()
out = vidattn.attention(q, k, v)
ref = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)
assert _ext.runtime_reason() is None, _ext.runtime_reason()
print(f"gpu_wheel_check: OK - the installed wheel ran the kernel; max |out - SDPA| "
      f"{(out.float() - ref.float()).abs().max().item():.4f}")
PY
