// Inline-PTX wrappers, one per instruction family, each naming its PTX ISA section (ISA 9.0 numbering).
// Pure CUDA: no torch. wgmma itself lives in wgmma_ops.cuh (generated: its operand lists are long).
#pragma once
#include <cstdint>
#include <cuda.h>  // CUtensorMap (the type only; nothing links against libcuda)

namespace vidattn::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The global nanosecond timer (PTX ISA, Special Registers: %globaltimer). Only the timeline build reads it, beside
// clock64, so that its cycle stamps convert to time at the clock the SM actually ran (diag_timeline.cuh).
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- mbarrier (9.7.13.15) -------------------------------------------------------------------------------
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrive_count) : "memory");
}

// Makes barrier initialisation visible to the async proxy (TMA) before first use (9.7.13.15.x, fence.mbarrier_init).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival that also announces `bytes` of transaction (TMA) traffic the phase must wait for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Spins until the phase with the given parity has completed (try_wait suspends in hardware for a while per try).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "VIDATTN_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra VIDATTN_WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// Whether the phase with the given parity has completed, without waiting (mbarrier.test_wait, 9.7.13.15.16). Only
// the timeline build uses it, to count waits that would block without timing them (diag_timeline.cuh, TlLate).
__device__ __forceinline__ bool mbarrier_ready(uint64_t* bar, uint32_t parity) {
  uint32_t ready;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(ready)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return ready != 0;
}

// ---- TMA: cp.async.bulk.tensor (9.7.9.25.5.1) ------------------------------------------------------------
// 4-D tile load global -> shared, completion counted in bytes on `bar`. Out-of-bounds box elements read as 0,
// which is what makes sequence tails free on loads.
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// The same load multicast (9.7.9.25.5.1, .multicast::cluster): the box lands at dst's CTA-relative offset in every
// CTA of the cluster named in cta_mask, and its bytes complete on bar's offset in each of them. A CTA pair's producers
// each load half of a K/V block this way (FwdTraits::kPairs), so every CTA's barrier counts both halves.
__device__ __forceinline__ void tma_load_4d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                                      int c2, int c3, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "h"(cta_mask)
      : "memory");
}

// 4-D tile store shared -> global (9.7.9.25.5.1), tracked in the issuing thread's bulk async-groups (9.7.9.25.6:
// cp.async.bulk.commit_group / wait_group). Box elements outside the tensor are not written, so query tails need no
// bounds checks. The shared source must be made visible to the async proxy first (fence_proxy_async_smem).
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, const void* src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// .read: only until the sources have been read (the shared buffer may be rewritten); without it, until written.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}
// 16 zero bytes into shared memory (st, 9.7.9.9: st.shared.v4.b32), a generic-proxy write: a wgmma that reads the
// bytes later needs fence_proxy_async_smem between them (wgmma reads shared memory through the async proxy).
__device__ __forceinline__ void st_shared_zero16(uint32_t smem_byte_addr) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(smem_byte_addr), "r"(0) : "memory");
}
// fence.proxy.async (9.7.13.4.x): this thread's generic-proxy shared-memory writes, ordered before later
// async-proxy (TMA) accesses.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- TMA prefetch: cp.async.bulk.prefetch.tensor (9.7.9.25.5.3) ----------------------------------------------
// 4-D tile global -> L2 only: no shared memory, no barrier, a hint the memory system may drop. Used to bring the
// next tile's Q into L2 while its shared-memory buffer is still in use.
__device__ __forceinline__ void tma_prefetch_l2_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- clusters (CTA pairs: FwdTraits::kPairs) -------------------------------------------------------------
// %cluster_ctarank (special register, 10.x): this CTA's rank in its cluster, read afresh where used.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// mapa (9.7.9.22): the shared::cluster address of p's offset in the shared memory of CTA `rank` of this cluster.
__device__ __forceinline__ uint32_t mapa(const void* p, uint32_t rank) {
  uint32_t a;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_addr(p)), "r"(rank));
  return a;
}
// barrier.cluster arrive + wait (9.7.13.3), every thread of every CTA of the cluster, converged: the barrier inits of
// both CTAs (fence_barrier_init releases them at cluster scope) before either CTA's TMA or arrivals reach the other's.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// One arrival on the barrier at bar's offset in CTA `rank` (9.7.13.15.13, mbarrier.arrive on shared::cluster), with
// the default semantics, release at CTA scope: enough to hand back a shared-memory stage this thread has finished
// reading (its wgmma or bulk-store reads waited for), and free of fences, where .release.cluster compiles to MEMBAR.GPU
// ahead of every arrival (ptxas 13.0), twice a key block in the consumers' loop.
__device__ __forceinline__ void mbarrier_arrive_remote(uint64_t* bar, uint32_t rank) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(mapa(bar, rank)) : "memory");
}
// The same, release at cluster scope: this thread's earlier writes into that CTA (st_cluster_u32) are seen by whoever
// waits on the barrier with acquire at cluster scope (mbarrier_wait_cluster). Once or twice a kernel.
__device__ __forceinline__ void mbarrier_arrive_remote_cluster(uint64_t* bar, uint32_t rank) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(mapa(bar, rank)) : "memory");
}
// mbarrier_wait with acquire at cluster scope (9.7.13.15.16): what the other CTA wrote into this one before its
// release arrival is seen after the wait.
__device__ __forceinline__ void mbarrier_wait_cluster(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "VIDATTN_CWAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra VIDATTN_CWAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// A 32-bit store into the shared memory of CTA `rank` at p's offset (st.shared::cluster: st, 9.7.9).
__device__ __forceinline__ void st_cluster_u32(const void* p, uint32_t rank, uint32_t v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(mapa(p, rank)), "r"(v) : "memory");
}

// %laneid (special register, 10.x), read with asm volatile so that values derived from it are computed where used:
// an epilogue's lane-dependent addresses hoisted out of the tile loop stay live through the whole main loop.
__device__ __forceinline__ int lane_id() {
  int l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}
// %tid.x (special register, 10.1), read afresh: the warp's index in its block (%warpid may change over a warp's life).
__device__ __forceinline__ int warp_in_block() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t / 32;
}

// ---- ldmatrix (9.7.14.5.15): four 8x8 16-bit matrices from shared memory into mma fragment layout ----------
// Lanes 8k..8k+7 give the row addresses of matrix k; lane l receives element (l / 4, 2 * (l % 4) + {0, 1}) of
// matrix k in r[k]. With the matrices ordered (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
// (rows 8-15, k 8-15) that is wgmma's A fragment for one warp's 16 rows and 16 k (9.7.15.5.1.1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t smem_byte_addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_byte_addr)
               : "memory");
}

// ---- stmatrix (9.7.14.5.16): four 8x8 16-bit matrices from mma fragment layout to shared memory ------------
// Lane l holds element (l / 4, 2 * (l % 4) + {0, 1}) of matrix k in r_k; lanes 8k..8k+7 give the row addresses of
// matrix k. This is the accumulator layout of wgmma, so O leaves the registers with no shuffles.
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_byte_addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_byte_addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// ---- named barriers (9.7.13.1 bar.sync): sync a subset of warps; id 0 is __syncthreads' -------------------
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- setmaxnreg (9.7.17.1): move registers between warpgroups; needs the launch-bounds register cap ----------
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// ---- wgmma ordering (9.7.15.5.3-5) ------------------------------------------------------------------------
// fence: registers written by ordinary instructions (rescaled O, packed P) are ordered before the next wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes an immediate in [0, 7]");
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across an in-flight wgmma.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Shared-memory matrix descriptor (9.7.15.5.1.2.2), 128-byte swizzle. Addresses and offsets are in bytes.
__device__ __forceinline__ uint64_t make_smem_desc_sw128(uint32_t smem_byte_addr, uint32_t lbo, uint32_t sbo) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16;
  desc |= static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32;
  desc |= 1ull << 62;  // swizzle mode 1 = 128B
  return desc;
}

// ---- math ---------------------------------------------------------------------------------------------------
// ex2.approx (9.7.4.x): one MUFU op; -inf -> +0, which is how masked keys drop out of the softmax.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// rcp.approx.ftz.f32 (9.7.4.x): one MUFU op, within 1 ulp; the normaliser of O, whose bf16/fp16 rounding is 2^16
// times coarser. (1.f / x compiles to the IEEE division with a branch to a slow path.)
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// cvt.rn.{bf16x2,f16x2}.f32 (9.7.9.21): two fp32 -> one packed 32-bit register, `lo` in the low half.
template <bool kFp16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (kFp16) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

}  // namespace vidattn::ptx
