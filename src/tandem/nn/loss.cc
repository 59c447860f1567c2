#include "tandem/nn/loss.h"

#include "tandem/ops/ops.h"

namespace tandem::nn {

void cross_entropy_loss(const Tensor& logits, const Tensor& targets, double normalizer, const Tensor& loss_sum,
                        const TpSlot& tp, float grad_scale) {
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
  // lse = max + log(sum exp); loss_sum += lse - target over the rows that count
  ops::cross_entropy_finish(row_max, target, lse, ids, loss_sum);
  ops::cross_entropy_backward(rows, ids, lse, static_cast<float>(grad_scale / normalizer), rows, start);
}

double cross_entropy_sum_and_grad(const Tensor& logits, const Tensor& targets, double normalizer, const TpSlot& tp) {
  Tensor sum = Tensor::zeros({1}, DType::F32, logits.device(), "loss sum");
  cross_entropy_loss(logits, targets, normalizer, sum, tp);
  return sum.to_host_floats()[0];
}

}  // namespace tandem::nn
