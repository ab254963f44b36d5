# Shared by pack.sh and device_build.sh (sourced, not run): what the anchors are built from and which files of theirs
# the recipe compiles. Only commit hashes, file paths, kernel names and compiler flags are written here; no code of
# FlashAttention-3, CUTLASS or SageAttention is in this repository (docs/anchors.md).

# The commits last measured (bench/results/h200_2026-12-02_seventh/call_d/anchors.json). CUTLASS is not pinned here:
# pack.sh reads the submodule commit FA3 pins at FA3_COMMIT, so the two cannot drift apart.
FA3_COMMIT_DEFAULT=0251105a2fb19d2957484b7f023cd8c115286ced
SAGE_COMMIT_DEFAULT=d1a57a546c3d395b1ffcbeecc66d81db76f3b4b5

# FA3 forward kernels, <hdim>_<dtype>: the default set is what a target compares against (bf16 at every head dim,
# e4m3 at 64 and 128); FA3_KERNELS=all (or a list) adds the optional e4m3 ones.
FA3_KERNELS_DEFAULT="64_bf16 96_bf16 128_bf16 192_bf16 256_bf16 64_e4m3 128_e4m3"
FA3_KERNELS_OPTIONAL="96_e4m3 192_e4m3 256_e4m3"

# The feature switches: everything the anchors do not measure is compiled out, which also keeps FA3's API from
# referencing kernels (split, paged, softcap, pack-gqa, hdim-diff, fp16, sm80) that are never built. FA3's setup turns
# each on from a FLASH_ATTENTION_DISABLE_* environment variable; this recipe names them directly.
FA3_FEATURE_FLAGS=(
  -DFLASHATTENTION_DISABLE_BACKWARD -DFLASHATTENTION_DISABLE_SPLIT -DFLASHATTENTION_DISABLE_PAGEDKV
  -DFLASHATTENTION_DISABLE_APPENDKV -DFLASHATTENTION_DISABLE_LOCAL -DFLASHATTENTION_DISABLE_SOFTCAP
  -DFLASHATTENTION_DISABLE_PACKGQA -DFLASHATTENTION_DISABLE_FP16 -DFLASHATTENTION_DISABLE_VARLEN
  -DFLASHATTENTION_DISABLE_CLUSTER -DFLASHATTENTION_DISABLE_SM8x
  -DFLASHATTENTION_DISABLE_HDIMDIFF64 -DFLASHATTENTION_DISABLE_HDIMDIFF192
)
FA3_FEATURES="forward only, sm_90a, bf16 + e4m3, head dims 64/96/128/192/256, causal and non-causal, GQA without pack-gqa; disabled: backward, split, paged KV, append KV, local, softcap, pack-gqa, fp16, varlen, cluster, sm8x, hdim-diff (64/256, 64/512, 192/128)"

fa3_kernel_file() {  # 128_e4m3 -> the instantiation file, relative to FA3's hopper/
  echo "instantiations/flash_fwd_hdim${1%_*}_${1#*_}_sm90.cu"
}

# FA3 files besides the kernels, relative to hopper/: the API (torch's stable C ABI, the one FA3's setup picks for
# torch >= 2.9) and the scheduler helper it calls.
FA3_API_FILE=flash_api_stable.cpp
FA3_SCHED_FILE=flash_prepare_scheduler.cu
# FA3's Python side: the top-level interface imports flash_attn_3._C and flash_attn_config (which FA3's setup writes;
# pack.sh writes ours).
FA3_PY_FILES="flash_attn_interface.py flash_attn_3/__init__.py flash_attn_3/flash_attn_interface.py flash_attn_3/flash_attn_config.py"

# SageAttention2: the sm90 module and the fused quantization module, relative to its repository root.
SAGE_SM90_CU=csrc/qattn/qk_int_sv_f8_cuda_sm90.cu
SAGE_SM90_PY=csrc/qattn/pybind_sm90.cpp
SAGE_FUSED_CU=csrc/fused/fused.cu
SAGE_FUSED_PY=csrc/fused/pybind.cpp
# What those include from csrc/ (the top-level helpers, the sm90 header pair, the fused folder).
SAGE_SRC_PATHS="csrc/cp_async.cuh csrc/dispatch_utils.h csrc/math.cuh csrc/mma.cuh csrc/numeric_conversion.cuh
  csrc/permuted_smem.cuh csrc/reduction_utils.cuh csrc/utils.cuh csrc/wgmma.cuh
  csrc/qattn/attn_cuda_sm90.h csrc/qattn/attn_utils.cuh csrc/qattn/pybind_sm90.cpp csrc/qattn/qk_int_sv_f8_cuda_sm90.cu
  csrc/fused"
