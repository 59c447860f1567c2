#include "tandem/nn/loss.h"

#include <algorithm>

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

Tensor head_loss(Layer& head, const TpSlot& tp, const Tensor& h, const Batch& batch, bool backward) {
  const int64_t C = h.dim(-1), N = h.numel() / C;
  TANDEM_CHECK(batch.loss && batch.targets.numel() == N, "head_loss: targets ", shape_str(batch.targets.shape()),
               " for the head's input ", shape_str(h.shape()), batch.loss ? "" : ", and no loss sink");
  const LossSink& sink = *batch.loss;
  // A mixture-of-experts model's balance loss, once per micro-batch: coef share aux, as a share of the sink's sum.
  if (const MoeBalance* b = batch.balance) {
    // Under context parallelism each shard counted only its own tokens: summed over the cp group here, every MoE
    // layer's forward done and no router's backward begun, the sums are the whole sequences' (the routers' gradients
    // read them; the metrics read the per-layer tables, each shard's own), and one shard adds the loss that all of
    // them now hold.
    if (batch.context.active()) {
      batch.context.exchange->sum(b->counts);
      batch.context.exchange->sum(b->probsum);
    }
    const double r = static_cast<double>(b->rows), experts = static_cast<double>(b->counts.numel());
    if (b->coef > 0.0f && batch.context.rank == 0)
      ops::moe_aux_loss(b->counts, b->probsum,
                        static_cast<float>(b->coef * b->share * experts * sink.normalizer / (r * r)), sink.sum);
  }
  const int64_t chunk = loss_chunk_rows(batch.tiles.loss_tokens, N, head.output_shape({1, C}).back(), h.dtype());
  const Tensor rows = h.view({N, C}), ids = batch.targets.view({N, 1});  // (N, C), (N, 1)
  Tensor dh;                                                             // (..., C)
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    Saved s;
    const Tensor logits = head.forward(n == N ? h : rows.rows(r0, n), s);  // (n, V_local), or h's (..., V_local)
    cross_entropy_loss(logits, ids.rows(r0, n).view({n}), sink.normalizer, sink.sum, tp, sink.grad_scale);
    if (!backward) continue;
    Tensor d = head.backward(logits, s);  // (n, C): logits hold d(loss)/d(logits) now
    if (n == N) return d;                 // one chunk: the head's own gradient, no copy
    if (!dh.defined()) dh = Tensor::empty(h.shape(), h.dtype(), h.device(), "head input grad");
    dh.view({N, C}).rows(r0, n).copy_from(d);
  }
  return dh;
}

Tensor head_forward(Linear& head, const Tensor& h, const Batch& batch, Saved& saved) {
  if (!batch.loss) return head.forward(h, saved.children.at(1));
  if (batch.training)
    saved.tensors = {h};
  else
    head_loss(head, head.tp(), h, batch, false);
  return Tensor();
}

Tensor head_backward(Linear& head, const Tensor& dy, const Batch& batch, Saved& saved) {
  return batch.loss ? head_loss(head, head.tp(), saved.tensors.at(0), batch, true)
                    : head.backward(dy, saved.children.at(1));
}

}  // namespace tandem::nn
