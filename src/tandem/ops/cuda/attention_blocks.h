// The sums of cuDNN's deterministic attention backward run in blocks of query rows (attention_cudnn_blocks.cc,
// scratch_sizes.h): every block writes the dk and dv of its keys [0, keys) into dqkv's k and v columns, and these
// two kernels add them, block after block, into an f32 accumulator, so every key's gradient is summed in the order
// of the blocks (the same bits every run).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tandem/core/tensor.h"

namespace tandem::ops::cuda {

// The k and v columns of dqkv (B, T, W): `kv` points at row 0's first k column, rows `row_stride` elements apart,
// `width` = 2 Hkv D columns a row; `acc` is (B, T, width) f32.
struct BlockSums {
  float* acc;
  void* kv;
  int64_t b, t, width, row_stride;
  bool f16;  // the data is f16, else bf16
};

// acc[.., j, :] = (j < summed ? acc[.., j, :] : 0) + kv[.., j, :] for j < keys: `summed` rows already hold earlier
// blocks' sums, the rest start here. Queued on `stream`; the launch's error is returned.
cudaError_t attention_blocks_add(const BlockSums& s, int64_t keys, int64_t summed, cudaStream_t stream);

// kv[.., j, :] = round((j < summed ? acc[.., j, :] : 0) + kv[.., j, :]) for every j < T: the last block's own dk and
// dv added to the earlier blocks' sums, written back as dqkv's k and v columns.
cudaError_t attention_blocks_finish(const BlockSums& s, int64_t summed, cudaStream_t stream);

// Block i's query lengths (B) and then key lengths (B) at lengths[2 B i ...], blocks of `rows` query rows covering
// [0, t) (the last what is left): what cuDNN's padding mask cuts each block's graph to, written on the device. The
// keys are those up to the block's last row, or with `split` those before its first for every whole-height block (the
// graph of its rows against the keys before them; its diagonal square runs apart).
cudaError_t attention_blocks_lengths(int32_t* lengths, int64_t b, int64_t t, int64_t rows, bool split,
                                     cudaStream_t stream);

// A split block's dq: dq[e, first + r, c] = round((first > 0 ? dq[e, first + r, c] : 0) + beside[e, r, c]) for every
// batch element e < b, row r < rows and column c < hd (a multiple of 8), where dq is dqkv (B, t, row_stride), its q
// columns first, and beside the (B, rows, hd) dq of the block's diagonal square, both 16-bit (f16, else bf16).
cudaError_t attention_blocks_add_dq(void* dq, const void* beside, int64_t b, int64_t t, int64_t row_stride, int64_t hd,
                                    int64_t first, int64_t rows, bool f16, cudaStream_t stream);

// ops.h's attention_gqa_backward with cuDNN's deterministic graphs in blocks of `rows` query rows, each block's graph
// over `groups` head groups in turn, the whole-height blocks split in two or not (scratch_sizes.h), whatever the
// shape, for checks of the blocks at sizes the rule would run otherwise. False when cuDNN cannot run them or `groups`
// does not divide H and Hkv (nothing written).
bool attention_gqa_backward_in_blocks(const Tensor& qkv, int heads, int kv_heads, const Tensor& y, const Tensor& lse,
                                      const Tensor& dy, const Tensor& dqkv, int64_t rows, int64_t groups = 1,
                                      bool split = false);

}  // namespace tandem::ops::cuda
