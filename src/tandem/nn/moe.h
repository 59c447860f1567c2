// A mixture-of-experts MLP (transformers' Qwen3-MoE and Mixtral sparse blocks): a router picks k of E SwiGLU experts
// for each token, and the token's output is the sum of their outputs weighted by the router. Dropless: every choice is
// computed. Legend: N tokens, C hidden size, E experts, k choices per token, F an expert's intermediate size,
// M = N k routed rows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/nn/expert_lora.h"
#include "tandem/nn/layer.h"
#include "tandem/nn/linear.h"

namespace tandem::nn {

struct MoeShape {
  int64_t dim = 0;           // C
  int64_t intermediate = 0;  // F, each expert's
  int experts = 0;           // E
  int top_k = 0;             // k
  bool normalize = false;    // the k weights divided by their sum (norm_topk_prob; Mixtral always)
  int64_t shared = 0;        // Fs: Qwen2-MoE's shared expert's width; 0: none
  int index = 0;             // its place among the model's MoE layers: its row of MoeBalance's per-layer tables
};

// y = residual + sum over the k chosen experts of weight x down_e(swiglu(gate_up_e(x))) for each token of x (N, C):
// the router's logits x router^T in fp32, their softmax and top-k (ops::moe_route), the tokens grouped by expert
// (ops::moe_order, moe_gather), the experts' products over their rows (ops::grouped_matmul), and the rows weighted
// back to their tokens (ops::moe_combine). Parameters "<name>.router.weight" (E, C), "<name>.gate_up.weight" (E, 2F, C)
// with each expert's gate rows then up rows, "<name>.down.weight" (E, C, F). The experts' products need the rows per
// expert on the host (ops::moe_expert_rows: a wait for the device per layer and pass; the planner's counting device
// assumes balanced routing).
// Expert parallelism (place_experts with a slot of P): the slot keeps experts [slot L, (slot + 1) L) of E, L = E / P
// ("gate_up" (L, 2F, C), "down" (L, C, F), each a part of the whole; the router stays whole). Each slot routes its own
// tokens; their rows go to the slots of their experts (ExpertExchange::rows, after the slots' rows per expert were
// gathered), are regrouped expert by expert (expert_route.h), computed, and come back the same way; the backward
// sends the outputs' gradients along the same route and the inputs' gradients back.
// A shared expert (Qwen2-MoE, shape.shared > 0): every token also goes through a dense SwiGLU MLP of width Fs, its
// output weighted by sigmoid(x . gate): "<name>.shared_gate_up.weight" (2Fs, C) gate rows then up rows and
// "<name>.shared_down.weight" (C, Fs), split over tp as a dense MLP's, and "<name>.shared_expert_gate.weight" (1, C),
// whole on every slot. It is no expert: every expert slot holds it whole.
// LoRA (lora.h): the shared expert's projections take adapters as a dense MLP's, "<name>.shared_gate_up.gate" and
// ".up" on the gate and up rows of shared_gate_up (PEFT's shared_expert.gate_proj and up_proj), "<name>.shared_down"
// (shared_expert.down_proj), and its gate one of its own, "<name>.shared_expert_gate" (PEFT's shared_expert_gate):
// A (r, C) and B (1, r) whole on every slot, s (x A^T) B^T added to the gate's fp32 logit before the sigmoid. The
// experts take adapters of rank r per expert on their stacked parameters (expert_lora.h; PEFT's target_parameters),
// "<name>.gate_up" (A "<name>.gate_up.lora_A" (E, r, C), B ".lora_B" (E, 2F, r)) and "<name>.down" (A (E, r, F),
// B (E, C, r)), split over the expert slots with their experts. The router stays frozen without adapters.
class MoeMlp final : public Layer {
 public:
  MoeMlp(std::string name, const MoeShape& shape, TpSlot tp = {});
  // x (N, C), residual (N, C) -> y (N, C). With `count` and a balance in the batch, adds this layer's rows to its
  // sums (the first forward of a micro-batch does; activation checkpointing's second does not).
  Tensor forward_add(const Tensor& x, const Tensor& residual, const Batch& batch, Saved& saved, bool count);
  Tensor forward(const Tensor& x, Saved& saved) override;
  // dy (N, C) -> dx (N, C), the residual's gradient left to the caller; accumulates the parameters' gradients, the
  // router's with the balance loss's term when the batch has one with a weight.
  Tensor backward(const Tensor& dy, const Batch& batch, Saved& saved) override;
  Tensor backward(const Tensor& dy, Saved& saved) override { return backward(dy, Batch{}, saved); }
  const MoeShape& shape() const { return shape_; }
  // Adds the adapters that `targets` names, the shared expert's and the experts' (the caller freezes the layer);
  // returns how many.
  int add_lora(const LoraTargets& targets);

 protected:
  void keep_experts(const ExpertSlot& slot) override;

 private:
  // The experts' part of the forward: routed (M, C), grouped by expert with `per_expert` rows each (E), to each row's
  // expert output (M, C); keeps what experts_backward needs in `saved` (from the slots' offsets when expert-parallel).
  Tensor experts_forward(const Tensor& routed, const Tensor& offsets, const std::vector<int64_t>& per_expert,
                         Saved& saved);
  // doutputs (M, C) -> the routed rows' gradients (M, C); accumulates the experts' weight gradients.
  Tensor experts_backward(const Tensor& doutputs, Saved& saved);
  // The experts' products over `rows` (this slot's experts'): x (R, C) -> (R, C), keeping in `saved` gate_up (R, 2F),
  // hidden (R, F) and the experts' adapters' outputs s x A_e^T (R, r) where they have adapters; and back, with x.
  Tensor products(const Tensor& x, const std::vector<int64_t>& rows, Saved& saved);
  Tensor products_backward(const Tensor& dy, const std::vector<int64_t>& rows, const Tensor& x, const Saved& saved);
  // The experts' adapter at "<name>.<part>" (part "gate_up" or "down", weight (E, out, in)), when `targets` names it.
  std::unique_ptr<ExpertLora> adapt_experts(const LoraTargets& targets, const std::string& part, int64_t out,
                                            int64_t in);
  // The shared expert: y (N, C) += sigmoid(x gate^T) down(swiglu(gate_up(x))) for x (..., C) (the micro-batch's rows,
  // (B, T, C), as its adapters' dropout keys them); and back, dx (N, C) += its input's gradient (the gate's included).
  void shared_forward(const Tensor& x, const Tensor& y, const Batch& batch, Saved& saved);
  void shared_backward(const Tensor& dy, const Tensor& dx, const Batch& batch, Saved& saved);

  MoeShape shape_;
  ExpertSlot slot_;
  Parameter* router_;   // (E, C)
  Parameter* gate_up_;  // (E, 2F, C)
  Parameter* down_;     // (E, C, F)
  // The experts' adapters under LoRA, else null: gate_up's and down's.
  std::unique_ptr<ExpertLora> gate_up_lora_, down_lora_;
  std::vector<Parameter*> per_expert_;  // every parameter split along the expert dim: the weights and their adapters
  // The shared expert (shape.shared > 0), else null.
  std::unique_ptr<Linear> shared_gate_up_;          // (2Fs / tp, C)
  std::unique_ptr<Linear> shared_down_;             // (C, Fs / tp)
  Parameter* shared_gate_ = nullptr;                // (1, C)
  std::unique_ptr<LoraAdapters> shared_gate_lora_;  // the gate's adapter under LoRA, else null
};

}  // namespace tandem::nn
