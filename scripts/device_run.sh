#!/usr/bin/env bash
# The one script run on the H200: build the kernel, GPU tests, compute-sanitizer, kernel benchmark, end to end.
#
#   bash scripts/device_run.sh                      # default stages: build gpu-tests sanitizer bench e2e forward
#   bash scripts/device_run.sh build bench          # chosen stages, in the order given ("all" = the default set)
#   BENCH_ARGS="--quick --shapes Wan" bash scripts/device_run.sh build bench
#
# Stages: build, smoke (scripts/kernel_smoke.py; not in the default set), gpu-tests, sanitizer, bench, e2e, forward.
# Each runs under `timeout`, a failure does not stop the next one, and a summary table (stage, status, seconds)
# is printed last. The whole run keeps inside BUDGET_S seconds (default 580, for the 10-minute device call):
# a stage gets min(its limit, what is left), and a stage with under MIN_STAGE_S seconds left is skipped.
#
# Files under $OUT (at most 8 come back, so logs are grouped):
#   device_run.log  header, build, smoke, gpu-tests, sanitizer, summary
#   bench.log       bench stage;  kernel_<date>_<commit>.json  its results (commit them from here)
#   e2e.log         e2e and forward stages;  report.json report.md latency.png forward_report.json (if made)
#
# Environment (all optional):
#   OUT               where logs and results go (default ./out)
#   PYTHON            interpreter (default python3)
#   BUDGET_S          seconds for the whole script (default 580); MIN_STAGE_S (default 30)
#   T_BUILD T_SMOKE T_GPU_TESTS T_SANITIZER T_BENCH T_E2E T_FORWARD   per-stage limits in seconds
#   PYTEST_FLAGS      default "-x -q -rfEs --durations=15"; PYTEST_TIMEOUT per test (default 300)
#   PYTEST_PATHS      default "tests/" (e.g. "tests/test_kernel_gpu.py" for the kernel suite alone)
#   SANITIZER_TOOLS   default "memcheck racecheck"
#   BENCH_ARGS        extra arguments for scripts/bench_kernel.py (e.g. "--quick", "--shapes seed")
#   E2E_ARGS          extra arguments for scripts/e2e_report.py; FORWARD_ARGS for its --forward-only run
#   VIDATTN_GIT_COMMIT  commit to record when the copied tree has no .git (the bench JSON name uses it)
#   COPY_LIB=1        also copy the built kernel library (.so) into $OUT (one more file of the 8)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
REPO=$PWD
PY=${PYTHON:-python3}
OUT=${OUT:-$REPO/out}
MAX_OUT_FILES=8

ALL_STAGES=(build smoke gpu-tests sanitizer bench e2e forward)
DEFAULT_STAGES=(build gpu-tests sanitizer bench e2e forward)
SKIPPED_RC=200  # a stage body exits with this when it has nothing to do (e.g. script missing)

# --------------------------------------------------------------------------------------------- stage bodies
# Each runs in its own `bash scripts/device_run.sh __stage NAME` process, so `timeout` can end it cleanly.

stage_build() {
    command -v nvcc >/dev/null && nvcc --version | tail -n 2
    "$PY" - <<'PYEOF'
import time
from pathlib import Path
import vidattn._ext as e
t = time.perf_counter()
path = Path(e.build(verbose=True))
print(f"kernel library: {path} (build() took {time.perf_counter() - t:.1f} s; cached builds return at once)")
log = path.with_suffix(".ptxas.log")
if log.is_file():
    print(f"--- {log.name} (registers, shared memory, spills):")
    print(log.read_text()[-8000:])
PYEOF
}

stage_smoke() {
    [[ -f scripts/kernel_smoke.py ]] || { echo "scripts/kernel_smoke.py missing"; return $SKIPPED_RC; }
    "$PY" scripts/kernel_smoke.py
}

stage_gpu_tests() {
    local extra=()
    if "$PY" -c "import pytest_timeout" 2>/dev/null; then
        extra+=("--timeout=${PYTEST_TIMEOUT:-300}")
    fi
    # shellcheck disable=SC2086  # PYTEST_FLAGS is a list of flags
    "$PY" -m pytest -m gpu -p no:cacheprovider ${PYTEST_FLAGS:--x -q -rfEs --durations=15} \
        ${extra[@]+"${extra[@]}"} ${PYTEST_PATHS:-tests/}
}

stage_sanitizer() {
    local cs
    cs=$(command -v compute-sanitizer || true)
    [[ -z $cs && -x /usr/local/cuda/bin/compute-sanitizer ]] && cs=/usr/local/cuda/bin/compute-sanitizer
    [[ -n $cs ]] || { echo "compute-sanitizer not found"; return 3; }
    local rc=0 tool
    for tool in ${SANITIZER_TOOLS:-memcheck racecheck}; do
        echo "-- compute-sanitizer --tool $tool"
        # No caching allocator: every tensor is its own cudaMalloc, so memcheck sees out-of-bounds accesses.
        if PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$cs" --tool "$tool" --error-exitcode 99 \
                "$PY" tests/sanitizer_cases.py; then
            echo "-- $tool: clean"
        else
            echo "-- $tool: FAILED (rc $?)"
            rc=1
        fi
    done
    return $rc
}

stage_bench() {
    # shellcheck disable=SC2086
    "$PY" scripts/bench_kernel.py --out "$OUT/" ${BENCH_ARGS:-}
}

stage_e2e() {
    [[ -f scripts/e2e_report.py ]] || { echo "scripts/e2e_report.py missing: skipped"; return $SKIPPED_RC; }
    # shellcheck disable=SC2086
    "$PY" scripts/e2e_report.py ${E2E_ARGS:-}
}

stage_forward() {
    [[ -f scripts/e2e_report.py ]] || { echo "scripts/e2e_report.py missing: skipped"; return $SKIPPED_RC; }
    if ! timeout 120 "$PY" scripts/e2e_report.py --help 2>&1 | grep -q -- "--forward-only"; then
        echo "scripts/e2e_report.py has no --forward-only option: skipped"
        return $SKIPPED_RC
    fi
    # shellcheck disable=SC2086
    "$PY" scripts/e2e_report.py --forward-only ${FORWARD_ARGS:-}
}

if [[ ${1:-} == __stage ]]; then
    fn="stage_${2//-/_}"
    "$fn"
    exit $?
fi

# ---------------------------------------------------------------------------------------------- arguments
STAGES=()
for a in "$@"; do
    case " ${ALL_STAGES[*]} all " in
        *" $a "*) ;;
        *) echo "unknown stage '$a'; stages: ${ALL_STAGES[*]} (or all)" >&2; exit 2 ;;
    esac
    if [[ $a == all ]]; then STAGES+=("${DEFAULT_STAGES[@]}"); else STAGES+=("$a"); fi
done
(( ${#STAGES[@]} )) || STAGES=("${DEFAULT_STAGES[@]}")

T0=$SECONDS
BUDGET_S=${BUDGET_S:-580}
MIN_STAGE_S=${MIN_STAGE_S:-30}
RESERVE_S=15   # kept back for timeout's kill grace and the summary
mkdir -p "$OUT"
MAIN_LOG=$OUT/device_run.log

log_of() {
    case $1 in
        bench) echo "$OUT/bench.log" ;;
        e2e | forward) echo "$OUT/e2e.log" ;;
        *) echo "$MAIN_LOG" ;;
    esac
}

limit_of() {
    case $1 in
        build) echo "${T_BUILD:-300}" ;;
        smoke) echo "${T_SMOKE:-120}" ;;
        gpu-tests) echo "${T_GPU_TESTS:-300}" ;;
        sanitizer) echo "${T_SANITIZER:-300}" ;;
        bench) echo "${T_BENCH:-420}" ;;
        e2e) echo "${T_E2E:-540}" ;;
        forward) echo "${T_FORWARD:-300}" ;;
    esac
}

# Copy into $OUT unless that would pass the number of files that come back.
copy_out() {
    local src=$1 dst=$OUT/$2 n
    [[ -f $src ]] || return 0
    [[ "$(realpath "$src")" == "$(realpath -m "$dst")" ]] && return 0
    n=$(find "$OUT" -type f | wc -l)
    if (( n >= MAX_OUT_FILES )); then
        echo "not copied to \$OUT (already $n files, $MAX_OUT_FILES come back): $src"
        return 0
    fi
    cp -f "$src" "$dst" && echo "copied $src -> $dst"
}

# Newest file named $2 written since marker $1, anywhere in the repo (outside .git) or $OUT.
newest_since() {
    find "$REPO" "$OUT" -type f -name "$2" -newer "$1" -not -path '*/.git/*' -printf '%T@ %p\n' 2>/dev/null \
        | sort -rn | head -n 1 | cut -d' ' -f2-
}

# ------------------------------------------------------------------------------------------- environment
export PYTHONUNBUFFERED=1 PIP_ROOT_USER_ACTION=ignore
export VIDATTN_CACHE_DIR=${VIDATTN_CACHE_DIR:-$REPO/.build}
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
if compgen -G ".whl/*.whl" >/dev/null; then
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl; then
        export PYTHONPATH=/tmp/site:$PYTHONPATH
    else
        echo "WARNING: installing the carried wheels (.whl/) failed; going on without them" | tee -a "$MAIN_LOG"
    fi
fi
if [[ -z ${VIDATTN_GIT_COMMIT:-} ]] && [[ -f .git_commit ]]; then
    VIDATTN_GIT_COMMIT=$(head -n 1 .git_commit)
fi
export VIDATTN_GIT_COMMIT=${VIDATTN_GIT_COMMIT:-}
export OUT PYTHON=$PY

{
    echo "== device_run $(date -u +%Y-%m-%dT%H:%M:%SZ) stages: ${STAGES[*]} budget ${BUDGET_S}s OUT=$OUT"
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used,memory.total \
        --format=csv 2>/dev/null
    "$PY" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__,
'| CUDA', torch.version.cuda, '| cuDNN', torch.backends.cudnn.version(),
'| GPU', torch.cuda.get_device_name() if torch.cuda.is_available() else None)"
    echo "PYTHONPATH=$PYTHONPATH VIDATTN_CACHE_DIR=$VIDATTN_CACHE_DIR commit=${VIDATTN_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
} 2>&1 | tee -a "$MAIN_LOG"

# ------------------------------------------------------------------------------------------------ stages
NAMES=()
STATUSES=()
SECS=()
FAILED=0

run_stage() {
    local name=$1 log limit left t rc dt st
    log=$(log_of "$name")
    limit=$(limit_of "$name")
    left=$(( BUDGET_S - (SECONDS - T0) - RESERVE_S ))
    if (( left < MIN_STAGE_S )); then
        echo "== [$name] skipped: ${left}s left of BUDGET_S=${BUDGET_S}s" | tee -a "$log"
        NAMES+=("$name"); STATUSES+=("skipped(budget)"); SECS+=(0)
        return
    fi
    (( limit > left )) && limit=$left
    echo "== [$name] start $(date -u +%H:%M:%S), limit ${limit}s" | tee -a "$log"
    t=$SECONDS
    timeout -k 10 "$limit" bash "$REPO/scripts/device_run.sh" __stage "$name" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    dt=$(( SECONDS - t ))
    if (( rc == 0 )); then st=pass
    elif (( rc == SKIPPED_RC )); then st=skipped
    elif (( rc == 124 || rc == 137 )); then st="TIMEOUT(${limit}s)"; FAILED=1
    else st="FAIL(rc=$rc)"; FAILED=1
    fi
    echo "== [$name] $st in ${dt}s" | tee -a "$log"
    NAMES+=("$name"); STATUSES+=("$st"); SECS+=("$dt")
}

for stage in "${STAGES[@]}"; do
    marker=$(mktemp)
    run_stage "$stage"
    case $stage in
        e2e)
            for f in report.json report.md latency.png; do
                copy_out "$(newest_since "$marker" "$f")" "$f" | tee -a "$(log_of e2e)"
            done ;;
        forward)
            for f in report.json report.md; do
                copy_out "$(newest_since "$marker" "$f")" "forward_$f" | tee -a "$(log_of e2e)"
            done ;;
        build)
            if [[ ${COPY_LIB:-0} == 1 ]]; then
                lib=$(find "$VIDATTN_CACHE_DIR" -maxdepth 1 -name 'libvidattn_sm90-*.so' -printf '%T@ %p\n' 2>/dev/null \
                      | sort -rn | head -n 1 | cut -d' ' -f2-)
                [[ -n $lib ]] && copy_out "$lib" "$(basename "$lib")" | tee -a "$MAIN_LOG"
            fi ;;
    esac
    rm -f "$marker"
done

# ------------------------------------------------------------------------------------------------ summary
{
    echo
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used --format=csv,noheader 2>/dev/null \
        | sed 's/^/GPU after: /'
    echo "== summary ($(( SECONDS - T0 ))s of ${BUDGET_S}s)"
    printf '%-10s %-18s %7s\n' stage status seconds
    for i in "${!NAMES[@]}"; do
        printf '%-10s %-18s %7s\n' "${NAMES[$i]}" "${STATUSES[$i]}" "${SECS[$i]}"
    done
    if [[ " ${STAGES[*]} " == *" bench "* && -f $OUT/bench.log ]]; then
        echo "== bench table (TFLOPS; from bench.log)"
        grep -E '^\|' "$OUT/bench.log" | tail -n 14
    fi
    n=$(find "$OUT" -type f | wc -l)
    echo "files in \$OUT: $n (at most $MAX_OUT_FILES come back)"
    find "$OUT" -type f -printf '  %P %s bytes\n' | sort
} 2>&1 | tee -a "$MAIN_LOG"
exit $FAILED
