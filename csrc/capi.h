// C ABI of the kernel library: what vidattn/_ext.py calls through ctypes. Keep in sync with `_Args` there.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct VidattnFwdArgs {
  const void* q;        // (B, Sq, H, D) view: element strides below, last dim contiguous
  const void* k;        // (B, Skv, H, D)
  const void* v;        // (B, Skv, H, D)
  void* o;              // (B, Sq, H, D)
  float* lse;           // (B, H, Sq) contiguous fp32, or NULL
  const int32_t* kv_lens;  // (B,) or NULL
  int64_t batch, heads, seqlen_q, seqlen_kv, head_dim;  // head_dim: a multiple of 8 from 8 to 256
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];  // (batch, seq, head) strides, in elements
  float scale;
  int32_t dtype;        // 0 = bf16, 1 = fp16
  // Scratch of vidattn_sm90_workspace_bytes() bytes for the tail launch (capi.cu, plan_tail: the last, partial round
  // of tiles split along the keys), or NULL: launches then keep the plain schedule. Any contents; one launch at a
  // time per workspace (one per stream).
  void* workspace;
  uint64_t workspace_bytes;
  // Key/value heads: grouped-query attention when fewer than `heads` (heads % kv_heads == 0; query head h reads
  // key/value head h / (heads / kv_heads), in place, no copy), or 0 for as many as `heads`. k and v have this many
  // heads; k_stride and v_stride step over them. Last in the struct so that callers predating it pass 0.
  int64_t kv_heads;
  // Causal mask: 0 none, 1 top-left aligned (query i sees keys j <= i: SDPA's is_causal), 2 bottom-right aligned
  // (j <= i + kv_len - seqlen_q, kv_len being seqlen_kv or the batch's kv_lens entry: FlashAttention's convention
  // when the lengths differ). kv_lens shortens the keys first, then the mask aligns to them. Rows that see no key
  // (bottom-right with kv_len < seqlen_q) get O = 0 and LSE -inf. Last in the struct so that callers predating it
  // pass 0. The 8-bit entry (vidattn_q8_fwd) refuses anything but 0.
  int32_t causal;
  // Block-sparse attention (flash_fwd.cuh, kSparse), or NULL for dense: the mask in 64 x 64 blocks of (query rows,
  // keys), given per tile of 128 rows, or 192 with blk_wgs 3 (vidattn_sm90_sparse_layout: tile t = (batch * heads +
  // head) * ceil(Sq / tile rows) + row block) as blk_cnt[t] entries blk_list[2 * (t * blk_stride + j) + {0, 1}] =
  // {first key / 64, bits} of key blocks of 128 keys, each starting at a multiple of 64 keys below Skv, ascending,
  // at most ceil(Skv / 128) of them (entries past that are not read); bit 2 w + c set where the tile's w-th 64 rows
  // see the block's c-th 64 keys, no (row, key) pair named twice. Head dims 64 and 128 (exactly), no kv_lens, not
  // causal; rows that see no key get O = 0 and LSE -inf. Last in the struct so that callers predating it pass NULL.
  const int32_t* blk_cnt;
  const int32_t* blk_list;
  int64_t blk_stride;
  // The consumer warpgroups a block-sparse tile has, each its own 64 rows: 0 or 2 (128-row tiles), or 3 at head dim
  // 64 (192-row tiles, bits 2 w + c for w < 3; vidattn_sm90_sparse_warpgroups). The tables must be built for it. Last
  // in the struct so that callers predating it pass 0.
  int32_t blk_wgs;
} VidattnFwdArgs;

// Launches on `stream` (a cudaStream_t). Returns 0 on success; otherwise vidattn_sm90_last_error() says why.
int vidattn_sm90_fwd(const VidattnFwdArgs* args, void* stream);
// The block-sparse layout (VidattnFwdArgs::blk_cnt): rows and keys of a tile (the two-warpgroup tile's; 192 rows
// with blk_wgs 3) and of a key block, of a mask block, and the unit of an entry's first key.
// (vidattn_sm90_sparse_tile, without the unit, was the layout of key blocks counted in 128 keys: a library that has
// only it reads the tables differently.)
int vidattn_sm90_sparse_layout(int32_t* tile_m, int32_t* tile_n, int32_t* block, int32_t* key_unit);
// The consumer warpgroup counts of a head dim's block-sparse builds, as bits (bit w set: VidattnFwdArgs::blk_wgs = w
// runs; blk_wgs 0 means 2); 0 for a head dim without them.
int vidattn_sm90_sparse_warpgroups(int32_t head_dim);
const char* vidattn_sm90_last_error(void);
// Head dim 64 only: force the consumer warpgroup count of later launches (2 or 3), or 0 for the launcher's choice
// by shape (the default). For tests and A/B timing; returns 0, or 1 for any other value (nothing changes).
int vidattn_sm90_set_d64_warpgroups(int warpgroups);
// Head dim 128 only: force the key-block width of later launches (the two builds: 176, and 128 for short keys), or 0
// for the launcher's choice by key count (the default). For tests and A/B timing; returns 0, or 1 for any other
// value (nothing changes).
int vidattn_sm90_set_d128_block_n(int block_n);
// Head dims 72..96 only: 128 runs later launches on the D=128 build with the columns padded, 96 or 0 (the default)
// on the D=96 build. For A/B timing and tests; returns 0, or 1 for any other value (nothing changes).
int vidattn_sm90_set_d96_build(int build);
// bf16 head dims 136..256: 1 runs later launches on the narrow D=192 (N=96) and D=256 (N=64) builds with the separate O
// scratch, 2 on the wide ones (N=112, 80) whose O epilogue goes through Q's buffer, 3 on the O-in-V builds (the wide
// widths, O through the V stages), 0 (the default) picks by key count; A/B variants of the D=256 O-in-V build (head
// dims 200..256; bf16 136..192 refused, fp16 wide): 4 O stored from registers, 5 Q loaded per warpgroup, 6 the O
// stores' reads waited for under the next tile's S_0 (the routed build), 7 that build with every partial key block
// narrowed, 8 that build run by CTA pairs sharing each K/V block (TMA multicast; vidattn_sm90_last_cluster_ctas says
// whether a call ran so). Nonzero return: bad value.
int vidattn_sm90_set_hd_narrow(int narrow);
// bf16 head dims 72..96 on the D=96 build: 3 runs later launches on three consumer warpgroups (192-row tiles, N=96),
// 2 on two (N=176), 0 (the default) picks by shape; fp16 always runs on two. Nonzero return: bad value (nothing
// changes).
int vidattn_sm90_set_d96_warpgroups(int warpgroups);
// The build (64, 96, 128, 192 or 256) a call of this head dim and causal mode (VidattnFwdArgs::causal) runs on, or 0
// when vidattn_sm90_fwd refuses it (causal masks past D=128 have no build). Pure function of the settings above.
int vidattn_sm90_build_head_dim(int head_dim, int causal);
// Key-block width (kBlockN) of the kernel this thread's last vidattn_sm90_fwd call launched (0: it launched none).
int vidattn_sm90_last_block_n(void);
// Where that kernel's epilogue staged O: 0 a scratch of its own, 1 Q's buffer, 2 the V stages (0: it launched none).
int vidattn_sm90_last_o_path(void);
// Rows of that kernel's Q box: 128 (the tile's) or 64 (a warpgroup's half: vidattn_sm90_set_hd_narrow(5)); 0: none.
int vidattn_sm90_last_q_box_rows(void);
// CTAs per cluster of that kernel's main launch: 1, or 2 (CTA pairs: vidattn_sm90_set_hd_narrow(8) where the call suits
// them: an even Q-block count, one launch); 0: none.
int vidattn_sm90_last_cluster_ctas(void);
// Bytes of workspace this build can use on the current device (0: it uses none, as a VIDATTN_TAIL_LAUNCH=0 build).
uint64_t vidattn_sm90_workspace_bytes(void);
// Key ranges per tile of the tail launch of this thread's last vidattn_sm90_fwd call (0: it had none; a balanced
// plan: the most pieces any tile has). For tests.
int vidattn_sm90_last_tail_splits(void);
// Whether kv_lens calls take the tail launch in later calls: 1 (the default) or 0 (the plain schedule), -1 the build's
// default or VIDATTN_TAIL_KV_LENS; returns nonzero for another value. vidattn_sm90_tail_kv_lens: the mode in force.
int vidattn_sm90_set_tail_kv_lens(int mode);
int vidattn_sm90_tail_kv_lens(void);
// The tail launch's plans in later calls: 2 lets ranges run in two short rounds where one range a tile per SM splits
// nothing, 3 cuts the last round's key blocks into one equal chunk per SM there instead (the balanced tail), 1 (the
// default) keeps the one-round plan, -1 the build's default or VIDATTN_TAIL_ROUNDS; returns nonzero for another
// value. vidattn_sm90_tail_rounds: the setting in force. vidattn_sm90_workspace_bytes follows it.
int vidattn_sm90_set_tail_rounds(int rounds);
int vidattn_sm90_tail_rounds(void);
// The causal modes vidattn_sm90_fwd takes (VidattnFwdArgs::causal up to this value): 2. Libraries that predate the
// field lack the symbol (vidattn/_ext.py then runs causal calls on SDPA).
int vidattn_sm90_causal_modes(void);
// The widest head dim a causal call runs on the kernel: 256 (builds at D=64, 128, 192 and 256). Libraries whose
// causal builds stop at D=128 lack the symbol (vidattn/_ext.py then runs wider causal calls on SDPA).
int vidattn_sm90_causal_max_head_dim(void);
// Causal calls with fewer query rows than a threshold keep the static tile order even with a workspace (the dynamic
// schedule's per-tile ticket costs more than it balances on short problems). One threshold per causal build: head
// dims up to 64 run on the D=64 build (default VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D64), 65-128 on the D=128 build
// (VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D128), 129-192 and 193-256 on the D=192 and D=256 builds (_D192, _D256). min_sq 0:
// dynamic whenever the workspace allows, -1: back to the build's default. _for sets the build that runs head_dim;
// without it, all four. Return 0, or 1 for a value below -1 or a head dim no causal build runs.
int vidattn_sm90_set_causal_dynamic_min_sq(int min_sq);
int vidattn_sm90_set_causal_dynamic_min_sq_for(int head_dim, int min_sq);
// The threshold in force for head_dim's causal build (-1: no causal build runs head_dim).
int vidattn_sm90_causal_dynamic_min_sq_for(int head_dim);
// 1 if this thread's last causal launch took the dynamic schedule (a tile counter in the workspace), 0 if static.
int vidattn_sm90_last_causal_dynamic(void);
// The dynamic schedule's head groups where they do not divide batch x heads: mode 0 puts the short group last, 1
// first (the launch then ends on a full group), -1 restores the build's default (VIDATTN_CAUSAL_GROUPING). Returns
// 0, or 1 for another mode. The tile order only: outputs are the same bits either way.
int vidattn_sm90_set_causal_grouping(int mode);
int vidattn_sm90_causal_grouping(void);
// The size of the short group that opened the list of this thread's last causal launch (0: none; the static order
// and mode 0 have none).
int vidattn_sm90_last_causal_first_group(void);
// Below the length threshold, causal calls whose static order would leave its busiest CTA more than permille / 1000
// of the mean (the simulator's model, dev/probes/causal_schedule_sim.py) take the dynamic schedule too. 0: off (the
// length alone decides), -1: the build's default (VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX). Returns 0, or 1 for a value
// between 1 and 999 or below -1.
int vidattn_sm90_set_causal_static_imbalance_max(int permille);
int vidattn_sm90_causal_static_imbalance_max(void);
// The static order's imbalance (permille) this thread's last causal call computed for that rule (0: it did not).
int vidattn_sm90_last_causal_static_imbalance(void);

// Fused rotary position embedding (csrc/common/rope.cuh states the formulas and why they are bit-exact with
// diffusers' eager torch code). out = rope(x) for x of shape (batch, seqlen, heads, head_dim), the tables broadcast
// over heads. Keep in sync with `_RopeArgs` in vidattn/rotary.py.
typedef struct VidattnRopeArgs {
  const void* x;        // (B, S, H, D) view: element strides below, last dim contiguous, 16-byte aligned
  void* out;            // (B, S, H, D), same rules; may be x itself (same strides): in place
  const void* cos;      // (B or 1, S, D) view: strides below, last dim contiguous, 16-byte aligned
  const void* sin;      // likewise
  int64_t batch, seqlen, heads, head_dim;  // head_dim: a multiple of 8 (mode 2: 16) up to 4096
  int64_t x_stride[3], out_stride[3];      // (batch, seq, head) strides, in elements: multiples of 8
  int64_t cos_stride[2], sin_stride[2];    // (batch, seq) strides, in elements: multiples of 16 bytes; 0 broadcasts
  int32_t dtype;        // x and out: 0 = bf16, 1 = fp16
  int32_t table_dtype;  // cos and sin: 0 = bf16, 1 = fp16, 2 = fp32
  int32_t mode;         // 0 = diffusers' Wan formula, 1 = interleaved pairs (apply_rotary_emb unbind -1),
                        // 2 = halves (apply_rotary_emb unbind -2)
} VidattnRopeArgs;

// Launches on `stream` (a cudaStream_t). Returns 0 on success; otherwise vidattn_sm90_last_error() says why.
int vidattn_rope(const VidattnRopeArgs* args, void* stream);
// The RoPE ABI's version (1); libraries that predate the fused RoPE lack the symbol.
int vidattn_rope_version(void);

// RMSNorm over each (batch, position) row of heads * head_dim elements, then the Wan RoPE (mode 0 above), in one
// pass: out = rope(rms_norm(x) * weight), as diffusers' Wan attention applies `torch.nn.RMSNorm(heads * head_dim)`
// and then its RoPE (csrc/common/norm_rope.cuh: the arithmetic, and the one step that is not bit for bit).
// Keep in sync with `_NormRopeArgs` in vidattn/rotary.py.
typedef struct VidattnNormRopeArgs {
  const void* x;        // (B, S, H, D) view: element strides below, last dim contiguous, 16-byte aligned
  void* out;            // (B, S, H, D), same rules; must not overlap x
  const void* weight;   // (H * D,) in x's dtype, contiguous, 16-byte aligned
  const void* cos;      // (B or 1, S, D) view: strides below, last dim contiguous, 16-byte aligned
  const void* sin;      // likewise
  int64_t batch, seqlen, heads, head_dim;  // head_dim: a multiple of 8 up to 4096; H * D at most 16384
  int64_t x_stride[3], out_stride[3];      // (batch, seq, head) strides, in elements: multiples of 8
  int64_t cos_stride[2], sin_stride[2];    // (batch, seq) strides, in elements: multiples of 16 bytes; 0 broadcasts
  float eps;            // added to the mean square, as RMSNorm's eps
  int32_t dtype;        // x, out and weight: 0 = bf16, 1 = fp16
  int32_t table_dtype;  // cos and sin: 0 = bf16, 1 = fp16, 2 = fp32
} VidattnNormRopeArgs;

// Launches on `stream` (a cudaStream_t). Returns 0 on success; otherwise vidattn_sm90_last_error() says why.
int vidattn_norm_rope(const VidattnNormRopeArgs* args, void* stream);
// The fused norm + RoPE kernel's schedule (csrc/common/norm_rope.cuh NormRopeSchedule): 0, the library's; 1 one row
// per CTA, 2 CTAs looping over rows, 3 one row per CTA with lean index math, 4 that held to 32 registers (A/B runs;
// bf16 x with fp32 tables only, other calls keep the default).
// Process-wide; returns 0, or 1 for a value out of range.
int vidattn_norm_rope_set_schedule(int schedule);
// The schedule (1-4) the calling thread's last vidattn_norm_rope launch ran; 0 before any.
int vidattn_norm_rope_last_schedule(void);

#ifdef __cplusplus
}
#endif
