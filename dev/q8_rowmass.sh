#!/usr/bin/env bash
# The 8-bit path's row mass (V = ones) on the device (dev/NOTES_8bit.md, "V = ones under row-sum mode 0"):
#   1. dev/q8_rowmass.py: the kv_lens case over DRAWS fresh draws, schedule 1 + conversion 2 and the default, bf16
#      against the old constant 2e-2 and row_mass_bound, fp16 row by row against the CPU model (q8_emulate.py).
#   2. RUNS invocations of the GPU tests that check V = ones (fresh seeds each), their ROWMASS lines (one per check:
#      seed, mode, schedule, dtype, max |o - 1|, its ratio to the bound) pooled into a table.
# Usage (repository root, library built): bash dev/q8_rowmass.sh OUTDIR [RUNS=15] [DRAWS=300]   (~4-5 min)
set -u
D=${1:?usage: q8_rowmass.sh OUTDIR [RUNS] [DRAWS]}
RUNS=${2:-15}
DRAWS=${3:-300}
mkdir -p "$D"
timeout 240 python3 dev/q8_rowmass.py --draws "$DRAWS" --out "$D" > "$D/q8_rowmass.log" 2>&1
echo "q8_rowmass.py rc=$?"
for i in $(seq 1 "$RUNS"); do
  timeout 90 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/test_8bit_gpu.py \
    -k "score_conversions or turn_schedules or row_mass or long_rows or row_sum_modes" > "$D/pytest_$i.log" 2>&1
  echo "pytest run $i rc=$? $(tail -1 "$D/pytest_$i.log")"
done | tee "$D/pytest_runs.txt"
grep -ah "^ROWMASS" "$D"/pytest_*.log > "$D/rowmass_lines.txt"
grep -ah "^FAILED\|^E  .*AssertionError" "$D"/pytest_*.log | head -8
python3 - "$D/rowmass_lines.txt" <<'EOF'
import re, sys
from collections import defaultdict
rows = defaultdict(list)
for line in open(sys.argv[1]):
    m = re.search(r"mode (\d) seq (-?\d) cvt (\d) (\w+) \(([\d, ]+)\)x(\d+) max_err ([\d.e+-]+) max_err/bound ([\d.]+)", line)
    if m:
        rows[(m[1], m[2], m[3], m[4], m[5].replace(" ", ""), m[6])].append((float(m[7]), float(m[8])))
print(f"\nROWMASS checks pooled over the pytest runs (ratio = max |o - 1| / row_mass_bound; > 1 fails)")
print(f"{'mode seq cvt dtype  q shape x keys':44s} {'n':>3s} {'max err':>9s} {'ratio median':>12s} {'ratio max':>9s}")
for key in sorted(rows):
    v = rows[key]
    r = sorted(x[1] for x in v)
    print(f"{' '.join(key[:4]):20s} {key[4] + 'x' + key[5]:23s} {len(v):3d} {max(x[0] for x in v):9.4f} "
          f"{r[len(r) // 2]:12.3f} {r[-1]:9.3f}")
EOF
echo
tail -n 5 "$D/q8_rowmass.log"
