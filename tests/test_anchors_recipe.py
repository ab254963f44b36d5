"""CPU checks of the anchors recipe (dev/anchors/): the pack's description and contents (skipped where the mirrors
of FA3, CUTLASS and SageAttention are absent, as in CI), device_build.sh's file lists and compile commands per kernel
set, the stand-ins for FA3 kernels that were not compiled, and the overlay description. Nothing here compiles an
anchor; the GPU machine does (docs/anchors.md)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "dev" / "anchors"
MIRRORS = Path(os.environ.get("MIRRORS", "/work/.mirror"))
MIRROR_REPOS = ("Dao-AILab+flash-attention", "NVIDIA+cutlass", "thu-ml+SageAttention")
DEFAULT = ["64_bf16", "96_bf16", "128_bf16", "192_bf16", "256_bf16", "64_e4m3", "128_e4m3"]
OPTIONAL = ["96_e4m3", "192_e4m3", "256_e4m3"]


def _meta():
    spec = importlib.util.spec_from_file_location("anchors_meta", RECIPE / "anchors_meta.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


meta = _meta()


def _mangled(d: int, cls: str, dv: int | None = None) -> str:
    name = {"bf16": "10bfloat16_t", "e4m3": "12float_e4m3_t"}[cls]
    dv = d if dv is None else dv
    return (f"_Z12run_mha_fwd_ILi90EN7cutlass{name}ELi{d}ELi{dv}ELb0ELb0ELb0ELb0EEvR16Flash_fwd_paramsP11CUstream_st")


SCHED = "_Z25prepare_varlen_num_blocksR16Flash_fwd_paramsP11CUstream_stbiib"


def _build(*args, env=None):
    e = dict(os.environ, PYTHON=sys.executable, **(env or {}))
    if "FA3_KERNELS" not in (env or {}):
        e.pop("FA3_KERNELS", None)  # the caller's own setting must not leak into the default-set checks
    return subprocess.run(["bash", str(RECIPE / "device_build.sh"), *args], capture_output=True, text=True, env=e,
                          timeout=120)


# --- device_build.sh without building ---

def test_list_default_and_optional_kernel_sets():
    r = _build("--list")
    assert r.returncode == 0, r.stderr
    items = r.stdout.split()
    assert items[0] == "api"  # first: every link needs it
    assert [i for i in items if i in DEFAULT + OPTIONAL] == DEFAULT
    assert {"sched", "sm90_cu", "sm90_py", "fused_cu", "fused_py"} <= set(items)
    r = _build("--list", env={"FA3_KERNELS": "all"})
    assert [i for i in r.stdout.split() if i in DEFAULT + OPTIONAL] == DEFAULT + OPTIONAL
    r = _build("--list", env={"FA3_KERNELS": "256_e4m3"})
    assert [i for i in r.stdout.split() if i in DEFAULT + OPTIONAL] == DEFAULT + ["256_e4m3"]
    r = _build("--list", "--only", "api,sched,fused_cu")
    assert r.stdout.split() == ["api", "fused_cu", "sched"]


def test_unknown_kernel_or_argument_is_refused():
    r = _build("--list", env={"FA3_KERNELS": "80_bf16"})
    assert r.returncode == 2 and "80_bf16" in r.stderr
    assert _build("--frobnicate").returncode == 2


@pytest.mark.parametrize("kernels", ["", "all"])
def test_dry_run_prints_each_compile_with_fa3s_and_sages_flags(kernels):
    r = _build("--dry-run", env={"FA3_KERNELS": kernels})
    assert r.returncode == 0, r.stderr
    lines = {ln.split(":", 1)[0]: ln for ln in r.stdout.splitlines() if ":" in ln}
    wanted = DEFAULT + (OPTIONAL if kernels else [])
    for k in DEFAULT + OPTIONAL:
        assert (k in lines) == (k in wanted), k
    for k in wanted:
        ln = lines[k]
        d, dt = k.split("_")
        assert f"instantiations/flash_fwd_hdim{d}_{dt}_sm90.cu" in ln
        assert "timeout" in ln and "nice -n" in ln
        for flag in ("arch=compute_90a\\,code=sm_90a", "--use_fast_math", "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED",
                     "-DCUTLASS_ENABLE_GDC_FOR_SM90", "-DNDEBUG", "-DFLASHATTENTION_DISABLE_BACKWARD",
                     "-DFLASHATTENTION_DISABLE_SPLIT", "-DFLASHATTENTION_DISABLE_PACKGQA",
                     "-DFLASHATTENTION_DISABLE_HDIMDIFF64", "-DFLASHATTENTION_DISABLE_HDIMDIFF192",
                     "-DFLASHATTENTION_DISABLE_SM8x", "-DTORCH_EXTENSION_NAME=_C"):
            assert flag in ln, (k, flag)
        assert "arch=compute_80" not in ln
    assert "flash_api_stable.cpp" in lines["api"] and "-DPy_LIMITED_API=0x03090000" in lines["api"]
    assert "flash_prepare_scheduler.cu" in lines["sched"]
    assert "qk_int_sv_f8_cuda_sm90.cu" in lines["sm90_cu"] and "-DTORCH_EXTENSION_NAME=_qattn_sm90" in lines["sm90_cu"]
    assert "-U__CUDA_NO_HALF_OPERATORS__" in lines["fused_cu"] and "-DTORCH_EXTENSION_NAME=_fused" in lines["fused_cu"]
    assert "pybind_sm90.cpp" in lines["sm90_py"] and "-DENABLE_BF16" in lines["sm90_py"]
    assert "_C.abi3.so" in lines["link flash_attn_3"]
    assert "-lcuda" in lines["link sageattention"] and "-ltorch_python" in lines["link sageattention"]
    assert "-ltorch_python" not in lines["link flash_attn_3"]  # FA3's module is limited-API / stable-ABI
    assert lines["not requested"].split(":", 1)[1].split() == ([] if kernels else OPTIONAL)


def test_build_without_a_pack_says_how_to_make_one(tmp_path):
    r = _build(env={"VIDATTN_ANCHORS_PACK": str(tmp_path / "none"), "ANCHORS_BUILD_DIR": str(tmp_path / "b")})
    assert r.returncode == 1 and "pack.sh" in r.stderr


# --- the stand-ins ---

def test_describe_symbol():
    assert meta.describe_symbol(_mangled(128, "e4m3")) == "128_e4m3"
    assert meta.describe_symbol(_mangled(96, "bf16")) == "96_bf16"
    assert meta.describe_symbol(_mangled(64, "bf16", 256)) == "64v256_bf16"
    assert meta.describe_symbol(SCHED) == "sched"
    assert meta.describe_symbol("_ZNSt13runtime_errorD1Ev") is None


def test_standins_cover_exactly_what_no_object_defines():
    needed = [_mangled(d, t) for d in (64, 96, 128, 192, 256) for t in ("bf16", "e4m3")] + [SCHED, "PyModule_Create2"]
    defined = {_mangled(128, "e4m3"), _mangled(64, "bf16"), SCHED}
    src, names = meta.standins(needed, defined, {"96_e4m3": "not requested (FA3_KERNELS)"})
    assert sorted(names) == sorted(f"{d}_{t}" for d in (64, 96, 128, 192, 256) for t in ("bf16", "e4m3")
                                   if (d, t) not in ((128, "e4m3"), (64, "bf16")))
    assert _mangled(128, "e4m3") not in src and SCHED not in src and "PyModule_Create2" not in src
    assert f'__asm__("{_mangled(96, "e4m3")}")' in src
    assert "this FlashAttention-3 anchor build has no hdim96 e4m3 kernel: not requested (FA3_KERNELS)" in src
    assert "this FlashAttention-3 anchor build has no hdim256 bf16 kernel\")" in src  # no reason given: none added
    # the message the harness refuses a shape with names the kernel the same way
    sys.path.insert(0, str(ROOT / "scripts"))
    import anchor_impls
    assert "no hdim96 e4m3 kernel" in f"this FlashAttention-3 build has no hdim{'96_e4m3'.replace('_', ' ')} kernel"
    assert anchor_impls.fa3_build_dim(80) == 96


@pytest.mark.skipif(shutil.which("c++") is None or shutil.which("nm") is None, reason="needs c++ and nm")
def test_standins_compile_under_the_mangled_names(tmp_path):
    needed = [_mangled(96, "e4m3"), SCHED]
    src, _ = meta.standins(needed, set(), {})
    (tmp_path / "s.cpp").write_text(src)
    subprocess.run(["c++", "-c", "-fPIC", str(tmp_path / "s.cpp"), "-o", str(tmp_path / "s.o")], check=True)
    syms = subprocess.run(["nm", "--defined-only", "--format=just-symbols", str(tmp_path / "s.o")],
                          capture_output=True, text=True, check=True).stdout.split()
    assert set(needed) <= set(syms)


# --- descriptions ---

def test_fa3_config_keeps_every_head_dim_and_disables_the_rest():
    ns: dict = {}
    exec(meta.fa3_config(), ns)
    flags = ns["CONFIG"]["build_flags"]
    for d in (64, 96, 128, 192, 256):
        assert flags[f"FLASHATTENTION_DISABLE_HDIM{d}"] is False  # FA3's interface rounds head dims by these
    for k in ("BACKWARD", "SPLIT", "PAGEDKV", "PACKGQA", "FP16", "VARLEN", "SM8x"):
        assert flags[f"FLASHATTENTION_DISABLE_{k}"] is True
    assert flags["FLASHATTENTION_DISABLE_FP8"] is False


def _args(**kw):
    base = dict(pack_json=None, state=None, site=None, logs="/tmp/logs", t0="0", final="1", ktimeout=300, jobs=16,
                requested=" ".join(DEFAULT), only="", compiler="nvcc 13.0", built_against=None,
                ext_suffix=".cpython-312-x86_64-linux-gnu.so", import_check=None)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_build_json_statuses_and_reasons(tmp_path):
    state, site = tmp_path / "state", tmp_path / "site"
    state.mkdir()
    (site / "sageattention").mkdir(parents=True)
    pack = {"fa3": {"commit": "abc", "kernels_default": DEFAULT, "kernels_optional": OPTIONAL}, "sage2": {},
            "packed": "x"}
    (tmp_path / "pack.json").write_text(json.dumps(pack))
    (tmp_path / "against.json").write_text(json.dumps({"torch": "2.11.0+cu130"}))

    def job(name, rc, secs=10):
        (state / f"{name}.start").write_text("100")
        if rc is not None:
            (state / f"{name}.end").write_text(str(100 + secs))
            (state / f"{name}.rc").write_text(str(rc))
    for k in ["api", "sched"] + DEFAULT[:5] + ["fused_cu", "fused_py", "sm90_py"]:
        job(k, 0)
    job("64_e4m3", 124, 300)
    job("128_e4m3", None)  # stopped mid-compile
    job("sm90_cu", 2)
    (state / "fa3_linked").write_text("\n".join(DEFAULT[:5]) + "\n")
    (site / "sageattention" / "_fused.cpython-312-x86_64-linux-gnu.so").write_text("")
    (state / "_fused_linked").write_text("")
    out = meta.build_json(_args(pack_json=str(tmp_path / "pack.json"), state=str(state), site=str(site),
                                built_against=str(tmp_path / "against.json"), import_check="fa3: import ok"))
    fa3, sage = out["fa3"], out["sage2"]
    assert fa3["commit"] == "abc" and out["packed"] == "x"  # the pack's description is kept
    assert fa3["kernels_built"] == sorted(DEFAULT[:5])
    assert fa3["kernels_missing"] == ["64_e4m3", "128_e4m3"] + OPTIONAL
    r = fa3["kernels_missing_reason"]
    assert "timed out after 300 s" in r["64_e4m3"] and "stopped" in r["128_e4m3"]
    assert all(r[k] == "not requested (FA3_KERNELS)" for k in OPTIONAL)
    assert fa3["files"]["64_e4m3"]["status"] == "timeout" and fa3["files"]["64_e4m3"]["seconds"] == 300
    assert fa3["files"]["128_bf16"] == {"status": "ok", "rc": 0, "seconds": 10, "start_s": 100,
                                        "end": fa3["files"]["128_bf16"]["end"]}
    assert fa3["built_where"].startswith("on the GPU machine by dev/anchors/device_build.sh")
    assert fa3["built_against"] == {"torch": "2.11.0+cu130"} == out["built_against"]
    assert sage["modules_built"] == ["_fused.cpython-312-x86_64-linux-gnu.so"]
    assert sage["modules_missing"] == ["_qattn_sm90.cpython-312-x86_64-linux-gnu.so"]
    assert "compile failed (rc 2" in sage["modules_missing_reason"]["_qattn_sm90.cpython-312-x86_64-linux-gnu.so"]
    b = out["build"]
    assert b["final"] is True and b["ktimeout_s"] == 300 and b["jobs"] == 16 and b["import_check"] == "fa3: import ok"
    # anchor_impls refuses exactly the shapes whose kernel is missing
    sys.path.insert(0, str(ROOT / "scripts"))
    import anchor_impls
    (tmp_path / "anchors.json").write_text(json.dumps(out))
    old = os.environ.get("VIDATTN_ANCHORS_DIR")
    os.environ["VIDATTN_ANCHORS_DIR"] = str(tmp_path)
    try:
        assert anchor_impls.supports("fa3_fp8", 64, 8, 8) and "hdim64 e4m3" in anchor_impls.supports("fa3_fp8", 64, 8, 8)
        assert anchor_impls.supports("fa3", 128, 8, 8) is None
    finally:
        if old is None:
            os.environ.pop("VIDATTN_ANCHORS_DIR")
        else:
            os.environ["VIDATTN_ANCHORS_DIR"] = old


# --- the pack, from the mirrors ---

needs_mirrors = pytest.mark.skipif(
    not all((MIRRORS / r / "repo").is_dir() for r in MIRROR_REPOS) or shutil.which("xz") is None,
    reason=f"the mirrors of FA3, CUTLASS and SageAttention are not under {MIRRORS} (or no xz)")


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    out = tmp_path_factory.mktemp("pack")
    r = subprocess.run(["bash", str(RECIPE / "pack.sh"), "--mirrors", str(MIRRORS), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def _names(p: Path) -> list[str]:
    with tarfile.open(p) as t:
        return [n.lstrip("./") for n in t.getnames()]


@needs_mirrors
def test_pack_description(pack):
    d = json.loads((pack / "anchors.json").read_text())
    fa3, sage = d["fa3"], d["sage2"]
    for k in ("source", "commit", "commit_date", "cutlass_commit", "cutlass_commit_date", "features",
              "kernels_default", "kernels_optional"):
        assert fa3[k], k
    assert fa3["kernels_default"] == DEFAULT and fa3["kernels_optional"] == OPTIONAL
    assert len(fa3["commit"]) == len(fa3["cutlass_commit"]) == len(sage["commit"]) == 40
    assert sage["commit_date"] and "sageattn_qk_int8_pv_fp8_cuda_sm90" in sage["kernel"]
    assert d["packed"].endswith("Z") and "dev/anchors/device_build.sh" in d["recipe"]


@needs_mirrors
def test_pack_contents_and_size(pack):
    total = sum(f.stat().st_size for f in pack.iterdir())
    assert total < 5 * 2**20, total
    fa3 = _names(pack / "fa3.tar.xz")
    for f in ("flash_attn_interface.py", "flash_attn_config.py", "flash_attn_3/__init__.py",
              "flash_attn_3/flash_attn_interface.py"):
        assert f in fa3, f
    assert any(n.startswith("flash_attn_3-") and n.endswith(".dist-info/METADATA") for n in fa3)
    sage = _names(pack / "sage2.tar.xz")
    assert "sageattention/core.py" in sage and "sageattention/sm90_compile.py" in sage
    src = _names(pack / "src.tar.xz")
    for k in DEFAULT + OPTIONAL:
        d, dt = k.split("_")
        assert f"fa3/hopper/instantiations/flash_fwd_hdim{d}_{dt}_sm90.cu" in src
    for f in ("fa3/hopper/flash_api_stable.cpp", "fa3/hopper/flash_prepare_scheduler.cu", "fa3/hopper/flash.h",
              "fa3/csrc/cutlass/include/cute/tensor.hpp", "fa3/csrc/cutlass/include/cutlass/numeric_types.h",
              "sage2/csrc/qattn/qk_int_sv_f8_cuda_sm90.cu", "sage2/csrc/fused/fused.cu"):
        assert f in src, f
    assert not any(n.endswith(".cu") and ("_bwd_" in n or "_sm80" in n) for n in src)  # forward sm90 kernels only
    for names in (fa3, sage, src):
        assert not any(n.endswith((".so", ".pyc")) for n in names)


@needs_mirrors
def test_device_anchors_installs_the_pack(pack, tmp_path):
    env = dict(os.environ, VIDATTN_ANCHORS_PACK=str(pack), VIDATTN_ANCHORS_DIR=str(tmp_path / "a"),
               VIDATTN_ANCHORS_OVERLAY=str(tmp_path / "no_overlay"), PYTHON=sys.executable)
    r = subprocess.run(["bash", str(ROOT / "dev" / "device_anchors.sh"), "install"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    site = tmp_path / "a" / "site"
    assert (site / "flash_attn_interface.py").is_file() and (site / "sageattention" / "core.py").is_file()
    assert json.loads((tmp_path / "a" / "anchors.json").read_text())["fa3"]["kernels_default"] == DEFAULT
    # without the compiled modules: the harness says why it cannot call them, it does not fail
    report = json.loads(r.stdout[r.stdout.index("\n{") + 1:])
    assert all(report["available"][n] for n in ("fa3", "fa3_fp8", "sage2"))


# --- the build's bookkeeping, with a stand-in toolchain (no FA3 or SageAttention source: empty files) ---

FAKE_NVCC = r"""#!/bin/bash
# Stand-in nvcc: an object defining the symbol the real file would (FA3's kernel or scheduler), or nothing.
[ "$1" = --version ] && { echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; }
out="" src=""
while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift 2 ;; -c) src=$2; shift 2 ;; *) shift ;; esac; done
f=$(basename "$src")
case "$f" in *"$FAIL"*) echo "fake failure" >&2; exit 1 ;; esac
case "$f" in *"$SLOW"*) sleep "${SLEEP:-60}" ;; esac
if [[ $f =~ hdim([0-9]+)_(bf16|e4m3) ]]; then
  d=${BASH_REMATCH[1]}; t=10bfloat16_t; [ "${BASH_REMATCH[2]}" = e4m3 ] && t=12float_e4m3_t
  sym="_Z12run_mha_fwd_ILi90EN7cutlass${t}ELi${d}ELi${d}ELb0ELb0ELb0ELb0EEvR16Flash_fwd_paramsP11CUstream_st"
elif [ "$f" = flash_prepare_scheduler.cu ]; then sym=_Z25prepare_varlen_num_blocksR16Flash_fwd_paramsP11CUstream_stbiib
else sym=""; fi
tmp=$(mktemp --suffix=.cpp)
[ -n "$sym" ] && echo "void f() __asm__(\"$sym\"); void f() {}" > "$tmp"
c++ -c -fPIC "$tmp" -o "$out"; rc=$?; rm -f "$tmp"; exit $rc
"""

FAKE_CXX = r"""#!/bin/bash
# Stand-in host compiler: FA3's API file becomes an object calling every kernel symbol; the bindings an empty
# object; everything else (the stand-ins, the links) goes to the real c++ without torch's libraries.
args=() out="" src=""
for a in "$@"; do case "$a" in -l*|-L*) ;; *) args+=("$a") ;; esac; done
while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift 2 ;; -c) src=$2; shift 2 ;; *) shift ;; esac; done
case "$(basename "$src")" in
  flash_api_stable.cpp)
    tmp=$(mktemp --suffix=.cpp); i=0
    for s in $SYMS; do echo "void f$i() __asm__(\"$s\");" >> "$tmp"; i=$((i + 1)); done
    echo "void api() {" >> "$tmp"; for ((j = 0; j < i; j++)); do echo "f$j();" >> "$tmp"; done; echo "}" >> "$tmp"
    exec c++ -c -fPIC "$tmp" -o "$out" ;;
  pybind*.cpp) echo "" > "$out.cpp"; exec c++ -c -fPIC -x c++ "$out.cpp" -o "$out" ;;
esac
exec c++ "${args[@]}"
"""


@pytest.fixture()
def fake_build(tmp_path):
    if shutil.which("c++") is None or shutil.which("nm") is None or shutil.which("xz") is None:
        pytest.skip("needs c++, nm and xz")
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "include").mkdir()
    (cuda / "bin" / "nvcc").write_text(FAKE_NVCC)
    (cuda / "bin" / "nvcc").chmod(0o755)
    (tmp_path / "cxx").write_text(FAKE_CXX)
    (tmp_path / "cxx").chmod(0o755)
    src = tmp_path / "src"
    for k in DEFAULT + OPTIONAL:
        d, dt = k.split("_")
        p = src / "fa3" / "hopper" / "instantiations" / f"flash_fwd_hdim{d}_{dt}_sm90.cu"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    for f in ("fa3/hopper/flash_api_stable.cpp", "fa3/hopper/flash_prepare_scheduler.cu",
              "sage2/csrc/qattn/qk_int_sv_f8_cuda_sm90.cu", "sage2/csrc/qattn/pybind_sm90.cpp",
              "sage2/csrc/fused/fused.cu", "sage2/csrc/fused/pybind.cpp"):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_text("")
    pack = tmp_path / "pack"
    pack.mkdir()
    subprocess.run(["tar", "-cJf", str(pack / "src.tar.xz"), "-C", str(src), "."], check=True)
    (pack / "anchors.json").write_text(json.dumps(
        {"fa3": {"commit": "c" * 40, "kernels_default": DEFAULT, "kernels_optional": OPTIONAL}, "sage2": {}}))
    syms = " ".join([_mangled(d, t) for d in (64, 96, 128, 192, 256) for t in ("bf16", "e4m3")] + [SCHED])
    env = dict(os.environ, CUDA_HOME=str(cuda), CXX=str(tmp_path / "cxx"), PYTHON=sys.executable, SYMS=syms,
               VIDATTN_ANCHORS_PACK=str(pack), ANCHORS_BUILD_DIR=str(tmp_path / "b"), JOBS="4", FAIL="none",
               SLOW="none", KTIMEOUT="30")
    env.pop("FA3_KERNELS", None)
    return tmp_path, env


def _defined(so: Path) -> set[str]:
    return set(subprocess.run(["nm", "-D", "--defined-only", "--format=just-symbols", str(so)], capture_output=True,
                              text=True, check=True).stdout.split())


def test_build_links_what_compiled_and_stands_in_for_the_rest(fake_build):
    tmp, env = fake_build
    env.update(FAIL="hdim96_bf16", SLOW="hdim64_e4m3", KTIMEOUT="25")  # the others take a second or two
    r = subprocess.run(["bash", str(RECIPE / "device_build.sh")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    overlay = tmp / "b" / "overlay"
    d = json.loads((overlay / "anchors.json").read_text())
    fa3 = d["fa3"]
    assert fa3["commit"] == "c" * 40
    assert fa3["kernels_built"] == sorted(set(DEFAULT) - {"96_bf16", "64_e4m3"})
    assert set(fa3["kernels_missing"]) == {"96_bf16", "64_e4m3", *OPTIONAL}
    assert "compile failed (rc 1" in fa3["kernels_missing_reason"]["96_bf16"]
    assert "timed out after 25 s" in fa3["kernels_missing_reason"]["64_e4m3"]
    assert fa3["files"]["64_e4m3"]["status"] == "timeout" and fa3["files"]["sched"]["status"] == "ok"
    assert d["build"]["final"] is True and d["build"]["jobs"] == 4 and "import_check" in d["build"]
    # every kernel symbol the API calls is defined: compiled, or a stand-in
    so = overlay / "site" / "flash_attn_3" / "_C.abi3.so"
    assert set(env["SYMS"].split()) <= _defined(so)
    standin_src = (tmp / "b" / "obj" / "standins.cpp").read_text()
    assert "no hdim96 bf16 kernel: compile failed" in standin_src and "no hdim256 e4m3 kernel: not requested" in standin_src
    assert _mangled(128, "bf16") not in standin_src
    sage = d["sage2"]
    assert len(sage["modules_built"]) == 2 and not sage["modules_missing"]
    assert (tmp / "b" / "cudastub" / "libcuda.so").is_file()  # no toolkit stub here: the generated one


def test_a_stopped_build_writes_what_it_has(fake_build):
    tmp, env = fake_build
    env.update(SLOW="hdim", SLEEP="600", KTIMEOUT="900")  # every kernel sleeps: stop while they run
    p = subprocess.Popen(["bash", str(RECIPE / "device_build.sh")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env)
    state = tmp / "b" / "state"
    deadline = time.time() + 120
    while time.time() < deadline and not (state / "api.rc").exists():
        time.sleep(0.5)
    time.sleep(2)
    p.terminate()
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 143, out
    d = json.loads((tmp / "b" / "overlay" / "anchors.json").read_text())
    assert d["build"]["final"] is True and "stopped" in out
    assert d["fa3"]["kernels_built"] == []
    assert all(d["fa3"]["files"][k]["status"] in ("stopped", "not started") for k in DEFAULT)
    assert "build was stopped" in d["fa3"]["kernels_missing_reason"]["128_bf16"]
    # the compiles were ended with it (their sleeps are in the fake nvcc's process group)
    groups = [int((state / f"{k}.pid").read_text()) for k in DEFAULT if (state / f"{k}.pid").exists()]
    assert groups

    def alive(g: int) -> bool:
        try:
            os.killpg(g, 0)
        except ProcessLookupError:
            return False
        return True
    deadline = time.time() + 30  # timeout passes the signal on and exits once its compiler has
    while time.time() < deadline and any(alive(g) for g in groups):
        time.sleep(0.5)
    left = [g for g in groups if alive(g)]
    for g in left:
        os.killpg(g, 9)
    assert not left
