"""The 8-bit kernel's register split, without a GPU: setmaxnreg moves registers only within the CTA's launch allocation
(threads x the per-thread count, a multiple of 8), so every consumer/producer split must fit that, not the 65,536 of
the file; the experiment that outgrew it (v16, four consumer warpgroups at 120, dev/experiments) hung in
setmaxnreg.inc. And quant8.last_warpgroups reads the C entry that says what ran."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

from vidattn import quant8

REPO = Path(__file__).resolve().parent.parent
CAPI = (REPO / "csrc/capi_8bit.cuh").read_text()
FWD = (REPO / "csrc/sm90/q8_fwd.cuh").read_text()


def launch_allocation(threads: int) -> int:
    return 65536 // threads // 8 * 8 * threads


def test_the_split_is_checked_against_the_launch_allocation():
    assert "static constexpr uint32_t kLaunchRegs = 65536 / kThreads / 8 * 8;" in FWD
    assert "kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= kLaunchRegs * kThreads" in FWD
    producer = int(re.search(r"kProducerRegs = (\d+);", FWD).group(1))
    three, two = map(int, re.search(r"kConsumerRegs = kConsumerWGs == 3 \? (\d+) : (\d+);", FWD).groups())
    for wgs, consumer in ((3, three), (2, two)):
        assert producer * 128 + consumer * 128 * wgs <= launch_allocation(128 * (wgs + 1)), wgs
    # what hung: four warpgroups at 120 fit the file (64,512) but not a 640-thread launch (96 x 640 = 61,440)
    assert producer * 128 + 120 * 128 * 4 <= 65536
    assert producer * 128 + 120 * 128 * 4 > launch_allocation(640)


def test_last_warpgroups_reads_the_c_entry():
    assert '"vidattn_q8_last_warpgroups"' in inspect.getsource(quant8.last_warpgroups)
    assert 'extern "C" int vidattn_q8_last_warpgroups(void) { return g_q8_last_wgs; }' in CAPI
