// Does a tiled TMA load that starts at a negative row fill the rows before 0 with zeros? dev/experiments/
// kv_shift.patch loads a padded batch's partial key block from kv_len - (its computed rows), which is negative for
// every batch shorter than its first block's width; the PTX ISA says the coordinates are .s32 and that a box's
// elements outside the tensor are zero-filled, but never shows a negative start. This loads one 64 x 64 bf16 box,
// 128B-swizzled like the kernel's K/V chunks, from a 4-D map laid out like csrc/capi.cu's (D, rows, heads, batch), at
// head 1 of batch 1 and row starts from -63 to 60, into shared memory pre-filled with 0x7777, and checks every element
// against what the tensor holds there (row r of head h, batch b is bf16(r + 1 + 100 h + 1000 b)) or 0 outside it: a
// start that read the previous head's rows, left shared memory unwritten or faulted shows as a mismatch or an error.
//   nvcc -gencode=arch=compute_90a,code=sm_90a dev/probes/tma_negative_rows.cu -lcuda -o /tmp/tma_neg && /tmp/tma_neg
// Prints one line a start and "tma_negative_rows: ok" or "... FAILED"; exit status 0 only when every start matched.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

constexpr int kD = 64, kRows = 64, kHeads = 2, kBatch = 2, kBox = 64;

__global__ void load_box(const __grid_constant__ CUtensorMap map, int row, uint16_t* out) {
  __shared__ alignas(1024) uint16_t tile[kBox * kD];  // 128B swizzle: the box's base on a 1024-byte boundary
  __shared__ alignas(8) uint64_t bar;
  const uint32_t bar_addr = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const uint32_t tile_addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  if (threadIdx.x != 0) return;
  for (int i = 0; i < kBox * kD; ++i) tile[i] = 0x7777;  // not a value the tensor holds, and not 0
  asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(bar_addr));
  // the generic-proxy fill and the barrier's init before the async proxy's writes (PTX ISA 9.7.12.15.x, fence.proxy)
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  // a box crossing the tensor's edge still counts its whole size (as the kernel's expect_tx assumes)
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(bar_addr), "r"(kBox * kD * 2));
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];" ::"r"(tile_addr),
      "l"(&map), "r"(0), "r"(row), "r"(1), "r"(1), "r"(bar_addr)
      : "memory");
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\nmbarrier.try_wait.parity.shared.b64 done, [%0], 0;\n@!done bra WAIT_%=;\n}" ::"r"(
          bar_addr)
      : "memory");
  for (int i = 0; i < kBox * kD; ++i) out[i] = tile[i];
}

uint16_t bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);  // the values are small integers: exact, no rounding
}

// The 128B swizzle moves 16-byte units within a 128-byte line; a row of 64 bf16 is one line, so element (r, c) of the
// box sits at line r, unit (c / 8) ^ (r % 8).
int swizzled(int r, int c) { return r * kD + (((c / 8) ^ (r % 8)) * 8) + c % 8; }

}  // namespace

int main() {
  const size_t n = static_cast<size_t>(kD) * kRows * kHeads * kBatch;
  uint16_t* host = new uint16_t[n];
  for (int b = 0; b < kBatch; ++b)
    for (int r = 0; r < kRows; ++r)
      for (int h = 0; h < kHeads; ++h)
        for (int d = 0; d < kD; ++d)
          host[((static_cast<size_t>(b) * kRows + r) * kHeads + h) * kD + d] = bf16(r + 1 + 100 * h + 1000 * b);
  void* dev = nullptr;
  uint16_t* out = nullptr;
  if (cudaMalloc(&dev, n * 2) != cudaSuccess || cudaMalloc(&out, kBox * kD * 2) != cudaSuccess) {
    std::printf("tma_negative_rows: cudaMalloc failed\n");
    return 2;
  }
  cudaMemcpy(dev, host, n * 2, cudaMemcpyHostToDevice);
  CUtensorMap map;
  const cuuint64_t dims[4] = {kD, kRows, kHeads, kBatch};  // BSHD: (D, rows, heads, batch) as csrc/capi.cu's maps
  const cuuint64_t strides[3] = {kHeads * kD * 2, kD * 2, static_cast<cuuint64_t>(kRows) * kHeads * kD * 2};
  const cuuint32_t box[4] = {kD, kBox, 1, 1}, elem[4] = {1, 1, 1, 1};
  const CUresult enc = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, dev, dims, strides, box, elem,
                                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (enc != CUDA_SUCCESS) {
    std::printf("tma_negative_rows: cuTensorMapEncodeTiled returned %d\n", static_cast<int>(enc));
    return 2;
  }
  // every box keeps a row inside the tensor, as every box the kernel loads does (its start is above -kN)
  const int starts[] = {-63, -28, -15, -12, -5, -1, 0, 10, 60};
  uint16_t got[kBox * kD];
  bool ok = true;
  for (int row : starts) {
    load_box<<<1, 32>>>(map, row, out);
    const cudaError_t err = cudaDeviceSynchronize();
    cudaMemcpy(got, out, sizeof(got), cudaMemcpyDeviceToHost);
    int bad = 0, zero_rows = 0;
    for (int r = 0; r < kBox; ++r) {
      const int src = row + r;
      const uint16_t want = (src >= 0 && src < kRows) ? bf16(src + 1 + 100 + 1000) : 0;
      bool all_zero = true;
      for (int c = 0; c < kD; ++c) {
        const uint16_t v = got[swizzled(r, c)];
        bad += v != want;
        all_zero = all_zero && v == 0;
      }
      zero_rows += all_zero;
    }
    std::printf("start %4d: %s, %2d rows zero (expected %2d), %4d of %d elements wrong\n", row,
                err == cudaSuccess ? "ran" : cudaGetErrorString(err), zero_rows,
                (row < 0 ? (-row < kBox ? -row : kBox) : 0) + (row + kBox > kRows ? row + kBox - kRows : 0), bad,
                kBox * kD);
    ok = ok && err == cudaSuccess && bad == 0;
  }
  std::printf("tma_negative_rows: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
