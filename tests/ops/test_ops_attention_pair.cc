// Ring attention's block-pair ops (ops/attention_pair.h) against the whole-sequence attention: a sequence of 4 blocks
// with each query block's pairs (the causal pair on its own block, full pairs on the earlier blocks) merged in two
// orders gives attention_gqa_forward's y and lse, and the pairs' backward with the merged y and lse gives
// attention_gqa_backward's dq, dk and dv; grouped-query and multi-head; with documents, attention_gqa_documents'; the
// merge takes a part whole where nothing is merged yet and leaves out a part that saw no key; the scratch through the
// device as the counting device takes it, for a planned CPU and a planned GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops_test_util.h"
#include "tandem/device/counting_device.h"
#include "tandem/ops/attention_pair.h"
#include "tandem/ops/cpu/attention_pair.h"
#include "tandem/ops/cuda/attention_pair.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {
namespace {

using testing::randn;
using testing::rel_error;
using testing::values;

struct Dims {
  int64_t b, t, h, kv, d;
  int64_t width() const { return (h + 2 * kv) * d; }
};

void PrintTo(const Dims& s, std::ostream* os) {
  *os << "B=" << s.b << " T=" << s.t << " H=" << s.h << " Hkv=" << s.kv << " D=" << s.d;
}

// Columns [col, col + width) of rows [t0, t0 + n) of each sequence of x (B, T, W) as a contiguous (B, n, width).
Tensor block(const Tensor& x, int64_t t0, int64_t n, int64_t col, int64_t width) {
  const int64_t B = x.dim(0), T = x.dim(1), W = x.dim(2);
  Tensor out = Tensor::empty({B, n, width}, x.dtype(), x.device(), "block");
  for (int64_t b = 0; b < B; ++b)
    copy_columns(x.flat_slice((b * T + t0) * W, n * W, {n, W}), col,
                 out.flat_slice(b * n * width, n * width, {n, width}), 0, width);
  return out;
}

// The inverse: b (B, n, width) into columns [col, col + width) of rows [t0, t0 + n) of x (B, T, W).
void put(const Tensor& b, const Tensor& x, int64_t t0, int64_t col) {
  const int64_t B = x.dim(0), T = x.dim(1), W = x.dim(2), n = b.dim(1), width = b.dim(2);
  for (int64_t i = 0; i < B; ++i)
    copy_columns(b.flat_slice(i * n * width, n * width, {n, width}), 0, x.flat_slice((i * T + t0) * W, n * W, {n, W}),
                 col, width);
}

// lse (B, H, n) of query block `k` (of n rows) from lse (B, H, T).
Tensor lse_block(const Tensor& lse, int64_t t0, int64_t n) {
  const int64_t B = lse.dim(0), H = lse.dim(1), T = lse.dim(2);
  Tensor out = Tensor::empty({B, H, n}, DType::F32, lse.device(), "lse block");
  for (int64_t i = 0; i < B * H; ++i) out.flat_slice(i * n, n, {n}).copy_from(lse.flat_slice(i * T + t0, n, {n}));
  return out;
}

struct Blocks {
  int64_t n = 0;               // tokens of a block
  std::vector<Tensor> q, kv;   // (B, n, H D), (B, n, 2 Hkv D) of each block
  std::vector<Tensor> y, lse;  // the merged (B, n, H D) f32, (B, H, n) f32
};

// Cuts qkv (B, T, W) into `count` blocks and runs, for query block i, its pairs with kv blocks 0 .. i (`reversed`:
// i .. 0), merging each; with `documents` (B, T) i32 attention kept inside them.
Blocks ring_forward(const Tensor& qkv, const Dims& s, int count, bool reversed, const Tensor& documents = Tensor()) {
  Device& dev = qkv.device();
  Blocks r;
  r.n = s.t / count;
  const int heads = static_cast<int>(s.h), kv = static_cast<int>(s.kv);
  for (int i = 0; i < count; ++i) {
    r.q.push_back(block(qkv, i * r.n, r.n, 0, s.h * s.d));
    r.kv.push_back(block(qkv, i * r.n, r.n, s.h * s.d, 2 * s.kv * s.d));
  }
  for (int i = 0; i < count; ++i) {
    Tensor y = Tensor::zeros({s.b, r.n, s.h * s.d}, DType::F32, dev, "y");
    Tensor lse = Tensor::empty({s.b, s.h, r.n}, DType::F32, dev, "lse");
    fill(lse, -std::numeric_limits<float>::infinity());
    for (int step = 0; step <= i; ++step) {
      const int j = reversed ? i - step : step;
      Tensor y_part = Tensor::empty(y.shape(), DType::F32, dev, "y part");
      Tensor lse_part = Tensor::empty(lse.shape(), DType::F32, dev, "lse part");
      attention_pair_forward(r.q[i], r.kv[j], heads, kv, PairPlace{i * r.n, j * r.n, documents}, y_part, lse_part);
      attention_merge(y_part, lse_part, y, lse);
    }
    r.y.push_back(y);
    r.lse.push_back(lse);
  }
  return r;
}

class OpsAttentionPair : public ::testing::TestWithParam<Dims> {};

TEST_P(OpsAttentionPair, MergedPairsAreTheWholeSequencesAttention) {
  const Dims s = GetParam();
  const int heads = static_cast<int>(s.h), kv = static_cast<int>(s.kv);
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 3);
  Tensor dy = randn(dev, {s.b, s.t, s.h * s.d}, 4);
  Tensor y = Tensor::empty({s.b, s.t, s.h * s.d}, DType::F32, dev, "y");
  Tensor lse = Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse");
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");
  attention_gqa_forward(qkv, heads, kv, y, lse);
  attention_gqa_backward(qkv, heads, kv, y, lse, dy, dqkv);

  for (const bool reversed : {false, true}) {
    const Blocks r = ring_forward(qkv, s, 4, reversed);
    Tensor got_y = Tensor::empty(y.shape(), DType::F32, dev, "ring y");
    for (int i = 0; i < 4; ++i) {
      put(r.y[i], got_y, i * r.n, 0);
      EXPECT_LT(rel_error(values(r.lse[i]), values(lse_block(lse, i * r.n, r.n))), 1e-6) << "block " << i;
    }
    EXPECT_LT(rel_error(values(got_y), values(y)), 2e-6) << (reversed ? "reversed" : "in order");
  }

  // Backward with the merged output: every pair (i, j <= i) adds into query block i's dq and kv block j's dk | dv.
  const Blocks r = ring_forward(qkv, s, 4, false);
  std::vector<Tensor> dq, dkv;
  for (int i = 0; i < 4; ++i) {
    dq.push_back(Tensor::zeros(r.q[i].shape(), DType::F32, dev, "dq"));
    dkv.push_back(Tensor::zeros(r.kv[i].shape(), DType::F32, dev, "dkv"));
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j) {
      const Tensor dy_i = block(dy, i * r.n, r.n, 0, s.h * s.d);
      attention_pair_backward(r.q[i], r.kv[j], heads, kv, PairPlace{i * r.n, j * r.n, Tensor()}, r.y[i], r.lse[i], dy_i,
                              dq[i], dkv[j]);
    }
  Tensor got = Tensor::empty(qkv.shape(), DType::F32, dev, "ring dqkv");
  for (int i = 0; i < 4; ++i) {
    put(dq[i], got, i * r.n, 0);
    put(dkv[i], got, i * r.n, s.h * s.d);
  }
  EXPECT_LT(rel_error(values(got), values(dqkv)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsAttentionPair,
                         ::testing::Values(Dims{2, 24, 4, 2, 8},    // grouped-query
                                           Dims{1, 16, 6, 2, 4},    // 3 query heads a kv head
                                           Dims{2, 8, 3, 3, 16}));  // multi-head

// Where nothing is merged yet (lse -inf), the merge takes the part as it is, bit for bit; a part that saw no key (lse
// -inf) leaves the result as it is.
TEST(OpsAttentionPairMerge, TakesThePartWholeIntoAnEmptyResultAndLeavesOutAnEmptyPart) {
  device::CpuDevice dev;
  Tensor y_part = randn(dev, {2, 5, 12}, 9), lse_part = randn(dev, {2, 3, 5}, 10);
  Tensor y = Tensor::zeros(y_part.shape(), DType::F32, dev, "y");
  Tensor lse = Tensor::empty(lse_part.shape(), DType::F32, dev, "lse");
  fill(lse, -std::numeric_limits<float>::infinity());
  attention_merge(y_part, lse_part, y, lse);
  EXPECT_TRUE(testing::bit_equal(y, y_part));
  EXPECT_TRUE(testing::bit_equal(lse, lse_part));
  Tensor empty_y = Tensor::zeros(y.shape(), DType::F32, dev, "empty part");
  Tensor empty_lse = Tensor::empty(lse.shape(), DType::F32, dev, "empty part lse");
  fill(empty_lse, -std::numeric_limits<float>::infinity());
  attention_merge(empty_y, empty_lse, y, lse);
  EXPECT_TRUE(testing::bit_equal(y, y_part));
  EXPECT_TRUE(testing::bit_equal(lse, lse_part));
}

// Documents packed into the sequence: the pairs with each row's keys cut at its document's start give
// attention_gqa_documents' y, lse and gradients. The documents (lengths 5, 9, 1, 9) end and begin inside blocks of 6,
// so some rows see none of an earlier block's keys.
TEST(OpsAttentionPairDocuments, MergedPairsAreTheWholeSequencesAttentionInsideDocuments) {
  const Dims s{2, 24, 4, 2, 8};
  const int heads = 4, kv = 2;
  device::CpuDevice dev;
  Tensor qkv = randn(dev, {s.b, s.t, s.width()}, 5);
  Tensor dy = randn(dev, {s.b, s.t, s.h * s.d}, 6);
  std::vector<int32_t> ids;
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t t = 0; t < s.t; ++t) ids.push_back(static_cast<int32_t>(t < 5 ? 0 : t < 14 ? 1 : t < 15 ? 2 : 3));
  const Tensor documents = testing::ids_tensor(dev, ids).view({s.b, s.t});
  Tensor y = Tensor::empty({s.b, s.t, s.h * s.d}, DType::F32, dev, "y");
  Tensor lse = Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "lse");
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, dev, "dqkv");
  attention_gqa_documents_forward(qkv, heads, kv, documents, y, lse);
  attention_gqa_documents_backward(qkv, heads, kv, documents, y, lse, dy, dqkv);

  const Blocks r = ring_forward(qkv, s, 4, false, documents);
  Tensor got_y = Tensor::empty(y.shape(), DType::F32, dev, "ring y");
  Tensor got = Tensor::empty(qkv.shape(), DType::F32, dev, "ring dqkv");
  for (int i = 0; i < 4; ++i) {
    put(r.y[i], got_y, i * r.n, 0);
    EXPECT_LT(rel_error(values(r.lse[i]), values(lse_block(lse, i * r.n, r.n))), 1e-6) << "block " << i;
  }
  EXPECT_LT(rel_error(values(got_y), values(y)), 2e-6);
  std::vector<Tensor> dq, dkv;
  for (int i = 0; i < 4; ++i) {
    dq.push_back(Tensor::zeros(r.q[i].shape(), DType::F32, dev, "dq"));
    dkv.push_back(Tensor::zeros(r.kv[i].shape(), DType::F32, dev, "dkv"));
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j)
      attention_pair_backward(r.q[i], r.kv[j], heads, kv, PairPlace{i * r.n, j * r.n, documents}, r.y[i], r.lse[i],
                              block(dy, i * r.n, r.n, 0, s.h * s.d), dq[i], dkv[j]);
  for (int i = 0; i < 4; ++i) {
    put(dq[i], got, i * r.n, 0);
    put(dkv[i], got, i * r.n, s.h * s.d);
  }
  EXPECT_LT(rel_error(values(got), values(dqkv)), 1e-5);
}

// The scratch goes through the device and is returned, its peak what the scratch functions say, which the counting
// device takes for the planner with the work of the pairs (a causal pair half a full one's).
TEST(OpsAttentionPairScratch, ThroughTheDeviceAndCountedAlike) {
  const Dims s{2, 20, 4, 2, 8};
  const int heads = 4, kv = 2;
  device::CpuDevice dev;
  Tensor q = randn(dev, {s.b, s.t, s.h * s.d}, 1), kvs = randn(dev, {s.b, s.t, 2 * s.kv * s.d}, 2);
  Tensor y = Tensor::empty(q.shape(), DType::F32, dev, "y"), lse = Tensor::empty({s.b, s.h, s.t}, DType::F32, dev, "l");
  Tensor dq = Tensor::zeros(q.shape(), DType::F32, dev, "dq"), dkv = Tensor::zeros(kvs.shape(), DType::F32, dev, "dkv");
  const int threads = omp_get_max_threads();
  const uint64_t live = dev.live_bytes();
  dev.reset_peak();
  const PairPlace full{s.t, 0, Tensor()}, causal{0, 0, Tensor()};  // keys before the queries; the same positions
  attention_pair_forward(q, kvs, heads, kv, full, y, lse);
  EXPECT_EQ(dev.live_bytes(), live);
  const auto forward = static_cast<uint64_t>(cpu::attention_pair_forward_scratch(threads, q, kvs, heads, kv));
  EXPECT_EQ(dev.peak_bytes() - live, forward);
  dev.reset_peak();
  attention_pair_backward(q, kvs, heads, kv, full, q, lse, q, dq, dkv);
  const auto backward = static_cast<uint64_t>(cpu::attention_pair_backward_scratch(threads, q, kvs, heads, kv));
  EXPECT_EQ(dev.peak_bytes() - live, backward);
  EXPECT_GE(forward, static_cast<uint64_t>(s.t * s.t) * sizeof(float));  // the scores at least

  device::CountingDevice counting(DeviceKind::Cpu, threads);
  const auto like = [&](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), counting, "counted"); };
  const Tensor cq = like(q), ckv = like(kvs), cy = like(y), clse = like(lse), cdq = like(dq), cdkv = like(dkv);
  const uint64_t counted_live = counting.live_bytes();
  counting.reset_peak();
  attention_pair_forward(cq, ckv, heads, kv, full, cy, clse);
  EXPECT_EQ(counting.peak_bytes() - counted_live, forward);
  counting.reset_peak();
  attention_pair_backward(cq, ckv, heads, kv, causal, cq, clse, cq, cdq, cdkv);
  EXPECT_EQ(counting.peak_bytes() - counted_live, backward);
  const double flops = 4.0 * s.b * s.t * s.t * s.h * s.d;
  EXPECT_DOUBLE_EQ(counting.work().attention_flops, flops + 2.5 * flops / 2);
  EXPECT_DOUBLE_EQ(counting.work().attention_backward_flops, 2.5 * flops / 2);
  const double weight = 128.0 / s.d;  // ops::attention_head_weight
  EXPECT_DOUBLE_EQ(counting.work().attention_weighted_flops, weight * (flops + 2.5 * flops / 2));
  EXPECT_DOUBLE_EQ(counting.work().attention_weighted_backward_flops, weight * 2.5 * flops / 2);

  // Planned for a GPU: the CUDA kernels' scratch, none forward and the rows' dots (B, H, Tq) f32 backward.
  device::CountingDevice gpu(DeviceKind::Cuda);
  const auto on_gpu = [&](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), gpu, "counted"); };
  const Tensor gq = on_gpu(q), gkv = on_gpu(kvs), gy = on_gpu(y), glse = on_gpu(lse), gdq = on_gpu(dq),
               gdkv = on_gpu(dkv);
  const uint64_t gpu_live = gpu.live_bytes();
  gpu.reset_peak();
  attention_pair_forward(gq, gkv, heads, kv, full, gy, glse);
  EXPECT_EQ(gpu.peak_bytes() - gpu_live, 0u);
  attention_pair_backward(gq, gkv, heads, kv, full, gq, glse, gq, gdq, gdkv);
  EXPECT_EQ(gpu.peak_bytes() - gpu_live, static_cast<uint64_t>(s.b * s.h * s.t * 4));
  EXPECT_EQ(gpu.peak_bytes() - gpu_live,
            static_cast<uint64_t>(cuda::attention_pair_backward_scratch_bytes(s.b, s.h, s.t)));
}

}  // namespace
}  // namespace tandem::ops
