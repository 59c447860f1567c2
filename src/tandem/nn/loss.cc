#include "tandem/nn/loss.h"

#include <cmath>

#include "tandem/ops/ops.h"

namespace tandem::nn {

double cross_entropy_sum_and_grad(const Tensor& logits, const Tensor& targets, double normalizer, const TpSlot& tp) {
  const int64_t V_local = logits.dim(-1), N = logits.numel() / V_local;
  TANDEM_CHECK(targets.numel() == N, "targets ", shape_str(targets.shape()), " do not match logits ",
               shape_str(logits.shape()));
  const Tensor rows = logits.view({N, V_local});  // (N, V_local)
  const Tensor ids = targets.view({N});
  const int64_t start = tp.rank * V_local;
  Device& dev = logits.device();
  Tensor row_max = Tensor::empty({N}, DType::F32, dev, "loss row max");      // (N)
  Tensor target = Tensor::empty({N}, DType::F32, dev, "loss target logit");  // (N)
  Tensor lse = Tensor::empty({N}, DType::F32, dev, "loss lse");              // (N)
  ops::cross_entropy_stats(rows, ids, start, V_local * tp.size, row_max, target);
  tp.max(row_max);
  ops::row_sum_exp(rows, row_max, lse);
  tp.sum(lse);
  tp.sum(target);
  // lse = max + log(sum exp(x - max)); loss of a row = lse - logit[target]
  double sum = 0;
  float* l = lse.f32();
  const float* m = row_max.f32();
  const float* t = target.f32();
  for (int64_t i = 0; i < N; ++i) {
    l[i] = m[i] + std::log(l[i]);
    sum += static_cast<double>(l[i]) - t[i];
  }
  ops::cross_entropy_backward(rows, ids, lse, static_cast<float>(1.0 / normalizer), rows, start);
  return sum;
}

}  // namespace tandem::nn
