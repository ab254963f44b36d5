#!/usr/bin/env bash
# Eighth session, device call 4 (as run): the shipped library under scripts/harness_probe.py on two shapes.
cd "$(dirname "$0")/../../../.." || exit 2
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_final.so
for s in wan14b_self seed16k; do
  timeout 200 python3 scripts/harness_probe.py --shape $s --rounds 5 --json $OUT/probe_$s.json 2>&1 | grep -v Warning
done
