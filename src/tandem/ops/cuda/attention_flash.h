// Tiled ("flash") causal grouped-query attention on tensor cores whose memory is linear in the sequence length T,
// forward and backward, with the same bits every run: every sum has a fixed order and no atomics.
//
// The semantics and layouts are those of ops.h's attention_gqa_forward / _backward (and the plain kernels in
// attention_gqa.cu): qkv and dqkv (B, T, W) with W = (H + 2 Hkv) D, query head h at column h*D, kv head g at
// H*D + g*D (k) and (H + Hkv) D + g*D (v), query head h reading kv head h / (H / Hkv); y and dy (B, T, H*D);
// lse (B, H, T) f32, the natural-log log-sum-exp of each row's scores q.k / sqrt(D). With documents (B, T) i32
// (non-decreasing along T) row i attends only keys j in [start_i, i], start_i the first position of its document.
//
// Depends on the CUDA runtime alone (no Tandem header), so a standalone nvcc program can build it
// (bench/gpu/flash_check.cu). Data bf16 or f16 with fp32 accumulation; D 64 or 128; any T >= 0 and B >= 1; every
// pointer on a 16-byte boundary (qkv, y, dy and dqkv rows are then too, D being a multiple of 8).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace tandem::ops::cuda {

struct FlashDims {
  int64_t b, t;  // batch, sequence length
  int h, kv, d;  // query heads H, key/value heads Hkv (H a multiple of Hkv), head dim D
};

// Whether the kernels take this shape (D 64 or 128, H a positive multiple of Hkv, B H within a grid's second
// dimension) and these pointers (16-byte boundaries); the dtype is the caller's to check (16-bit only).
bool flash_attention_supported(const FlashDims& s);
bool flash_attention_aligned(std::initializer_list<const void*> pointers);

// y (B, T, H*D) and lse (B, H, T) from qkv (B, T, W). documents (B, T) or null (one document). f16: the data is
// f16, else bf16. Queued on `stream`; the launch's error is returned (no synchronisation).
cudaError_t flash_attention_forward(const FlashDims& s, const void* qkv, void* y, float* lse, const int32_t* documents,
                                    bool f16, cudaStream_t stream);

// dqkv (B, T, W) overwritten from qkv, y, lse (the forward's), dy. scratch holds
// flash_attention_backward_scratch_bytes(s) bytes: rowsum(dy * y) (B, H, T) f32.
cudaError_t flash_attention_backward(const FlashDims& s, const void* qkv, const void* y, const float* lse,
                                     const void* dy, void* dqkv, float* scratch, const int32_t* documents, bool f16,
                                     cudaStream_t stream);

// B H T f32: linear in T (cuDNN's deterministic backward wants 2 B H T^2 bytes).
inline int64_t flash_attention_backward_scratch_bytes(const FlashDims& s) {
  return s.b * static_cast<int64_t>(s.h) * s.t * 4;
}

}  // namespace tandem::ops::cuda
