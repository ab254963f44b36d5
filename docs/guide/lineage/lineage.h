// lineage.h: the one C ABI every lineage step (docs/guide/lineage/NN_*.cu) implements.
//
// Contract (every step may assume it and must return an error, never garbage, for anything else):
//   - q, k, v, o: contiguous (batch, seqlen, heads, head_dim) bf16 device pointers (BSHD);
//   - head_dim == 128, non-causal, Sq == Skv == seqlen;
//   - seqlen a positive multiple of 1408 (= lcm(128, 176), so every step's query and key tiles divide it);
//   - scale: the softmax scale (usually 1/sqrt(head_dim)), applied to Q.K^T before the softmax.
// The canonical benchmark shape is batch=1, heads=16, seqlen=11264 (= 128*88 = 176*64), head_dim=128.
//
// Each step's .cu is standalone (CUDA headers + this file only) and defines both functions extern "C".
// lineage_fwd launches on `stream` (a cudaStream_t; NULL = legacy default stream) and does not synchronize.
#ifndef VIDATTN_LINEAGE_H
#define VIDATTN_LINEAGE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LineageArgs {
    const void* q;  // (batch, seqlen, heads, head_dim) bf16, contiguous
    const void* k;  // (batch, seqlen, heads, head_dim) bf16, contiguous
    const void* v;  // (batch, seqlen, heads, head_dim) bf16, contiguous
    void* o;        // (batch, seqlen, heads, head_dim) bf16, contiguous, written in full
    int batch, heads, seqlen, head_dim;
    float scale;
} LineageArgs;

// Returns 0 when the kernel was launched; otherwise nonzero and lineage_error() says why.
int lineage_fwd(const LineageArgs* args, void* stream);
// The last error message of this step's lineage_fwd in this process ("" if none). Never NULL.
const char* lineage_error(void);

#ifdef __cplusplus
}
#endif

#endif  // VIDATTN_LINEAGE_H
