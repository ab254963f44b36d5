#!/usr/bin/env bash
# The CPU test suite on the oldest torch releases and Python the package claims (pyproject.toml), and on the newest
# ones: a fresh venv per case, the package installed editable without its dependencies, the suite run with no kernel
# library (every call on SDPA).
#
#   bash dev/tools/torch_matrix.sh [VENV_ROOT]     # default /tmp/vidattn_torch_matrix; ~3 GB of wheels a case
#
# Cases: torch 2.5.1 and 2.6.0 on this Python (python3, or $PYTHON); torch 2.6.0 on Python 3.10 ($PYTHON310, or
# python3.10 on PATH) and torch 2.14.1 with diffusers on Python 3.13 ($PYTHON313, or python3.13), each skipped
# without its Python. diffusers 0.42 needs torch 2.6 (it calls torch.accelerator, which 2.5 lacks) and Python 3.11,
# so the 2.5.1 and Python 3.10 cases run without it: the tests that need it fail at its import, and the summary counts
# the failures that do not name it. PyPI's torch wheels are CUDA builds (their nvidia-* wheels come too); the suite
# uses the CPU only.
set -uo pipefail
root=${1:-/tmp/vidattn_torch_matrix}
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-python3}
py310=${PYTHON310:-$(command -v python3.10 || true)}
py313=${PYTHON313:-$(command -v python3.13 || true)}
media="imageio imageio-ffmpeg scikit-image matplotlib"  # the [diffusers] extra's other packages
cases=("torch2.5.1|$py|2.5.1|$media" "torch2.6.0|$py|2.6.0|diffusers==0.42.1 transformers accelerate $media")
[ -n "$py310" ] && cases+=("py3.10_torch2.6.0|$py310|2.6.0|$media")
[ -n "$py313" ] && cases+=("py3.13_torch2.14.1|$py313|2.14.1|diffusers==0.42.1 transformers accelerate $media")
mkdir -p "$root"
summary=()
for spec in "${cases[@]}"; do
  IFS='|' read -r name python ver extra <<< "$spec"
  venv="$root/$name"
  echo "== $name: $venv"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" || { summary+=("$name: venv failed"); continue; }
  # shellcheck disable=SC2086  # extra is a list of requirements
  "$venv/bin/pip" install -q "torch==$ver" numpy tqdm pytest "setuptools>=64" wheel $extra \
    || { summary+=("$name: install failed"); continue; }
  "$venv/bin/pip" install -q --no-deps -e "$repo" || { summary+=("$name: vidattn install failed"); continue; }
  log="$root/pytest_$name.log"
  (cd "$repo" && COLUMNS=300 VIDATTN_LIBRARY=/nonexistent "$venv/bin/python" -m pytest -q -p no:cacheprovider -rfE \
    > "$log" 2>&1)
  rc=$?
  total=$(tail -n 1 "$log")
  if [[ "$extra" != *diffusers* ]]; then
    other=$(grep -E '^(FAILED|ERROR) ' "$log" \
      | grep -v -c -E "No module named '(diffusers|transformers|tokenizers)'|SystemExit" || true)
    summary+=("$name (no diffusers): $total; failures that do not name a missing diffusers: $other (in $log)")
  else
    summary+=("$name: $total (rc $rc)")
  fi
done
echo
printf '%s\n' "${summary[@]}"
