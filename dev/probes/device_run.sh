#!/usr/bin/env bash
# The one script run on the H200: build the kernel, GPU tests, compute-sanitizer, kernel benchmark, end to end.
#
#   bash dev/probes/device_run.sh                      # default stages: build gpu-tests sanitizer bench e2e forward
#   bash dev/probes/device_run.sh build bench          # chosen stages, in the order given ("all" = the default set)
#   BENCH_ARGS="--quick --shapes Wan" bash dev/probes/device_run.sh build bench
#
# Stages: build, smoke (dev/probes/kernel_smoke.py; not in the default set), gpu-tests, sanitizer, bench, e2e, forward,
# cross-model (not in the default set: one forward-only report per video DiT family, then the cross-model table;
# it prints each family's estimated wall time first; see stage_cross_model).
# Each runs under `timeout`, a failure does not stop the next one, and a summary table (stage, status, seconds)
# is printed last. The whole run keeps inside BUDGET_S seconds (default 580, for the 10-minute device call):
# a stage gets min(its limit, what is left), and a stage with under MIN_STAGE_S seconds left is skipped.
#
# Files under $OUT (at most 8 come back, so logs are grouped):
#   device_run.log  header, build, smoke, gpu-tests, sanitizer, summary
#   bench.log       bench stage;  kernel_<date>_<commit>.json  its results (commit them from here)
#   e2e.log         e2e and forward stages;  report.json report.md latency.png forward_report.json (if made)
#   cross_model.log cross-model stage;  cross_model_reports.tar.gz (every family's report.json/.md/latency.png and
#                   the table, paths relative to the repo: `tar xzf ... -C <repo>`), cross_model_<date>.md/.json
#
# Environment (all optional):
#   OUT               where logs and results go (default ./out)
#   PYTHON            interpreter (default python3)
#   BUDGET_S          seconds for the whole script (default 580); MIN_STAGE_S (default 30)
#   T_BUILD T_SMOKE T_GPU_TESTS T_SANITIZER T_BENCH T_E2E T_FORWARD T_CROSS_MODEL   per-stage limits in seconds
#   PYTEST_FLAGS      default "-x -q -rfEs --durations=15"; PYTEST_TIMEOUT per test (default 300)
#   PYTEST_PATHS      default "tests/" (e.g. "tests/test_kernel_gpu.py" for the kernel suite alone)
#   SANITIZER_TOOLS   default "memcheck racecheck"
#   BENCH_ARGS        extra arguments for scripts/bench_kernel.py (e.g. "--quick", "--shapes seed")
#   E2E_ARGS          extra arguments for scripts/e2e_report.py; FORWARD_ARGS for its --forward-only run
#   CROSS_MODELS      cross-model families in run order, FAMILY or FAMILY:PRESET (default: all, cheapest first:
#                     ltx wan cogvideox skyreels_v2 hunyuan_video15 wan14b mochi allegro hunyuan_video)
#   CROSS_ARGS        extra arguments for every cross-model e2e_report.py run
#   VIDATTN_GIT_COMMIT  commit to record when the copied tree has no .git (the bench JSON name uses it)
#   COPY_LIB=1        also copy the built kernel library (.so) into $OUT (one more file of the 8)
#   OUT_FILE_LIMIT    files this script leaves in $OUT at most (default 8; device_ab_validate.sh bundles, so more)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
REPO=$PWD
PY=${PYTHON:-python3}
OUT=${OUT:-$REPO/out}
# The device tool returns at most 8 files from $OUT; a wrapper that bundles $OUT afterwards raises this.
MAX_OUT_FILES=${OUT_FILE_LIMIT:-8}

ALL_STAGES=(build smoke gpu-tests sanitizer bench e2e forward cross-model)
DEFAULT_STAGES=(build gpu-tests sanitizer bench e2e forward)
SKIPPED_RC=200  # a stage body exits with this when it has nothing to do (e.g. script missing)

# --------------------------------------------------------------------------------------------- stage bodies
# Each runs in its own `bash dev/probes/device_run.sh __stage NAME` process, so `timeout` can end it cleanly.

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
    [[ -f dev/probes/kernel_smoke.py ]] || { echo "dev/probes/kernel_smoke.py missing"; return $SKIPPED_RC; }
    "$PY" dev/probes/kernel_smoke.py
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

stage_cross_model() {
    # One forward-only report per family (scripts/e2e_report.py --model-family F --forward-only), each under its
    # own timeout (about 2x its estimate + 90 s, and never past what is left of this stage), then the table.
    # Families whose estimate does not fit in what is left are skipped (and said so): run them in a later call.
    # Estimated wall time on the H200 per family (python3 -m pipelines.families; build + both paths, warm-up,
    # timed and profiled forwards; estimates for budgeting, fitted to the measured Wan forwards):
    #   ltx 34s  wan 37s  cogvideox 62s  skyreels_v2 45s  hunyuan_video15 75s  wan14b 82s  mochi 120s
    #   allegro 133s  hunyuan_video 244s (720p, 118800 tokens)  -> about 830 s in all, plus ~15 s per call for
    # the plan and ~10 s for the table: three device calls back to back (the machine stays warm between them),
    # each well inside its 10 minutes (about 375 s, 280 s, 270 s):
    #   CROSS_MODELS="ltx wan cogvideox skyreels_v2 hunyuan_video15 wan14b" bash dev/probes/device_run.sh build cross-model
    #   CROSS_MODELS="mochi allegro" bash dev/probes/device_run.sh build cross-model
    #   CROSS_MODELS="hunyuan_video" bash dev/probes/device_run.sh build cross-model
    # then, here: unpack each call's cross_model_reports.tar.gz into the repo and run
    # `python3 scripts/cross_model_table.py --readme` for the table over all of them.
    [[ -f scripts/cross_model_table.py && -f pipelines/families.py ]] || { echo "cross-model scripts missing"; return $SKIPPED_RC; }
    local t0=$SECONDS stage_limit=${STAGE_LIMIT_S:-570} date plan fam preset tmo w i est left dir rc st
    local -a dirs=() summary=()
    date=$(date -u +%Y%m%d)
    echo "-- cross-model plan (H200 estimates from pipelines/families.py, for budgeting; not measurements):"
    # shellcheck disable=SC2086  # CROSS_MODELS is a list
    "$PY" -m pipelines.families --timeouts-file "$OUT/.cross_plan" ${CROSS_MODELS:-} | sed 's/^/   /'
    plan=$(cat "$OUT/.cross_plan" 2>/dev/null) && rm -f "$OUT/.cross_plan"
    [[ -n $plan ]] || { echo "pipelines.families failed: no plan"; return 1; }
    echo "-- stage limit ${stage_limit}s; the table and the tarball need about 20 s at the end"
    while read -r fam preset tmo w i est; do
        [[ -n $fam ]] || continue
        left=$(( stage_limit - (SECONDS - t0) - 30 ))
        if (( left < est )); then
            echo "-- [$fam:$preset] skipped: estimated ${est}s, ${left}s left in this stage (run it in another call: CROSS_MODELS=\"$fam:$preset\")"
            summary+=("$fam:$preset skipped(budget)")
            continue
        fi
        (( tmo > left )) && tmo=$left
        if [[ $preset == default ]]; then dir=bench/results/forward_${fam}_${date}; else dir=bench/results/forward_${fam}-${preset}_${date}; fi
        echo "-- [$fam:$preset] start $(date -u +%H:%M:%S), estimated ${est}s, timeout ${tmo}s -> $dir"
        local t=$SECONDS
        # shellcheck disable=SC2086
        timeout -k 10 "$tmo" "$PY" scripts/e2e_report.py --model-family "$fam" --preset "$preset" --forward-only \
            --warmup "$w" --iters "$i" --out-dir "$REPO/$dir" ${CROSS_ARGS:-} </dev/null
        rc=$?
        if (( rc == 0 )); then st=pass; elif (( rc == 124 || rc == 137 )); then st="TIMEOUT(${tmo}s)"; else st="FAIL(rc=$rc)"; fi
        echo "-- [$fam:$preset] $st in $(( SECONDS - t ))s (estimated ${est}s)"
        summary+=("$fam:$preset $st $(( SECONDS - t ))s est ${est}s")
        [[ -f $REPO/$dir/report.json ]] && dirs+=("$dir")
    done <<< "$plan"
    "$PY" scripts/cross_model_table.py --date "$date" || echo "cross_model_table.py failed (rc $?)"
    local files=()
    for d in ${dirs[@]+"${dirs[@]}"}; do
        for f in report.json report.md latency.png; do [[ -f $REPO/$d/$f ]] && files+=("$d/$f"); done
    done
    for f in bench/results/cross_model_"$date".md bench/results/cross_model_"$date".json; do
        [[ -f $REPO/$f ]] && files+=("$f")
    done
    if (( ${#files[@]} )); then
        tar czf "$OUT/cross_model_reports.tar.gz" -C "$REPO" "${files[@]}" && \
            echo "-- wrote \$OUT/cross_model_reports.tar.gz (${#files[@]} files; unpack with: tar xzf cross_model_reports.tar.gz -C <repo>)"
        for f in bench/results/cross_model_"$date".md bench/results/cross_model_"$date".json; do
            if [[ -f $REPO/$f ]] && (( $(find "$OUT" -type f | wc -l) < MAX_OUT_FILES )); then cp -f "$REPO/$f" "$OUT/"; fi
        done
    fi
    echo "-- cross-model summary (family:preset status seconds, estimate):"
    printf '   %s\n' ${summary[@]+"${summary[@]}"}
    local bad=0 s_
    for s_ in ${summary[@]+"${summary[@]}"}; do
        [[ $s_ == *" pass "* || $s_ == *"skipped(budget)"* ]] || bad=1
    done
    return $bad
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
        cross-model) echo "$OUT/cross_model.log" ;;
        *) echo "$MAIN_LOG" ;;
    esac
}

limit_of() {
    case $1 in
        build) echo "${T_BUILD:-540}" ;;
        smoke) echo "${T_SMOKE:-120}" ;;
        gpu-tests) echo "${T_GPU_TESTS:-300}" ;;
        sanitizer) echo "${T_SANITIZER:-300}" ;;
        bench) echo "${T_BENCH:-420}" ;;
        e2e) echo "${T_E2E:-540}" ;;
        forward) echo "${T_FORWARD:-300}" ;;
        cross-model) echo "${T_CROSS_MODEL:-570}" ;;
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
    STAGE_LIMIT_S=$limit timeout -k 10 "$limit" bash "$REPO/dev/probes/device_run.sh" __stage "$name" 2>&1 | tee -a "$log"
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
