#include "tandem/nn/linear.h"

#include <algorithm>
#include <cmath>

#include "tandem/ops/ops.h"

namespace tandem::nn {

Linear::Linear(std::string name, int64_t in_features, int64_t out_features, bool bias, Split split, TpSlot tp,
               int fused, const std::string& tied_to)
    : Layer(std::move(name)),
      in_(in_features),
      out_(out_features),
      parts_(static_cast<size_t>(std::max(fused, 1)), out_features / std::max(fused, 1)),
      split_(tp.active() ? split : Split::None),
      tp_(tp) {
  const int parts = tp_.size;
  // The weight, as its own parameter or as a replica of `tied_to` split the same way.
  auto weight = [&](Shape global, Shape local, Shard shard) -> Parameter* {
    if (!tied_to.empty()) return &add_replica_parameter(tied_to, std::move(global), std::move(local), shard, true);
    return &add_sharded_parameter("weight", std::move(global), std::move(local), shard, Init::Normal, true);
  };
  TANDEM_CHECK(tied_to.empty() || split_ != Split::Row, this->name(), ": a tied weight is split by rows or not at all");
  if (split_ == Split::None) {
    Shard whole;
    whole.split = out_ * in_;
    weight_ = weight({out_, in_}, {out_, in_}, whole);
    bias_ = bias ? &add_parameter("bias", {out_}, Init::Zeros, false) : nullptr;
    return;
  }
  if (split_ == Split::Column) {
    TANDEM_CHECK(out_features % (fused * parts) == 0, this->name(), ": ", out_features, " outputs over ", fused, " x ",
                 parts);
    out_ = out_features / parts;
    const int64_t block = out_features / fused;  // rows of one fused projection
    weight_ = weight({out_features, in_}, {out_, in_}, Shard{fused, block, in_, tp.rank, parts});
    bias_ = bias ? &add_sharded_parameter("bias", {out_features}, {out_}, Shard{fused, block, 1, tp.rank, parts},
                                          Init::Zeros, false)
                 : nullptr;
  } else {
    TANDEM_CHECK(in_features % parts == 0, this->name(), ": ", in_features, " inputs over ", parts);
    in_ = in_features / parts;
    weight_ = &add_sharded_parameter("weight", {out_, in_features}, {out_, in_},
                                     Shard{out_, in_features, 1, tp.rank, parts}, Init::Normal, true);
    bias_ = bias ? &add_parameter("bias", {out_}, Init::Zeros, false) : nullptr;
  }
}

namespace {
int64_t sum_of(const std::vector<int64_t>& sizes) {
  int64_t s = 0;
  for (const int64_t n : sizes) s += n;
  return s;
}
}  // namespace

Linear::Linear(std::string name, int64_t in_features, const std::vector<int64_t>& fused_sizes, bool bias, Split split,
               TpSlot tp)
    : Layer(std::move(name)),
      in_(in_features),
      out_(sum_of(fused_sizes)),
      parts_(fused_sizes),
      split_(tp.active() ? split : Split::None),
      tp_(tp) {
  TANDEM_CHECK(!fused_sizes.empty(), this->name(), ": no fused projection sizes");
  for (const int64_t n : fused_sizes) TANDEM_CHECK(n > 0, this->name(), ": a fused projection of ", n, " outputs");
  const bool equal =
      std::all_of(fused_sizes.begin(), fused_sizes.end(), [&](int64_t n) { return n == fused_sizes[0]; });
  if (split_ != Split::Column) {
    TANDEM_CHECK(split_ == Split::None, this->name(), ": fused projections are split by columns only");
    weight_ = &add_parameter("weight", {out_, in_}, Init::Normal, true);
    bias_ = bias ? &add_parameter("bias", {out_}, Init::Zeros, false) : nullptr;
    return;
  }
  const int parts = tp_.size;
  const int64_t out_features = out_;
  for (const int64_t n : fused_sizes)
    TANDEM_CHECK(n % parts == 0, this->name(), ": a fused projection of ", n, " outputs over ", parts,
                 " tensor-parallel slots");
  out_ = out_features / parts;
  // Equal sizes: the (fused, block, inner) form Linear(..., fused) makes, so both constructors shard alike.
  const auto shard = [&](int64_t inner) {
    return equal ? Shard{static_cast<int64_t>(fused_sizes.size()), fused_sizes[0], inner, tp.rank, parts}
                 : Shard{1, out_features, inner, tp.rank, parts, fused_sizes};
  };
  weight_ = &add_sharded_parameter("weight", {out_features, in_}, {out_, in_}, shard(in_), Init::Normal, true);
  bias_ = bias ? &add_sharded_parameter("bias", {out_features}, {out_}, shard(1), Init::Zeros, false) : nullptr;
}

Parameter* Linear::defer_bias() {
  TANDEM_CHECK(bias_, name(), ": no bias to defer");
  bias_deferred_ = true;
  return bias_;
}

Shape Linear::output_shape(const Shape& in) const {
  Shape s = in;
  s.back() = out_;
  return s;
}

Tensor Linear::forward(const Tensor& x, Saved& saved) { return forward_add(x, Tensor(), Batch{}, saved); }

Tensor Linear::forward(const Tensor& x, const Batch& batch, Saved& saved) {
  return forward_add(x, Tensor(), batch, saved);
}

Tensor Linear::forward_add(const Tensor& x, const Tensor& residual, Saved& saved) {
  return forward_add(x, residual, Batch{}, saved);
}

Tensor Linear::backward(const Tensor& dy, Saved& saved) { return backward(dy, Batch{}, saved); }

bool Linear::use_fp8(const spec::Fp8Config& config) {
  // Decided on the logical shape, so every layout runs the same projections in FP8.
  const int64_t slots = split_ == Split::None ? 1 : tp_.size;
  const int64_t in = split_ == Split::Row ? in_ * slots : in_, out = split_ == Split::Column ? out_ * slots : out_;
  fp8_gradients_ = config.gradients;
  fp8_recipe_ = config.recipe;
  fp8_ = config.enabled && in >= config.min_features && out >= config.min_features && in % 16 == 0 && out % 16 == 0;
  if (!fp8_) return false;
  if (!ops::fp8_shape_ok(16, out_, in_) || !ops::fp8_shape_ok(16, in_, out_))
    TANDEM_FAIL(name(), ": FP8 products need ", "multiples of 16 features, but this tensor-parallel slot holds ", in_,
                " inputs and ", out_, " outputs of ", in, " and ", out,
                ": use fewer tensor-parallel slots, or set fp8.min_features above ", std::min(in, out),
                " to keep this projection in the compute dtype");
  if (fp8_recipe_ == spec::Fp8Recipe::Blockwise && slots > 1) {
    // A slot's blocks must be blocks of the logical tensor: its share of each split dimension (of each fused part)
    // whole 128-element tiles.
    bool aligned = split_ != Split::Row || in_ % kFp8Tile == 0;
    if (split_ == Split::Column)
      for (const int64_t part : parts_) aligned = aligned && part % (kFp8Tile * slots) == 0;
    if (!aligned)
      TANDEM_FAIL(name(), ": the blockwise FP8 recipe scales 128 x 128 tiles of the weight and 1 x 128 ones ",
                  "of the activations, so each tensor-parallel slot's share of a split dimension must be whole tiles; ",
                  "this layer's ", in, " inputs and ", out, " outputs over ", slots, " slots are not. Use fewer ",
                  "tensor-parallel slots, the \"rowwise\" or \"tensorwise\" recipe, or set fp8.min_features above ",
                  std::min(in, out), " to keep this projection in the compute dtype");
  }
  return true;
}

namespace {
// A one-element fp32 tensor on x's device: an amax or an inverse scale.
Tensor scalar_like(const Tensor& x, const std::string& what) {
  return Tensor::empty({1}, DType::F32, x.device(), what);
}

// t's amax, the maximum over the tp slots when `split` (they hold parts of one logical tensor) and over the cp shards
// when `tokens` (t holds this shard's tokens: an activation or its gradient).
Tensor amax_of(const Tensor& t, bool split, bool tokens, const TpSlot& tp, const ContextSplit& cp,
               const std::string& what) {
  Tensor a = scalar_like(t, what);
  ops::amax(t, a);
  if (split) tp.max(a);
  if (tokens) cp.max(a);
  return a;
}

// t (R, C) in `format` with its inverse scale: q (R, C) and/or q_t (C, R) as asked.
struct Quantized {
  Tensor q, q_t, inv_scale;
};
Quantized quantize(const Tensor& t, const Tensor& amax, DType format, bool plain, bool transposed,
                   const std::string& what) {
  const int64_t r = t.numel() / t.dim(-1), c = t.dim(-1);
  Quantized out;
  if (plain) out.q = Tensor::empty({r, c}, format, t.device(), what);
  if (transposed) out.q_t = Tensor::empty({c, r}, format, t.device(), what + " transposed");
  out.inv_scale = scalar_like(t, what + " scale");
  ops::fp8_quantize(t.view({r, c}), amax, out.q, out.q_t, out.inv_scale);
  return out;
}

// One operand of an FP8 product under a recipe with several scales per tensor: q (R, K) in `format`, t (R, K) itself
// or t^T when `transposed`, with the inverse scales of its blocks.
struct Fp8Operand {
  Tensor q, inv_scale;
  ops::Fp8Blocks blocks;
};
// `across_slots`: the blocks hold elements of other tp slots, so their amaxes are the maximum over the slots;
// `across_shards`: the same for other cp shards' tokens.
struct Across {
  bool slots = false, shards = false;
};
Fp8Operand operand(const Tensor& t, bool transposed, DType format, ops::Fp8Blocks blocks, Across across,
                   const TpSlot& tp, const ContextSplit& cp, const std::string& what) {
  const int64_t r = t.numel() / t.dim(-1), c = t.dim(-1);
  const Tensor t2d = t.view({r, c});
  const int64_t rows = transposed ? c : r, k = transposed ? r : c;
  const int64_t count = ops::fp8_scale_grid(rows, k, blocks).count;
  Tensor amax = Tensor::empty({count}, DType::F32, t.device(), what + " amax");
  ops::amax(t2d, amax, blocks, transposed);
  if (across.slots) tp.max(amax);
  if (across.shards) cp.max(amax);
  Fp8Operand out{Tensor::empty({rows, k}, format, t.device(), what), Tensor(), blocks};
  out.inv_scale = Tensor::empty({count}, DType::F32, t.device(), what + " scale");
  ops::fp8_quantize(t2d, amax, transposed ? Tensor() : out.q, transposed ? out.q : Tensor(), out.inv_scale, blocks);
  return out;
}
}  // namespace

ops::Fp8Blocks Linear::fp8_blocks(bool weight) const {
  switch (fp8_recipe_) {
    case spec::Fp8Recipe::Tensorwise:
      return {};
    case spec::Fp8Recipe::Rowwise:
      return {1, 0};
    case spec::Fp8Recipe::Blockwise:
      return weight ? ops::Fp8Blocks{kFp8Tile, kFp8Tile} : ops::Fp8Blocks{1, kFp8Tile};
  }
  return {};
}

bool Linear::fp8_across_slots(bool rows_split, bool k_split) const {
  switch (fp8_recipe_) {
    case spec::Fp8Recipe::Tensorwise:
      return rows_split || k_split;  // one scale for the whole logical tensor
    case spec::Fp8Recipe::Rowwise:
      return k_split;  // a row's scale spans the product's K
    case spec::Fp8Recipe::Blockwise:
      return false;  // use_fp8 checked that every slot holds whole tiles
  }
  return true;
}

bool Linear::fp8_across_shards(bool transposed, int64_t n, const ContextSplit& cp) const {
  if (!cp.active()) return false;
  switch (fp8_recipe_) {
    case spec::Fp8Recipe::Tensorwise:
      return true;  // one scale for every token of the micro-batch
    case spec::Fp8Recipe::Rowwise:
      return transposed;  // a row of x^T or dy^T spans the tokens; a row of x or dy is one token
    case spec::Fp8Recipe::Blockwise:
      // check_fp8_context: a shard's tokens are whole tiles of the sequence, or one tile (of at most kFp8Tile tokens)
      // that is one device's only tile too.
      return transposed && n <= kFp8Tile;
  }
  return true;
}

void check_fp8_context(const spec::Fp8Config& config, int64_t micro_batch, int64_t seq_len, int cp) {
  if (!config.enabled || cp == 1) return;
  const int64_t tokens = micro_batch * seq_len, shard = tokens / cp;  // a micro-batch's, one shard's
  // One device runs a micro-batch of a multiple of 16 tokens in FP8 (Linear::fp8_tokens); each shard then runs its
  // part, the K of its weight gradient's product.
  if (tokens % 16 == 0 && shard % 16 != 0)
    TANDEM_FAIL("\"fp8\" with parallel.context ", cp, ": a shard's ", shard, " tokens of a micro-batch (", micro_batch,
                " x seq_len ", seq_len, " / ", cp,
                ") must be a multiple of 16, the FP8 products' inner size; choose a ",
                "seq_len that makes micro-batch x seq_len a multiple of ", 16 * cp, " (seq_len ", 16 * cp,
                " always does), or a smaller parallel.context");
  if (config.recipe != spec::Fp8Recipe::Blockwise) return;
  const int64_t chunk = seq_len / (2 * cp);  // a shard holds two chunks of each sequence (context_split.h)
  if (chunk % kFp8Tile == 0 || tokens <= kFp8Tile) return;
  TANDEM_FAIL("\"fp8\" recipe \"blockwise\" with parallel.context ", cp, " and seq_len ", seq_len,
              ": the weight gradients scale tiles of ", kFp8Tile, " consecutive tokens, and a shard holds chunks of ",
              "seq_len / (2 x ", cp, ") = ", chunk, " positions, which cut those tiles; choose a seq_len that is a ",
              "multiple of ", 2 * cp * kFp8Tile, " (whole tiles in every chunk), or micro-batch x seq_len at most ",
              kFp8Tile, " (one tile in all), or the \"rowwise\" or \"tensorwise\" recipe");
}

void Linear::forward_fp8(const Tensor& x2d, const Tensor& bias, const Tensor& residual, const Tensor& y2d,
                         const ContextSplit& cp, Saved& saved) {
  const int64_t n = x2d.dim(0);
  if (fp8_recipe_ != spec::Fp8Recipe::Tensorwise) {
    // x (N, in) and W (out, in), each scaled along `in`: split over the slots in a row-parallel layer.
    const bool row = split_ == Split::Row, column = split_ == Split::Column;
    const Fp8Operand xq =
        operand(x2d, false, DType::E4M3, fp8_blocks(false),
                {fp8_across_slots(false, row), fp8_across_shards(false, n, cp)}, tp_, cp, name() + " x fp8");
    const Fp8Operand wq = operand(weight_->value, false, DType::E4M3, fp8_blocks(true),
                                  {fp8_across_slots(column, row), false}, tp_, cp, name() + " weight fp8");
    ops::fp8_matmul(xq.q, xq.inv_scale, wq.q, wq.inv_scale, bias, residual, y2d, /*fast_accum=*/true, xq.blocks,
                    wq.blocks);
    return;
  }
  const Tensor amax_x = amax_of(x2d, split_ == Split::Row, true, tp_, cp, name() + " amax x");
  const Tensor amax_w = amax_of(weight_->value, split_ != Split::None, false, tp_, cp, name() + " amax weight");
  const Quantized xq = quantize(x2d, amax_x, DType::E4M3, true, false, name() + " x fp8");
  const Quantized wq = quantize(weight_->value, amax_w, DType::E4M3, true, false, name() + " weight fp8");
  ops::fp8_matmul(xq.q, xq.inv_scale, wq.q, wq.inv_scale, bias, residual, y2d, /*fast_accum=*/true);
  saved.tensors.push_back(amax_x);
  saved.tensors.push_back(amax_w);
}

Tensor Linear::backward_fp8_blocks(const Tensor& dy2d, const Tensor& x, const ContextSplit& cp) {
  const int64_t n = dy2d.dim(0);
  const Tensor x2d = x.view({n, in_});  // (N, in)
  const bool row = split_ == Split::Row, column = split_ == Split::Column;
  if (weight_->trainable) {
    // dW (out, in) += dy^T (out, N) x^T (in, N)^T, both scaled along the tokens, which no slot splits and the cp
    // shards do.
    const bool shards = fp8_across_shards(true, n, cp);
    const Fp8Operand gq_t = operand(dy2d, true, fp8_gradients_, fp8_blocks(false),
                                    {fp8_across_slots(column, false), shards}, tp_, cp, name() + " dy fp8 transposed");
    const Fp8Operand xq_t = operand(x2d, true, DType::E4M3, fp8_blocks(false), {fp8_across_slots(row, false), shards},
                                    tp_, cp, name() + " x fp8 transposed");
    ops::fp8_matmul(gq_t.q, gq_t.inv_scale, xq_t.q, xq_t.inv_scale, Tensor(), weight_->grad, weight_->grad, false,
                    gq_t.blocks, xq_t.blocks);
  }
  // dx (N, in) = dy (N, out) W^T (in, out)^T, both scaled along `out`: split over the slots in a column-parallel
  // layer.
  const Fp8Operand gq =
      operand(dy2d, false, fp8_gradients_, fp8_blocks(false),
              {fp8_across_slots(false, column), fp8_across_shards(false, n, cp)}, tp_, cp, name() + " dy fp8");
  const Fp8Operand wq_t = operand(weight_->value, true, DType::E4M3, fp8_blocks(true),
                                  {fp8_across_slots(row, column), false}, tp_, cp, name() + " weight fp8 transposed");
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " input grad");  // (..., in)
  ops::fp8_matmul(gq.q, gq.inv_scale, wq_t.q, wq_t.inv_scale, Tensor(), Tensor(), dx.view({n, in_}), false, gq.blocks,
                  wq_t.blocks);
  return dx;
}

Tensor Linear::backward_fp8(const Tensor& dy2d, const Tensor& x, const Tensor& amax_x, const Tensor& amax_w,
                            const ContextSplit& cp) {
  const int64_t n = dy2d.dim(0);
  const Tensor x2d = x.view({n, in_});  // (N, in)
  const Tensor amax_dy = amax_of(dy2d, split_ == Split::Column, true, tp_, cp, name() + " amax dy");
  const Quantized gq = quantize(dy2d, amax_dy, fp8_gradients_, true, weight_->trainable, name() + " dy fp8");
  if (weight_->trainable) {
    // dW (out, in) += dy^T (out, N) x^T (in, N)^T: both with the tokens contiguous.
    const Quantized xq = quantize(x2d, amax_x, DType::E4M3, false, true, name() + " x fp8");
    ops::fp8_matmul(gq.q_t, gq.inv_scale, xq.q_t, xq.inv_scale, Tensor(), weight_->grad, weight_->grad);
  }
  // dx (N, in) = dy (N, out) W^T (in, out)^T.
  const Quantized wq = quantize(weight_->value, amax_w, DType::E4M3, false, true, name() + " weight fp8");
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " input grad");  // (..., in)
  ops::fp8_matmul(gq.q, gq.inv_scale, wq.q_t, wq.inv_scale, Tensor(), Tensor(), dx.view({n, in_}));
  return dx;
}

Tensor Linear::forward_add(const Tensor& x, const Tensor& residual, const Batch& batch, Saved& saved) {
  TANDEM_CHECK(x.dim(-1) == in_, name(), " expects last dim ", in_, ", got ", shape_str(x.shape()));
  Tensor y = Tensor::empty(output_shape(x.shape()), x.dtype(), x.device(), name() + " output");  // (..., out)
  const Tensor bias = bias_ && !bias_deferred_ ? bias_->value : Tensor();                        // (out) or none
  const int64_t n = x.numel() / in_;
  const Tensor x2d = x.view({n, in_}), y2d = y.view({n, out_});  // (N, in), (N, out)
  saved.tensors = {x};
  const bool fp8 = fp8_tokens(n, batch.context);
  std::vector<Tensor> h;  // (N, r) per adapter: what their backward needs
  if (split_ == Split::Row) {
    // Partial products of the input slices: summed over tp first, then the adapters, the bias and the residual.
    if (fp8)
      forward_fp8(x2d, Tensor(), Tensor(), y2d, batch.context, saved);
    else
      ops::matmul(x, weight_->value, y, false, true);
    if (lora_) h = lora_->down(x, batch);
    tp_.sum(y);
    if (lora_) lora_->up(h, y);
    if (bias.defined()) ops::add_bias(y.view({y.numel() / out_, out_}), bias);
    if (residual.defined()) ops::add(y, residual, y);
  } else if (lora_ && !fp8 && !bias.defined() && !residual.defined()) {
    // The adapters' sum written first, then the base product added into it (cuBLASLt reads it as its C): y is
    // written twice and read once, not written, read and written again.
    h = lora_->down(x, batch);
    lora_->up(h, y, 0.0f);
    ops::matmul(x, weight_->value, y, false, true, 1.0f);
  } else {
    if (fp8)
      forward_fp8(x2d, bias, residual.defined() ? residual.view({n, out_}) : Tensor(), y2d, batch.context, saved);
    else
      ops::linear_forward(x, weight_->value, bias, residual, y);
    if (lora_) {
      h = lora_->down(x, batch);
      lora_->up(h, y);
    }
  }
  saved.tensors.insert(saved.tensors.end(), h.begin(), h.end());  // {x, [amax x, amax W], h...}
  return y;
}

Tensor Linear::backward(const Tensor& dy, const Batch& batch, Saved& saved) {
  const Tensor x = saved.tensors.at(0);  // (..., in)
  const int64_t n = x.numel() / in_;
  const bool fp8 = fp8_tokens(n, batch.context);
  const std::vector<Tensor> adapters(saved.tensors.begin() + 1 + (fp8 ? fp8_saved() : 0), saved.tensors.end());
  const bool bias_grad = bias_ && bias_->trainable;
  Tensor dx;                   // (..., in), allocated after the weight gradient's product and its scratch
  bool adapters_done = false;  // whether the adapters' input gradient is in dx
  if (fp8) {
    if (bias_grad) ops::bias_backward(dy.view({n, out_}), bias_->grad);
    dx = fp8_saved() > 0 ? backward_fp8(dy.view({n, out_}), x, saved.tensors.at(1), saved.tensors.at(2), batch.context)
                         : backward_fp8_blocks(dy.view({n, out_}), x, batch.context);
  } else {
    // dW (out, in) += dy^T x and db (out) += sum dy, one op; nothing for a frozen weight.
    if (weight_->trainable)
      ops::linear_weight_grad(dy, x, weight_->grad, bias_grad ? bias_->grad : Tensor());
    else if (bias_grad)
      ops::bias_backward(dy.view({n, out_}), bias_->grad);
    dx = Tensor::empty(x.shape(), x.dtype(), x.device(), name() + " input grad");
    // As in the forward: the adapters' part written first, the base's product added into it.
    adapters_done = lora_ && lora_->writes_input_grad(batch);
    if (adapters_done) lora_->backward(x, adapters, dy, dx, batch, 0.0f);
    ops::matmul(dy, weight_->value, dx, false, false, adapters_done ? 1.0f : 0.0f);
  }
  if (lora_ && !adapters_done) lora_->backward(x, adapters, dy, dx, batch);
  if (split_ == Split::Column) tp_.sum(dx);  // each slot saw only its output columns
  saved.clear();
  return dx;
}

void Linear::add_lora(const LoraOptions& options, int part, const std::string& label) {
  TANDEM_CHECK(part >= -1 && part < static_cast<int>(parts_.size()), name(), ": no fused part ", part, " of ",
               parts_.size());
  TANDEM_CHECK(split_ != Split::Row || part == -1, name(), ": a row-parallel projection is not fused");
  const int slots = split_ == Split::None ? 1 : tp_.size, slot = split_ == Split::None ? 0 : tp_.rank;
  const int64_t r = options.r, in_global = split_ == Split::Row ? in_ * tp_.size : in_;
  if (!lora_) lora_ = std::make_unique<LoraAdapters>(options, split_ == Split::Row, tp_, in_, in_global, out_);
  const auto whole = [](int64_t numel) {
    Shard s;
    s.split = numel;
    return s;
  };
  const std::string prefix = label.empty() ? "" : label + ".";
  // A (r, in): split by columns under a row split, as the weight; whole otherwise.
  Parameter& a = add_sharded_parameter(
      prefix + "lora_A", {r, in_global}, {r, in_},
      split_ == Split::Row ? Shard{r, in_global, 1, slot, slots} : whole(r * in_global), Init::Uniform, true);
  // B (rows, r): the part's rows, split by rows under a column split (a whole-output adapter as the weight is), whole
  // under a row split.
  const bool column = split_ == Split::Column;
  int64_t rows = out_ * (column ? slots : 1), row = 0;  // in all; the local first row
  if (part >= 0) {
    rows = parts_[static_cast<size_t>(part)];
    for (int q = 0; q < part; ++q) row += parts_[static_cast<size_t>(q)] / (column ? slots : 1);
  }
  Shard b_shard = whole(rows * r);
  if (part >= 0 && column) {
    b_shard = Shard{1, rows, r, slot, slots};
  } else if (column) {
    b_shard = weight_->shard;
    b_shard.inner = r;
  }
  const int64_t local_rows = rows / (column ? slots : 1);
  Parameter& b = add_sharded_parameter(prefix + "lora_B", {rows, r}, {local_rows, r}, b_shard, Init::Zeros, true);
  init_lora_pair(a, b, options, in_global);
  lora_->add({&a, &b, row, local_rows});
}

int Linear::adapt(const LoraTargets& targets, int part, const std::string& label) {
  const std::string site = label.empty() ? name() : name() + "." + label;
  if (!targets.sites.count(site)) return 0;
  add_lora(targets.options, part, label);
  return 1;
}

}  // namespace tandem::nn
