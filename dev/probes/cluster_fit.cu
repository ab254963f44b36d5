// How many CTA pairs a card runs at once when each CTA takes a whole SM (the D=256 pair build's shape: clusters of
// two, 384 threads, ~225 KB of shared memory), and which SMs they land on. Standalone, no torch:
//   nvcc -arch=sm_90a -O2 -o /tmp/cluster_fit dev/probes/cluster_fit.cu && /tmp/cluster_fit
// Prints the SM count, cudaOccupancyMaxActiveClusters for clusters of 1 and 2, and, for a launch of that many pairs
// that spin until every CTA has arrived (so all are resident at once), the SMs that held none. A GPC with an odd
// number of SMs leaves one of them idle under clusters of two: the pair build then runs on fewer SMs than the routed
// build, at the same per-SM rate, and draws less power.
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__device__ unsigned int g_arrived;

__global__ void where(int* smid, int ctas) {
  extern __shared__ unsigned char pad[];
  if (threadIdx.x == 0) {
    unsigned int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));  // PTX ISA 10.x "Special registers: %smid"
    smid[blockIdx.x] = static_cast<int>(id);
    pad[0] = static_cast<unsigned char>(id);
    atomicAdd(&g_arrived, 1u);
    // All CTAs resident at once or this never ends: bounded, so a card that cannot hold them reports it.
    long long t0 = clock64();
    while (atomicAdd(&g_arrived, 0u) < static_cast<unsigned int>(ctas) && clock64() - t0 < 2000000000ll) {
    }
  }
}

static int check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("%s: %s\n", what, cudaGetErrorString(e));
    return 1;
  }
  return 0;
}

int main() {
  int dev = 0, sms = 0;
  cudaDeviceProp prop{};
  if (check(cudaGetDeviceProperties(&prop, dev), "properties")) return 1;
  sms = prop.multiProcessorCount;
  const size_t smem = 225 * 1024;
  const int threads = 384;
  if (check(cudaFuncSetAttribute(where, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
            "smem attribute"))
    return 1;
  std::printf("%s: %d SMs\n", prop.name, sms);
  int fit[3] = {0, 0, 0};
  for (int c = 1; c <= 2; ++c) {
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = c;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(sms & ~1));
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (check(cudaOccupancyMaxActiveClusters(&fit[c], where, &cfg), "cudaOccupancyMaxActiveClusters")) return 1;
    std::printf("clusters of %d: %d fit at once (%d CTAs, %d SMs idle)\n", c, fit[c], c * fit[c], sms - c * fit[c]);
  }
  const int ctas = 2 * fit[2];
  if (ctas <= 0) return 1;
  int* d_smid = nullptr;
  if (check(cudaMalloc(&d_smid, sizeof(int) * ctas), "malloc")) return 1;
  unsigned int zero = 0;
  cudaMemcpyToSymbol(g_arrived, &zero, sizeof(zero));
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (check(cudaLaunchKernelEx(&cfg, where, d_smid, ctas), "launch") || check(cudaDeviceSynchronize(), "sync"))
    return 1;
  std::vector<int> smid(ctas);
  cudaMemcpy(smid.data(), d_smid, sizeof(int) * ctas, cudaMemcpyDeviceToHost);
  std::vector<int> used(sms, 0);
  for (int s : smid)
    if (s >= 0 && s < sms) used[s]++;
  std::printf("a launch of %d pairs: SMs without a CTA:", fit[2]);
  int idle = 0;
  for (int s = 0; s < sms; ++s)
    if (!used[s]) {
      std::printf(" %d", s);
      ++idle;
    }
  std::printf(" (%d)\n", idle);
  return 0;
}
