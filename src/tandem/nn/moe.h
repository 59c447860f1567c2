// A mixture-of-experts MLP (transformers' Qwen3-MoE and Mixtral sparse blocks): a router picks k of E SwiGLU experts
// for each token, and the token's output is the sum of their outputs weighted by the router. Dropless: every choice is
// computed. Legend: N tokens, C hidden size, E experts, k choices per token, F an expert's intermediate size,
// M = N k routed rows.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/nn/layer.h"

namespace tandem::nn {

struct MoeShape {
  int64_t dim = 0;           // C
  int64_t intermediate = 0;  // F, each expert's
  int experts = 0;           // E
  int top_k = 0;             // k
  bool normalize = false;    // the k weights divided by their sum (norm_topk_prob; Mixtral always)
};

// y = residual + sum over the k chosen experts of weight x down_e(swiglu(gate_up_e(x))) for each token of x (N, C):
// the router's logits x router^T in fp32, their softmax and top-k (ops::moe_route), the tokens grouped by expert
// (ops::moe_order, moe_gather), the experts' products over their rows (ops::grouped_matmul), and the rows weighted
// back to their tokens (ops::moe_combine). Parameters "<name>.router.weight" (E, C), "<name>.gate_up.weight" (E, 2F, C)
// with each expert's gate rows then up rows, "<name>.down.weight" (E, C, F). The experts' products need the rows per
// expert on the host (ops::moe_expert_rows: a wait for the device per layer and pass; the planner's counting device
// assumes balanced routing).
class MoeMlp final : public Layer {
 public:
  MoeMlp(std::string name, const MoeShape& shape);
  // x (N, C), residual (N, C) -> y (N, C). With `count` and a balance in the batch, adds this layer's rows to its
  // sums (the first forward of a micro-batch does; activation checkpointing's second does not).
  Tensor forward_add(const Tensor& x, const Tensor& residual, const Batch& batch, Saved& saved, bool count);
  Tensor forward(const Tensor& x, Saved& saved) override;
  // dy (N, C) -> dx (N, C), the residual's gradient left to the caller; accumulates the parameters' gradients, the
  // router's with the balance loss's term when the batch has one with a weight.
  Tensor backward(const Tensor& dy, const Batch& batch, Saved& saved) override;
  Tensor backward(const Tensor& dy, Saved& saved) override { return backward(dy, Batch{}, saved); }
  const MoeShape& shape() const { return shape_; }

 private:
  MoeShape shape_;
  Parameter* router_;   // (E, C)
  Parameter* gate_up_;  // (E, 2F, C)
  Parameter* down_;     // (E, C, F)
};

}  // namespace tandem::nn
