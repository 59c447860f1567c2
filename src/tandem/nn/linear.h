// Linear: y = x W^T + b with W (out, in) as PyTorch's nn.Linear, so names and shapes interchange.
// Tensor-parallel forms (Megatron): with W = [W_1; ..; W_tp] split by rows, a column-parallel layer computes
// Y_i = X W_i^T + b_i from a replicated X (its input gradient is summed over tp: the "f" operator); with
// W = [W_1 .. W_tp] split by columns, a row-parallel layer computes Y = sum_i X_i W_i^T + b from a
// partitioned X (the sum over tp is the "g" operator; b is replicated and added once after it).
// With LoRA adapters (lora.h) the frozen product gains s (x A^T) B^T on the adapted outputs; a frozen weight has no
// gradient and its weight-gradient product is skipped.
// With FP8 (use_fp8, spec/fp8.h) the three products run as ops::fp8_matmul: x and W in e4m3, dy in e5m2 (or e4m3),
// with power-of-two scales taken from the amaxes of the logical tensor's blocks, so every layout rounds every element
// alike. Tensorwise: one scale per tensor, the maximum over tp wherever the tensor is split (W always, x in a
// row-parallel layer, dy in a column-parallel one); forward saves x and the two amaxes and backward quantizes again
// from them (the same bits). Rowwise: one scale per row of each operand as its product reads it (each scaled along
// the product's K), the maximum over tp where the slots split that K. Blockwise: 1 x 128 tiles of x and dy, 128 x 128
// tiles of W, each slot holding whole tiles (use_fp8 checks), so no slot needs another's amax. The two block recipes
// take each operand's amaxes in backward, from x and W.
// Under context parallelism (batch.h's ContextSplit) x and dy hold a shard's tokens, so a block that spans tokens
// takes the maximum over the cp group as well: tensorwise x and dy, the rowwise weight gradient's x^T and dy^T (rows
// along the tokens), and the blockwise ones where a shard's tokens are one block; otherwise the blockwise tiles of
// tokens are whole tiles of the sequence (check_fp8_context), as one device cuts them. The weight is whole on every
// shard. Whether a product runs in FP8 is decided on the whole sequences' tokens, so every shard runs what one device
// does.
#pragma once

#include <memory>
#include <vector>

#include "tandem/nn/layer.h"
#include "tandem/nn/lora.h"
#include "tandem/ops/fp8_scale.h"
#include "tandem/spec/fp8.h"

namespace tandem::nn {

enum class Split { None, Column, Row };

// The blockwise FP8 recipe's tiles: 1 x 128 of activations and gradients, 128 x 128 of weights.
inline constexpr int64_t kFp8Tile = 128;

// Throws Error, before a run starts, saying which seq_len or context size would do, when FP8 (`config`) cannot run on
// sequences of `seq_len` split over `cp` context-parallel shards, `micro_batch` sequences at once, as on one device: a
// shard's tokens must be a multiple of 16 where one device's are (the FP8 kernels' K in the weight gradient), and
// under the blockwise recipe each chunk of seq_len / (2 cp) positions must be whole tiles of 128 tokens, or the whole
// micro-batch at most one tile (then every shard's one tile takes the maximum over the shards).
void check_fp8_context(const spec::Fp8Config& config, int64_t micro_batch, int64_t seq_len, int cp);

class Linear final : public Layer {
 public:
  // `fused` > 1 (column split only): the outputs are `fused` stacked projections (q, k, v) and each is split
  // separately, so every slot holds its rows of each. `tied_to`: the weight is a replica of that parameter (a head
  // tied to the embedding table: Parameter::replica), which must be split as this weight is.
  Linear(std::string name, int64_t in_features, int64_t out_features, bool bias = true, Split split = Split::None,
         TpSlot tp = {}, int fused = 1, const std::string& tied_to = "");
  // Fused projections of the given sizes stacked along the outputs (out_features = their sum), each split
  // separately under a column split, so every slot holds the same fraction of each: grouped-query attention's q, k
  // and v of H*D, Hkv*D and Hkv*D rows. Equal sizes give the layout (and the Shard) of `fused` = their count.
  Linear(std::string name, int64_t in_features, const std::vector<int64_t>& fused_sizes, bool bias = true,
         Split split = Split::None, TpSlot tp = {});

  // x (..., in_local) -> y (..., out_local). The forms with a Batch hand it to the adapters, whose dropout mask it
  // keys (lora.h): x then holds the micro-batch's rows, (B, T, in_local) or (B, in_local). The forms without one run
  // no dropout (a head, an MLP's tile, a test of the product alone).
  Tensor forward(const Tensor& x, Saved& saved) override;
  Tensor forward(const Tensor& x, const Batch& batch, Saved& saved) override;
  // The same plus a residual (..., out_local) added in the product's pass (a transformer block's skip connection):
  // y = x W^T + b + residual, what forward then ops::add give. Backward is the same as forward's: the residual's
  // gradient is the caller's.
  Tensor forward_add(const Tensor& x, const Tensor& residual, Saved& saved);
  Tensor forward_add(const Tensor& x, const Tensor& residual, const Batch& batch, Saved& saved);
  // Given the batch its forward had.
  Tensor backward(const Tensor& dy, Saved& saved) override;
  Tensor backward(const Tensor& dy, const Batch& batch, Saved& saved) override;
  Shape output_shape(const Shape& in) const override;

  int64_t in_features() const { return in_; }    // this slot's input width
  int64_t out_features() const { return out_; }  // this slot's output width
  const TpSlot& tp() const { return tp_; }
  // Whether its adapters apply a dropout mask (lora.h), keyed by each row's place in the micro-batch.
  bool has_dropout() const { return lora_ && lora_->options().dropout > 0.0f; }

  // Leaves the bias add to the layer that follows, which folds it into its own pass (GptBlock's GELU: one pass over
  // the (B, T, 4C) activation instead of two), and returns the bias. Forward then returns x W^T without it;
  // backward still accumulates the bias gradient (dy is the same for the sum with or without the bias).
  Parameter* defer_bias();

  // Adds a LoRA adapter (lora.h) on part `part` of the fused projections (0-based, in the order the constructor took
  // them) or, with part -1, on every output; its parameters are "<name>.<label>.lora_A" (r, in) and
  // "<name>.<label>.lora_B" (rows, r), or "<name>.lora_A" / "<name>.lora_B" with an empty label, split over tp as
  // lora.h says. Every adapter of one layer takes the same options.
  void add_lora(const LoraOptions& options, int part, const std::string& label);
  // add_lora at site "<name>.<label>" ("<name>" with an empty label) when `targets` names that site (a model builder's
  // LoraTargets); returns 1 if it added one, else 0.
  int adapt(const LoraTargets& targets, int part, const std::string& label);

  // Runs the products in FP8 from now on when the logical layer has at least config.min_features inputs and outputs,
  // both multiples of 16; returns whether it does. Throws when it does but this slot's share is not a multiple of 16
  // (ops::fp8_shape_ok). A call whose token count is not a multiple of 16 still runs in the compute dtype.
  bool use_fp8(const spec::Fp8Config& config);
  bool fp8() const { return fp8_; }

 private:
  // The FP8 forward product into y (N, out): x W^T (+ bias + residual when given), saving the amaxes into `saved`;
  // `cp` the split of x's tokens.
  void forward_fp8(const Tensor& x2d, const Tensor& bias, const Tensor& residual, const Tensor& y2d,
                   const ContextSplit& cp, Saved& saved);
  // dW += dy^T x (when trainable), then dx = dy W (returned, x's shape), in FP8, from the amaxes forward saved.
  Tensor backward_fp8(const Tensor& dy2d, const Tensor& x, const Tensor& amax_x, const Tensor& amax_w,
                      const ContextSplit& cp);
  // The same under a recipe of several scales per tensor, each operand scaled along the product's K.
  Tensor backward_fp8_blocks(const Tensor& dy2d, const Tensor& x, const ContextSplit& cp);
  // Whether a pass of n tokens (this shard's, of cp's split) runs in FP8: decided on the whole sequences' n cp.size.
  bool fp8_tokens(int64_t n, const ContextSplit& cp) const { return fp8_ && (n * cp.size) % 16 == 0; }
  // The tensors forward_fp8 saves after x: the two amaxes under the tensorwise recipe, none under the others.
  int fp8_saved() const { return fp8_recipe_ == spec::Fp8Recipe::Tensorwise ? 2 : 0; }
  // The recipe's blocks of an operand in the product's orientation: a weight's (W, W^T) or an activation's (x, dy
  // and their transposes).
  ops::Fp8Blocks fp8_blocks(bool weight) const;
  // Whether an operand's amaxes are the maximum over the tp slots, given whether the slots split its rows and its
  // K (its columns): when its blocks hold elements of other slots.
  bool fp8_across_slots(bool rows_split, bool k_split) const;
  // Whether an activation operand's (x's or dy's) amaxes are the maximum over the cp shards, given whether it is
  // transposed (its rows along the tokens) and the shard's tokens n: when its blocks hold other shards' tokens.
  bool fp8_across_shards(bool transposed, int64_t n, const ContextSplit& cp) const;

  int64_t in_, out_;
  std::vector<int64_t> parts_;  // the fused projections' output sizes, in all (one part when not fused)
  Split split_;
  TpSlot tp_;
  Parameter* weight_;  // (out_local, in_local)
  Parameter* bias_;    // (out_local) or null
  bool bias_deferred_ = false;
  bool fp8_ = false;
  DType fp8_gradients_ = DType::E5M2;  // dy's format under FP8
  spec::Fp8Recipe fp8_recipe_ = spec::Fp8Recipe::Tensorwise;
  std::unique_ptr<LoraAdapters> lora_;  // null without adapters
};

}  // namespace tandem::nn
