"""dev/probes/clock_probe.py: parsing nvidia-smi's CSV samples and their summary (CPU only; the probe itself needs a
GPU and nvidia-smi)."""
from __future__ import annotations

import math
from pathlib import Path

from _support import load_script

ROOT = Path(__file__).resolve().parent.parent


def _mod():
    return load_script(ROOT / "dev" / "probes" / "clock_probe.py")


def test_parse_skips_what_is_not_a_sample():
    lines = ["timestamp, clocks.sm [MHz], power.draw [W], temperature.gpu",  # a header, should one appear
             "2026/11/30 15:00:00.050, 1980, 612.40, 61",
             "2026/11/30 15:00:00.100, 1755, [N/A], 62",
             "2026/11/30 15:00:00.150, 1740, 698.10, 63",
             "2026/11/30 15:00:00.2"]  # cut off when the sampler was stopped
    assert _mod().parse_samples(lines) == [(1980.0, 612.4, 61.0), (1740.0, 698.1, 63.0)]


def test_summary_is_the_median_and_nan_without_samples():
    mod = _mod()
    s = mod.summarize([(1980.0, 600.0, 60.0), (1700.0, 700.0, 70.0), (1800.0, 650.0, 65.0)])
    assert s == {"n": 3, "clock_mhz": 1800.0, "power_w": 650.0, "temp_c": 65.0}
    empty = mod.summarize([])
    assert empty["n"] == 0 and math.isnan(empty["clock_mhz"])


def test_timed_samples_keep_the_time_and_parse_samples_drops_it():
    """parse_timed_samples (what the sampling context yields, shared with neighbour_probe.py) keeps each sample's
    time, None where the timestamp does not parse; parse_samples is the same samples without it."""
    mod = _mod()
    lines = ["2026/11/30 15:00:00.050, 1980, 612.40, 61", "not a time, 1740, 698.10, 63"]
    timed = mod.parse_timed_samples(lines)
    assert [s[1:] for s in timed] == mod.parse_samples(lines) == [(1980.0, 612.4, 61.0), (1740.0, 698.1, 63.0)]
    assert timed[0][0] is not None and timed[1][0] is None


def test_shapes_are_anchor_keys_or_bxhxsxd():
    """BxHxSxD is a self-attention shape of its own; anything else is looked up as an anchor key (an unknown one is
    an argument error, not an empty run); --paths takes fa3 and keeps the order given."""
    import pytest

    mod = _mod()
    assert mod.parse_shapes(["16x8x1024x256"]) == [("16x8x1024x256", 16, 8, 1024, 1024, 256)]
    key = mod.anchor_shapes.SHAPES[0].key
    assert mod.parse_shapes([key]) == mod.anchor_shapes.by_key([key])
    args = mod.parse_args(["1x8x32768x256", "--paths", "fa3", "cudnn", "vidattn"])
    assert args.paths == ["fa3", "cudnn", "vidattn"] and args.shape_rows[0][1:] == (1, 8, 32768, 32768, 256)
    for bad in (["16x8x0x256"], ["no_such_shape"]):
        with pytest.raises(SystemExit):
            mod.parse_args(bad)


def test_paths_name_their_settings():
    """vidattn_tN: the exact kernel's tail setting N; vidattn_hdN: VIDATTN_HD_NARROW=N (6 the routed D=256 build, 8
    that build in CTA pairs); the plain paths run under the library's own settings."""
    mod = _mod()
    assert {"vidattn_hd6", "vidattn_hd8", "vidattn_t3"} <= set(mod.PATHS)
    assert [mod.path_setting(p) for p in ("vidattn", "cudnn", "vidattn_t3", "vidattn_hd6", "vidattn_hd8")] == \
        [(-1, -1), (-1, -1), (3, -1), (-1, 6), (-1, 8)]
    args = mod.parse_args(["1x8x32768x256", "--paths", "vidattn_hd6", "vidattn_hd8", "cudnn"])
    assert args.paths == ["vidattn_hd6", "vidattn_hd8", "cudnn"]
