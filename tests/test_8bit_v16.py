"""v16 (dev/NOTES_8bit.md "v16": D=64 schedule 1 with four consumer warpgroups) without a GPU: built only under
-DVIDATTN_Q8_D64_WG4=1, selected by set_d64_warpgroups(4), refused with a clear error elsewhere; the register
arithmetic that made its first build hang is asserted at compile time; quant8 reads what ran."""
from __future__ import annotations

import inspect
from pathlib import Path

from vidattn import quant8

REPO = Path(__file__).resolve().parent.parent
CAPI = (REPO / "csrc/capi_8bit.cuh").read_text()
FWD = (REPO / "csrc/sm90/q8_fwd.cuh").read_text()


def test_off_by_default_and_refused_with_the_reason():
    assert "#define VIDATTN_Q8_D64_WG4 0" in CAPI
    assert "if (warpgroups != 0 && warpgroups != 2 && warpgroups != 3 && warpgroups != 4) return 1;" in CAPI
    i = CAPI.index("if (g_q8_d64_wgs == 4) {")
    block = CAPI[i:CAPI.index("#endif", i)]
    assert "#if VIDATTN_Q8_D64_WG4" in block and "#else" in block
    assert "experiment builds only" in block and "VIDATTN_Q8_D64_WG4=1" in block
    # (built with row-sum mode 1 and conversion 1 only, as the default it is compared with)
    assert "q8_launch<64, 4, true, false, true, false, 1>" in block


def test_setmaxnreg_fits_what_the_launch_gives():
    """setmaxnreg moves registers within the CTA's launch allocation (threads x per-thread count, a multiple of 8):
    the first v16 build asked 120 per consumer thread of 96 x 640 and hung in setmaxnreg.inc."""
    assert "static constexpr uint32_t kLaunchRegs = 65536 / kThreads / 8 * 8;" in FWD
    assert "<= kLaunchRegs * kThreads" in FWD
    for wgs, consumer in ((2, 240), (3, 160), (4, 112)):
        threads = 128 * (wgs + 1)
        launch = 65536 // threads // 8 * 8
        assert 24 * 128 + consumer * 128 * wgs <= launch * threads, wgs
    assert 24 * 128 + 120 * 128 * 4 > (65536 // 640 // 8 * 8) * 640  # what hung
    assert "kConsumerWGs == 4 ? 112 : kConsumerWGs == 3 ? 160 : 240" in FWD


def test_last_warpgroups_reads_the_c_entry():
    """quant8.last_warpgroups (v16's A/B and GPU tests read it) is the C entry's reader."""
    assert '"vidattn_q8_last_warpgroups"' in inspect.getsource(quant8.last_warpgroups)
    assert 'extern "C" int vidattn_q8_last_warpgroups(void) { return g_q8_last_wgs; }' in CAPI
