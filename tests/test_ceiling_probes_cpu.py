"""dev/probes/gemm_ceiling.py and dev/probes/mufu_tensor_overlap.{cu,py} on the CPU: argument parsing, the sample
windows, the tables on fake data, the variant names the runner's baselines refer to, and (where nvcc is present) that
the .cu builds for sm_90a with no spills and with the instructions it is meant to time. Marked `dev`
(tests/conftest.py)."""
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from _support import load_script

ROOT = Path(__file__).resolve().parent.parent
PROBES = ROOT / "dev" / "probes"
CU = PROBES / "mufu_tensor_overlap.cu"


def _gemm():
    return load_script(PROBES / "gemm_ceiling.py", importable=True)


def _overlap():
    return load_script(PROBES / "mufu_tensor_overlap.py", importable=True)


def test_gemm_args_default_to_bf16_fp8_both_scalings_and_int8_for_at_least_five_seconds():
    g = _gemm()
    a = g.parse_args([])
    assert a.cases == g.DEFAULT_CASES and set(a.cases) <= set(g.CASES) and a.seconds >= 5 and a.n == 8192
    assert {"bf16", "int8"} <= set(a.cases) and any(c.startswith("fp8_tensor") for c in a.cases)
    assert any(c.startswith("fp8_row") for c in a.cases)
    assert g.parse_args(["--cases", "int8", "fp8_row_fast", "--seconds", "6"]).cases == ["int8", "fp8_row_fast"]
    with pytest.raises(SystemExit):
        g.parse_args(["--cases", "fp16"])


def test_gemm_window_keeps_the_samples_inside_the_measured_span():
    g = _gemm()
    samples = [(10.0, 1980.0, 300.0, 50.0), (11.0, 1600.0, 690.0, 60.0), (12.0, 1500.0, 700.0, 61.0),
               (13.5, 1900.0, 200.0, 55.0)]
    assert g.window(samples, 10.5, 12.5) == [(1600.0, 690.0, 60.0), (1500.0, 700.0, 61.0)]
    # no sample carries a time (unparsed timestamps): all of them rather than none
    assert g.window([(None, 1700.0, 650.0, 58.0)], 0.0, 1.0) == [(1700.0, 650.0, 58.0)]


def test_gemm_summary_and_table_on_fake_spans():
    g = _gemm()
    n = 8192
    flops = 2.0 * n ** 3
    # 100 calls at 1000 TFLOPS, then 100 at 900: the window's rate is the calls over the seconds (the harmonic mean
    # here), not the mean of the span rates
    spans = [(100, 100 * flops / 1000e12), (100, 100 * flops / 900e12)]
    r = g.summarize("fp8_tensor_fast", 8192, n, spans, [(1500.0, 700.0, 60.0), (1700.0, 680.0, 61.0)], 132)
    assert r["clock_mhz"] == 1600.0 and r["power_w"] == 690.0
    assert r["tflops"] == pytest.approx(2 / (1 / 1000 + 1 / 900))
    assert r["tflops_first_span"] == pytest.approx(1000) and r["tflops_last_span"] == pytest.approx(900)
    assert r["tflops_per_ghz"] == pytest.approx(r["tflops"] / 1.6)
    assert r["peak_tflops_per_ghz"] == pytest.approx(132 * 8192 / 1000)
    assert r["frac_of_peak_at_clock"] == pytest.approx(r["tflops"] / (1.6 * 132 * 8.192))
    empty = g.summarize("bf16", 4096, n, spans, [], 132)
    assert math.isnan(empty["clock_mhz"]) and math.isnan(empty["tflops_per_ghz"])
    text = g.table([r, {"case": "int8", "what": "", "error": "RuntimeError: no int8 kernel"}])
    lines = text.splitlines()
    assert lines[0].startswith("| case | TFLOPS")
    assert "| fp8_tensor_fast | 947 | 1000 / 900 | 1600 | 690 | 592 | 55% | 2 |" in lines[2]
    assert "failed: RuntimeError: no int8 kernel" in lines[3]


def _fake_line(variant, tflops, tensor, mufu, t0, t1, ghz=1.7):
    return {"variant": variant, "what": "", "wgs": 4, "sync": 0, "sms": 132, "t_start": t0, "t_end": t1,
            "seconds": t1 - t0, "sm_ghz": ghz, "tflops": tflops, "macs_per_clk_sm": 4096 * tensor,
            "tensor_frac": tensor, "ex2_per_clk_sm": 16 * mufu, "mufu_frac": mufu, "distinct_sms": 132}


def test_overlap_rows_samples_and_the_both_column():
    o = _overlap()
    import json
    lines = [_fake_line("a_fp8ss_4t", 1700, 0.95, 0.0, 100.0, 101.5),
             _fake_line("b_ex2_4m", 0, 0.0, 0.98, 102.0, 103.5),
             _fake_line("c_same_e64", 850, 0.475, 0.49, 104.0, 105.5),      # taking turns: 0.5 + 0.5
             _fake_line("a_fp8ss_2t", 1650, 0.90, 0.0, 106.0, 107.5),
             _fake_line("b_ex2_2m", 0, 0.0, 0.96, 108.0, 109.5),
             _fake_line("d_2t2m_free", 1620, 0.882, 0.9408, 110.0, 111.5)]  # at once: 0.98 + 0.98
    text = "warming up\n" + "\n".join(json.dumps(x) for x in lines) + "\n{not json}\n"
    rows = o.parse_lines(text)
    assert [r["variant"] for r in rows] == [x["variant"] for x in lines]
    samples = [(100.5, 1750.0, 690.0, 60.0), (101.0, 1650.0, 700.0, 61.0), (104.5, 1800.0, 600.0, 59.0),
               (None, 1.0, 1.0, 1.0), (200.0, 1.0, 1.0, 1.0)]
    o.attach_samples(rows, samples)
    assert rows[0]["smi_clock_mhz"] == 1700.0 and rows[0]["smi_power_w"] == 695.0 and rows[0]["smi_samples"] == 2
    assert rows[2]["smi_samples"] == 1 and math.isnan(rows[1]["smi_clock_mhz"])
    o.add_overlap(rows)
    by = {r["variant"]: r for r in rows}
    assert by["a_fp8ss_4t"]["both"] is None and by["b_ex2_4m"]["both"] is None
    assert by["c_same_e64"]["both"] == pytest.approx(0.5 + 0.49 / 0.98)
    assert by["d_2t2m_free"]["both"] == pytest.approx(0.98 + 0.98)
    assert by["d_2t2m_free"]["both_baselines"] == ["a_fp8ss_2t", "b_ex2_2m"]
    table = o.table(rows)
    assert "| d_2t2m_free | 1620 | 88.2 | 15.05 | 94.1 | 1.96 |" in table
    assert "| b_ex2_4m | 0 | 0.0 | 15.68 | 98.0 | - |" in table and "WARNING" not in table
    rows[1]["distinct_sms"] = 66  # two CTAs shared SMs
    assert "WARNING: not one CTA per SM in b_ex2_4m" in o.table(rows)


def test_overlap_runner_names_exist_in_the_program():
    """The baselines the runner divides by are variants the .cu defines (a rename would leave "both" empty)."""
    o = _overlap()
    names = set(re.findall(r'^\s*\{"([a-z0-9_]+)", "\(', CU.read_text(), flags=re.M))
    assert {"a_fp8ss_4t", "b_ex2_4m", "c_same_e64", "d_2t2m_sync"} <= names
    used = {n for pair in o.BASELINES.values() for n in pair} | set(o.BASELINES) | set(o.DEFAULT_BASELINE)
    assert used <= names, used - names
    a = o.parse_args(["--out", "/tmp/x", "c_same_e64"])
    assert a.variants == ["c_same_e64"] and a.seconds > 0 and a.bin is None


def test_probe_wgmma_header_is_the_generators_output():
    import sys
    out = subprocess.run([sys.executable, str(ROOT / "csrc/tools/gen_wgmma8.py"), "--probe"], capture_output=True,
                         text=True, check=True).stdout
    assert out == (PROBES / "wgmma8_probe_ops.cuh").read_text()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_overlap_program_builds_without_spills_and_has_the_instructions(tmp_path):
    """The runner's own build command; ptxas -v on every kernel; the program lists its variants and refuses an unknown
    one without touching a GPU; the SASS (where cuobjdump and nvdisasm are on PATH) holds what it is meant to time."""
    o = _overlap()
    exe = tmp_path / "mto"
    cmd = o.nvcc_command(shutil.which("nvcc"), exe)
    cmd[cmd.index("-o"):cmd.index("-o")] = ["-Xptxas", "-v"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stderr
    # every kernel: no spills, and no wgmma serialized by ptxas (C7510-C7520 "Potential Performance Loss")
    assert "Potential Performance Loss" not in log, log
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(spills) == 9 and all(sp == ("0", "0") for sp in spills), spills
    listed = subprocess.run([str(exe), "--list"], capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0
    names = {line.split()[0] for line in listed.stdout.splitlines()}
    assert {n for pair in o.BASELINES.values() for n in pair} | set(o.BASELINES) <= names
    bad = subprocess.run([str(exe), "no_such_variant"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown variant" in bad.stderr
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is None:
        return
    sass = subprocess.run([cuobjdump, "-sass", str(exe)], capture_output=True, text=True, timeout=120)
    if sass.returncode != 0:  # cuobjdump without nvdisasm
        return
    for op in ("QGMMA.64x128x32.F32.E4M3.E4M3", "IGMMA.64x128x32.S8.S8", "MUFU.EX2", "F2FP.SATFINITE.E4M3"):
        assert op in sass.stdout, op
    # the SS form of FP8 (both operands from descriptors) as well as the RS form (A from registers)
    assert re.search(r"QGMMA\.64x128x32\.F32\.E4M3\.E4M3 R\d+, gdesc", sass.stdout)
    assert re.search(r"QGMMA\.64x128x32\.F32\.E4M3\.E4M3 R\d+, R\d+, gdesc", sass.stdout)
    # the (f) and (g) variants: bf16 wgmma in both forms, and the (g) copies as bulk copies on the TMA unit
    assert re.search(r"HGMMA\.64x128x16\.F32\.BF16 R\d+, gdesc", sass.stdout)
    assert re.search(r"HGMMA\.64x128x16\.F32\.BF16 R\d+, R\d+, gdesc", sass.stdout)
    assert "UBLKCP.S.G" in sass.stdout
    # the (h) pair's copies into both CTAs, and its cluster barrier
    assert "UBLKCP.S.G.MULTICAST" in sass.stdout and "UCGABAR_WAIT" in sass.stdout


def test_gemm_main_runs_every_case_and_records_a_refusal(monkeypatch, tmp_path, capsys):
    """main() end to end with the GPU faked: each case timed over its window, one that torch refuses recorded as
    failed while the others run, the JSON and the table written under --out."""
    import contextlib
    import json
    import types

    import torch

    g = _gemm()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake H200")
    props = types.SimpleNamespace(multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: props)

    def build(case, n):
        if case == "int8":
            raise RuntimeError("no int8 here")
        return lambda: None

    @contextlib.contextmanager
    def sampling(period_ms=50):
        samples = []
        yield samples
        import time
        now = time.time()  # the measured window is at least one 1 s span: now - 0.5 falls inside it
        samples.extend([(now - 0.5, 1500.0, 690.0, 60.0), (None, 1.0, 1.0, 1.0), (now + 100, 1.0, 1.0, 1.0)])

    monkeypatch.setattr(g, "build", build)
    monkeypatch.setattr(g.clock_probe, "sampling", sampling)
    rc = g.main(["--cases", "bf16", "int8", "--n", "256", "--seconds", "0.05", "--warmup", "0.01", "--pause", "0",
                 "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "gemm_ceiling.json").read_text())
    bf16, int8 = result["rows"]
    assert bf16["case"] == "bf16" and bf16["calls"] > 0 and bf16["clock_mhz"] == 1500.0 and bf16["samples"] == 1
    assert int8["error"] == "RuntimeError: no int8 here"
    assert (tmp_path / "gemm_ceiling.txt").read_text().splitlines()[3].startswith("| int8 | failed")
    assert capsys.readouterr().out.rstrip().endswith("| int8 | failed: RuntimeError: no int8 here | | | | | | |")
