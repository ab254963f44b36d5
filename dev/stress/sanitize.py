"""compute-sanitizer memcheck, racecheck and synccheck over tests/sanitizer_cases.py: one line per tool
("errors found: N"), exit non-zero on any error, any wrong result or missed path, or a tool that did not finish.

    python3 dev/stress/sanitize.py [--tools memcheck,racecheck,synccheck] [--out DIR] [--json FILE] [--serial]
    python3 dev/stress/sanitize.py --reread DIR    # an earlier run's logs read again (DIR: its --out, sanitize.json)

memcheck runs the full case set, racecheck and synccheck the small one (they instrument every shared-memory access
and barrier; the small set has the same code paths with fewer tiles: tests/sanitizer_cases.py). The tools run at
once, as separate processes (the GPU has room for all three; their time is mostly the host's instrumentation), unless
--serial. The kernel library is built first, outside the tools. Each tool's full output is kept in DIR/<tool>.log.
racecheck's warnings (possible hazards it cannot prove, e.g. two writes of the same value) are printed and recorded
but are not errors; nor is a racecheck error whose every access is to the causal tile index handed over through
mbarriers (KNOWN_RACE_WORD: counted and named, see parse).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "sanitizer_cases.py"
TOOLS = ("memcheck", "racecheck", "synccheck")
CASE_SET = {"memcheck": "full", "racecheck": "small", "synccheck": "small"}

_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards? displayed\s*\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)")


def find_sanitizer() -> str | None:
    """$COMPUTE_SANITIZER, then PATH, then the CUDA toolkit's bin folders."""
    candidates = [os.environ.get("COMPUTE_SANITIZER"), shutil.which("compute-sanitizer")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(str(Path(home) / "bin" / "compute-sanitizer"))
    candidates += sorted(glob.glob("/usr/local/cuda-*/bin/compute-sanitizer"), reverse=True)
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


def command(sanitizer: str, tool: str, python: str = sys.executable, cases_args: tuple = ()) -> list[str]:
    return [sanitizer, "--tool", tool, "--error-exitcode", "1", python, str(CASES), "--set", CASE_SET[tool],
            *cases_args]


# One racecheck error: its first access, then "and ... access at ... in <file>:<line>" lines, up to a bare "=====".
_RACE_ERROR = re.compile(r"Error: Race reported between (.*?)^=+[ \t]*$", re.M | re.S)
_ACCESS_AT = re.compile(r" in ([\w.-]+\.cuh?):(\d+)")
# The shared-memory word racecheck cannot see ordered: the causal builds' tile index, written by the producer and read
# by the consumers across the q_full / q_empty mbarriers. racecheck does not take an mbarrier phase as ordering
# (dev/probes/racecheck_mbarrier.cu reports the same pair on a hand-off that is right by construction), so a report
# whose every access is to it says nothing either way: docs/guide/causal.md, "Racecheck".
KNOWN_RACE_WORD = "sched_tile"
KNOWN_RACE_WHY = "the causal tile index's mbarrier hand-off, which racecheck does not follow (docs/guide/causal.md)"


def source_line(name: str, number: int, src: Path = ROOT / "csrc") -> str | None:
    """Line `number` of the one file called `name` under csrc/ (None when there is not exactly one)."""
    files = [f for f in src.rglob(name) if f.is_file()]
    if len(files) != 1:
        return None
    lines = files[0].read_text(errors="replace").splitlines()
    return lines[number - 1] if 0 < number <= len(lines) else None


def known_race(report: str) -> bool:
    """Whether one racecheck error names only accesses to KNOWN_RACE_WORD (read from the source lines it cites)."""
    sites = _ACCESS_AT.findall(report)
    return bool(sites) and all(KNOWN_RACE_WORD in (source_line(f, int(n)) or "") for f, n in sites)


def parse(tool: str, log: str, rc: int | None) -> dict:
    """What one tool's output says: errors (None when the tool printed no summary: it crashed or was killed), how
    many of racecheck's are the known hand-off (KNOWN_RACE_WHY), racecheck's warnings, and whether the cases
    themselves passed. The known reports alone do not fail a run; any other error does."""
    found = _ERROR_SUMMARY.findall(log)
    errors = int(found[-1]) if found else None
    warnings = known = undisplayed = 0
    race = _RACE_SUMMARY.findall(log)
    if race:
        _, race_errors, warnings = (int(x) for x in race[-1])
        errors = max(errors or 0, race_errors)
        reports = _RACE_ERROR.findall(log)
        if len(reports) <= race_errors:  # (each error printed once at most; more reports than errors: count none)
            known = sum(known_race(r) for r in reports)
            undisplayed = race_errors - len(reports)
    cases_ok = "[sanitizer_cases] all right" in log
    wrong = [line.split("] ", 1)[1] for line in log.splitlines()
             if line.startswith("[sanitizer_cases]") and ("WRONG" in line or "MISSED PATH" in line
                                                          or "would not run" in line)]
    # compute-sanitizer exits 1 (--error-exitcode) on any error, the known ones too
    ok = cases_ok and errors is not None and errors == known and rc == (0 if errors == 0 else 1)
    # The tool's own failure (racecheck's "failure to track a kernel launch" in threaded rounds, several sittings): what
    # it counted after it may have no report, so such a run cannot pass, and the line says why.
    tool_error = next((ln.split("Internal Sanitizer Error:", 1)[1].strip() for ln in log.splitlines()
                       if "Internal Sanitizer Error:" in ln), None)
    return {"tool": tool, "errors": errors, "known_errors": known, "undisplayed_errors": undisplayed,
            "tool_error": tool_error, "warnings": warnings, "rc": rc,
            "cases_ok": cases_ok, "case_failures": wrong, "ok": ok, "set": CASE_SET[tool]}


def line(r: dict) -> str:
    errors = "?" if r["errors"] is None else r["errors"]
    extra = [f"{r['seconds']:.0f} s", f"{r['set']} set"]
    if r.get("known_errors"):
        extra.append(f"{r['known_errors']} of them {KNOWN_RACE_WHY}")
    if r.get("undisplayed_errors"):
        extra.append(f"{r['undisplayed_errors']} counted without a report")
    if r.get("tool_error"):
        extra.append(f"the tool's own error: {r['tool_error']}")
    if r["warnings"]:
        extra.append(f"{r['warnings']} racecheck warnings")
    if r["errors"] is None:
        extra.append("no summary: the tool did not finish" + (" (timed out)" if r.get("timed_out") else ""))
    if not r["cases_ok"]:
        extra.append(f"cases FAILED: {'; '.join(r['case_failures'][:3]) or 'see the log'}")
    return f"{r['tool']:<10} errors found: {errors}  ({', '.join(extra)}) -> {'ok' if r['ok'] else 'FAIL'}"


def reread(folder: Path) -> int:
    """An earlier run's verdicts by this parse(): its <tool>.log files, with the exit status and time sanitize.json
    recorded for each."""
    recorded = json.loads((folder / "sanitize.json").read_text())["tools"]
    results = []
    for old in recorded:
        r = parse(old["tool"], (folder / f"{old['tool']}.log").read_text(errors="replace"), old["rc"])
        r["seconds"] = old.get("seconds") or 0.0
        results.append(r)
        print(line(r))
    return 0 if results and all(r["ok"] for r in results) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "sanitizer")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per tool")
    ap.add_argument("--serial", action="store_true", help="one tool after the other")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--no-threads", action="store_true",
                    help="leave out the cases' threaded rounds (tests/sanitizer_cases.py --no-threads)")
    ap.add_argument("--thread-timeout", type=float, default=None, metavar="S",
                    help="seconds a threaded round may take before the cases call it hung (their default: 600)")
    ap.add_argument("--reread", type=Path, metavar="DIR",
                    help="run nothing: read an earlier run's logs and sanitize.json in DIR with this parse()")
    args = ap.parse_args(argv)
    if args.reread:
        return reread(args.reread)
    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        ap.error(f"unknown tools {sorted(unknown)}; choose from {TOOLS}")
    sanitizer = find_sanitizer()
    if sanitizer is None:
        print("compute-sanitizer not found (set COMPUTE_SANITIZER or CUDA_HOME)")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.no_build:  # nvcc must not run under the tools
        b = subprocess.run([sys.executable, "-c", "import vidattn; vidattn.build()"], cwd=ROOT)
        if b.returncode != 0:
            print("kernel library build failed")
            return 1
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", PYTHONUNBUFFERED="1")
    cases_args = (("--no-threads",) if args.no_threads else ()) + (
        ("--thread-timeout", str(args.thread_timeout)) if args.thread_timeout is not None else ())
    running = {}
    results = []

    def finish(tool):
        proc, f, t0 = running.pop(tool)
        timed_out = False
        try:
            proc.wait(timeout=max(1.0, args.timeout - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, 9)
            proc.wait()
        f.close()
        r = parse(tool, (args.out / f"{tool}.log").read_text(errors="replace"), None if timed_out else proc.returncode)
        r.update(seconds=time.monotonic() - t0, timed_out=timed_out,
                 command=" ".join(command(sanitizer, tool, cases_args=cases_args)),
                 log=str(args.out / f"{tool}.log"))
        results.append(r)
        print(line(r), flush=True)

    started = []  # every tool's process (finish() takes a tool out of `running` before it waits for it)

    def stop(signum, frame):  # the tools run in sessions of their own: a `timeout` around this runner reaches only
        for proc in started:  # it, and tools left running would share the GPU with what comes next
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for tool in tools:
        f = open(args.out / f"{tool}.log", "w")
        proc = subprocess.Popen(command(sanitizer, tool, cases_args=cases_args), cwd=ROOT, env=env, stdout=f,
                                stderr=subprocess.STDOUT,
                                start_new_session=True)
        started.append(proc)
        running[tool] = (proc, f, time.monotonic())
        if args.serial:
            finish(tool)
    for tool in list(running):
        finish(tool)
    if args.json:
        args.json.write_text(json.dumps({"sanitizer": sanitizer, "tools": results}, indent=1))
    return 0 if results and all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
