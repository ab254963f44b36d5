// Can the H200 run 8-bit wgmma and MUFU.EX2 side by side at full rate? A standalone probe (no torch, no library):
// one CTA per SM, 3 or 4 warpgroups, no producer; each warpgroup has a role (wgmma only, ex2 only, both, or idle)
// and loops until a deadline on %globaltimer, counting its iterations, with clock64 and %globaltimer read at its start
// and end. Operands come from shared memory written once (pseudo-random bytes, so the tensor cores toggle as they
// would on real data) and, for the RS form, from registers perturbed every iteration as P is.
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I csrc -o /tmp/mto dev/probes/mufu_tensor_overlap.cu
// (-arch=sm_90a alone made ptxas refuse the FP8 wgmma for a plain sm_90 PTX target with nvcc 13.0)
//   /tmp/mto --list                      # the variants
//   /tmp/mto --seconds 2 [variant ...]   # one JSON line per variant (dev/probes/mufu_tensor_overlap.py runs it)
// The (a)-(e) of the variant names: (a) tensor only, (b) MUFU only, (c) both in the same warpgroup, (d) in different
// warpgroups (free-running, or meeting at a barrier every iteration so the work ratio is fixed), (e) with the
// softmax's other per-score instructions. Counts are per CTA and warpgroup; the rates are per SM and per clock of
// clock64 (the SM's own clock), so a lower clock under the power cap shows in the TFLOPS, not in the shares.
// Units: one m64n128k32 wgmma is 64 x 128 x 32 = 262144 MACs, 64 clocks of an SM's tensor cores at 4096 8-bit MACs
// per clock (H100/H200 SXM dense FP8/INT8: 8192 flop/clk/SM); ex2.approx is one MUFU.EX2, 16 per clock per SM (4 per
// SM sub-partition, 8 clocks per warp instruction). The attention kernel per 64 x 128 block and warpgroup: 4 INT8 SS
// wgmmas (S) + 4 FP8 RS (P V) = 8 wgmmas, and 64 (66) ex2 per thread: both pipes 512 clocks, the ratio "E = 64 per
// T = 8" below.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <sys/time.h>
#include <unistd.h>
#include <vector>

#include "sm90/ptx.cuh"
#include "sm90/wgmma8_ops.cuh"
#include "sm90/wgmma_ops.cuh"     // Wgmma<128, false>: the bf16 forms of the (f) variants
#include "wgmma8_probe_ops.cuh"  // WgmmaE4m3SS: the same generator (csrc/tools/gen_wgmma8.py --probe)

namespace ptx = vidattn::ptx;

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    const cudaError_t err_ = (x);                                                                  \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_));   \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

namespace {

constexpr int kMaxWGs = 4;
// independent ex2 chains per thread: 16 x 8 clocks per warp >> MUFU latency
constexpr int kChains = 16;
constexpr int kATileBytes = 64 * 128;   // A: 64 rows x 128 bytes (k = 128 in 4 k32 steps), 128-byte swizzle
constexpr int kBTileBytes = 128 * 128;  // B: 128 rows (N) x 128 bytes
constexpr double kMacsPerWgmma = 64.0 * 128.0 * 32.0;  // 8-bit m64n128k32; bf16 m64n128k16 is half
constexpr int kStat = 4;  // per CTA and warpgroup: iterations, clock64 cycles, %globaltimer ns, %smid
// Dynamic shared memory asked per CTA: more than half an SM's 228 KB, so no SM can hold two CTAs (the ex2-only kernels
// need few registers and would otherwise fit several per SM); the host checks the CTAs' %smid all differ.
constexpr size_t kSmemAsk = 120 * 1024;
// The (g) variants: each warpgroup's copies land in a scratch area of its own, in kCopyBytes pieces taken round-robin
// from a kSrcBytes buffer (L2-resident after the first pass, as an attention call's K and V mostly are).
constexpr int kScratchBytes = 16 * 1024;
constexpr int kCopyBytes = 4096;
constexpr size_t kSrcBytes = 16u << 20;
constexpr int kT = 8;  // wgmmas per iteration of a tensor role: one attention block's S + P V

enum Kind : int {
  kIdle = 0,
  kFp8SS = 1,   // wgmma .f32.e4m3.e4m3, A and B from shared memory
  kS8SS = 2,    // wgmma .s32.s8.s8, A and B from shared memory (S = Q K^T's form)
  kFp8RS = 3,   // wgmma .f32.e4m3.e4m3, A from registers (P V's form)
  kAttn = 4,    // the kernel's pair in its order: 4 INT8 SS (S), wait, 4 FP8 RS (P V) with A from S (3 WGs)
  kNoTensor = 5,  // no wgmma: only the exponentials (and ALU mix)
  kBf16SS = 6,  // wgmma .f32.bf16.bf16 m64n128k16, A and B from shared memory (the exact kernel's S = Q K^T)
  kBf16RS = 7,  // the same with A from registers (the exact kernel's P V)
};

// The bf16 kinds run m64n128k16 (half an 8-bit wgmma's MACs) at 2048 MACs per clock per SM (dense bf16: 4096
// flop/clk/SM, half the 8-bit rate). The same tiles serve both: a k16 step of bf16 is 32 bytes of a row, as a k32
// step of 8-bit elements is, so the descriptors are the same.
__host__ __device__ constexpr bool is_bf16(int kind) { return kind == kBf16SS || kind == kBf16RS; }

struct Role {
  int kind;  // Kind
  int t;     // wgmmas per iteration: kT for the tensor kinds, 0 for the others (issued back to back, one commit,
             // waited at the iteration's end; kT is a compile-time count: wgmma under a runtime loop was serialized
             // by ptxas, C7520). Host-side bookkeeping only.
  int e;     // ex2 per thread per iteration, a multiple of kChains
  int mix;   // 1: each ex2 with the softmax's other work (FFMA, FADD, IMAD, half an F2FP + LOP3)
  int load;  // bytes a warpgroup copies from global memory (L2) into shared memory per iteration, by cp.async.bulk on
             // an mbarrier as the kernel's TMA loads: the (g) variants (0: none)
  int ahead; // 1: the copies of iteration i + 1 issued during iteration i, two stages (as the kernel's producer runs
             // ahead of the consumers); 0: issued at iteration i's start and waited for at its end
};

struct Params {
  Role role[kMaxWGs];
  int sync;              // 1: all working warpgroups meet at a barrier every iteration (fixed work ratio)
  int sync_threads;      // threads of the working warpgroups
  uint64_t budget_ns;    // each CTA runs until its start + budget on %globaltimer
  float c1, c2, c3, c4;  // runtime constants of the ex2 chains (the compiler cannot fold them)
  int im, ia;
  int sink_key;          // never equal to the magic: the sink store is there only so the work cannot be deleted
  float* sink;
  unsigned long long* stats;  // kStat values per CTA and warpgroup
  const uint8_t* src;         // the (g) variants' source: kSrcBytes, small enough to stay in L2 as K and V do
  int cluster;                // 2: (h) CTA pairs, each CTA copying half of every stage into both (multicast)
  unsigned long long iters_fixed;  // > 0: every warpgroup stops after this many iterations, not at the deadline
                                   // (a pair must stop together: each waits on the other's arrivals)
};

// %globaltimer (PTX ISA chapter 10, special registers): nanoseconds, the same clock on every SM; the deadline and
// the wall time per CTA.
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// %smid (PTX ISA chapter 10, special registers): which SM ran the CTA (the host checks one CTA per SM).
__device__ __forceinline__ uint32_t smid() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}

// cvt.rn.satfinite.e4m3x2.f32 (PTX ISA 9.7.9.21): the F2FP that packs two P values to e4m3 in the kernel.
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// A copy the compiler cannot see through: the tile addresses, taken afresh each iteration, so that the eight
// descriptors (16 registers) are rebuilt in the loop (a few IADDs) instead of hoisted out of it and held.
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
  asm volatile("mov.b32 %0, %0;" : "+r"(x));
  return x;
}

// The folds of S into P and of O_tile into the output, as volatile asm: kept in order between the volatile zeroing
// of the accumulators, so that the compiler cannot sink a fold past the next accumulator's zeroing and keep both
// accumulators live at once (it did: they got disjoint registers, and ptxas serialized the wgmmas, C7512).
// lop3.b32 (PTX ISA 9.7.8.6), LUT 0x78 = a ^ (b & c): one LOP3 per fold (and + xor stayed two).
__device__ __forceinline__ void vxor_low_bits(uint32_t& a, int32_t s) {
  asm volatile("lop3.b32 %0, %0, %1, 0x01010101, 0x78;" : "+r"(a) : "r"(s));
}
__device__ __forceinline__ void vfma(float& acc, float c, float x) {
  asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(acc) : "f"(c), "f"(x));
}

template <int N>
__device__ __forceinline__ void fence_iregs(int32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

struct Shared {
  alignas(1024) uint8_t a[2][kATileBytes];
  alignas(1024) uint8_t b[2][kBTileBytes];
  alignas(128) uint8_t scratch[kMaxWGs][2][kScratchBytes];
  uint64_t bar[kMaxWGs][2];
  uint64_t empty[kMaxWGs][2];  // (h): both CTAs of the pair have waited for this stage's fill (two arrivals)
  int flag[kMaxWGs + 1][2];
};

// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes (PTX ISA 9.7.9.25.4.1): a 1-D bulk copy on the
// TMA unit, completing its bytes on the mbarrier as the kernel's tensor loads do (a CTA is its own cluster).
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          ptx::smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(ptx::smem_addr(bar))
      : "memory");
}

// A byte pattern that is a valid e4m3 everywhere (no 0x7F / 0xFF NaN) and spread over the range, so the multipliers
// toggle as on real operands; as INT8 the same bytes are arbitrary signed values.
__device__ __forceinline__ uint32_t pattern_word(uint32_t i) {
  uint32_t x = i * 2654435761u + 0x9E3779B9u;
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return x & 0xBFBFBFBFu;  // clears bit 6 of each byte: exponent <= 0b0111 below 0b1111, never NaN, |v| <= 1.875
}

// The exponentials of one iteration: e per thread over kChains independent chains x <- 2^-x (a fixed point at
// 0.641; MUFU.EX2 takes the negation as an operand modifier). mix adds the softmax's other per-score work.
template <bool kMix, int kCh>
__device__ __forceinline__ void exp_work(float (&ch)[kCh], float (&sum)[4], int32_t (&ik)[4], uint32_t& pk,
                                         int e, const Params& p) {
  for (int n = 0; n < e; n += kCh) {
#pragma unroll
    for (int i = 0; i < kCh; ++i) {
      if constexpr (kMix) {
        const float t = fmaf(ch[i], p.c1, p.c2);       // FFMA: the scale and max of the score
        const float y = ptx::exp2_approx(t);           // MUFU.EX2
        ch[i] = y;
        sum[i & 3] += y;                               // FADD: the row sum
        ik[i & 3] = ik[i & 3] * p.im + p.ia;           // IMAD: the kernel's address / bias moves
        if (i & 1) pk ^= e4m3x2(ch[i - 1], y);         // F2FP (+ LOP3): P packed to e4m3
      } else {
        ch[i] = ptx::exp2_approx(-ch[i]);
      }
    }
  }
}

// (h) CTA pairs: the cluster wrappers are the kernel's (csrc/sm90/ptx.cuh: cluster_ctarank, cluster_sync, and
// mbarrier_arrive_remote, the release at CTA scope the kernel's stage releases use: .release.cluster put a MEMBAR.GPU
// ahead of each).
// cp.async.bulk ... .multicast::cluster (9.7.9.25.4.1): the same bytes into dst of every CTA in cta_mask, each
// completing on that CTA's mbarrier at the same offset.
__device__ __forceinline__ void bulk_copy_g2s_mc(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                 uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
      "%4;" ::"r"(ptx::smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(ptx::smem_addr(bar)), "h"(cta_mask)
      : "memory");
}

// One iteration's copies: `bytes` in kCopyBytes pieces into warpgroup wg's stage `st` (wrapping inside it), on that
// stage's mbarrier, the source pieces taken round-robin from `piece`.
// Pairs (cluster 2): iteration j's fill of the stage waits until both CTAs have waited for its previous fill
// (empty, phase j / 2 - 1), then each CTA copies its half of the bytes into both CTAs, so each stage's mbarrier still
// expects all of them.
__device__ __forceinline__ void issue_copies(Shared& s, int wg, int st, int bytes, const uint8_t* src, uint32_t& piece,
                                             uint32_t src_pieces, int cluster = 1, unsigned long long j = 0) {
  if (cluster == 2 && j >= 2) ptx::mbarrier_wait(&s.empty[wg][st], static_cast<uint32_t>(((j >> 1) - 1) & 1));
  ptx::mbarrier_arrive_expect_tx(&s.bar[wg][st], static_cast<uint32_t>(bytes));
  const int issued = bytes / cluster, base = cluster == 2 ? static_cast<int>(ptx::cluster_ctarank()) * issued : 0;
  for (int off = base; off < base + issued; off += kCopyBytes) {
    void* dst = &s.scratch[wg][st][off % kScratchBytes];
    const uint8_t* from = src + static_cast<size_t>(piece) * kCopyBytes;
    if (cluster == 2) bulk_copy_g2s_mc(dst, from, kCopyBytes, &s.bar[wg][st], 0x3);
    else bulk_copy_g2s(dst, from, kCopyBytes, &s.bar[wg][st]);
    piece = piece + 1 == src_pieces ? 0 : piece + 1;
  }
}

template <int kKind, bool kMix>
__device__ __forceinline__ void role_loop(const Params& p, Shared& s, int wg, uint64_t deadline) {
  const Role r = p.role[wg];
  const int tid = threadIdx.x % 128;
  const bool leader = tid == 0;
  constexpr int kCh = kChains;
  float ch[kCh], sum[4] = {0.f, 0.f, 0.f, 0.f};
  int32_t ik[4] = {tid, tid + 1, tid + 2, tid + 3};
  uint32_t pk = 0;
#pragma unroll
  for (int i = 0; i < kCh; ++i) ch[i] = 0.25f + 0.01f * i + 1e-4f * tid;

  constexpr bool kFloatAcc = kKind == kFp8SS || kKind == kFp8RS || kKind == kAttn || is_bf16(kKind);
  constexpr bool kIntAcc = kKind == kS8SS;
  float facc[kFloatAcc ? 64 : 1];
  int32_t iacc[kIntAcc ? 64 : 1];
#pragma unroll
  for (int i = 0; i < (kFloatAcc ? 64 : 1); ++i) facc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < (kIntAcc ? 64 : 1); ++i) iacc[i] = 0;
  constexpr bool kTensor = kKind != kIdle && kKind != kNoTensor;
  constexpr bool kRegA = kKind == kFp8RS || kKind == kAttn || kKind == kBf16RS;
  uint32_t frag[4][4];  // the RS form's A: 4 k32 steps x 4 b32 per thread (the kernel's P)
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) frag[k][j] = kRegA ? pattern_word(4 * (4 * tid + k) + j) : 0u;

  const uint32_t a_base = ptx::smem_addr(&s.a[wg & 1][0]), b_base = ptx::smem_addr(&s.b[wg & 1][0]);
  // (g): this warpgroup's place in the source, apart from the other warpgroups' and CTAs'
  const uint32_t src_pieces = static_cast<uint32_t>(kSrcBytes / kCopyBytes);
  uint32_t piece = (blockIdx.x * kMaxWGs + wg) * 131u % src_pieces;
  if (kTensor && r.load > 0 && r.ahead && leader)
    issue_copies(s, wg, 0, r.load, p.src, piece, src_pieces, p.cluster, 0);
  const uint64_t c0 = clock64(), n0 = globaltimer();
  unsigned long long iters = 0;
  float osum = 0.f;  // kAttn: O_tile merged into it after each P V (the kernel's 64 FFMA merge)
  for (;;) {
    if constexpr (kKind == kAttn) {
      // The kernel's order in one warpgroup: S = Q K^T (INT8 SS) and its wait; P from S (here 64 LOP3 folding S into
      // the 16 registers of P); P V (FP8 RS) into a fresh O_tile, the exponentials while it runs, its wait and the
      // merge. S and O_tile share one set of 64 registers (S is dead once folded into P), each zeroed before its
      // fence (the kernel's bias moves): with two sets ptxas spilled and serialized the wgmmas (C7512) at the
      // 3-warpgroup budget of 168 registers, however the folds were ordered.
      const uint32_t a0 = opaque(a_base), b0 = opaque(b_base);
#pragma unroll
      for (int i = 0; i < 64; ++i) asm volatile("mov.b32 %0, 0;" : "=f"(facc[i]));
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        ptx::WgmmaS8<128>::ss(reinterpret_cast<int32_t(&)[64]>(facc),
                              ptx::make_smem_desc_sw128(a0 + kk * 32, 16, 1024),
                              ptx::make_smem_desc_sw128(b0 + kk * 32, 16, 1024), kk > 0);
      }
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      ptx::fence_regs(facc);
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) vxor_low_bits(frag[k][j], __float_as_int(facc[16 * k + 4 * j + q]));
#pragma unroll
      for (int i = 0; i < 64; ++i) asm volatile("mov.b32 %0, 0;" : "=f"(facc[i]));
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        ptx::WgmmaE4m3<128>::rs(facc, frag[kk], ptx::make_smem_desc_sw128(b0 + kk * 32, 16, 1024), kk > 0);
      ptx::wgmma_commit();
    } else if constexpr (kTensor) {
      if (r.load > 0 && leader) {
        // the copies of iteration i (of i + 1 with ahead: iteration 0's went before the loop), into stage j & 1 on
        // that stage's mbarrier, waited for after iteration i's wgmmas (ahead: i + 1's, during i + 1)
        const unsigned long long j = iters + (r.ahead ? 1 : 0);
        issue_copies(s, wg, static_cast<int>(j & 1), r.load, p.src, piece, src_pieces, p.cluster, j);
      }
      if constexpr (kRegA) {
        // P changes every block: a new A fragment (16 LOP3) written before the fence that orders it for wgmma
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
          for (int j = 0; j < 4; ++j) frag[k][j] ^= static_cast<uint32_t>(iters) & 0x01010101u;
      }
      ptx::wgmma_fence();
      const uint32_t a0 = opaque(a_base), b0 = opaque(b_base);
#pragma unroll
      for (int t = 0; t < kT; t += 4) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          // the project's descriptor (128-byte swizzle, 8-row groups 1024 bytes apart; k32 = +32 bytes in a row)
          const uint64_t da = ptx::make_smem_desc_sw128(a0 + kk * 32, 16, 1024);
          const uint64_t db = ptx::make_smem_desc_sw128(b0 + kk * 32, 16, 1024);
          if constexpr (kKind == kFp8SS) {
            ptx::WgmmaE4m3SS<128>::ss(facc, da, db, t + kk > 0);
          } else if constexpr (kKind == kS8SS) {
            ptx::WgmmaS8<128>::ss(iacc, da, db, t + kk > 0);
          } else if constexpr (kKind == kBf16SS) {
            ptx::Wgmma<128, false>::ss(facc, da, db, t + kk > 0);
          } else if constexpr (kKind == kBf16RS) {
            ptx::Wgmma<128, false>::rs<0>(facc, frag[kk], db, t + kk > 0);  // B K-major, as in SS
          } else {
            ptx::WgmmaE4m3<128>::rs(facc, frag[kk], db, t + kk > 0);
          }
        }
      }
      ptx::wgmma_commit();
    }
    exp_work<kMix>(ch, sum, ik, pk, r.e, p);
    if constexpr (kTensor) {
      ptx::wgmma_wait<0>();
      if constexpr (kFloatAcc) ptx::fence_regs(facc);
      if constexpr (kIntAcc) fence_iregs(iacc);
      if constexpr (kKind == kAttn) {
#pragma unroll
        for (int i = 0; i < 64; ++i) vfma(osum, p.c3, facc[i]);
      }
      if (r.load > 0 && leader) {  // stage i & 1 completes its (i >> 1)-th phase in iteration i
        ptx::mbarrier_wait(&s.bar[wg][iters & 1], static_cast<uint32_t>((iters >> 1) & 1));
        if (p.cluster == 2) {  // this CTA is done with the fill: both CTAs' empty barriers hear it
          ptx::mbarrier_arrive(&s.empty[wg][iters & 1]);
          ptx::mbarrier_arrive_remote(&s.empty[wg][iters & 1], ptx::cluster_ctarank() ^ 1u);
        }
      }
    }
    ++iters;
    if (p.iters_fixed > 0) {  // the count is uniform, so no vote; the barrier still keeps the warpgroup's warps in
      ptx::named_barrier_sync(2 + wg, 128);  // step behind the leader's waits, as in the deadline mode
      if (iters >= p.iters_fixed) break;
      continue;
    }
    // Stop together: one thread reads the clock, its verdict reaches the others through shared memory and a barrier
    // (every wgmma is .sync.aligned: all 128 threads of a warpgroup must leave in the same iteration). Parity
    // buffers: a flag is rewritten two barriers after it was read.
    const int slot = p.sync ? kMaxWGs : wg;
    if ((p.sync ? threadIdx.x == 0 : leader)) s.flag[slot][iters & 1] = globaltimer() >= deadline;
    if (p.sync) ptx::named_barrier_sync(1, p.sync_threads);
    else ptx::named_barrier_sync(2 + wg, 128);
    if (s.flag[slot][iters & 1]) break;
  }
  const uint64_t c1 = clock64(), n1 = globaltimer();
  // ahead: the copies issued for the iteration that did not run land before the CTA (and its shared memory) ends
  if (kTensor && r.load > 0 && r.ahead && leader)
    ptx::mbarrier_wait(&s.bar[wg][iters & 1], static_cast<uint32_t>((iters >> 1) & 1));
  if (leader) {
    unsigned long long* st = p.stats + (static_cast<size_t>(blockIdx.x) * kMaxWGs + wg) * kStat;
    st[0] = iters;
    st[1] = c1 - c0;
    st[2] = n1 - n0;
    st[3] = smid();
  }
  float acc = sum[0] + sum[1] + sum[2] + sum[3] + static_cast<float>(ik[0] ^ ik[1] ^ ik[2] ^ ik[3] ^ pk);
#pragma unroll
  for (int i = 0; i < kCh; ++i) acc += ch[i];
  acc += osum;
#pragma unroll
  for (int i = 0; i < (kFloatAcc && kKind != kAttn ? 64 : 1); ++i) acc += facc[i];
#pragma unroll
  for (int i = 0; i < (kIntAcc ? 64 : 1); ++i) acc += static_cast<float>(iacc[i]);
  if (p.sink_key == 0x5EED) p.sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

template <int kWGs, int kKind, bool kMix>
__global__ void __launch_bounds__(kWGs * 128, 1) overlap_kernel(const __grid_constant__ Params p) {
  extern __shared__ uint8_t smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  {
    uint32_t* w = reinterpret_cast<uint32_t*>(&s.a[0][0]);
    const int words = (2 * kATileBytes + 2 * kBTileBytes) / 4;
    for (int i = threadIdx.x; i < words; i += blockDim.x) w[i] = pattern_word(i);
    if (threadIdx.x < 2 * (kMaxWGs + 1)) (&s.flag[0][0])[threadIdx.x] = 0;
    if (threadIdx.x < 2 * kMaxWGs) ptx::mbarrier_init(&s.bar[threadIdx.x / 2][threadIdx.x % 2], 1);
    if (threadIdx.x < 2 * kMaxWGs) ptx::mbarrier_init(&s.empty[threadIdx.x / 2][threadIdx.x % 2], 2);
  }
  ptx::fence_barrier_init();
  // generic-proxy stores that wgmma reads through the async proxy: fenced before the barrier
  ptx::fence_proxy_async_smem();
  __syncthreads();
  if (p.cluster == 2) ptx::cluster_sync();  // both CTAs' barriers initialised before either arrives on the other's
  // one start for the whole CTA, so every warpgroup stops at the same deadline
  __shared__ uint64_t start;
  if (threadIdx.x == 0) start = globaltimer();
  __syncthreads();
  const uint64_t deadline = start + p.budget_ns;
  const int wg = threadIdx.x / 128;
  // One tensor kind per kernel (with the ex2-only role beside it): a kernel holding several kinds' loops is
  // register-allocated for all of them, and ptxas then serialized every wgmma (C7512) and spilled.
  const int kind = p.role[wg].kind;
  if (kind == kKind) role_loop<kKind, kMix>(p, s, wg, deadline);
  else if (kind == kNoTensor) role_loop<kNoTensor, kMix>(p, s, wg, deadline);
  if (p.cluster == 2) ptx::cluster_sync();  // the peer may still copy into this CTA or arrive on its barriers
}

struct Variant {
  const char* name;
  const char* what;
  int wgs;
  int sync;
  Role role[kMaxWGs];
  int cluster;  // 2: launched in CTA pairs (the (h) variants), which run a fixed iteration count
};

// T = 8 wgmmas per iteration (one attention block's S + P V), E = 64 ex2 per thread (its exponentials): "1x".
const Variant kVariants[] = {
    {"a_fp8ss_4t", "(a) tensor only: 4 WGs FP8 SS", 4, 0,
     {{kFp8SS, 8, 0, 0}, {kFp8SS, 8, 0, 0}, {kFp8SS, 8, 0, 0}, {kFp8SS, 8, 0, 0}}},
    {"a_s8ss_4t", "(a) tensor only: 4 WGs INT8 SS", 4, 0,
     {{kS8SS, 8, 0, 0}, {kS8SS, 8, 0, 0}, {kS8SS, 8, 0, 0}, {kS8SS, 8, 0, 0}}},
    {"a_fp8rs_4t", "(a) tensor only: 4 WGs FP8 RS", 4, 0,
     {{kFp8RS, 8, 0, 0}, {kFp8RS, 8, 0, 0}, {kFp8RS, 8, 0, 0}, {kFp8RS, 8, 0, 0}}},
    {"a_attn_3t", "(a) tensor only: 3 WGs INT8 SS + FP8 RS (the kernel's pair)", 3, 0,
     {{kAttn, 8, 0, 0}, {kAttn, 8, 0, 0}, {kAttn, 8, 0, 0}, {kIdle, 0, 0, 0}}},
    {"a_fp8ss_2t", "(a) tensor only: 2 WGs FP8 SS, 2 idle (baseline of d 2t+2m)", 4, 0,
     {{kFp8SS, 8, 0, 0}, {kFp8SS, 8, 0, 0}, {kIdle, 0, 0, 0}, {kIdle, 0, 0, 0}}},
    {"b_ex2_4m", "(b) MUFU only: 4 WGs ex2", 4, 0,
     {{kNoTensor, 0, 64, 0}, {kNoTensor, 0, 64, 0}, {kNoTensor, 0, 64, 0}, {kNoTensor, 0, 64, 0}}},
    {"b_ex2_2m", "(b) MUFU only: 2 WGs ex2, 2 idle (baseline of d 2t+2m)", 4, 0,
     {{kIdle, 0, 0, 0}, {kIdle, 0, 0, 0}, {kNoTensor, 0, 64, 0}, {kNoTensor, 0, 64, 0}}},
    {"c_same_e32", "(c) same WG x4: 8 FP8 SS wgmma + 32 ex2 (0.5x)", 4, 0,
     {{kFp8SS, 8, 32, 0}, {kFp8SS, 8, 32, 0}, {kFp8SS, 8, 32, 0}, {kFp8SS, 8, 32, 0}}},
    {"c_same_e64", "(c) same WG x4: 8 FP8 SS wgmma + 64 ex2 (1x)", 4, 0,
     {{kFp8SS, 8, 64, 0}, {kFp8SS, 8, 64, 0}, {kFp8SS, 8, 64, 0}, {kFp8SS, 8, 64, 0}}},
    {"c_same_e128", "(c) same WG x4: 8 FP8 SS wgmma + 128 ex2 (2x)", 4, 0,
     {{kFp8SS, 8, 128, 0}, {kFp8SS, 8, 128, 0}, {kFp8SS, 8, 128, 0}, {kFp8SS, 8, 128, 0}}},
    {"d_2t2m_free", "(d) 2 WGs FP8 SS + 2 WGs ex2, free-running", 4, 0,
     {{kFp8SS, 8, 0, 0}, {kFp8SS, 8, 0, 0}, {kNoTensor, 0, 64, 0}, {kNoTensor, 0, 64, 0}}},
    {"d_2t2m_sync", "(d) 2 WGs FP8 SS + 2 WGs ex2, barrier per iteration (1x)", 4, 1,
     {{kFp8SS, 8, 0, 0}, {kFp8SS, 8, 0, 0}, {kNoTensor, 0, 64, 0}, {kNoTensor, 0, 64, 0}}},
    {"d_2t2m_sync_05x", "(d) 2 WGs FP8 SS + 2 WGs ex2 (32/iteration), barrier per iteration (0.5x)", 4, 1,
     {{kFp8SS, 8, 0, 0}, {kFp8SS, 8, 0, 0}, {kNoTensor, 0, 32, 0}, {kNoTensor, 0, 32, 0}}},
    {"d_2t2m_sync_2x", "(d) 2 WGs FP8 SS + 2 WGs ex2 (128/iteration), barrier per iteration (2x)", 4, 1,
     {{kFp8SS, 8, 0, 0}, {kFp8SS, 8, 0, 0}, {kNoTensor, 0, 128, 0}, {kNoTensor, 0, 128, 0}}},
    {"d_3t1m_sync", "(d) 3 WGs FP8 SS + 1 WG ex2 x3, barrier per iteration (1x)", 4, 1,
     {{kFp8SS, 8, 0, 0}, {kFp8SS, 8, 0, 0}, {kFp8SS, 8, 0, 0}, {kNoTensor, 0, 192, 0}}},
    {"d_attn2_1m", "(d) 2 WGs the kernel's pair + 1 WG ex2 (128/iteration), free-running", 3, 0,
     {{kAttn, 8, 0, 0}, {kAttn, 8, 0, 0}, {kNoTensor, 0, 128, 0}, {kIdle, 0, 0, 0}}},
    {"e_same_mix", "(e) same WG x3: kernel pair (8 wgmma) + 64 ex2 with FFMA/FADD/IMAD/F2FP", 3, 0,
     {{kAttn, 8, 64, 1}, {kAttn, 8, 64, 1}, {kAttn, 8, 64, 1}, {kIdle, 0, 0, 0}}},
    {"e_ex2mix_3m", "(e) MUFU + ALU only: 3 WGs 64 ex2 with the mix", 3, 0,
     {{kNoTensor, 0, 64, 1}, {kNoTensor, 0, 64, 1}, {kNoTensor, 0, 64, 1}, {kIdle, 0, 0, 0}}},
    // (f) the exact kernel's tensor work alone: bf16 wgmma with nothing else, the ceiling of its MMA rate under the
    // power cap (tensor % of 2048 MACs/clk/SM in these rows).
    {"f_bf16ss_4t", "(f) tensor only: 4 WGs bf16 SS", 4, 0,
     {{kBf16SS, 8, 0, 0}, {kBf16SS, 8, 0, 0}, {kBf16SS, 8, 0, 0}, {kBf16SS, 8, 0, 0}}},
    {"f_bf16rs_4t", "(f) tensor only: 4 WGs bf16 RS", 4, 0,
     {{kBf16RS, 8, 0, 0}, {kBf16RS, 8, 0, 0}, {kBf16RS, 8, 0, 0}, {kBf16RS, 8, 0, 0}}},
    {"f_bf16ss_2t", "(f) tensor only: 2 WGs bf16 SS, 2 idle (the exact kernel's two consumers)", 4, 0,
     {{kBf16SS, 8, 0, 0}, {kBf16SS, 8, 0, 0}, {kIdle, 0, 0, 0}, {kIdle, 0, 0, 0}}},
    // two warpgroups with A from registers, as the kernel's P V (P in registers): does RS on the kernel's two
    // consumers still reach the ceiling, or is part of D=256's gap to the bare loop there (dev/NOTES.md, "Call P61")?
    {"f_bf16rs_2t", "(f) tensor only: 2 WGs bf16 RS, 2 idle (the kernel's P V on its two consumers)", 4, 0,
     {{kBf16RS, 8, 0, 0}, {kBf16RS, 8, 0, 0}, {kIdle, 0, 0, 0}, {kIdle, 0, 0, 0}}},
    // (g) (f) with the exact kernel's L2 -> shared traffic beside it: K and V, 2 x 2 bytes a key and channel, for
    // 2 x 128 rows of MACs a tile (128-row tiles): 1/64 byte per MAC, 16 KB per warpgroup and iteration of 8
    // m64n128k16 (1 M MACs); half of it is what K/V multicast across a CTA pair would leave.
    {"g_bf16ss_l2_4t", "(g) 4 WGs bf16 SS + 16 KB L2 -> shared a WG and iteration (1/64 B a MAC: the kernel's)", 4,
     0, {{kBf16SS, 8, 0, 0, 16384}, {kBf16SS, 8, 0, 0, 16384}, {kBf16SS, 8, 0, 0, 16384}, {kBf16SS, 8, 0, 0, 16384}}},
    {"g_bf16ss_l2half_4t", "(g) 4 WGs bf16 SS + 8 KB L2 -> shared (1/128 B a MAC: a CTA pair's multicast)", 4, 0,
     {{kBf16SS, 8, 0, 0, 8192}, {kBf16SS, 8, 0, 0, 8192}, {kBf16SS, 8, 0, 0, 8192}, {kBf16SS, 8, 0, 0, 8192}}},
    {"g_bf16ss_l2x2_4t", "(g) 4 WGs bf16 SS + 32 KB L2 -> shared (1/32 B a MAC: 64-row tiles)", 4, 0,
     {{kBf16SS, 8, 0, 0, 32768}, {kBf16SS, 8, 0, 0, 32768}, {kBf16SS, 8, 0, 0, 32768}, {kBf16SS, 8, 0, 0, 32768}}},
    // the same bytes a stage ahead: the copies' latency under the previous iteration's wgmmas, so what is left of the
    // loss is the traffic's energy (the clock) and bandwidth, not its wait
    {"g_bf16ss_l2ahead_4t", "(g) 4 WGs bf16 SS + 16 KB L2 -> shared, a stage ahead", 4, 0,
     {{kBf16SS, 8, 0, 0, 16384, 1}, {kBf16SS, 8, 0, 0, 16384, 1}, {kBf16SS, 8, 0, 0, 16384, 1},
      {kBf16SS, 8, 0, 0, 16384, 1}}},
    {"g_bf16ss_l2halfahead_4t", "(g) 4 WGs bf16 SS + 8 KB L2 -> shared, a stage ahead", 4, 0,
     {{kBf16SS, 8, 0, 0, 8192, 1}, {kBf16SS, 8, 0, 0, 8192, 1}, {kBf16SS, 8, 0, 0, 8192, 1},
      {kBf16SS, 8, 0, 0, 8192, 1}}},
    // (h) K/V multicast in CTA pairs: 16 KB land in every CTA a WG-iteration, as in g_bf16ss_l2ahead_4t, but each CTA
    // reads only half of them from L2 and copies them into both, a stage ahead, a stage refilled only once both CTAs
    // have waited for it (the lock-step a multicast kernel has). Against g_bf16ss_l2ahead_4t (same bytes delivered)
    // and g_bf16ss_l2halfahead_4t (same bytes read): is the traffic's cost in reading L2 or in delivering the bytes?
    {"h_bf16ss_mc_4t", "(h) 4 WGs bf16 SS, CTA pairs: 16 KB into each CTA, 8 KB read from L2 by each (multicast)", 4,
     0, {{kBf16SS, 8, 0, 0, 16384, 1}, {kBf16SS, 8, 0, 0, 16384, 1}, {kBf16SS, 8, 0, 0, 16384, 1},
         {kBf16SS, 8, 0, 0, 16384, 1}}, 2},
};

// A launch of `ctas` CTAs of kWGs warpgroups in clusters of two (the (h) pairs). The attribute lives beside the
// configuration that points at it.
struct PairLaunch {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg;
  PairLaunch(int ctas, int wgs, size_t smem) : attr{}, cfg{} {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(static_cast<unsigned>(ctas));
    cfg.blockDim = dim3(wgs * 128);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  PairLaunch(const PairLaunch&) = delete;  // cfg.attrs points into this object
};

template <int kWGs, int kKind, bool kMix>
void launch_one(const Params& p, int sms, size_t smem) {
  CHECK(cudaFuncSetAttribute(overlap_kernel<kWGs, kKind, kMix>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)));
  if (p.cluster != 2) {
    overlap_kernel<kWGs, kKind, kMix><<<sms, kWGs * 128, smem>>>(p);
    return;
  }
  const PairLaunch launch(sms, kWGs, smem);
  CHECK(cudaLaunchKernelEx(&launch.cfg, overlap_kernel<kWGs, kKind, kMix>, p));
}

// The CTAs of a pair launch (v.cluster 2): two a cluster, as many clusters as fit at once at one CTA an SM (an SM
// left over in a GPC of odd size stays idle).
int pair_ctas(const Variant& v, int sms, size_t smem) {
  if (v.cluster != 2) return sms;
  auto kernel = overlap_kernel<4, kBf16SS, false>;  // the only pair kind built
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const PairLaunch launch(sms & ~1, 4, smem);
  int clusters = 0;
  CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.cfg));
  return std::min(2 * clusters, sms & ~1);
}

// The variant's one tensor kind (kNoTensor if none) and whether its exponentials carry the ALU mix; the kernels built.
bool launch(const Variant& v, const Params& p, int sms, size_t smem) {
  int kind = kNoTensor, mix = -1;
  for (int w = 0; w < v.wgs; ++w) {
    const Role& r = v.role[w];
    if (r.kind == kIdle) continue;
    if (r.kind != kNoTensor) {
      if (kind != kNoTensor && kind != r.kind) return false;
      kind = r.kind;
    }
    if (mix >= 0 && mix != r.mix) return false;
    mix = r.mix;
  }
  const bool m = mix == 1;
  if (v.wgs == 4 && kind == kFp8SS && !m) launch_one<4, kFp8SS, false>(p, sms, smem);
  else if (v.wgs == 4 && kind == kS8SS && !m) launch_one<4, kS8SS, false>(p, sms, smem);
  else if (v.wgs == 4 && kind == kFp8RS && !m) launch_one<4, kFp8RS, false>(p, sms, smem);
  else if (v.wgs == 4 && kind == kNoTensor && !m) launch_one<4, kNoTensor, false>(p, sms, smem);
  else if (v.wgs == 4 && kind == kBf16SS && !m) launch_one<4, kBf16SS, false>(p, sms, smem);
  else if (v.wgs == 4 && kind == kBf16RS && !m) launch_one<4, kBf16RS, false>(p, sms, smem);
  else if (v.wgs == 3 && kind == kAttn) {
    if (m) launch_one<3, kAttn, true>(p, sms, smem);
    else launch_one<3, kAttn, false>(p, sms, smem);
  } else if (v.wgs == 3 && kind == kNoTensor && m) launch_one<3, kNoTensor, true>(p, sms, smem);
  else return false;
  return true;
}

double unix_now() {
  timeval tv;
  gettimeofday(&tv, nullptr);
  return tv.tv_sec + tv.tv_usec * 1e-6;
}

int run_variant(const Variant& v, double seconds, int sms, float* sink, unsigned long long* stats_d,
                const uint8_t* src, bool report) {
  Params p{};
  if (v.sync && v.role[0].kind == kIdle) {  // thread 0 reads the clock for all in sync mode
    std::fprintf(stderr, "%s: sync needs warpgroup 0 working\n", v.name);
    std::exit(1);
  }
  for (int w = 0; w < kMaxWGs; ++w) p.role[w] = w < v.wgs ? v.role[w] : Role{kIdle, 0, 0, 0, 0, 0};
  p.sync = v.sync;
  for (int w = 0; w < v.wgs; ++w) p.sync_threads += p.role[w].kind != kIdle ? 128 : 0;
  p.budget_ns = static_cast<uint64_t>(seconds * 1e9);
  p.c1 = -1.f; p.c2 = 0.f; p.c3 = 1.f; p.c4 = 0.f; p.im = 3; p.ia = 1;
  p.sink_key = 0;
  p.sink = sink;
  p.stats = stats_d;
  p.src = src;
  const size_t smem = std::max(sizeof(Shared) + 1024, kSmemAsk);
  const int all_sms = sms;
  p.cluster = v.cluster == 2 ? 2 : 1;
  if (p.cluster == 2) {
    sms = pair_ctas(v, sms, smem);
    // ~6.5e5 iterations a second per warpgroup near 700 TFLOPS (call P59's g rows): about `seconds` of work
    p.iters_fixed = std::max(1000ull, static_cast<unsigned long long>(seconds * 6.5e5));
  }
  CHECK(cudaMemset(stats_d, 0, sizeof(unsigned long long) * sms * kMaxWGs * kStat));
  const double t0 = unix_now();
  if (!launch(v, p, sms, smem)) {
    std::fprintf(stderr, "%s: no kernel built for this mix of roles\n", v.name);
    std::exit(1);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  const double t1 = unix_now();
  std::vector<unsigned long long> st(static_cast<size_t>(sms) * kMaxWGs * kStat);
  CHECK(cudaMemcpy(st.data(), stats_d, st.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  // Per CTA: the SM's tensor MACs and ex2 per clock, summed over its warpgroups (which ran over the same interval),
  // and its clock (cycles / ns); then averaged over CTAs. Totals for the TFLOPS over the mean CTA wall time.
  double macs_clk = 0, ex2_clk = 0, ghz = 0, macs = 0, ex2 = 0, ns = 0;
  bool bf16 = false;  // the variant's tensor kind is bf16: its peak is 2048 MACs/clk/SM
  for (int w = 0; w < v.wgs; ++w) bf16 |= is_bf16(v.role[w].kind);
  std::set<unsigned long long> smids;
  for (int b = 0; b < sms; ++b) {
    double cta_ns = 0, cta_cyc = 0;
    for (int w = 0; w < v.wgs; ++w) {
      const unsigned long long* s = &st[(static_cast<size_t>(b) * kMaxWGs + w) * kStat];
      if (s[1] != 0) smids.insert(s[3]);
      const Role& r = p.role[w];
      if (r.kind == kIdle || s[1] == 0) continue;
      const double m = r.kind == kNoTensor ? 0.0 : double(s[0]) * r.t * kMacsPerWgmma / (is_bf16(r.kind) ? 2 : 1);
      const double x = double(s[0]) * r.e * 128.0;
      macs_clk += m / double(s[1]);
      ex2_clk += x / double(s[1]);
      macs += m;
      ex2 += x;
      cta_ns = std::max(cta_ns, double(s[2]));
      cta_cyc = std::max(cta_cyc, double(s[1]));
    }
    ns += cta_ns;
    ghz += cta_cyc / std::max(cta_ns, 1.0);
  }
  macs_clk /= sms;
  ex2_clk /= sms;
  ghz /= sms;
  ns /= sms;
  const double tflops = 2.0 * macs / (ns * 1e-9) / 1e12;
  if (!report) return 0;
  std::printf(
      "{\"variant\": \"%s\", \"what\": \"%s\", \"wgs\": %d, \"sync\": %d, \"sms\": %d, \"t_start\": %.3f, "
      "\"t_end\": %.3f, \"seconds\": %.4f, \"sm_ghz\": %.4f, \"tflops\": %.1f, \"macs_per_clk_sm\": %.1f, "
      "\"tensor_frac\": %.4f, \"ex2_per_clk_sm\": %.3f, \"mufu_frac\": %.4f, \"distinct_sms\": %d, "
      "\"tflops_all_sms\": %.1f}\n",
      v.name, v.what, v.wgs, v.sync, sms, t0, t1, ns * 1e-9, ghz, tflops, macs_clk,
      macs_clk / (bf16 ? 2048.0 : 4096.0), ex2_clk,
      ex2_clk / 16.0, static_cast<int>(smids.size()), tflops * all_sms / sms);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2.0, pause = 0.5;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--list")) {
      for (const Variant& v : kVariants) std::printf("%-14s %s\n", v.name, v.what);
      return 0;
    } else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--pause") && i + 1 < argc) {
      pause = std::atof(argv[++i]);
    } else {
      names.emplace_back(argv[i]);
    }
  }
  for (const std::string& n : names) {
    bool known = false;
    for (const Variant& v : kVariants) known |= n == v.name;
    if (!known) {
      std::fprintf(stderr, "unknown variant %s (--list)\n", n.c_str());
      return 2;
    }
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float* sink;
  unsigned long long* stats;
  CHECK(cudaMalloc(&sink, sizeof(float) * sms * 512));
  CHECK(cudaMalloc(&stats, sizeof(unsigned long long) * sms * kMaxWGs * kStat));
  uint8_t* src;  // the (g) variants' source: pseudo-random bytes, so that the copies toggle as real data does
  CHECK(cudaMalloc(&src, kSrcBytes));
  {
    std::vector<uint32_t> h(kSrcBytes / 4);
    uint32_t x = 12345u;
    for (uint32_t& w : h) w = (x = x * 1664525u + 1013904223u) & 0xBFBFBFBFu;
    CHECK(cudaMemcpy(src, h.data(), kSrcBytes, cudaMemcpyHostToDevice));
  }
  for (const Variant& v : kVariants) {
    bool want = names.empty();
    for (const std::string& n : names) want |= n == v.name;
    if (!want) continue;
    run_variant(v, 0.05, sms, sink, stats, src, false);  // warm-up (and the first launch's module load), not reported
    run_variant(v, seconds, sms, sink, stats, src, true);
    if (pause > 0) usleep(static_cast<useconds_t>(pause * 1e6));  // idle: the card cools the same way before each
  }
  return 0;
}
