"""Helpers of the anchors recipe (dev/anchors/): the JSON descriptions, FA3's build-config module, the dist-info
folders, and the stand-ins for FA3 kernels that were not compiled. Our own code; it reads and writes only
descriptions and generated stubs, nothing of FA3 or SageAttention.

    python3 anchors_meta.py fa3-config                       FA3's flash_attn_config module, for our switches
    python3 anchors_meta.py dist-info SITE NAME VERSION      a minimal NAME-VERSION.dist-info (importlib.metadata)
    python3 anchors_meta.py pack-json --fa3-commit ...       the pack's anchors.json (pack.sh)
    python3 anchors_meta.py standins --needed F --defined F --reasons F
                                                             C++ stand-ins for FA3 symbols no object defines
    python3 anchors_meta.py build-json --pack-json F --state DIR ...
                                                             the overlay's anchors.json (device_build.sh)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
from pathlib import Path

RECIPE = "dev/anchors/device_build.sh"
BUILT_WHERE = f"on the GPU machine by {RECIPE} (nvcc for sm_90a on the GPU machine, FA3's and SageAttention2's own flags)"
# FA3's build_flags keys (its interface reads the HDIM ones; the rest describe the build). True = compiled out.
FA3_DISABLED = ("BACKWARD", "SPLIT", "PAGEDKV", "APPENDKV", "LOCAL", "SOFTCAP", "PACKGQA", "FP16", "VARLEN",
                "CLUSTER", "SM8x")
FA3_KEPT = ("FP8", "HDIM64", "HDIM96", "HDIM128", "HDIM192", "HDIM256")
FA3_FILES = ("api", "sched")
SAGE_MODULES = {"_qattn_sm90": ("sm90_cu", "sm90_py"), "_fused": ("fused_cu", "fused_py")}
DTYPES = {"bfloat16_t": "bf16", "float_e4m3_t": "e4m3", "half_t": "fp16"}


def utc(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def fa3_config() -> str:
    flags = {f"FLASHATTENTION_DISABLE_{k}": True for k in FA3_DISABLED}
    flags.update({f"FLASHATTENTION_DISABLE_{k}": False for k in FA3_KEPT})
    flags["FLASHATTENTION_ENABLE_VCOLMAJOR"] = False
    flags["FLASH_ATTENTION_DISABLE_HDIMDIFF64"] = True
    flags["FLASH_ATTENTION_DISABLE_HDIMDIFF192"] = True
    return ("# Written by vidattn's dev/anchors/pack.sh: the switches dev/anchors/device_build.sh compiles with.\n"
            f"CONFIG = {{'build_flags': {flags!r}}}\n\n\ndef show():\n    from pprint import pprint\n"
            "    pprint(CONFIG)\n")


def dist_info(site: str, name: str, version: str) -> None:
    d = Path(site) / f"{name}-{version}.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                "Summary: unpacked by vidattn's dev/device_anchors.sh (anchor for measurement)\n")
    (d / "INSTALLER").write_text("vidattn dev/anchors\n")


def pack_json(a) -> dict:
    return {
        "fa3": {
            "source": "Dao-AILab/flash-attention, hopper/",
            "commit": a.fa3_commit, "commit_date": a.fa3_date,
            "cutlass_commit": a.cutlass_commit, "cutlass_commit_date": a.cutlass_date,
            "cutlass_commit_pinned": a.cutlass_pinned,
            "version": a.fa3_version,
            "features": a.features,
            "kernels_default": a.kernels_default.split(),
            "kernels_optional": a.kernels_optional.split(),
        },
        "sage2": {
            "source": "thu-ml/SageAttention",
            "commit": a.sage_commit, "commit_date": a.sage_date,
            "version": a.sage_version,
            "kernel": "sageattn_qk_int8_pv_fp8_cuda_sm90: INT8 QK (per-thread, K smoothed) + FP8 PV (fp32+fp32)",
        },
        "packed": utc(),
        "packed_by": "dev/anchors/pack.sh",
        "recipe": f"{RECIPE} (nvcc for sm_90a on the GPU machine, FA3's and SageAttention2's own flags)",
    }


# The Itanium-mangled name of run_mha_fwd_<Arch, T, kHeadDim, kHeadDimV, ...>: the element type is a
# cutlass:: class, the dims are int template arguments.
_FWD = re.compile(r"run_mha_fwd_ILi(\d+)EN7cutlass\d+(\w+?)ELi(\d+)ELi(\d+)E")


def describe_symbol(sym: str) -> str | None:
    """The kernel name (<hdim>_<dtype>, or <hdim>v<hdimv>_<dtype> for a head-dim-diff kernel) of an FA3 forward
    symbol, 'sched' for the scheduler helper, None for anything else."""
    m = _FWD.search(sym)
    if m:
        arch, cls, d, dv = m.groups()
        dt = DTYPES.get(cls, cls)
        return f"{d}_{dt}" if d == dv else f"{d}v{dv}_{dt}"
    if "prepare_varlen_num_blocks" in sym:
        return "sched"
    return None


def standins(needed: list[str], defined: set[str], reasons: dict[str, str]) -> tuple[str, list[str]]:
    """C++ source defining, under their mangled names (GCC asm labels, so no FA3 header is needed), every FA3
    symbol in `needed` that no compiled object defines; each throws the error the harness expects. Returns the
    source and the kernel names stood in."""
    lines = ["// Generated by vidattn's dev/anchors/anchors_meta.py: stand-ins for FlashAttention-3 functions whose",
             "// file was not compiled; each raises instead of running. Our code, no FA3 code.",
             "#include <stdexcept>", "",
             "[[noreturn]] static void vidattn_anchor_missing(const char* what) { throw std::runtime_error(what); }",
             ""]
    names = []
    for i, sym in enumerate(sorted(set(needed) - defined)):
        kernel = describe_symbol(sym)
        if kernel is None:
            continue
        if kernel == "sched":
            what = "this FlashAttention-3 anchor build has no scheduler helper (flash_prepare_scheduler.cu)"
        else:
            what = f"this FlashAttention-3 anchor build has no hdim{kernel.replace('_', ' ')} kernel"
        why = reasons.get(kernel)
        if why:
            what += f": {why}"
        what = what.replace("\\", "\\\\").replace('"', '\\"')
        # The callers pass (params&, stream); a function that ignores its arguments is call-compatible on x86-64.
        lines.append(f'void vidattn_standin_{i}() __asm__("{sym}");')
        lines.append(f'void vidattn_standin_{i}() {{ vidattn_anchor_missing("{what}"); }}')
        names.append(kernel)
    return "\n".join(lines) + "\n", names


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def file_state(state: Path, name: str, t0: float, ktimeout: int, final: bool, unselected=()) -> dict:
    """status/rc/seconds/start_s/end of one compile job from its marker files (<name>.start, .end, .rc)."""
    start, end, rc = (_read(state / f"{name}.{x}") for x in ("start", "end", "rc"))
    out: dict = {}
    if start is None and name in unselected:
        out["status"] = "not selected (--only)"
        return out
    if start is None:
        out["status"] = "not started" if final else "queued"
        return out
    out["start_s"] = int(float(start) - t0)
    if rc is None:
        out["status"] = "stopped" if final else "compiling"
        out["seconds"] = int(time.time() - float(start))
        return out
    rc_i = int(rc)
    out["status"] = "ok" if rc_i == 0 else ("timeout" if rc_i in (124, 137) else "failed")
    out["rc"] = rc_i
    if end is not None:
        out["seconds"] = int(float(end) - float(start))
        out["end"] = time.strftime("%H:%M:%S", time.gmtime(float(end)))
    return out


def missing_reason(st: dict, ktimeout: int, log: str) -> str:
    s = st["status"]
    if s == "timeout":
        return f"compile timed out after {ktimeout} s (KTIMEOUT)"
    if s == "failed":
        return f"compile failed (rc {st.get('rc')}; {log})"
    if s.startswith("not selected"):
        return s
    if s in ("compiling", "queued"):
        return "still compiling when this was written"
    return "compile did not finish (the build was stopped)"


def build_json(a) -> dict:
    pack = json.loads(Path(a.pack_json).read_text()) if a.pack_json and Path(a.pack_json).is_file() else {}
    state = Path(a.state)
    t0 = float(a.t0)
    final = bool(int(a.final))
    against = json.loads(Path(a.built_against).read_text()) if a.built_against else {}
    fa3 = pack.setdefault("fa3", {})
    sage = pack.setdefault("sage2", {})
    requested = a.requested.split()
    known = (fa3.get("kernels_default") or []) + (fa3.get("kernels_optional") or [])
    files, built, missing, reason = {}, [], [], {}
    # The kernels in flash_attn_3._C as last linked (device_build.sh writes the list after each successful link).
    linked = set((_read(state / "fa3_linked") or "").split())
    for name in list(FA3_FILES) + [k for k in known if k in requested] + [k for k in requested if k not in known]:
        files[name] = file_state(state, name, t0, a.ktimeout, final, a.only.split())
    api_ok = files["api"]["status"] == "ok"
    for k in list(dict.fromkeys(known + requested)):
        if k not in requested:
            missing.append(k)
            reason[k] = "not selected (--only)" if k in a.only.split() else "not requested (FA3_KERNELS)"
            continue
        st = files[k]
        if st["status"] == "ok" and k in linked:
            built.append(k)
            continue
        missing.append(k)
        if st["status"] == "ok":
            reason[k] = ("FA3's API file did not compile" if not api_ok
                         else "compiled, but flash_attn_3._C did not link (build log)")
        else:
            reason[k] = missing_reason(st, a.ktimeout, f"log {a.logs}/{k}.log")
    fa3.update({"kernels_built": sorted(built), "kernels_missing": missing, "kernels_missing_reason": reason,
                "built_where": BUILT_WHERE, "compiler": a.compiler, "built_against": against, "files": files})
    sfiles, mbuilt, mmissing, mreason = {}, [], [], {}
    for mod, parts in SAGE_MODULES.items():
        for p in parts:
            sfiles[p] = file_state(state, p, t0, a.ktimeout, final, a.only.split())
        so = f"{mod}{a.ext_suffix}"
        if (Path(a.site) / "sageattention" / so).is_file() and (state / f"{mod}_linked").exists():
            mbuilt.append(so)
            continue
        mmissing.append(so)
        bad = [p for p in parts if sfiles[p]["status"] != "ok"]
        mreason[so] = (missing_reason(sfiles[bad[0]], a.ktimeout, f"log {a.logs}/{bad[0]}.log") if bad
                       else "compiled, but did not link (build log)")
    sage.update({"modules_built": mbuilt, "modules_missing": mmissing, "built_where": BUILT_WHERE,
                 "modules_missing_reason": mreason, "compiler": a.compiler, "built_against": against,
                 "files": sfiles})
    pack["compiler"] = a.compiler
    pack["built_against"] = against
    pack["build"] = {"ktimeout_s": a.ktimeout, "elapsed_s": int(time.time() - t0), "final": final,
                     "updated": utc(), "host": socket.gethostname(), "cores": os.cpu_count(), "jobs": a.jobs,
                     "requested": requested}
    if a.import_check:
        pack["build"]["import_check"] = a.import_check
    return pack


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fa3-config")
    d = sub.add_parser("dist-info")
    d.add_argument("site"), d.add_argument("name"), d.add_argument("version")
    p = sub.add_parser("pack-json")
    for k in ("fa3-commit", "fa3-date", "cutlass-commit", "cutlass-date", "cutlass-pinned", "sage-commit",
              "sage-date", "fa3-version", "sage-version", "kernels-default", "kernels-optional", "features"):
        p.add_argument(f"--{k}", required=True)
    s = sub.add_parser("standins")
    s.add_argument("--needed", required=True, help="file: mangled symbols the API and scheduler objects use")
    s.add_argument("--defined", required=True, help="file: mangled symbols the compiled objects define")
    s.add_argument("--reasons", help="JSON file {kernel: why it is missing}")
    s.add_argument("--names-out", help="write the kernel names stood in here, one a line")
    b = sub.add_parser("build-json")
    b.add_argument("--pack-json")
    b.add_argument("--state", required=True)
    b.add_argument("--site", required=True)
    b.add_argument("--logs", required=True)
    b.add_argument("--t0", required=True)
    b.add_argument("--final", default="0")
    b.add_argument("--ktimeout", type=int, required=True)
    b.add_argument("--jobs", type=int, required=True)
    b.add_argument("--requested", required=True, help="the kernels compiled")
    b.add_argument("--only", default="", help="kernels and files left out by device_build.sh --only")
    b.add_argument("--compiler", default="")
    b.add_argument("--built-against")
    b.add_argument("--ext-suffix", required=True)
    b.add_argument("--import-check")
    b.add_argument("--reasons-out", help="also write {kernel: reason} for the stand-ins here")
    a = ap.parse_args(argv)
    if a.cmd == "fa3-config":
        sys.stdout.write(fa3_config())
    elif a.cmd == "dist-info":
        dist_info(a.site, a.name, a.version)
    elif a.cmd == "pack-json":
        print(json.dumps(pack_json(a), indent=1))
    elif a.cmd == "standins":
        needed = Path(a.needed).read_text().split()
        defined = set(Path(a.defined).read_text().split())
        reasons = json.loads(Path(a.reasons).read_text()) if a.reasons else {}
        src, names = standins(needed, defined, reasons)
        sys.stdout.write(src)
        if a.names_out:
            Path(a.names_out).write_text("".join(n + "\n" for n in names))
    elif a.cmd == "build-json":
        out = build_json(a)
        if a.reasons_out:
            Path(a.reasons_out).write_text(json.dumps(out["fa3"]["kernels_missing_reason"]))
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
