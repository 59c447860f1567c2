// LoRA adapters' forward and backward (lora.h): dense products on each adapter's rank-r factors, the tensor-parallel
// sums where lora.h's math puts them, and the counter-based dropout mask.
#include "tandem/nn/lora.h"

#include "tandem/core/philox.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {

LoraSites::LoraSites(const LoraTargets* targets, const Model& model) {
  if (!targets) return;
  targets_ = *targets;
  targets_->options.context = model.batch_context();
}

void LoraSites::check_all_added() const {
  if (!targets_ || added_ == targets_->sites.size()) return;
  std::string sites;
  for (const std::string& s : targets_->sites) sites += (sites.empty() ? "" : ", ") + s;
  TANDEM_FAIL("LoRA: ", targets_->sites.size(), " adapter sites were asked for (", sites, ") but the model has ",
              added_, " of them");
}

LoraAdapters::LoraAdapters(LoraOptions options, bool row_parallel, TpSlot tp, int64_t in_local, int64_t in_global,
                           int64_t out_local)
    : options_(std::move(options)),
      row_parallel_(row_parallel),
      tp_(tp),
      in_local_(in_local),
      in_global_(in_global),
      out_local_(out_local) {
  TANDEM_CHECK(options_.r > 0, "LoRA rank ", options_.r);
  TANDEM_CHECK(options_.dropout == 0.0f || options_.context, "LoRA dropout without a batch context");
}

Tensor LoraAdapters::padded_b(const Adapter& a) const {
  if (a.row == 0 && a.rows == out_local_) return a.b->value;
  const Tensor& b = a.b->value;  // (rows, r)
  Tensor padded = Tensor::zeros({out_local_, options_.r}, b.dtype(), b.device(), a.b->name + " at its rows");
  padded.rows(a.row, a.rows).copy_from(b);
  return padded;  // (out_local, r)
}

bool LoraAdapters::masking() const { return options_.dropout > 0.0f && options_.context && options_.context->training; }

Tensor LoraAdapters::dropped(const Adapter& a, const Tensor& rows, int64_t per_sample) const {
  if (!masking()) return rows;
  // Keyed by the element's place in the step's whole batch: sample, token (a row), logical column.
  const BatchContext& ctx = *options_.context;
  Tensor out = Tensor::empty(rows.shape(), rows.dtype(), rows.device(), a.a->name + " dropout");  // (N, in_local)
  const uint64_t stream = hash_name(a.a->name) + static_cast<uint64_t>(ctx.step) * 0x9E3779B97F4A7C15ull;
  ops::dropout(rows, out, options_.dropout, ctx.seed, stream, ctx.first_sample * per_sample, in_global_,
               row_parallel_ ? tp_.rank * in_local_ : 0);
  return out;
}

std::vector<Tensor> LoraAdapters::down(const Tensor& x) const {
  const int64_t n = x.numel() / in_local_, per_sample = n / x.dim(0);
  const Tensor rows = x.view({n, in_local_});  // (N, in_local)
  std::vector<Tensor> out;
  for (const Adapter& a : adapters_) {
    Tensor h = Tensor::empty({n, options_.r}, x.dtype(), x.device(), a.a->name + " output");  // (N, r)
    ops::matmul(dropped(a, rows, per_sample), a.a->value, h, false, true);
    if (row_parallel_) tp_.sum(h);  // each slot saw only its input columns
    if (options_.scaling != 1.0f) ops::scale(h, options_.scaling);
    out.push_back(h);
  }
  return out;
}

void LoraAdapters::up(const std::vector<Tensor>& h, const Tensor& y) const {
  const Tensor rows = y.view({y.numel() / out_local_, out_local_});  // (N, out_local)
  for (size_t i = 0; i < adapters_.size(); ++i) ops::matmul(h[i], padded_b(adapters_[i]), rows, false, true, 1.0f);
}

void LoraAdapters::backward(const Tensor& x, const std::vector<Tensor>& h, const Tensor& dy, const Tensor& dx) const {
  const int64_t n = x.numel() / in_local_, per_sample = n / x.dim(0);
  const Tensor rows = x.view({n, in_local_});     // (N, in_local)
  const Tensor g_out = dy.view({n, out_local_});  // (N, out_local)
  const Tensor g_in = dx.view({n, in_local_});    // (N, in_local)
  for (size_t i = 0; i < adapters_.size(); ++i) {
    const Adapter& a = adapters_[i];
    // dB += dY^T (s H): h holds s H. For an adapter on some of the rows, the product over every row, its rows taken.
    if (a.rows == out_local_) {
      ops::matmul(g_out, h[i], a.b->grad, true, false, 1.0f);
    } else {
      Tensor all = Tensor::empty({out_local_, options_.r}, DType::F32, x.device(), a.b->name + " gradient rows");
      ops::matmul(g_out, h[i], all, true, false);
      ops::axpy(1.0f, all.rows(a.row, a.rows), a.b->grad);
    }
    // G = s dY B: the gradient of dropout(x) A^T.
    const Tensor b = padded_b(a);
    Tensor g = Tensor::empty({n, options_.r}, dy.dtype(), dy.device(), a.a->name + " output grad");  // (N, r)
    ops::matmul(g_out, b, g, false, false);
    if (options_.scaling != 1.0f) ops::scale(g, options_.scaling);
    // dX += dropout'(G A): the slot's partial sum under a column split, summed over tp by the layer with its own.
    if (!masking()) {
      ops::matmul(g, a.a->value, g_in, false, false, 1.0f);
    } else {
      Tensor t = Tensor::empty({n, in_local_}, dx.dtype(), dx.device(), a.a->name + " input grad");  // (N, in_local)
      ops::matmul(g, a.a->value, t, false, false);
      ops::add(g_in, dropped(a, t, per_sample), g_in);  // the same mask: dropout is its own transpose
    }
    // dA += dH^T dropout(x), with dH summed over the slots of a column split (each holds part of B).
    if (!row_parallel_) tp_.sum(g);
    ops::matmul(g, dropped(a, rows, per_sample), a.a->grad, true, false, 1.0f);
  }
}

}  // namespace tandem::nn
