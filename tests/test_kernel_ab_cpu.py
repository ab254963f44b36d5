"""dev/probes/kernel_ab.sh and device_ab_validate.sh: valid bash; every patch the default variants name exists in
dev/experiments and every -D flag is a macro the kernel reads; the candidate pick of kernel_ab_time.py."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from _support import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "dev" / "probes" / "kernel_ab.sh"


@pytest.mark.parametrize("name", ["kernel_ab.sh", "device_ab_validate.sh", "ncu_profile.sh"])
def test_syntax(name):
    subprocess.run(["bash", "-n", str(ROOT / "dev" / "probes" / name)], check=True)


def test_default_variants_name_existing_patches_and_macros():
    text = SCRIPT.read_text()
    block = re.search(r'VARIANTS=\$\{VARIANTS:-"(.*?)"\}', text, re.S).group(1)
    specs = [line.split("|") for line in block.split()]
    assert len(specs) >= 2 and all(len(s) == 3 for s in specs)
    config = (ROOT / "csrc" / "sm90" / "tile_config.cuh").read_text()
    for _, patch, flags in specs:
        defined_by = config
        if patch:
            assert (ROOT / "dev" / "experiments" / patch).is_file(), patch
            defined_by += (ROOT / "dev" / "experiments" / patch).read_text()  # a patch may add its own macro
        for flag in filter(None, flags.split(",")):
            macro = re.fullmatch(r"-D(\w+)=\w+", flag).group(1)
            assert f"#ifndef {macro}" in defined_by, macro


def _ab_time():
    return load_script(ROOT / "dev" / "probes" / "kernel_ab_time.py")


def test_pick_takes_the_best_geomean_among_candidates_only():
    times = {  # ms per round; ratio = cudnn / variant
        "a": {"cudnn": [1.0, 1.0, 1.0], "old": [0.5, 0.5, 0.5], "x": [1.0, 1.1, 0.9], "y": [0.8, 0.8, 0.8]},
        "b": {"cudnn": [2.0, 2.0, 2.0], "old": [1.0, 1.0, 1.0], "x": [1.6, 1.6, 1.6], "y": [2.2, 2.2, 2.2]},
    }
    best, scores = _ab_time().pick_best(times, ["x", "y"])
    # x: sqrt(1.0 * 1.25) = 1.118; y: sqrt(1.25 * 0.909) = 1.066; "old" is faster but not a candidate
    assert best == "x" and scores["x"] > scores["y"] and "old" not in scores


def test_pick_without_timings_returns_none():
    # A candidate that was never timed (failed smoke check) must not be validated as if it had won.
    times = {"a": {"cudnn": [1.0], "other": [1.0]}}
    assert _ab_time().pick_best(times, ["first", "second"]) == (None, {})


def test_pick_cli_refuses_when_nothing_was_timed(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path
    path = tmp_path / "ab_times.json"
    path.write_text(json.dumps({"times_ms": {"a": {"cudnn": [1.0]}}}))
    script = Path(__file__).resolve().parent.parent / "dev" / "probes" / "kernel_ab_time.py"
    r = subprocess.run([sys.executable, str(script), "--pick", str(path), "x,y"], capture_output=True, text=True)
    assert r.returncode != 0 and r.stdout == "" and "nothing to validate" in r.stderr


def test_anchor_shape_keys_are_unique_and_resolve():
    import sys
    sys.path.insert(0, str(ROOT))
    from bench import anchor_shapes
    keys = [s.key for s in anchor_shapes.SHAPES]
    assert len(keys) == len(set(keys)) == 12 and all(keys)
    assert anchor_shapes.by_key(["wan_cross"]) == [("wan_cross", 1, 12, 32760, 512, 128)]
    with pytest.raises(KeyError):
        anchor_shapes.by_key(["no_such_shape"])


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_build_records_the_commit_only_when_csrc_is_committed(tmp_path):
    """kernel_ab.sh --build-only writes .build/ab/NAME.commit (the commit csrc/ is) for device_ab_validate.sh to
    name results by, and none when csrc/ has uncommitted changes. nvcc is a stub here."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "dev" / "probes").mkdir(parents=True)
    for name in ("dev/probes/kernel_ab.sh", "scripts/nvcc_flags.py"):
        (repo / name).write_text((ROOT / name).read_text())
    (repo / "vidattn").mkdir()
    (repo / "vidattn" / "_ext.py").write_text('NVCC_FLAGS = ["-O3"]\n')
    (repo / "csrc").mkdir()
    (repo / "csrc" / "capi.cu").write_text("// kernel\n")
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "nvcc").write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\ntouch "$2"\n'
                               'echo "ptxas info    : Compiling entry function k" >&2\n')
    (stub / "nvcc").chmod(0o755)
    env = {"PATH": f"{stub}:/usr/bin:/bin", "HOME": str(tmp_path), "VARIANTS": "v||",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, env=env, check=True, capture_output=True, text=True)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "x")
    head = git("rev-parse", "HEAD").stdout.strip()
    run = lambda: subprocess.run(["bash", "dev/probes/kernel_ab.sh", "--build-only"], cwd=repo, env=env, check=True,
                                 capture_output=True, text=True)
    run()
    assert (repo / ".build" / "ab" / "v.commit").read_text().strip() == head
    (repo / ".build" / "ab" / "lib_v.so").unlink()
    (repo / "csrc" / "capi.cu").write_text("// kernel, edited\n")
    assert "uncommitted" in run().stdout
    assert not (repo / ".build" / "ab" / "v.commit").exists()


def test_extra_shapes_are_parsed_before_any_library_loads(monkeypatch):
    """--extra-shapes takes clock_probe.py's BxHxSxD form (D=256 rows are not anchor shapes); a bad one is an argument
    error before any library is opened or timed."""
    import sys

    mod = load_script(ROOT / "dev" / "probes" / "kernel_ab_time.py")
    assert mod.parse_shapes(["1x8x32768x256"]) == [("1x8x32768x256", 1, 8, 32768, 32768, 256)]
    opened = []
    monkeypatch.setattr(mod._ext, "open_library", lambda path: opened.append(path))
    monkeypatch.setattr(sys, "argv", ["kernel_ab_time.py", "base=/nonexistent.so", "--extra-shapes", "16x8x0x256"])
    with pytest.raises(SystemExit):
        mod.main()
    assert opened == []


def test_paired_table_counts_rounds_won_against_the_first(tmp_path):
    import json
    import subprocess
    import sys
    times = {"s1": {"base": [1.0, 1.0, 1.0, 1.0], "new": [0.9, 1.1, 0.95, 0.99], "cudnn": [2.0] * 4},
             "s2": {"base": [1.0, 2.0], "cudnn": [1.0, 1.0]}}  # a variant missing from a shape: a dash
    table = _ab_time().paired_table(times, ["base", "new"])
    row1 = next(line for line in table.splitlines() if line.startswith("s1"))
    assert row1.split()[1:3] == ["3/4", f"{(1 / 0.99 + 1 / 0.95) / 2:.4f}"]
    assert next(line for line in table.splitlines() if line.startswith("s2")).split()[1:] == ["-"]
    against = _ab_time().paired_table(times, ["base", "new", "cudnn"], "cudnn")  # speedups over cuDNN
    assert next(line for line in against.splitlines() if line.startswith("s1")).split()[1:3] == ["4/4", "2.0000"]
    path = tmp_path / "ab.json"
    path.write_text(json.dumps({"times_ms": times}))
    script = str(ROOT / "dev" / "probes" / "kernel_ab_time.py")
    r = subprocess.run([sys.executable, script, "--paired", str(path)], capture_output=True, text=True)
    assert r.returncode == 0 and "against base" in r.stdout and "3/4" in r.stdout
    r = subprocess.run([sys.executable, script, "--paired", str(path), "--against", "cudnn"], capture_output=True,
                       text=True)
    assert r.returncode == 0 and "against cudnn" in r.stdout
    r = subprocess.run([sys.executable, script, "--paired", str(path), "--against", "fa3"], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "--against fa3" in r.stderr
