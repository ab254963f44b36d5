#!/bin/bash
# Compile the anchors (FlashAttention-3's forward kernels, SageAttention2's sm90 and fused modules) on the GPU
# machine, from the pack's src.tar.xz (dev/anchors/pack.sh), against the torch installed there; no network needed.
# Writes the overlay that dev/device_anchors.sh install adds to the unpacked Python packages:
#   /tmp/anchors_build/overlay/site/flash_attn_3/_C.abi3.so, site/sageattention/_qattn_sm90*.so, _fused*.so
#   /tmp/anchors_build/overlay/anchors.json   the pack's description + what was built, what is missing and why
#
#   KTIMEOUT=400 bash dev/anchors/device_build.sh > build.log 2>&1      # the default kernel set
#   FA3_KERNELS=all ...                          # adds the optional e4m3 kernels (or a list: "96_e4m3 256_e4m3")
#   bash dev/anchors/device_build.sh --dry-run   # print every compile and link command, run nothing
#   bash dev/anchors/device_build.sh --list      # the files it would compile, one a line
#   ... --only api,sched,fused_cu,fused_py       # compile only these (checking the recipe on a small machine)
#
# Every file compiles at once (JOBS, default the core count) at a low priority (nice), each under
# `timeout $KTIMEOUT`. As each finishes, flash_attn_3._C is relinked from the kernels done plus stand-ins that
# raise "this FlashAttention-3 anchor build has no hdim… kernel" for the rest, and anchors.json is rewritten, so the
# overlay is usable at any moment; SIGTERM stops the compiles and writes the final description.
# Environment: VIDATTN_ANCHORS_PACK (default <repo>/.anchors), ANCHORS_BUILD_DIR (default /tmp/anchors_build),
# VIDATTN_ANCHORS_OVERLAY (default $ANCHORS_BUILD_DIR/overlay), CUDA_HOME, CXX, PYTHON, JOBS, NICE.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

MODE=build ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) MODE=dry; shift ;;
    --list) MODE=list; shift ;;
    --only) ONLY=",$2,"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "device_build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

PACK=${VIDATTN_ANCHORS_PACK:-$ROOT/.anchors}
B=${ANCHORS_BUILD_DIR:-/tmp/anchors_build}
OVERLAY=${VIDATTN_ANCHORS_OVERLAY:-$B/overlay}
SITE=$OVERLAY/site
SRC=$B/src OBJ=$B/obj LOGS=$B/logs STATE=$B/state
KTIMEOUT=${KTIMEOUT:-400}
JOBS=${JOBS:-$(nproc)}
NICE=${NICE:-19}
PY=${PYTHON:-python3}
CXX=${CXX:-c++}
META="$PY $HERE/anchors_meta.py"

# --- which FA3 kernels: the default set, plus FA3_KERNELS (all = every optional one) ---
requested=($FA3_KERNELS_DEFAULT)
for k in ${FA3_KERNELS:-}; do
  if [ "$k" = all ]; then requested+=($FA3_KERNELS_OPTIONAL); continue; fi
  case " $FA3_KERNELS_DEFAULT $FA3_KERNELS_OPTIONAL " in
    *" $k "*) requested+=("$k") ;;
    *) echo "device_build.sh: FA3_KERNELS names $k; known: $FA3_KERNELS_DEFAULT $FA3_KERNELS_OPTIONAL" >&2; exit 2 ;;
  esac
done
mapfile -t requested < <(printf '%s\n' "${requested[@]}" | awk '!seen[$0]++')
selected() { [ -z "$ONLY" ] || [[ $ONLY == *",$1,"* ]]; }
kernels=() unselected=()
for k in "${requested[@]}"; do if selected "$k"; then kernels+=("$k"); else unselected+=("$k"); fi; done
# Started in this order when JOBS is below the file count: the API first (seconds, and every link needs it), then
# the longest (FA3's kernels, about 100 s each on the GPU machine; SageAttention's sm90 kernel), the short ones last.
ITEMS=()
for i in api "${kernels[@]}" sm90_cu fused_cu sched sm90_py fused_py; do selected "$i" && ITEMS+=("$i"); done
for i in api sched sm90_cu fused_cu sm90_py fused_py; do selected "$i" || unselected+=("$i"); done

# --- toolchain: nvcc of CUDA_HOME (as FA3's and SageAttention's setups use), torch's paths and flags ---
if [ -z "${CUDA_HOME:-}" ]; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then CUDA_HOME=/usr/local/cuda
  else CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"); fi
fi
NVCC=$CUDA_HOME/bin/nvcc
# CUDA 13 moved CCCL's headers (cuda/std, cub) under include/cccl; nvcc finds them, the host compiler does not.
# FA3's setup puts that folder on CPLUS_INCLUDE_PATH for CUDA >= 13; so does this.
if [ -d "$CUDA_HOME/include/cccl" ]; then
  export CPLUS_INCLUDE_PATH="$CUDA_HOME/include/cccl${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
  export C_INCLUDE_PATH="$CUDA_HOME/include/cccl${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}"
fi
# torch's include and library folders, C++ ABI, torch's default nvcc flags (which its extension builder puts before
# the project's own), the Python headers and the extension suffix. Without torch (a dry run on a bare machine) the
# placeholders say what goes there.
TORCHQ=$(CUDA_HOME=$CUDA_HOME "$PY" - <<'PYEOF' 2>/dev/null || true
import shlex, sysconfig, warnings
warnings.simplefilter("ignore")
import torch, torch.utils.cpp_extension as ce
try:  # torch's own; CUDA_HOME/include is added below
    inc, lib = ce.include_paths(device_type="cpu"), ce.library_paths(device_type="cpu")[0]
except TypeError:  # torch 2.5 and older: a cuda flag, not a device type
    inc, lib = ce.include_paths(cuda=False), ce.library_paths(cuda=False)[0]
try:
    pybind = ce._get_pybind11_abi_build_flags()
except Exception:
    pybind = []
print("TORCH_INC=(" + " ".join(shlex.quote("-I" + p) for p in inc) + ")")
print("TORCH_LIB=" + shlex.quote(lib))
print("ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
print("COMMON_NVCC=(" + " ".join(shlex.quote(f) for f in ce.COMMON_NVCC_FLAGS) + ")")
print("PYBIND=(" + " ".join(shlex.quote(f) for f in pybind) + ")")
print("PY_INC=" + shlex.quote(sysconfig.get_paths()["include"]))
# The CUDA libraries' headers that torch's CUDA wheels install (nvidia/<lib>/include, nvidia/cu13/include): torch's
# ATen/cuda headers include cusparse.h and cublas_v2.h, which a toolkit without those libraries lacks. They go after
# CUDA_HOME/include, so they only fill in what the toolkit does not have.
import glob, os
nv = []
for sp in {os.path.dirname(os.path.dirname(torch.__file__))}:
    nv += sorted(d for d in glob.glob(os.path.join(sp, "nvidia", "*", "include")) if os.path.isdir(d))
extra = [os.environ["CUDA_INC_PATH"]] if os.environ.get("CUDA_INC_PATH") else []
print("NV_INC=(" + " ".join(shlex.quote("-I" + p) for p in extra + nv) + ")")
print("EXT_SUFFIX=" + shlex.quote(sysconfig.get_config_var("EXT_SUFFIX")))
PYEOF
)
if [ -n "$TORCHQ" ]; then eval "$TORCHQ"
else
  [ "$MODE" = build ] && { echo "device_build.sh: $PY cannot import torch" >&2; exit 1; }
  TORCH_INC=(-I'<torch include dirs>') TORCH_LIB='<torch lib>' ABI=1 COMMON_NVCC=('<torch COMMON_NVCC_FLAGS>')
  PYBIND=() PY_INC='<python include>' EXT_SUFFIX='.cpython-312-x86_64-linux-gnu.so' NV_INC=()
fi
SYS_INC=("${TORCH_INC[@]}" "-I$CUDA_HOME/include" "${NV_INC[@]}" "-I$PY_INC")
TORCH_DEFS=(-DTORCH_API_INCLUDE_EXTENSION_H "-D_GLIBCXX_USE_CXX11_ABI=$ABI" "${PYBIND[@]}")
ARCH=(-gencode arch=compute_90a,code=sm_90a)  # sm_90a only: the wgmma kernels need the 'a' target

# FA3's nvcc flags for its kernels (hopper/setup.py: nvcc_flags + nvcc_threads_args + cc_flag + feature_args).
FA3_NVCC=(--threads 2 -O3 -std=c++17 --ftemplate-backtrace-limit=0 --use_fast_math --resource-usage -lineinfo
  -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90 -DCUTLASS_DEBUG_TRACE_LEVEL=0 -DNDEBUG
  "${ARCH[@]}" "${FA3_FEATURE_FLAGS[@]}")
# FA3's host flags for its API file: the stable ABI (torch >= 2.9), limited Python API, the same switches.
FA3_CXX=(-O3 -std=c++17 -DPy_LIMITED_API=0x03090000 -DTORCH_TARGET_VERSION=0x0209000000000000
  "${FA3_FEATURE_FLAGS[@]}")
FA3_INC=("-I$SRC/fa3/hopper" "-I$SRC/fa3/csrc/cutlass/include")
# SageAttention's setup.py flags (CXX_FLAGS, NVCC_FLAGS), with sm_90a as the only target. Its -lgomp among the
# compile flags only matters to a link, and neither module uses OpenMP at link time; it is left out.
SAGE_NVCC=(-O3 -std=c++17 -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__ --use_fast_math --threads=8
  -Xptxas=-v -diag-suppress=174 "-D_GLIBCXX_USE_CXX11_ABI=$ABI" "${ARCH[@]}")
SAGE_CXX=(-g -O3 -fopenmp -std=c++17 -DENABLE_BF16 "-D_GLIBCXX_USE_CXX11_ABI=$ABI")

# The compile command of one item, into the array CMD.
compile_cmd() {
  local n=$1
  case "$n" in
    api) CMD=("$CXX" "${FA3_INC[@]}" "${SYS_INC[@]}" -c "$SRC/fa3/hopper/$FA3_API_FILE" -o "$OBJ/api.o" -fPIC
           "${FA3_CXX[@]}" -DTORCH_EXTENSION_NAME=_C "${TORCH_DEFS[@]}") ;;
    sched) CMD=("$NVCC" "${FA3_INC[@]}" "${SYS_INC[@]}" -c "$SRC/fa3/hopper/$FA3_SCHED_FILE" -o "$OBJ/sched.o"
             "${COMMON_NVCC[@]}" --compiler-options -fPIC "${FA3_NVCC[@]}" -DTORCH_EXTENSION_NAME=_C
             "${TORCH_DEFS[@]}") ;;
    sm90_cu|fused_cu)
      local f=$SAGE_SM90_CU m=_qattn_sm90
      [ "$n" = fused_cu ] && f=$SAGE_FUSED_CU m=_fused
      CMD=("$NVCC" "${SYS_INC[@]}" -c "$SRC/sage2/$f" -o "$OBJ/$n.o" "${COMMON_NVCC[@]}" --compiler-options -fPIC
           "${SAGE_NVCC[@]}" "-DTORCH_EXTENSION_NAME=$m" "${TORCH_DEFS[@]}") ;;
    sm90_py|fused_py)
      local f=$SAGE_SM90_PY m=_qattn_sm90
      [ "$n" = fused_py ] && f=$SAGE_FUSED_PY m=_fused
      CMD=("$CXX" "${SYS_INC[@]}" -c "$SRC/sage2/$f" -o "$OBJ/$n.o" -fPIC "${SAGE_CXX[@]}"
           "-DTORCH_EXTENSION_NAME=$m" "${TORCH_DEFS[@]}") ;;
    *) CMD=("$NVCC" "${FA3_INC[@]}" "${SYS_INC[@]}" -c "$SRC/fa3/hopper/$(fa3_kernel_file "$n")" -o "$OBJ/$n.o"
         "${COMMON_NVCC[@]}" --compiler-options -fPIC "${FA3_NVCC[@]}" -DTORCH_EXTENSION_NAME=_C
         "${TORCH_DEFS[@]}") ;;
  esac
}

# The torch libraries an extension links (as torch's CUDAExtension does; FA3's limited-API module without
# torch_python). Those absent (a CPU-only torch, where only the recipe is being checked) are skipped.
torch_libs() {  # with_python
  local l out=("-L$TORCH_LIB")
  for l in c10 torch torch_cpu $([ "$1" = 1 ] && echo torch_python) c10_cuda torch_cuda; do
    [ -e "$TORCH_LIB/lib$l.so" ] || [ "$MODE" != build ] && out+=("-l$l")
  done
  printf '%s\n' "${out[@]}" "-L$CUDA_HOME/lib64" -lcudart
}

if [ "$MODE" != build ]; then
  for i in "${ITEMS[@]}"; do
    if [ "$MODE" = list ]; then echo "$i"; continue; fi
    compile_cmd "$i"
    printf '%s: nice -n %s timeout -k 10 %s ' "$i" "$NICE" "$KTIMEOUT"; printf '%q ' "${CMD[@]}"; echo
  done
  if [ "$MODE" = dry ]; then
    mapfile -t L0 < <(torch_libs 0); mapfile -t L1 < <(torch_libs 1)
    printf 'link flash_attn_3: '
    printf '%q ' "$CXX" -shared -o "$SITE/flash_attn_3/_C.abi3.so" "$OBJ/api.o" "$OBJ/sched.o" '<kernel objects>' \
      "$OBJ/standins.o" "${L0[@]}"; echo
    printf 'link sageattention: '; printf '%q ' "$CXX" -shared -o "$SITE/sageattention/_qattn_sm90$EXT_SUFFIX" \
      "$OBJ/sm90_py.o" "$OBJ/sm90_cu.o" "${L1[@]}" -lcuda; echo
    echo "not requested: $(for k in $FA3_KERNELS_DEFAULT $FA3_KERNELS_OPTIONAL; do
      [[ " ${requested[*]} " == *" $k "* ]] || printf '%s ' "$k"; done)"
  fi
  exit 0
fi

# --- the build ---
[ -f "$PACK/src.tar.xz" ] || { echo "device_build.sh: no $PACK/src.tar.xz (make it with dev/anchors/pack.sh)" >&2; exit 1; }
T0=$(date +%s.%N)
rm -rf "$SRC" "$OBJ" "$LOGS" "$STATE" "$OVERLAY"
mkdir -p "$SRC" "$OBJ" "$LOGS" "$STATE" "$SITE/flash_attn_3" "$SITE/sageattention"
untar() {  # tar's xz filter needs the xz program; Python's tarfile reads xz without it
  if command -v xz >/dev/null 2>&1; then tar -xJf "$1" -C "$2"
  else "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"; fi
}
untar "$PACK/src.tar.xz" "$SRC"
[ -f "$PACK/anchors.json" ] && cp "$PACK/anchors.json" "$STATE/pack.json"
COMPILER=$("$NVCC" --version | grep -m1 '^Cuda compilation tools' || true)
"$PY" - "$CXX" > "$STATE/built_against.json" <<'PYEOF'
import json, platform, subprocess, sys, torch
cxx = subprocess.run([sys.argv[1], "--version"], capture_output=True, text=True).stdout.splitlines()
print(json.dumps({"torch": torch.__version__, "torch_cuda": torch.version.cuda, "python": platform.python_version(),
                  "cxx": cxx[0] if cxx else sys.argv[1]}))
PYEOF
echo "device_build.sh: ${#ITEMS[@]} files (${ITEMS[*]}), $JOBS at a time, KTIMEOUT=$KTIMEOUT s, $COMPILER"

write_json() {  # final(0/1) [import check]
  $META build-json --pack-json "$STATE/pack.json" --state "$STATE" --site "$SITE" --logs "$LOGS" --t0 "$T0" \
    --final "$1" --ktimeout "$KTIMEOUT" --jobs "$JOBS" --requested "${kernels[*]}" --only "${unselected[*]}" \
    --compiler "$COMPILER" --built-against "$STATE/built_against.json" --ext-suffix "$EXT_SUFFIX" ${2:+--import-check "$2"} \
    --reasons-out "$STATE/reasons.json" > "$OVERLAY/anchors.json.tmp"
  mv "$OVERLAY/anchors.json.tmp" "$OVERLAY/anchors.json"
}
ok() { [ "$(cat "$STATE/$1.rc" 2>/dev/null)" = 0 ]; }
# Always succeeds (an assignment from a failing command substitution would end the script under set -e).
sched_obj() { if ok sched; then echo "$OBJ/sched.o"; fi; }

FA3_LINKED=""  # the kernel set of the last link, so an unchanged set is not relinked
link_fa3() {
  ok api || return 0
  local done_k=() objs=("$OBJ/api.o") k
  if ok sched; then objs+=("$OBJ/sched.o"); fi
  for k in "${kernels[@]}"; do if ok "$k"; then done_k+=("$k"); objs+=("$OBJ/$k.o"); fi; done
  local sig
  sig="$(sched_obj) ${done_k[*]}"
  if [ "$FA3_LINKED" = "$sig" ]; then return 0; fi
  write_json 0  # for the stand-ins' reasons
  # What the API and scheduler objects call, less what the compiled objects define: the stand-ins' symbols.
  nm --undefined-only --format=just-symbols "$OBJ/api.o" $(sched_obj) > "$STATE/needed.txt"
  nm --defined-only --format=just-symbols "${objs[@]:1}" /dev/null 2>/dev/null > "$STATE/defined.txt" || true
  $META standins --needed "$STATE/needed.txt" --defined "$STATE/defined.txt" --reasons "$STATE/reasons.json" \
    --names-out "$STATE/standins.txt" > "$OBJ/standins.cpp"
  "$CXX" -c -fPIC -O1 "$OBJ/standins.cpp" -o "$OBJ/standins.o"
  mapfile -t libs < <(torch_libs 0)
  local so=$SITE/flash_attn_3/_C.abi3.so
  # Linked under a temporary name and moved: an install copying the overlay meanwhile never sees half a file.
  if "$CXX" -shared -o "$so.tmp" "${objs[@]}" "$OBJ/standins.o" "${libs[@]}" >> "$LOGS/link_fa3.log" 2>&1; then
    mv "$so.tmp" "$so"
    printf '%s\n' "${done_k[@]}" > "$STATE/fa3_linked"
    FA3_LINKED=$sig
    echo "device_build.sh: linked flash_attn_3._C: ${done_k[*]:-no kernel}; stand-ins: $(tr '\n' ' ' < "$STATE/standins.txt")"
  else
    echo "device_build.sh: linking flash_attn_3._C failed ($LOGS/link_fa3.log)"
  fi
}

# SageAttention's sm90 module calls the CUDA driver (cuTensorMapEncodeTiled...): its setup links -lcuda. The
# toolkit's link stub serves; without one, a stand-in libcuda.so.1 naming the functions the objects call is generated
# to link against, and the real driver provides them when the module loads.
libcuda_flags() {
  local d
  for d in "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs"; do
    [ -e "$d/libcuda.so" ] && { printf '%s\n' "-L$d" -lcuda; return; }
  done
  mkdir -p "$B/cudastub"
  { nm --undefined-only --format=just-symbols "$@" | grep -E '^cu[A-Z]' || true; } | sort -u \
    | sed 's/.*/void &(void) {}/' > "$B/cudastub/cuda_stub.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$B/cudastub/libcuda.so" "$B/cudastub/cuda_stub.c"
  printf '%s\n' "-L$B/cudastub" -lcuda
}
link_sage() {  # module, python-binding item, kernel item
  local m=$1 so
  so=$SITE/sageattention/$1$EXT_SUFFIX
  [ -f "$STATE/${m}_linked" ] && return 0
  ok "$2" && ok "$3" || return 0
  mapfile -t libs < <(torch_libs 1)
  [ "$m" = _qattn_sm90 ] && mapfile -t -O "${#libs[@]}" libs < <(libcuda_flags "$OBJ/$2.o" "$OBJ/$3.o")
  if "$CXX" -shared -o "$so.tmp" "$OBJ/$2.o" "$OBJ/$3.o" "${libs[@]}" >> "$LOGS/link$m.log" 2>&1; then
    mv "$so.tmp" "$so"; touch "$STATE/${m}_linked"
    echo "device_build.sh: linked sageattention.$m"
  else
    echo "device_build.sh: linking sageattention.$m failed ($LOGS/link$m.log)"
  fi
}
relink() { link_fa3; link_sage _qattn_sm90 sm90_py sm90_cu; link_sage _fused fused_py fused_cu; write_json 0; }

# Both packs unpacked beside the overlay, imported in a fresh process: Python binds every symbol of an extension when
# it loads, so a missing one (an ABI mismatch with this torch) shows here, not in the benchmark.
import_check() {
  local chk=$B/check_site p
  rm -rf "$chk"; mkdir -p "$chk"
  for p in "$PACK/fa3.tar.xz" "$PACK/sage2.tar.xz"; do [ -f "$p" ] && untar "$p" "$chk"; done
  cp -r "$SITE/." "$chk/"
  PYTHONPATH="$chk" "$PY" - <<'PYEOF' 2>/dev/null | tail -1 || echo "import check could not run"
import warnings
warnings.simplefilter("ignore")
out = []
try:
    import torch, flash_attn_interface  # noqa: F401
    out.append("fa3: import ok; torch.ops.flash_attn_3.fwd " + ("registered" if hasattr(torch.ops.flash_attn_3, "fwd") else "MISSING"))
except Exception as e:
    out.append(f"fa3: {type(e).__name__}: {e}".replace("\n", " ")[:300])
try:
    from sageattention import core
    out.append(f"sage2: import ok; SM90_ENABLED={core.SM90_ENABLED}")
except Exception as e:
    out.append(f"sage2: {type(e).__name__}: {e}".replace("\n", " ")[:300])
print("; ".join(out))
PYEOF
}

declare -A PIDS=()  # pid -> item, of the compiles running
finish() {  # final description, after the compiles ended or were stopped
  relink
  local chk
  chk=$(import_check)
  write_json 1 "$chk"
  echo "device_build.sh: done in $(( $(date +%s) - ${T0%.*} )) s; $chk"
  local linked=""  # (none when --only left FA3 out: not a failure, which the ERR trap would report)
  [ -f "$STATE/fa3_linked" ] && linked=$(tr '\n' ' ' < "$STATE/fa3_linked")
  echo "device_build.sh: FA3 kernels built: $linked; overlay $OVERLAY"
}
on_stop() {
  trap - TERM INT
  local p
  # Each job's recording subshell first, then its compiler's group: the other order let a subshell whose compiler had
  # just been killed write rc 143 ("failed") before its own kill arrived, on a loaded machine (a CI run).
  for p in "${!PIDS[@]}"; do
    kill -- "-$p" 2>/dev/null || true
    kill -- "-$(cat "$STATE/${PIDS[$p]}.pid" 2>/dev/null)" 2>/dev/null || true
  done
  echo "device_build.sh: stopped; writing what was built"
  finish
  exit 143
}
trap on_stop TERM INT
# An unexpected failure of the script itself (not of a compile, which is recorded) would leave the compiles running
# without anyone to link them: say where, and end them.
on_error() {
  trap - ERR
  echo "device_build.sh: failed at line $1; ending the compiles" >&2
  local p
  for p in "${!PIDS[@]}"; do
    kill -- "-$(cat "$STATE/${PIDS[$p]}.pid" 2>/dev/null)" 2>/dev/null || true
    kill -- "-$p" 2>/dev/null || true
  done
}
set -E  # the ERR trap in functions too
trap 'on_error $LINENO' ERR
set -m  # each compile job in its own process group (the job's subshell, then timeout's group inside it)

start() {
  local n=$1
  compile_cmd "$n"
  (
    set +e
    trap - ERR  # a failing compile is recorded, not an error of the script
    date +%s.%N > "$STATE/$n.start"
    # timeout puts itself and the compiler in a process group of their own (so a timeout ends ptxas and cicc too);
    # its pid, which is that group's, lets a stop end them as well.
    nice -n "$NICE" timeout -k 10 "$KTIMEOUT" "${CMD[@]}" &
    echo $! > "$STATE/$n.pid"
    wait $!
    rc=$?
    date +%s.%N > "$STATE/$n.end"
    echo "$rc" > "$STATE/$n.rc"  # last: its presence means the file is done
  ) > "$LOGS/$n.log" 2>&1 &
  PIDS[$!]=$n
}
write_json 0
next=0
while [ "$next" -lt "${#ITEMS[@]}" ] || [ "${#PIDS[@]}" -gt 0 ]; do
  while [ "$next" -lt "${#ITEMS[@]}" ] && [ "${#PIDS[@]}" -lt "$JOBS" ]; do start "${ITEMS[$next]}"; next=$((next + 1)); done
  wait -n || true
  for p in "${!PIDS[@]}"; do
    if ! kill -0 "$p" 2>/dev/null; then
      n=${PIDS[$p]}; unset "PIDS[$p]"
      echo "device_build.sh: $n rc=$(cat "$STATE/$n.rc" 2>/dev/null || echo '?') after $(( $(date +%s) - $(cut -d. -f1 "$STATE/$n.start") )) s"
    fi
  done
  relink
done
trap - TERM INT
finish
