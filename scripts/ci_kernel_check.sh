#!/usr/bin/env bash
# Compiles the kernel library for sm_90a with the machine's nvcc (no GPU needed) and fails if ptxas reports a
# register spill or a stack frame in any kernel: in the hot loop either one means local-memory traffic.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [ ! -x "$NVCC" ]; then
  echo "ci_kernel_check: nvcc not found" >&2
  exit 1
fi
log=$(mktemp)
out=$(mktemp --suffix=.so)
# Same flags as vidattn/_ext.py builds with (read from there, so the check cannot drift from the real build).
mapfile -t flags < <(python3 scripts/nvcc_flags.py)
t0=$(date +%s)
"$NVCC" "${flags[@]}" -I csrc csrc/capi.cu -o "$out" 2>"$log" || { cat "$log"; exit 1; }
echo "ci_kernel_check: built csrc/capi.cu for sm_90a in $(( $(date +%s) - t0 )) s with $("$NVCC" --version | tail -1)"
grep -E "Compiling entry|stack frame|registers" "$log" | sed 's/^/  /'
bad=$(grep -E "stack frame|spill" "$log" | grep -v -E "^\s*0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" || true)
if grep -q "C7508\|setmaxnreg.*ignored" "$log"; then
  echo "ci_kernel_check: ptxas ignored setmaxnreg"; grep -E "C7508|setmaxnreg" "$log"; exit 1
fi
kernels=$(grep -c "Compiling entry function" "$log" || true)
if [ "$kernels" -lt 6 ]; then echo "ci_kernel_check: expected >= 6 kernel instantiations, saw $kernels"; exit 1; fi
if [ -n "$bad" ]; then
  echo "ci_kernel_check: FAIL - spills or stack frames:"; echo "$bad"; exit 1
fi
echo "ci_kernel_check: OK - $kernels kernels, no spills, no stack frames"
rm -f "$log" "$out"
