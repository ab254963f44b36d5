// Host-side TMA descriptor encoding (CUDA driver API cuTensorMapEncodeTiled), reached through the runtime's
// driver entry point so nothing links against libcuda. Pure CUDA host code, no torch.
#pragma once
#include <cstdint>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <string>

namespace vidattn::sm90 {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(std::string* err) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (fn == nullptr) {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || ptr == nullptr) {
      *err = "cuTensorMapEncodeTiled not available from the driver";
      return nullptr;
    }
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }
  return fn;
}

// A 4-D map over (D, S, H, B) of 16-bit elements with the caller's element strides for (S, H, B). The box is
// 64 columns (128 bytes: the most a 128B-swizzled box row may hold) x box_rows rows of one head of one batch.
inline bool make_tensor_map_4d(CUtensorMap* map, const void* base, bool fp16, int64_t d, int64_t s, int64_t h,
                               int64_t b, const int64_t stride_bsh[3], uint32_t box_rows, std::string* err) {
  auto encode = tensor_map_encoder(err);
  if (encode == nullptr) return false;
  const int64_t sizes[3] = {s, h, b};
  const int64_t strides[3] = {stride_bsh[1], stride_bsh[2], stride_bsh[0]};  // (seq, head, batch)
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(s), static_cast<cuuint64_t>(h),
                        static_cast<cuuint64_t>(b)};
  cuuint64_t gstrides[3];
  for (int i = 0; i < 3; ++i) {
    // A dimension of extent 1 is never stepped, so its stride is free; TMA still wants a multiple of 16 bytes.
    gstrides[i] = sizes[i] == 1 ? 16 : static_cast<cuuint64_t>(strides[i]) * 2;
  }
  cuuint32_t box[4] = {64, box_rows, 1, 1};
  cuuint32_t estrides[4] = {1, 1, 1, 1};
  CUresult r = encode(map, fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
                      const_cast<void*>(base), dims, gstrides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    *err = "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(r)) +
           " (check 16-byte alignment of the base pointer and strides)";
    return false;
  }
  return true;
}

}  // namespace vidattn::sm90
