// LoRA adapters' forward and backward (lora.h): dense products on each adapter's rank-r factors, the tensor-parallel
// sums where lora.h's math puts them, and the counter-based dropout mask.
#include "tandem/nn/lora.h"

#include <cmath>

#include "tandem/core/philox.h"
#include "tandem/ops/ops.h"

namespace tandem::nn {

LoraSites::LoraSites(const LoraTargets* targets) {
  if (targets) targets_ = *targets;
}

void LoraSites::check_all_added() const {
  if (!targets_ || added_ == targets_->sites.size()) return;
  std::string sites;
  for (const std::string& s : targets_->sites) sites += (sites.empty() ? "" : ", ") + s;
  TANDEM_FAIL("LoRA: ", targets_->sites.size(), " adapter sites were asked for (", sites, ") but the model has ",
              added_, " of them");
}

void init_lora_pair(Parameter& a, Parameter& b, const LoraOptions& options, int64_t in_global, int64_t b_in) {
  a.bound = 1.0f / std::sqrt(static_cast<float>(in_global));
  if (options.init == spec::LoraInit::Gaussian) {
    a.init = Init::Normal;
    a.stddev = 1.0f / static_cast<float>(options.r);
  }
  if (options.init == spec::LoraInit::Random) {
    b.init = Init::Uniform;
    b.bound = 1.0f / std::sqrt(static_cast<float>(b_in > 0 ? b_in : options.r));
  }
  a.adapter = b.adapter = true;
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
}

Tensor LoraAdapters::padded_b(const Adapter& a) const {
  if (a.row == 0 && a.rows == out_local_) return a.b->value;
  const Tensor& b = a.b->value;  // (rows, r)
  Tensor padded = Tensor::zeros({out_local_, options_.r}, b.dtype(), b.device(), a.b->name + " at its rows");
  padded.rows(a.row, a.rows).copy_from(b);
  return padded;  // (out_local, r)
}

bool LoraAdapters::masking(const Batch& batch) const { return options_.dropout > 0.0f && batch.training; }

Tensor LoraAdapters::dropped(const Adapter& a, const Tensor& rows, int64_t samples, const Batch& batch) const {
  if (!masking(batch)) return rows;
  // Keyed by the element's place in the step's whole batch: sample, position in the whole sequence (a row), logical
  // column.
  const SamplePlace& at = batch.samples;
  const ContextSplit& cp = batch.context;
  Tensor out = Tensor::empty(rows.shape(), rows.dtype(), rows.device(), a.a->name + " dropout");  // (N, in_local)
  const uint64_t stream = hash_name(a.a->name) + static_cast<uint64_t>(at.step) * 0x9E3779B97F4A7C15ull;
  const int64_t col0 = row_parallel_ ? tp_.rank * in_local_ : 0;
  const int64_t local = rows.dim(0) / samples;  // this shard's tokens of each sample
  const auto draw = [&](int64_t row, int64_t count, int64_t row0) {
    ops::dropout(rows.rows(row, count), out.rows(row, count), options_.dropout, at.seed, stream, row0, in_global_,
                 col0);
  };
  if (!cp.active()) {
    draw(0, rows.dim(0), at.first_sample * local);  // whole sequences: the micro-batch's rows are consecutive
    return out;
  }
  const int64_t T = local * cp.size;  // the whole sequence
  for (int64_t s = 0; s < samples; ++s)
    for (const ContextSplit::Run& run : cp.runs(T))
      draw(s * local + run.local, run.count, (at.first_sample + s) * T + run.position);
  return out;
}

bool LoraAdapters::merged(const Batch& batch) const { return adapters_.size() > 1 && !masking(batch); }

Tensor LoraAdapters::stacked_a(const Tensor& like) const {
  const int64_t r = options_.r;
  Tensor a = Tensor::empty({static_cast<int64_t>(adapters_.size()) * r, in_local_}, like.dtype(), like.device(),
                           "LoRA A of the merged adapters");  // (k r, in_local)
  for (size_t j = 0; j < adapters_.size(); ++j) a.rows(static_cast<int64_t>(j) * r, r).copy_from(adapters_[j].a->value);
  return a;
}

Tensor LoraAdapters::block_diagonal_b(const Tensor& like) const {
  const int64_t r = options_.r, kr = static_cast<int64_t>(adapters_.size()) * r;
  Tensor b = Tensor::zeros({out_local_, kr}, like.dtype(), like.device(), "LoRA B of the merged adapters");
  // Adapter j's B_j (rows, r) at its block's rows, columns [j r, (j + 1) r).
  for (size_t j = 0; j < adapters_.size(); ++j) {
    const Adapter& a = adapters_[j];
    ops::copy_columns(a.b->value, 0, b.rows(a.row, a.rows), static_cast<int64_t>(j) * r, r);
  }
  return b;  // (out_local, k r)
}

std::vector<Tensor> LoraAdapters::down_merged(const Tensor& rows) const {
  const int64_t n = rows.dim(0), kr = static_cast<int64_t>(adapters_.size()) * options_.r;
  Tensor h = Tensor::empty({n, kr}, rows.dtype(), rows.device(), "LoRA output of the merged adapters");  // (N, k r)
  ops::matmul(rows, stacked_a(rows), h, false, true);
  if (row_parallel_) tp_.sum(h);
  if (options_.scaling != 1.0f) ops::scale(h, options_.scaling);
  return {h};
}

std::vector<Tensor> LoraAdapters::down(const Tensor& x, const Batch& batch) const {
  const int64_t n = x.numel() / in_local_, samples = x.dim(0);
  const Tensor rows = x.view({n, in_local_});  // (N, in_local)
  if (merged(batch)) return down_merged(rows);
  std::vector<Tensor> out;
  for (const Adapter& a : adapters_) {
    Tensor h = Tensor::empty({n, options_.r}, x.dtype(), x.device(), a.a->name + " output");  // (N, r)
    ops::matmul(dropped(a, rows, samples, batch), a.a->value, h, false, true);
    if (row_parallel_) tp_.sum(h);  // each slot saw only its input columns
    if (options_.scaling != 1.0f) ops::scale(h, options_.scaling);
    out.push_back(h);
  }
  return out;
}

void LoraAdapters::up(const std::vector<Tensor>& h, const Tensor& y, float beta) const {
  const Tensor rows = y.view({y.numel() / out_local_, out_local_});  // (N, out_local)
  if (h.size() == 1 && adapters_.size() > 1) {                       // down's merged form
    ops::matmul(h[0], block_diagonal_b(y), rows, false, true, beta);
    return;
  }
  for (size_t i = 0; i < adapters_.size(); ++i)
    ops::matmul(h[i], padded_b(adapters_[i]), rows, false, true, i == 0 ? beta : 1.0f);
}

void LoraAdapters::backward(const Tensor& x, const std::vector<Tensor>& h, const Tensor& dy, const Tensor& dx,
                            const Batch& batch, float beta) const {
  TANDEM_CHECK(beta == 1.0f || writes_input_grad(batch), "LoRA: a masked input gradient is added, not written");
  const int64_t n = x.numel() / in_local_, samples = x.dim(0);
  const Tensor rows = x.view({n, in_local_});     // (N, in_local)
  const Tensor g_out = dy.view({n, out_local_});  // (N, out_local)
  const Tensor g_in = dx.view({n, in_local_});    // (N, in_local)
  if (h.size() == 1 && merged(batch)) {
    backward_merged(rows, h[0], g_out, g_in, beta);
    return;
  }
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
    if (!masking(batch)) {
      ops::matmul(g, a.a->value, g_in, false, false, i == 0 ? beta : 1.0f);
    } else {
      Tensor t = Tensor::empty({n, in_local_}, dx.dtype(), dx.device(), a.a->name + " input grad");  // (N, in_local)
      ops::matmul(g, a.a->value, t, false, false);
      ops::add(g_in, dropped(a, t, samples, batch), g_in);  // the same mask: dropout is its own transpose
    }
    // dA += dH^T dropout(x), with dH summed over the slots of a column split (each holds part of B).
    if (!row_parallel_) tp_.sum(g);
    ops::matmul(g, dropped(a, rows, samples, batch), a.a->grad, true, false, 1.0f);
  }
}

void LoraAdapters::backward_merged(const Tensor& rows, const Tensor& h, const Tensor& g_out, const Tensor& g_in,
                                   float beta) const {
  const int64_t n = rows.dim(0), r = options_.r, kr = static_cast<int64_t>(adapters_.size()) * r;
  Device& device = rows.device();
  // dB_j += (dY^T (s H_cat))[its rows, columns j r..]: the rows picked as a view, the columns copied out.
  Tensor all = Tensor::empty({out_local_, kr}, DType::F32, device, "LoRA B gradient of the merged adapters");
  ops::matmul(g_out, h, all, true, false);
  for (size_t j = 0; j < adapters_.size(); ++j) {
    const Adapter& a = adapters_[j];
    Tensor part = Tensor::empty({a.rows, r}, DType::F32, device, a.b->name + " gradient of the merged adapters");
    ops::copy_columns(all.rows(a.row, a.rows), static_cast<int64_t>(j) * r, part, 0, r);
    ops::axpy(1.0f, part, a.b->grad);
  }
  // G_cat = s dY B_blk (N, k r); dX = beta dX + G_cat A_cat; dA_cat = G_cat^T X, summed over the slots of a column
  // split.
  Tensor g = Tensor::empty({n, kr}, g_out.dtype(), device, "LoRA output grad of the merged adapters");
  ops::matmul(g_out, block_diagonal_b(g_out), g, false, false);
  if (options_.scaling != 1.0f) ops::scale(g, options_.scaling);
  ops::matmul(g, stacked_a(rows), g_in, false, false, beta);
  if (!row_parallel_) tp_.sum(g);
  Tensor da = Tensor::empty({kr, in_local_}, DType::F32, device, "LoRA A gradient of the merged adapters");
  ops::matmul(g, rows, da, true, false);
  for (size_t j = 0; j < adapters_.size(); ++j)
    ops::axpy(1.0f, da.rows(static_cast<int64_t>(j) * r, r), adapters_[j].a->grad);
}

}  // namespace tandem::nn
