// Model: an ordered list of layers (the units a pipeline may later cut between) whose parameters live in
// two flat fp32 buffers, values and gradients, on one device. Build it in code with add(), or from a
// config through build_mlp / build_gpt (models.h); hand it to the trainer.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tandem/nn/host_checkpoints.h"
#include "tandem/nn/layer.h"

namespace tandem::nn {

class Model {
 public:
  Model() = default;
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;

  // Appends a layer. Parameter names must be unique across the model.
  Layer& add(std::unique_ptr<Layer> layer);
  template <class L, class... Args>
  L& emplace(Args&&... args) {
    return static_cast<L&>(add(std::make_unique<L>(std::forward<Args>(args)...)));
  }

  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // Every parameter once: the originals, in layer order (replicas of tied ones left out: see replicas()).
  std::vector<Parameter*> parameters() const;
  // The replicas of tied parameters (Parameter::replica), in layer order.
  std::vector<Parameter*> replicas() const;
  int64_t num_parameters() const;

  // Allocates the flat value and gradient buffers on `device` (through its budget), points every parameter
  // at its slice (a frozen one gets no gradient view), and initialises values from (seed, parameter name, element
  // index): N(0, stddev) for Init::Normal, U(-bound, bound) for Init::Uniform, 0 or 1 otherwise. The result does not
  // depend on anything else.
  void materialize(Device& device, uint64_t seed);
  bool materialized() const { return values_.defined(); }
  const Tensor& flat_values() const { return values_; }  // (P)
  const Tensor& flat_grads() const { return grads_; }    // (P)
  void zero_grad() const { grads_.fill_zero(); }

  // Runs every layer. `saved` gets one entry per layer. With `recompute`, each layer keeps only its input
  // and its forward is run again in backward (activation checkpointing).
  Tensor forward(const Tensor& input, std::vector<Saved>& saved, bool recompute = false);
  // Backward through every layer from d(output); accumulates into the gradient buffer.
  void backward(const Tensor& doutput, std::vector<Saved>& saved, bool recompute = false);

  // The same over layers [first, last) only (a pipeline chunk); `saved` gets last - first entries. `hooks`,
  // when given, run around each layer (ZeRO gathers and frees parameters there).
  struct LayerHooks {
    virtual ~LayerHooks() = default;
    virtual void before_forward(size_t layer) {}
    virtual void after_forward(size_t layer) {}
    virtual void before_backward(size_t layer) {}
    virtual void after_backward(size_t layer) {}
  };
  // `batch`: what the micro-batch brings besides the input (batch.h), handed to every layer. With a loss sink in
  // it and a head that computes the loss (computes_loss()), the range's output is undefined and its backward starts
  // from an undefined doutput.
  // `host` (with `recompute`; null: on the device): the inputs the layers keep wait in host memory, every layer's but
  // the range's last, whose backward comes first: its input would have to come straight back, with nothing to
  // overlap the copies. The backward brings each back one layer ahead. Pass the same `host` to both calls.
  Tensor forward_range(size_t first, size_t last, const Tensor& input, std::vector<Saved>& saved, bool recompute,
                       LayerHooks* hooks = nullptr, const Batch& batch = {}, HostCheckpoints* host = nullptr);
  // Returns d(input) (undefined when the first layer takes tokens).
  Tensor backward_range(size_t first, size_t last, const Tensor& doutput, std::vector<Saved>& saved, bool recompute,
                        LayerHooks* hooks = nullptr, const Batch& batch = {}, HostCheckpoints* host = nullptr);
  // Whether the last layer computes the loss itself when the batch carries a sink (the gpt and llama heads): the
  // logits are then never held whole.
  bool computes_loss() const { return computes_loss_; }
  void set_computes_loss(bool v) { computes_loss_ = v; }

  // True when the last layer returns one tensor-parallel slot's slice of the vocabulary (gpt under tp),
  // so the loss must be vocabulary-parallel.
  bool vocab_parallel_logits() const { return vocab_parallel_logits_; }
  void set_vocab_parallel_logits(bool v) { vocab_parallel_logits_ = v; }
  // How many of the blocks' projections run their products in FP8 (spec/fp8.h), of how many: the builder's count.
  struct Fp8Use {
    int fp8 = 0, projections = 0;
  };
  Fp8Use fp8_use() const { return fp8_use_; }
  void set_fp8_use(Fp8Use use) { fp8_use_ = use; }
  // A mixture-of-experts model's balance loss (batch.h's MoeBalance): the experts of its MoE layers, how many of those
  // layers it has and the loss's weight, for the sums each micro-batch carries. experts 0: no MoE layers.
  struct MoeRouting {
    int experts = 0, layers = 0;
    float coef = 0.0f;
    std::vector<int> indices;  // (layers) each MoE layer's block number (model.layers.<i>), in model order
  };
  const MoeRouting& moe_routing() const { return moe_routing_; }
  void set_moe_routing(MoeRouting routing) { moe_routing_ = routing; }
  // Expert parallelism: every layer keeps only `slot`'s experts (Layer::place_experts). Before materialising.
  void place_experts(const ExpertSlot& slot) {
    for (auto& l : layers_) l->place_experts(slot);
  }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unordered_map<std::string, Parameter*> originals_;  // by name: a repeated name is refused, a replica checked
  Tensor values_;                                          // (P) fp32
  Tensor grads_;                                           // (P) fp32
  bool vocab_parallel_logits_ = false;
  bool computes_loss_ = false;
  Fp8Use fp8_use_;
  MoeRouting moe_routing_;
};

// The parameter's initial values for elements [first, first + count) of what it holds (its shard, flattened), on the
// host in fp32. Any slice, any tensor-parallel split: the same numbers.
std::vector<float> initial_values(const Parameter& param, uint64_t seed, int64_t first, int64_t count);
// Fills `value` (f32) with initial_values(param, seed, first, value.numel()), drawn on value's own device.
void initialize_parameter(const Parameter& param, const Tensor& value, uint64_t seed, int64_t first = 0);

}  // namespace tandem::nn
