"""dev/probes/ncu_stalls.py on a small synthetic Nsight Compute source-page export."""
from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "dev" / "probes" / "ncu_stalls.py"
CSV = """"Kernel Name","k",
"Address","Source","Warp Stall Sampling (All Samples)","stall_barrier","stall_long_sb","stall_wait","stall_barrier (Not Issued)"
"0x10","  HGMMA.64x176x16 R24, gdesc[UR4], RZ","30","25","0","5","20"
"0x20","  @!P0 BRA 0x900","60","0","60","0","50"
"0x30","  FMNMX R0, R1, R2","10","0","0","10","0"
"""


def test_summary_orders_instructions_and_reasons(tmp_path):
    path = tmp_path / "src.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write(CSV)
    out = subprocess.run([sys.executable, str(SCRIPT), str(path), "--top", "2"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == "3 instructions, 100 samples"
    assert out[1].startswith("by reason: long_sb 60.0%, barrier 25.0%, wait 15.0%")  # "(Not Issued)" not counted
    assert "BRA 0x900" in out[2] and "60.0%" in out[2] and "long_sb 60" in out[2]
    assert "HGMMA" in out[3] and len(out) == 4


def test_rejects_a_file_without_the_source_header(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text('"a","b"\n"1","2"\n')
    r = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True)
    assert r.returncode != 0 and "no header row" in r.stderr
