"""The stress tools' own logic, on the CPU: the documented workspace figures against the C sources they mirror, the
sanitizer runner's verdicts (with a fake compute-sanitizer), the sanitizer cases' path annotations against the
launcher's tail plan, the soak's hour-equivalence against its source, and the device script's syntax.
The GPU halves: tests/test_reliability_gpu.py, dev/device_reliability.sh."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dev.stress import budget, sanitize  # noqa: E402


def _define(path: str, name: str) -> int:
    text = (REPO / path).read_text()
    m = re.search(rf"#define {name} (\d+)", text) or re.search(rf"constexpr int {name} = (\d+);", text)
    assert m, f"{name} not found in {path}"
    return int(m.group(1))


# ------------------------------------------------------------------------------------------------ the documented figures
def test_workspace_constants_mirror_the_c_sources():
    capi = (REPO / "csrc/capi.cu").read_text()
    assert "constexpr uint64_t kTailItemBytes = 128 * (256 + 2) * sizeof(float);" in capi
    assert budget.TAIL_ITEM_BYTES == 128 * 258 * 4
    assert f"constexpr int kTailMaxItemsPerSm = {budget.TAIL_ITEMS_PER_SM};" in capi
    assert "const uint64_t per_sm = tail_rounds() >= 2 ? kTailMaxItemsPerSm : 1;" in capi
    assert "const uint64_t tail = per_sm * sm_count() * kTailItemBytes;" in capi
    assert _define("csrc/capi.cu", "VIDATTN_TAIL_ROUNDS") == budget.EXACT_TAIL_ROUNDS
    assert _define("csrc/sm90/q8_quant.cuh", "kQ8BlockN") == budget.Q8_BLOCK_N
    assert _define("csrc/sm90/q8_quant.cuh", "kQ8BlockMPad") == budget.Q8_BLOCK_M_PAD
    assert _define("csrc/sm90/q8_quant.cuh", "kQ8KGroups") == budget.Q8_K_GROUPS
    layout = (REPO / "csrc/capi_8bit.cuh").read_text()
    body = layout[layout.index("Q8Layout q8_layout("):layout.index("l.total = at;")]
    # The parts budget.q8_workspace_bytes sums, in the C layout's order.
    assert re.findall(r"l\.(\w+) = take\(", body) == ["q8", "q_scale", "k8", "k_scale", "vt8", "v_scale", "k_sum",
                                                        "v_amax", "lse_corr", "ws_o", "ws_ml"]
    assert "l.ws_o = take(items * kQ8TailBlockM * head_dim * 4);" in body
    assert "l.ws_ml = take(items * kQ8TailBlockM * 2 * 4);" in body
    assert "if (with_tail && (head_dim == 64 || head_dim == 128)) {" in body
    for name, value in (("kQ8TailBlockM", budget.Q8_TAIL_BLOCK_M), ("kQ8TailMaxSplits", budget.Q8_TAIL_MAX_SPLITS),
                        ("kQ8TailMinBlocks", budget.Q8_TAIL_MIN_BLOCKS),
                        ("kQ8TailMaxItemsPerSm", budget.Q8_TAIL_MAX_ITEMS_PER_SM)):
        assert re.search(rf"constexpr int(?:64_t)? {name} = {value};", layout), name
    assert "at = (at + bytes + 255) / 256 * 256;" in body


def test_q8_workspace_figures():
    # Wan 14B 720p, 81 frames: 75600 tokens, 40 heads of 128; about 3 bytes per element of Q, K and V together.
    ws = budget.q8_workspace_bytes(1, 40, 75600, 75600, 128)
    assert budget.q8_tail_plan(1, 40, 75600, 75600) == (52, 5)  # 260 ranges of the tail launch
    tail = 260 * 192 * 130 * 4
    assert 1.18e9 < ws - tail < 1.19e9
    assert ws - tail == pytest.approx(3 * 40 * 75600 * 128, rel=0.03)
    # Wan 1.3B: 216 ranges (72 tiles x 3), 21.6 MB; CogVideoX plans none.
    assert budget.q8_workspace_bytes(1, 12, 32760, 32760, 128) - budget.q8_workspace_bytes(
        1, 12, 32760, 32760, 128, sms=2052) == 216 * 192 * 130 * 4
    assert budget.q8_tail_plan(1, 48, 17776, 17776) == (0, 1)
    # One query and one key: Q padded to 384 rows (24576 + 1536 bytes), K and V^T to 128 keys (8192 each), the five
    # small parts 256 bytes each.
    assert budget.q8_workspace_bytes(1, 1, 1, 1, 64) == 384 * 64 + 384 * 4 + 2 * 128 * 64 + 5 * 256
    assert budget.q8_workspace_bytes(0, 1, 1, 1, 64) == 0
    # Grouped-query attention: K's and V's parts per key/value head, Q's per query head; heads that do not group: 0.
    gqa, mha = budget.q8_layout(1, 32, 32768, 32768, 128, h_kv=8), budget.q8_layout(1, 32, 32768, 32768, 128)
    for part in ("k8", "k_scale", "vt8", "v_scale", "k_sum", "v_amax"):
        assert gqa[part][1] * 4 == mha[part][1], part
    for part in ("q8", "q_scale", "lse_corr"):
        assert gqa[part][1] == mha[part][1], part
    assert budget.q8_workspace_bytes(1, 32, 1, 1, 64, h_kv=5) == 0
    assert budget.exact_workspace_bytes(132) == 17_436_672
    assert budget.exact_workspace_bytes(132, rounds=2) == 2 * 17_436_672
    assert budget.call_bytes(1, 2, 100, 300, 64, "exact", sms=132, lse=True) == 2 * 100 * 64 * 2 + 2 * 100 * 4 \
        + 17_436_672


def test_the_docs_quote_the_figures_of_budget():
    doc = (REPO / "docs/reliability.md").read_text()
    assert budget.table() in doc, "docs/reliability.md's workspace table is stale: paste python3 dev/stress/budget.py"


# ------------------------------------------------------------------------------------------------ the sanitizer runner
CLEAN = "========= COMPUTE-SANITIZER\n[sanitizer_cases] tails: ... -> ok\n[sanitizer_cases] all right (3 cases)\n" \
        "========= ERROR SUMMARY: 0 errors\n"


@pytest.mark.parametrize("tool,log,rc,errors,ok", [
    ("memcheck", CLEAN, 0, 0, True),
    ("racecheck", CLEAN.replace("ERROR SUMMARY: 0 errors",
                                "RACECHECK SUMMARY: 4 hazards displayed (3 errors, 1 warning)\n"
                                "========= ERROR SUMMARY: 3 errors"), 1, 3, False),
    ("racecheck", CLEAN.replace("ERROR SUMMARY: 0 errors",
                                "RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)\n"
                                "========= ERROR SUMMARY: 0 errors"), 0, 0, True),
    ("synccheck", "========= COMPUTE-SANITIZER\nSegmentation fault\n", None, None, False),  # no summary: killed
    ("memcheck", CLEAN.replace("all right", "FAILED").replace("-> ok", "-> WRONG"), 1, 0, False),
    ("memcheck", "[sanitizer_cases] x: the kernel would not run (no GPU); nothing to sanitize\n"
                 "[sanitizer_cases] FAILED\n========= ERROR SUMMARY: 0 errors\n", 2, 0, False),
])
def test_runner_verdicts(tool, log, rc, errors, ok):
    r = sanitize.parse(tool, log, rc)
    assert r["errors"] == errors and r["ok"] is ok
    r["seconds"] = 1.0
    line = sanitize.line(r)
    assert line.startswith(tool) and f"errors found: {'?' if errors is None else errors}" in line
    assert line.endswith("-> ok" if ok else "-> FAIL")
    if "WRONG" in log or "would not run" in log:
        assert "cases FAILED" in line


def _race_report(lines: list[int]) -> str:
    """One racecheck error as compute-sanitizer 2025.3 prints it: a read, then writes, in flash_fwd.cuh."""
    first, *rest = lines
    out = ("========= Error: Race reported between Read access at void vidattn::sm90::consumer<(int)64, (int)3>(const "
           f"vidattn::sm90::FwdParams &, int)+0x750 in flash_fwd.cuh:{first}\n")
    for n in rest:
        out += ("=========     and Write access at void vidattn::sm90::producer<(int)64>(const vidattn::sm90::FwdParams "
                "&)::[lambda(int, int) (instance 1)]::operator ()(int, int) const+0x32110 in "
                f"flash_fwd.cuh:{n} [76 hazards]\n")
    return out + "========= \n"


def _race_log(reports: list[str]) -> str:
    n = len(reports)
    return CLEAN.replace("========= ERROR SUMMARY: 0 errors\n", "".join(reports)
                         + f"========= RACECHECK SUMMARY: {n} hazards displayed ({n} errors, 0 warnings)\n"
                         + f"========= ERROR SUMMARY: {n} errors\n")


def test_racecheck_known_handoff_is_named_not_failed():
    """The causal tile index's mbarrier hand-off (docs/guide/causal.md, Racecheck) is counted as known only when every
    access the error names is a source line that touches it; anything else beside it still fails the run."""
    src = (REPO / "csrc/sm90/flash_fwd.cuh").read_text().splitlines()
    at = [i + 1 for i, text in enumerate(src) if "s.sched_tile[" in text]
    other = next(i + 1 for i, text in enumerate(src) if "s.q[" in text)
    assert len(at) >= 3 and sanitize.KNOWN_RACE_WORD not in src[other - 1]
    handoff = _race_report([at[-1], at[0], at[1]])
    r = sanitize.parse("racecheck", _race_log([handoff]), 1)
    assert r["ok"] and r["errors"] == 1 and r["known_errors"] == 1
    r["seconds"] = 1.0
    assert sanitize.line(r).endswith("-> ok") and "tile index" in sanitize.line(r)
    for reports in ([_race_report([at[-1], other])], [handoff, _race_report([other, other])]):
        r = sanitize.parse("racecheck", _race_log(reports), 1)
        assert not r["ok"] and r["known_errors"] == len(reports) - 1
    assert not sanitize.parse("racecheck", _race_log([handoff]), 0)["ok"]  # the exit status disagrees: not trusted
    moved = _race_report([at[-1], len(src) + 5])  # a line past the file's end is not the hand-off
    assert sanitize.parse("racecheck", _race_log([moved]), 1)["known_errors"] == 0


def test_racecheck_error_without_report_and_tool_error_are_named():
    """Seventeenth sitting, call P14: racecheck counted 4 errors, printed 3 (each the known hand-off) and, in a
    threaded round, its own "failure to track a kernel launch". The run cannot pass (the fourth error has no report to
    read), and the line names both the missing report and the tool's error."""
    src = (REPO / "csrc/sm90/flash_fwd.cuh").read_text().splitlines()
    at = [i + 1 for i, text in enumerate(src) if "s.sched_tile[" in text]
    handoff = _race_report([at[-1], at[0], at[1]])
    log = _race_log([handoff, handoff]).replace("(2 errors", "(3 errors").replace(
        "========= RACECHECK", "========= Internal Sanitizer Error: Detected a failure to track a kernel launch. "
        "Future records might be incomplete\n========= RACECHECK")
    r = sanitize.parse("racecheck", log, 1)
    assert r["errors"] == 3 and r["known_errors"] == 2 and r["undisplayed_errors"] == 1 and not r["ok"]
    assert r["tool_error"].startswith("Detected a failure to track a kernel launch")
    r["seconds"] = 1.0
    line = sanitize.line(r)
    assert "1 counted without a report" in line and "failure to track" in line and line.endswith("-> FAIL")
    clean = sanitize.parse("racecheck", _race_log([handoff]), 1)
    assert clean["ok"] and clean["undisplayed_errors"] == 0 and clean["tool_error"] is None


def test_reread_gives_an_earlier_runs_verdicts(tmp_path):
    src = (REPO / "csrc/sm90/flash_fwd.cuh").read_text().splitlines()
    at = [i + 1 for i, text in enumerate(src) if "s.sched_tile[" in text]
    (tmp_path / "racecheck.log").write_text(_race_log([_race_report([at[-1], at[0]])]))
    (tmp_path / "memcheck.log").write_text(CLEAN)
    tools = [{"tool": "racecheck", "rc": 1, "seconds": 35.0, "ok": False}, {"tool": "memcheck", "rc": 0, "seconds": 3.0}]
    (tmp_path / "sanitize.json").write_text(json.dumps({"sanitizer": "x", "tools": tools}))
    run = subprocess.run([sys.executable, "dev/stress/sanitize.py", "--reread", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 of them the causal tile index" in run.stdout and run.stdout.count("-> ok") == 2
    tools[0]["rc"] = 0  # an exit status that disagrees with the error: the run is not trusted
    (tmp_path / "sanitize.json").write_text(json.dumps({"sanitizer": "x", "tools": tools}))
    run = subprocess.run([sys.executable, "dev/stress/sanitize.py", "--reread", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True)
    assert run.returncode == 1 and "-> FAIL" in run.stdout


FAKE_SANITIZER = """#!/usr/bin/env bash
tool=$2
echo "========= COMPUTE-SANITIZER"
echo "[sanitizer_cases] all right (1 cases) $*"
if [ "$tool" = "racecheck" ]; then
  echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
  echo "========= ERROR SUMMARY: 1 error"; exit 1
fi
echo "========= ERROR SUMMARY: 0 errors"
"""


def test_runner_prints_a_line_per_tool_and_fails_on_any_error(tmp_path):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(FAKE_SANITIZER)
    fake.chmod(0o755)
    env = dict(os.environ, COMPUTE_SANITIZER=str(fake))
    run = subprocess.run([sys.executable, "dev/stress/sanitize.py", "--no-build", "--out", str(tmp_path / "o"),
                          "--json", str(tmp_path / "s.json")], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 1, run.stdout + run.stderr
    assert [ln.split()[0] for ln in lines] == ["memcheck", "racecheck", "synccheck"]
    assert "errors found: 0" in lines[0] and lines[0].endswith("-> ok")
    assert "errors found: 1" in lines[1] and lines[1].endswith("-> FAIL")
    # memcheck on the full case set, the others on the small one
    assert "--set full" in (tmp_path / "o" / "memcheck.log").read_text()
    assert "--set small" in (tmp_path / "o" / "synccheck.log").read_text()
    ok = subprocess.run([sys.executable, "dev/stress/sanitize.py", "--no-build", "--tools", "memcheck,synccheck",
                         "--out", str(tmp_path / "o2")], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_runner_forwards_the_case_options():
    cmd = sanitize.command("cs", "racecheck", "py", cases_args=("--no-threads", "--thread-timeout", "30"))
    assert cmd[cmd.index("--set") + 1] == sanitize.CASE_SET["racecheck"]
    assert cmd[-3:] == ["--no-threads", "--thread-timeout", "30"]
    assert sanitize.command("cs", "memcheck", "py")[-2:] == ["--set", "full"]


def test_runner_ends_a_tool_that_runs_past_its_timeout(tmp_path):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/usr/bin/env bash\necho started\nsleep 60\n")
    fake.chmod(0o755)
    env = dict(os.environ, COMPUTE_SANITIZER=str(fake))
    run = subprocess.run([sys.executable, "dev/stress/sanitize.py", "--no-build", "--tools", "synccheck", "--timeout",
                          "2", "--out", str(tmp_path / "o")], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 1 and "errors found: ?" in run.stdout and "timed out" in run.stdout, run.stdout


def test_runner_stopped_by_sigterm_takes_its_tools_down(tmp_path):
    """A `timeout` around the runner signals only the runner (the tools run in sessions of their own): it must end
    them, or they keep the GPU busy under whatever runs next (call S of the sixth sitting: an anchors bench at half
    speed beside a racecheck left running)."""
    import signal
    import time

    fake = tmp_path / "compute-sanitizer"
    marker = tmp_path / "pids"
    fake.write_text(f"#!/usr/bin/env bash\necho $$ >> {marker}\nsleep 60\n")
    fake.chmod(0o755)
    env = dict(os.environ, COMPUTE_SANITIZER=str(fake))
    run = subprocess.Popen([sys.executable, "dev/stress/sanitize.py", "--no-build", "--tools", "memcheck,racecheck",
                            "--out", str(tmp_path / "o")], cwd=REPO, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while (not marker.exists() or len(marker.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int(p) for p in marker.read_text().split()]
    assert len(pids) == 2
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=20) == 128 + signal.SIGTERM
    time.sleep(0.5)
    for pid in pids:  # gone, or a zombie waiting for its new parent to reap it (state Z in /proc)
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        assert state in ("gone", "Z", "X"), f"tool process {pid} still running (state {state})"


# ------------------------------------------------------------------------------------------------ the sanitizer cases
def _cases():
    sys.path.insert(0, str(REPO / "tests"))
    import sanitizer_cases

    return sanitizer_cases


def _takes_tail(c, sms: int = 132) -> bool:
    """csrc/capi.cu's plan_tail (dev/stress/budget.py's model of it, whose constants are read back here) for an exact
    D > 64 call (on the D=128 build, or the D=192/256 builds' key-block widths: tile_config.cuh); kv_lens calls plan
    as any other (tail_kv_lens)."""
    assert _define("csrc/capi.cu", "VIDATTN_TAIL_MIN_TILE_BLOCKS") == budget.EXACT_TAIL_MIN_TILE_BLOCKS
    assert _define("csrc/capi.cu", "VIDATTN_TAIL_MIN_BLOCKS") == budget.EXACT_TAIL_MIN_BLOCKS
    assert _define("csrc/capi.cu", "kTailMaxSplits") == budget.EXACT_TAIL_MAX_SPLITS
    assert _define("csrc/capi.cu", "VIDATTN_TAIL_KV_LENS") == 1
    rounds = c.tail_rounds if c.tail_rounds > 0 else _define("csrc/capi.cu", "VIDATTN_TAIL_ROUNDS")
    short_max = _define("csrc/capi.cu", "VIDATTN_D128_SHORT_KV_MAX")
    block_n = c.block_n or (_define("csrc/sm90/tile_config.cuh", "VIDATTN_BLOCK_N_D128_SHORT") if c.skv <= short_max
                            else _define("csrc/sm90/tile_config.cuh", "VIDATTN_BLOCK_N_D128"))
    if c.d in (192, 256):
        block_n = _define("csrc/sm90/tile_config.cuh", f"VIDATTN_BLOCK_N_D{c.d}")
    heads = _cases().resolve_heads(c.h, sms)
    heads = heads[0] if isinstance(heads, tuple) else heads
    tiles = c.b * heads * math.ceil(c.sq / 128)
    return budget.exact_tail_splits(tiles, math.ceil(c.skv / block_n), sms, rounds) >= 2


def test_sanitizer_cases_paths_agree_with_the_launcher():
    sc = _cases()
    names = [c.name for c in sc.CASES]
    assert len(set(names)) == len(names) and set(sc.THREAD_CASES) <= set(names)
    for c in sc.CASES:
        if c.d > 64 and c.precision == "exact" and ("tail" in c.expect or "no tail" in c.expect):
            assert _takes_tail(c) is ("tail" in c.expect), c.name


@pytest.mark.parametrize("which", ["full", "small"])
def test_both_sanitizer_sets_cover_every_path(which):
    sc = _cases()
    cs = [c for c in sc.CASES if which == "full" or c.small]
    exact = [c for c in cs if c.precision == "exact"]
    assert any("tail" in c.expect and c.h == "sms+1" for c in exact)  # main launch, then the tail
    assert any("tail" in c.expect and c.h != "sms+1" for c in exact)  # all tail
    assert any(c.block_n == 176 for c in exact) and any(c.d == 128 and c.block_n == 0 for c in exact)
    assert {2, 3} <= {c.d64_wgs for c in exact if c.d <= 64}
    assert any(c.h == "sms+1" and "no tail" in c.expect for c in exact)  # several tiles per CTA
    assert any(c.h == "sms+1" and c.d64_wgs == 3 for c in exact)
    assert any(c.d not in (64, 128) and c.d > 64 for c in exact) and any(c.d < 64 for c in exact)  # padded
    assert any(isinstance(c.h, tuple) for c in exact) and any(c.kv_lens for c in exact)
    assert any(c.spiked for c in exact)
    # the causal builds: D=128's and D=64's, and the one-Q-buffer ones (D=192, D=256)
    causal_dims = {c.d for c in exact if c.causal}
    assert any(d <= 128 for d in causal_dims) and any(128 < d <= 192 for d in causal_dims)
    assert any(d > 192 for d in causal_dims)
    q8 = [c for c in cs if c.precision == "8bit"]
    assert {64, 128} <= {c.d for c in q8} and {2, 3} <= {c.q8_wgs for c in q8 if c.d == 64}
    assert any(c.kv_lens for c in q8)
    # the tail launch with kv_lens (mode 2), a batch of one key among them (ranges without keys), at both head dims
    assert {64, 128} <= {c.d for c in q8 if c.q8_tail == 2 and "q8 tail" in c.expect and 1 in (c.kv_lens or [])}
    causal = [c for c in exact if c.causal]
    assert {"top_left", "bottom_right"} <= {c.causal for c in causal}
    assert any(c.h == "sms+1" for c in causal) and any(c.kv_lens for c in causal) and any(c.sq > c.skv for c in causal)
    assert [(s, p) for s, p in sc.THREAD_CONFIGS] == [("shared", False), ("shared", True), ("own", False),
                                                      ("own", True)]


# ------------------------------------------------------------------------------------------------ the soak
def test_soak_hour_equivalence_matches_its_source():
    from dev.stress import soak

    report = (REPO / soak.ROOT / "bench/results/e2e_wan1.3b_74bf459/report.md").read_text()
    row = next(ln for ln in report.splitlines() if ln.startswith("| vidattn |"))
    assert float(row.strip("| \n").split("|")[-1]) == soak.SECONDS_PER_VIDEO  # the projected 50-step video
    assert "2 forwards/step" in report and "30 / 30" in report  # guidance doubles the forwards; 30 blocks
    assert soak.CALLS_PER_VIDEO == 6000 and soak.CALLS_PER_HOUR == 382301
    names = {s.name for s in soak.MIX}
    assert set(soak.GRAPHED) <= names and len(names) == len(soak.MIX)
    assert {"8bit"} <= {s.precision for s in soak.MIX} and any(s.kv_lens for s in soak.MIX)
    assert {64, 96, 128} <= {s.d for s in soak.MIX} and any(s.hkv < s.hq for s in soak.MIX)


def test_device_script_parses_and_names_existing_files():
    script = (REPO / "dev/device_reliability.sh").read_text()
    subprocess.run(["bash", "-n", str(REPO / "dev/device_reliability.sh")], check=True)
    for path in re.findall(r"(?:dev|tests)/[\w/]+\.(?:py|sh)", script):
        assert (REPO / path).is_file(), path


@pytest.mark.parametrize("causal,kv_lens,sq,skv", [(False, None, 40, 70), (False, [70, 20], 40, 70),
                                                   ("top_left", None, 50, 50), ("top_left", None, 30, 70),
                                                   ("bottom_right", None, 30, 70), ("bottom_right", [70, 45], 30, 70),
                                                   ("bottom_right", None, 70, 30)])
def test_sanitizer_reference_is_sdpa_with_the_mask(causal, kv_lens, sq, skv):
    """The fp64 reference the sanitizer cases check against, against float64 SDPA with the mask written out (rows
    that see no key: zeros and an LSE of -inf, the kernel's answer)."""
    import torch
    import torch.nn.functional as F

    sc = _cases()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, 3, 16, generator=g, dtype=torch.float64) for n in (sq, skv, skv))
    out, lse = sc.reference(q, k, v, "bshd", kv_lens, causal)
    lens = torch.tensor(kv_lens or [skv, skv])
    i, j = torch.arange(sq)[:, None], torch.arange(skv)[None, :]
    keep = torch.stack([(j < n) & ((j <= i) if causal == "top_left" else (j <= i + n - sq) if causal else
                                   torch.ones(sq, skv, dtype=torch.bool)) for n in lens.tolist()])[:, None]
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=keep).nan_to_num(0.0).transpose(1, 2)
    empty = ~keep.any(-1).expand(-1, 3, -1)
    torch.testing.assert_close(out, torch.where(empty.transpose(1, 2)[..., None], 0.0, ref))
    assert torch.equal(torch.isneginf(lse), empty) and (causal == "bottom_right" and sq > skv) is bool(empty.any())


def test_sanitizer_cases_run_end_to_end_with_a_fake_kernel(monkeypatch, capsys):
    """The script's own flow (cases, path checks, threads, verdicts, exit code) on the CPU: "CUDA" is the CPU, the
    kernel is the fp64 reference itself and the path probes say what each case expects, so every line must read ok;
    then one wrong answer and one missed path must each fail the run."""
    import contextlib

    import torch

    import vidattn
    from vidattn import _ext, quant8

    sc = _cases()
    # A few cases (and the threaded ones) cover the flow; the fp64 references of all would take CI half a minute.
    keep = {"skv=1", "tails+ragged", "lone tile split", "lone tile split N=176", "d64-2wg tails",
            "8bit d64 2wg ragged", "causal bottom-right rows without keys", *sc.THREAD_CASES}
    monkeypatch.setattr(sc, "CASES", [c for c in sc.CASES if c.name in keep])
    refs = {}
    state = {"tail": 0, "block_n": 0, "forced_n": 0, "q8_wgs": 0, "corrupt": None, "miss": None}

    def fake_attention(q, k, v, *, layout="bshd", scale=None, kv_lens=None, return_lse=False, precision=None,
                       causal=False):
        name = next(c.name for c in sc.CASES if c.layout == layout and c.d == q.shape[-1] and c.precision ==
                    (precision or "exact") and c.causal == causal and c.sq == (q.shape[1] if layout == "bshd" else
                                                                             q.shape[2])
                    and c.skv == (k.shape[1] if layout == "bshd" else k.shape[2]) and c.b == q.shape[0]
                    and (c.kv_lens is None) == (kv_lens is None) and c.dtype == q.dtype
                    and c.block_n == state["forced_n"])
        case = next(c for c in sc.CASES if c.name == name)
        if name not in refs:
            refs[name] = sc.reference(q, k, v, layout, None if kv_lens is None else kv_lens.tolist(), causal)
        out, lse = refs[name]
        if state["corrupt"] == name:
            out = out + 1
        state["tail"] = 0 if state["miss"] == name else (4 if "tail" in case.expect else 0)
        state["block_n"] = state["forced_n"] or 128
        state["q8_wgs"] = case.q8_wgs
        return out.to(q.dtype), lse.float()

    class Stream:
        def synchronize(self):
            pass

    real_zeros = torch.zeros
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: type("P", (), {"multi_processor_count": 132}))
    monkeypatch.setattr(torch, "zeros", lambda *a, device=None, **kw: real_zeros(*a, **kw))
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self: self)
    monkeypatch.setattr(vidattn, "attention", fake_attention)
    monkeypatch.setattr(vidattn, "explain", lambda q, k, v, *, layout="bshd", scale=None, kv_lens=None,
                        precision=None, causal=False: None)
    monkeypatch.setattr(_ext, "last_tail_splits", lambda: state["tail"])
    monkeypatch.setattr(_ext, "last_block_n", lambda: state["block_n"])
    monkeypatch.setattr(_ext, "d64_warpgroups", lambda n: contextlib.nullcontext())
    @contextlib.contextmanager
    def forced(n):
        state["forced_n"] = n
        yield
        state["forced_n"] = 0

    monkeypatch.setattr(_ext, "d128_block_n", forced)
    monkeypatch.setattr(quant8, "set_d64_warpgroups", lambda n: None)
    monkeypatch.setattr(quant8, "last_variant", lambda: (state["q8_wgs"], -1))
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", quant8.SHORT_KV_EXACT_MAX)

    assert sc.main(["--set", "small"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("[sanitizer_cases]")]
    assert all(ln.endswith("-> ok") for ln in lines[:-1]), [ln for ln in lines if not ln.endswith("-> ok")]
    assert sum("[thread" in ln for ln in lines) == len(sc.THREAD_CONFIGS) * sc.N_THREADS * len(sc.THREAD_CASES)
    assert "all right" in lines[-1]
    # each threaded call's start and each round's start and join, apart from the verdict lines (a log cut short by a
    # tool's time limit names the calls in flight)
    progress = [ln for ln in out.splitlines() if ln.startswith("[sanitizer_cases:progress]")]
    assert len(progress) == len(sc.THREAD_CONFIGS) * (2 + sc.N_THREADS * len(sc.THREAD_CASES))
    state["corrupt"] = "tails+ragged"
    assert sc.main(["--only", "tails+ragged"]) == 1 and "-> WRONG" in capsys.readouterr().out
    state["corrupt"], state["miss"] = None, "lone tile split"
    assert sc.main(["--only", "lone tile split"]) == 1 and "MISSED PATH" in capsys.readouterr().out


def test_soak_runs_end_to_end_on_a_fake_device(monkeypatch):
    """The soak's own flow (cases, graph capture and replay threads, warm-up barrier, quotas, verdicts) with the CPU as
    its device: SDPA answers every call (the same bitwise from every thread), a "graph" replays nothing (its output
    stays the captured call's) and memory reads flat; then an allocation that is never freed must fail the memory
    checks. Small: 240 calls."""
    import contextlib
    import warnings

    import torch

    import vidattn
    from dev.stress import soak

    mem = {"allocated": 1000, "peak": 1000}

    class Stream:
        def synchronize(self):
            pass

        def wait_stream(self, other):
            pass

    class Graph:
        def replay(self):
            pass

    monkeypatch.setattr(soak, "DEV", "cpu")
    monkeypatch.setattr(soak, "MIX", [s for s in soak.MIX if s.hq < 100])  # the 140-head shape: seconds of CPU
    for name, value in {"Stream": Stream, "CUDAGraph": Graph, "stream": lambda s: contextlib.nullcontext(),
                        "graph": lambda g, stream=None: contextlib.nullcontext(), "synchronize": lambda *a: None,
                        "current_stream": lambda *a: Stream(), "default_stream": lambda *a: Stream(),
                        "memory_allocated": lambda *a: mem["allocated"], "max_memory_allocated": lambda *a: mem["peak"],
                        "memory_reserved": lambda *a: 1 << 30, "reset_peak_memory_stats": lambda *a: None,
                        "mem_get_info": lambda *a: (1 << 30, 2 << 30), "current_device": lambda: 0,
                        "get_device_properties": lambda i: type("P", (), {"multi_processor_count": 132})}.items():
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(vidattn, "explain", lambda *a, **kw: None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vidattn.VidattnFallbackWarning)
        r = soak.soak(total_calls=240, max_seconds=60)
        assert r["ok"] and r["complete"], {k: v for k, v in r["checks"].items() if not v}
        assert r["calls"] >= 240 and r["graph_replays"] > 0 and r["exact_mismatches"] == 0
        assert r["eight_bit_worst_rel_l2"] == 0.0 and not r["errors"] and r["hung_threads"] == 0
        assert r["memory"]["documented_bound"] > len(soak.EAGER_THREADS) * soak.budget.exact_workspace_bytes(132)
        # As if a gigabyte leaked during the soak (the peak statistics are reset right after the baseline is read).
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                            lambda *a: mem.update(allocated=1000 + (1 << 30), peak=1000 + (1 << 30)))
        r = soak.soak(total_calls=80, max_seconds=60)
    failed = {k for k, v in r["checks"].items() if not v}
    assert failed == {"allocated memory back to the baseline", "peak allocated within the documented per-call figures"}
