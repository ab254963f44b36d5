"""compute-sanitizer memcheck, racecheck and synccheck over tests/sanitizer_cases.py: one line per tool
("errors found: N"), exit non-zero on any error, any wrong result or missed path, or a tool that did not finish.

    python3 dev/stress/sanitize.py [--tools memcheck,racecheck,synccheck] [--out DIR] [--json FILE] [--serial]

memcheck runs the full case set, racecheck and synccheck the small one (they instrument every shared-memory access
and barrier; the small set has the same code paths with fewer tiles: tests/sanitizer_cases.py). The tools run at
once, as separate processes (the GPU has room for all three; their time is mostly the host's instrumentation), unless
--serial. The kernel library is built first, outside the tools. Each tool's full output is kept in DIR/<tool>.log.
racecheck's warnings (possible hazards it cannot prove, e.g. two writes of the same value) are printed and recorded
but are not errors.
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


def command(sanitizer: str, tool: str, python: str = sys.executable) -> list[str]:
    return [sanitizer, "--tool", tool, "--error-exitcode", "1", python, str(CASES), "--set", CASE_SET[tool]]


def parse(tool: str, log: str, rc: int | None) -> dict:
    """What one tool's output says: errors (None when the tool printed no summary: it crashed or was killed),
    racecheck's warnings, and whether the cases themselves passed."""
    found = _ERROR_SUMMARY.findall(log)
    errors = int(found[-1]) if found else None
    warnings = 0
    race = _RACE_SUMMARY.findall(log)
    if race:
        _, race_errors, warnings = (int(x) for x in race[-1])
        errors = max(errors or 0, race_errors)
    cases_ok = "[sanitizer_cases] all right" in log
    wrong = [line.split("] ", 1)[1] for line in log.splitlines()
             if line.startswith("[sanitizer_cases]") and ("WRONG" in line or "MISSED PATH" in line
                                                          or "would not run" in line)]
    ok = rc == 0 and errors == 0 and cases_ok
    return {"tool": tool, "errors": errors, "warnings": warnings, "rc": rc, "cases_ok": cases_ok,
            "case_failures": wrong, "ok": ok, "set": CASE_SET[tool]}


def line(r: dict) -> str:
    errors = "?" if r["errors"] is None else r["errors"]
    extra = [f"{r['seconds']:.0f} s", f"{r['set']} set"]
    if r["warnings"]:
        extra.append(f"{r['warnings']} racecheck warnings")
    if r["errors"] is None:
        extra.append("no summary: the tool did not finish" + (" (timed out)" if r.get("timed_out") else ""))
    if not r["cases_ok"]:
        extra.append(f"cases FAILED: {'; '.join(r['case_failures'][:3]) or 'see the log'}")
    return f"{r['tool']:<10} errors found: {errors}  ({', '.join(extra)}) -> {'ok' if r['ok'] else 'FAIL'}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "sanitizer")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per tool")
    ap.add_argument("--serial", action="store_true", help="one tool after the other")
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args(argv)
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
        r.update(seconds=time.monotonic() - t0, timed_out=timed_out, command=" ".join(command(sanitizer, tool)),
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
        proc = subprocess.Popen(command(sanitizer, tool), cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
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
