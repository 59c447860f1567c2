// Layer: the unit a model is made of. Explicit forward and backward, named parameters, no hidden state:
// what forward keeps for backward lives in a Saved the caller owns (one per micro-batch in flight).
// Layers never communicate; parallel wrappers (tandem/parallel) do that around them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/nn/batch.h"
#include "tandem/nn/expert_parallel.h"
#include "tandem/nn/tensor_parallel.h"

namespace tandem::nn {

enum class Init { Normal, Uniform, Zeros, Ones };

// A tensor of the model. `value` and `grad` are views into the model's flat buffers once materialised.
struct Parameter {
  std::string name;    // logical name, e.g. "blocks.3.qkv.weight": the same in every layout and checkpoint
  Shape shape;         // what this rank holds
  Shape global_shape;  // the logical tensor
  Shard shard;         // which part of the logical tensor `shape` is
  Init init = Init::Normal;
  float stddev = 0.02f;  // for Init::Normal
  float bound = 0.0f;    // for Init::Uniform: U(-bound, bound)
  bool decay = true;     // weight decay applies (matrices, embeddings), not to biases and norm gains
  // False: frozen (the base model under LoRA). It has no gradient (`grad` stays undefined: layers skip its gradient
  // and the weight-gradient product), no fp32 master and no optimizer state; its values are held in the compute
  // dtype only.
  bool trainable = true;
  // A LoRA adapter's A or B (lora.h): not one of the base model's weights, which Hugging Face folders and --init
  // files hold.
  bool adapter = false;
  // A second use of a parameter another layer declares under the same name (tied weights: a head that reads the
  // embedding's table). It holds the same values and its gradient is summed with the original's: on one device
  // the two are one buffer; when they sit on two pipeline stages, each stage keeps a copy and the gradients are
  // summed between them every step (parallel::ParameterStore). Checkpoints and exports hold the original only.
  bool replica = false;
  // An expert's weights under expert parallelism: `shard` is this expert slot's part (its experts, rows of dim 0),
  // every tp slot holds it whole, and the ranks holding it are the expert slot's replicas (layout/groups.h, edp).
  bool expert = false;
  Tensor value;
  Tensor grad;
};

// Whether each tensor-parallel slot holds a part of the parameter (not all of it).
inline bool tp_sharded(const Parameter& p) { return p.shard.sharded() && !p.expert; }

// What a layer's forward keeps for its backward; nested for composite layers.
struct Saved {
  std::vector<Tensor> tensors;
  std::vector<Saved> children;
  // Under activation checkpointing, what a layer's first forward keeps for its second (forward_for_backward) beside
  // the layer's input, which Model::forward_range and backward_range carry over: a block's attention output and
  // log-sum-exp under parallel.keep_attention (Batch::keep_attention). Empty otherwise.
  std::vector<Tensor> kept;
  void clear() {
    tensors.clear();
    children.clear();
    kept.clear();
  }
};

// A block's attention output `att` and log-sum-exp `lse`, when activation checkpointing's first forward kept them
// (Saved::kept): true, and the second forward takes them instead of running attention again.
bool kept_attention(const Saved& saved, Tensor& att, Tensor& lse);
// After a block's first forward ran attention: keeps its output and log-sum-exp for the second when the batch says so.
void keep_attention(const Batch& batch, const Tensor& att, const Tensor& lse, Saved& saved);

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  // Own parameters, then each child's, in declaration order.
  std::vector<Parameter*> parameters();

  // Freezes every parameter of this layer and its children (Parameter::trainable false).
  void freeze();

  // y = f(x). Fills `saved` with what backward needs.
  virtual Tensor forward(const Tensor& x, Saved& saved) = 0;
  // dx from dy; accumulates parameter gradients (+=). Returns an undefined tensor when x has no gradient
  // (token ids). May release what `saved` holds.
  virtual Tensor backward(const Tensor& dy, Saved& saved) = 0;
  // The forms the model runs (Model::forward_range, backward_range): they also see the micro-batch (batch.h). Layers
  // that read it (attention kept inside documents, a head that computes the loss) override them; the rest ignore it.
  virtual Tensor forward(const Tensor& x, const Batch& batch, Saved& saved) { return forward(x, saved); }
  virtual Tensor backward(const Tensor& dy, const Batch& batch, Saved& saved) { return backward(dy, saved); }
  // The forward that activation checkpointing runs again just before the backward (Model::backward_range): only what
  // it saves is used, not its output. A layer that can leave work out there overrides it (LlamaBlock's tiled MLP,
  // which its backward recomputes tile by tile anyway).
  virtual Tensor forward_for_backward(const Tensor& x, const Batch& batch, Saved& saved) {
    return forward(x, batch, saved);
  }
  // The output's shape for an input of shape `in` (pipelines size their receive buffers with it).
  virtual Shape output_shape(const Shape& in) const { return in; }
  // Expert parallelism: this layer and its children keep only `slot`'s experts (their parameters become its parts).
  // Before the parameters are materialised.
  void place_experts(const ExpertSlot& slot);

 protected:
  // Declares a parameter named "<layer name>.<local>" holding all of a logical tensor of `shape`.
  Parameter& add_parameter(const std::string& local, Shape shape, Init init, bool decay);
  // Declares a parameter holding part `shard` of a logical tensor of `global_shape`; its own shape is
  // `global_shape` with the split dim divided.
  Parameter& add_sharded_parameter(const std::string& local, Shape global_shape, Shape local_shape, Shard shard,
                                   Init init, bool decay);
  // Declares a replica (see Parameter::replica) of the parameter `logical_name` (its full name, not under this
  // layer's), holding part `shard` of its `global_shape` as the original does.
  Parameter& add_replica_parameter(const std::string& logical_name, Shape global_shape, Shape local_shape, Shard shard,
                                   bool decay);
  // A layer with experts keeps `slot`'s (place_experts); by default there are none.
  virtual void keep_experts(const ExpertSlot&) {}
  // Registers a member layer so its parameters are listed after this layer's own.
  void add_child(Layer& child) { children_.push_back(&child); }
  // A child's name under this layer: "<layer name>.<local>".
  std::string child_name(const std::string& local) const { return name_.empty() ? local : name_ + "." + local; }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Parameter>> params_;  // stable addresses
  std::vector<Layer*> children_;
};

// Where a layer accumulates the gradient of `p`: its gradient, or for a frozen parameter a zeroed fp32 tensor of its
// shape on `device` that is dropped afterwards (ops that compute a gain's gradient with the input's, such as the
// norms', get somewhere to write it).
Tensor gradient_or_sink(const Parameter& p, Device& device);

}  // namespace tandem::nn
