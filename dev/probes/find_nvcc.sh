# Sourced by the probes that compile csrc/ themselves (timeline_d256.sh, timeline_sparse.sh): NVCC is the nvcc that
# vidattn/_ext.py's find_nvcc picks, looked for in its order (CUDA_HOME, CUDA_PATH, /usr/local/cuda, then PATH);
# empty when there is none. Kept in shell so that no torch import precedes a build.
NVCC=""
for c in "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "${CUDA_PATH:+$CUDA_PATH/bin/nvcc}" /usr/local/cuda/bin/nvcc "$(command -v nvcc)"; do
  [[ -n $c && -x $c ]] && { NVCC=$c; break; }
done
