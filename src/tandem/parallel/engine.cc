#include "tandem/parallel/engine.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tandem/nn/loss.h"
#include "tandem/ops/ops.h"
#include "tandem/optim/clip.h"
#include "tandem/parallel/moe_metrics.h"

namespace tandem::parallel {

Engine::Engine(const std::function<nn::Model(nn::TpSlot)>& build, const EngineConfig& cfg, layout::Groups& groups,
               Device& device, const Shape& input_shape)
    : cfg_(cfg), groups_(groups), device_(device), timeline_(device) {
  const layout::Layout& l = groups.layout;
  tp_reducer_ = std::make_unique<CommTpReducer>(*groups.tp);
  if (l.cp > 1) {
    TANDEM_CHECK(input_shape.size() == 2, "context parallelism splits token sequences; the model reads ",
                 shape_str(input_shape));
    context_exchange_ = std::make_unique<CommContextExchange>(*groups.cp);
    context_ = nn::ContextSplit{groups.coord.cp, l.cp, context_exchange_.get(), cfg.plan.context_attention};
  }
  model_ = build(nn::TpSlot{groups.coord.tp, l.tp, tp_reducer_.get()});
  if (l.ep > 1) {
    TANDEM_CHECK(groups.ep && groups.edp, "expert parallelism ", l.ep, " without its groups");
    expert_exchange_ = std::make_unique<CommExpertExchange>(*groups.ep);
    model_.place_experts(nn::ExpertSlot{groups.ep->rank(), l.ep, expert_exchange_.get()});
  }

  const int v = cfg.plan.virtual_stages;
  const int S = l.pp * v;
  all_chunks_ = cfg.plan.stages.empty() ? pipeline::balance_by_parameters(model_, S)
                                        : pipeline::gpt_stage_map(model_, cfg.plan.stages);
  std::vector<size_t> held;
  for (int c = 0; c < v; ++c) {
    const auto range = all_chunks_[static_cast<size_t>(pipeline::global_stage(groups.coord.pp, c, l.pp))];
    chunks_.push_back(range);
    for (size_t i = range.first; i < range.second; ++i) held.push_back(i);
  }
  OffloadOptions offload{cfg.offload_optimizer, cfg.offload_param, nullptr, static_cast<int>(cfg.micro_batches),
                         cfg.offload_run};
  // Checkpoints in host memory share it with offloaded state; their copies are meant to overlap, so it is page-locked.
  const bool host_checkpoints = cfg.plan.activation_checkpointing && cfg.plan.cpu_checkpointing;
  if (cfg.offload_optimizer.enabled() || host_checkpoints) {
    auto* accounted = dynamic_cast<device::AccountedDevice*>(&device);
    TANDEM_CHECK(accounted, "offload needs an accounted device (CPU, CUDA or counting), not ", device.name());
    host_ =
        accounted->host_memory(cfg.offload_optimizer.pin_memory || cfg.offload_param.pin_memory || host_checkpoints);
    if (cfg.offload_optimizer.enabled()) offload.host = host_.get();
  }
  store_ = std::make_unique<ParameterStore>(model_, held, cfg.zero_stage, *groups.dp, device, cfg.seed, cfg.optimizer,
                                            cfg.compute, groups.tied.get(), offload, groups.edp.get());
  if (cfg.fp16.enabled) {
    loss_scale_ =
        cfg.fp16.loss_scale > 0 ? cfg.fp16.loss_scale : std::ldexp(1.0, static_cast<int>(cfg.fp16.initial_scale_power));
    overflows_left_ = static_cast<int>(cfg.fp16.hysteresis);
  }

  const auto kind = v > 1 ? pipeline::ScheduleKind::Interleaved : cfg.plan.schedule;
  const pipeline::ScheduleSpec spec{l.pp, static_cast<int>(cfg.micro_batches), v};
  auto schedule = pipeline::build_schedule(kind, spec);
  pipeline::ExecutorSetup setup;
  setup.pp_rank = groups.coord.pp;
  setup.pp = l.pp;
  setup.virtual_stages = v;
  setup.micro_batches = static_cast<int>(cfg.micro_batches);
  setup.chunks = chunks_;
  setup.actions = schedule[static_cast<size_t>(groups.coord.pp)];
  setup.input_shape = input_shape;
  // Each context shard runs T / cp tokens of every sequence through its stage.
  if (context_.active()) setup.input_shape[1] = input_shape[1] / l.cp;
  setup.context = context_;
  setup.activation_dtype = cfg.compute;
  setup.recompute = cfg.plan.activation_checkpointing;
  if (host_checkpoints) setup.checkpoint_host = host_.get();
  setup.checkpoint_host_layers = cfg.plan.cpu_checkpointing_layers;
  setup.keep_attention = cfg.plan.keep_attention;
  setup.tiles = cfg.tiles;
  // The balance sums travel between stages only where the loss reads them: the metrics read the per-layer tables.
  if (const nn::Model::MoeRouting& r = model_.moe_routing(); r.experts > 0 && r.coef > 0.0f)
    setup.balance_sums = 2 * r.experts;
  executor_ = std::make_unique<pipeline::PipelineExecutor>(model_, std::move(setup), *groups.pp, store_.get(), device);
  // The offload timeline watches the store's steps and the host checkpoints' copies; it records only once armed.
  store_->observe(&timeline_);
  if (nn::HostCheckpoints* h = executor_->host_checkpoints()) h->set_timeline(&timeline_);
}

std::unique_ptr<Timeline> Engine::take_timeline(bool at_end) {
  if (!timeline_.ready(at_end)) return nullptr;
  store_->finish_update();  // the recorded step's updates add their spans
  return timeline_.take();
}

// Micro-batch mb of this virtual GPU's share of the global batch, with where its samples sit in the step (the layers'
// per-sample draws); float inputs (mlp features) enter in the compute dtype, token ids stay i32.
pipeline::MicroBatch Engine::micro_batch(const std::function<pipeline::MicroBatch(int64_t, int64_t)>& batch, int mb,
                                         int64_t step_index) {
  const int64_t per_replica = cfg_.micro_batch * cfg_.micro_batches;
  const int64_t first = groups_.coord.dp * per_replica + mb * cfg_.micro_batch;
  pipeline::MicroBatch b = batch(first, cfg_.micro_batch);
  b.samples = {cfg_.seed, step_index, first};
  if (const nn::Model::MoeRouting& r = model_.moe_routing(); r.experts > 0) {
    // The balance sums over this micro-batch's tokens and MoE layers; its share of the step's loss is its samples'.
    auto balance = std::make_shared<nn::MoeBalance>();
    const PurposeScope scope(device_, MemoryPurpose::Other);
    balance->sums = Tensor::zeros({2 * r.experts}, DType::F32, device_, "expert choices and probabilities");
    balance->counts = balance->sums.flat_slice(0, r.experts, {r.experts});
    balance->probsum = balance->sums.flat_slice(r.experts, r.experts, {r.experts});
    balance->rows = b.inputs.numel() * r.layers;
    balance->coef = r.coef;
    balance->share = static_cast<double>(cfg_.micro_batch) / static_cast<double>(per_replica * groups_.layout.dp);
    balance->layer_counts = Tensor::zeros({r.layers, r.experts}, DType::F32, device_, "expert choices per layer");
    balance->layer_probsum =
        Tensor::zeros({r.layers, r.experts}, DType::F32, device_, "expert probabilities per layer");
    b.balance = std::move(balance);
    if (balances_.size() <= static_cast<size_t>(mb)) balances_.resize(static_cast<size_t>(mb) + 1);
    balances_[static_cast<size_t>(mb)] = b.balance;
  }
  if (context_.active()) {
    // This shard's tokens and targets; the documents stay whole for attention, which sees every token.
    const int64_t B = b.inputs.dim(0), T = b.inputs.dim(1);
    TANDEM_CHECK(b.targets.numel() == B * T, "context parallelism needs a target per token, got ",
                 shape_str(b.targets.shape()), " for inputs ", shape_str(b.inputs.shape()));
    b.inputs = context_.shard_sequences(b.inputs);
    b.targets = context_.shard_sequences(b.targets.view({B, T})).view({B * T / context_.size});
  }
  if (b.inputs.dtype() != DType::I32 && b.inputs.dtype() != cfg_.compute) {
    Tensor cast = Tensor::empty(b.inputs.shape(), cfg_.compute, device_, "inputs (compute dtype)");
    ops::cast(b.inputs, cast);
    b.inputs = cast;
  }
  return b;
}

double Engine::run_schedule(const std::function<pipeline::MicroBatch(int64_t, int64_t)>& batch, double loss_normalizer,
                            bool forward_only, int64_t step_index) {
  const auto& c = groups_.coord;
  const nn::TpSlot loss_tp =
      model_.vocab_parallel_logits() ? nn::TpSlot{c.tp, groups_.layout.tp, tp_reducer_.get()} : nn::TpSlot{};
  Tensor loss_sum = Tensor::zeros({1}, DType::F32, device_, "step loss sum");  // (1), summed on the device
  const auto scale = static_cast<float>(forward_only ? 1.0 : loss_scale_);
  const nn::LossSink sink{loss_sum, loss_normalizer, scale};
  executor_->run([&](int mb) { return micro_batch(batch, mb, step_index); }, sink,
                 [&](const Tensor& logits, const Tensor& targets) {
                   nn::cross_entropy_loss(logits, targets, loss_normalizer, loss_sum, loss_tp, scale);
                 },
                 forward_only);
  if (!forward_only) {
    store_->reduce_gradients();
    store_->tie_gradients();
  }
  // Every tp slot of the last stage computed the same loss: count it once per virtual GPU. This read and the
  // gradient norm's are the step's only waits for the device.
  const double local_loss = c.tp == 0 ? static_cast<double>(loss_sum.to_host_floats()[0]) : 0.0;
  return groups_.world->all_reduce_scalar(local_loss);
}

void Engine::balance_metrics(StepResult& r) {
  if (balances_.empty()) return;
  MoeMetrics m = moe_metrics(balances_, groups_, device_);
  balances_.clear();
  r.moe = true;
  r.moe_balance_loss = m.balance_loss;
  r.moe_max_load = m.max_load;
  r.moe_layer_max_load = std::move(m.layer_max_load);
  r.moe_layers = model_.moe_routing().indices;
}

double Engine::evaluate(const std::function<pipeline::MicroBatch(int64_t, int64_t)>& batch, double loss_normalizer) {
  const double loss = run_schedule(batch, loss_normalizer, true, 0);
  balances_.clear();  // an evaluation's sums are not the step's
  return loss;
}

StepResult Engine::step(const std::function<pipeline::MicroBatch(int64_t, int64_t)>& batch, float lr,
                        double loss_normalizer, int64_t step_index) {
  const auto& c = groups_.coord;
  // Without clipping or fp16's overflow check the update needs nothing of the whole step: with offload it starts in
  // the backward, each unit's as its gradient comes down (the scale is the one computed below: 1 / 1), unless
  // offload_optimizer.update holds it until the backward's end.
  const bool in_backward = cfg_.offload_optimizer.update == spec::OffloadUpdate::InBackward && !cfg_.fp16.enabled &&
                           cfg_.gradient_clipping <= 0;
  store_->begin_step(in_backward ? std::optional<ParameterStore::UpdateInBackward>({lr, 1.0f}) : std::nullopt);
  StepResult r;
  r.loss_scale = loss_scale_;
  balances_.clear();
  r.loss_sum = run_schedule(batch, loss_normalizer, false, step_index);
  balance_metrics(r);
  r.grad_norm = std::sqrt(groups_.world->all_reduce_scalar(store_->grad_sum_of_squares(c.tp == 0))) / loss_scale_;
  if (cfg_.fp16.enabled && !std::isfinite(r.grad_norm)) {
    r.skipped = true;  // the same verdict on every rank: the norm was reduced over the world
    if (cfg_.fp16.loss_scale <= 0 && --overflows_left_ <= 0) {
      loss_scale_ = std::max(cfg_.fp16.min_loss_scale, loss_scale_ / 2);
      overflows_left_ = static_cast<int>(cfg_.fp16.hysteresis);
    }
    good_steps_ = 0;
    return r;
  }
  const float unscale = static_cast<float>(1.0 / loss_scale_);
  store_->optimizer_step(lr, optim::clip_coefficient(r.grad_norm, cfg_.gradient_clipping) * unscale);
  if (cfg_.fp16.enabled && cfg_.fp16.loss_scale <= 0 && ++good_steps_ >= cfg_.fp16.loss_scale_window) {
    loss_scale_ *= 2;
    good_steps_ = 0;
  }
  return r;
}

void Engine::set_loss_scale_state(double scale, int good_steps, int overflows_left) {
  if (!cfg_.fp16.enabled) return;  // a checkpoint from an fp16 run resumed without fp16
  loss_scale_ = scale;
  good_steps_ = good_steps;
  overflows_left_ = overflows_left;
}

std::map<std::string, std::vector<float>> Engine::collect_parameters() {
  std::map<std::string, Tensor> full;  // every parameter of the model, zeros where this rank holds nothing
  for (nn::Parameter* p : model_.parameters())
    full[p->name] = Tensor::zeros(p->global_shape, DType::F32, device_, p->name + " (collected)");
  const auto& c = groups_.coord;
  // One rank writes each element: replica 0, and tp slot 0 for parameters every slot holds whole.
  store_->visit_full_values([&](const nn::Parameter& p, const Tensor& value) {
    if (store_->replica_rank(p) != 0 || (!nn::tp_sharded(p) && c.tp != 0)) return;
    const std::vector<float> local = value.to_host_floats();
    std::vector<float> global(static_cast<size_t>(shape_numel(p.global_shape)), 0.0f);
    for (size_t i = 0; i < local.size(); ++i)
      global[static_cast<size_t>(p.shard.global_index(static_cast<int64_t>(i)))] = local[i];
    full[p.name].copy_from_host(global.data());
  });
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : full) {
    groups_.world->all_reduce(t, comm::ReduceOp::Sum);
    out[name] = t.to_host_floats();
  }
  return out;
}

std::string Engine::describe_stages() const {
  std::ostringstream os;
  const auto& layers = model_.layers();
  auto label = [&](size_t i) {
    const std::string& n = layers[i]->name();
    return n.empty() ? layers[i]->parameters().front()->name : n;
  };
  for (size_t s = 0; s < all_chunks_.size(); ++s) {
    const auto [first, last] = all_chunks_[s];
    int64_t params = 0;
    for (size_t i = first; i < last; ++i)
      for (nn::Parameter* p : layers[i]->parameters()) params += shape_numel(p->global_shape);
    os << "  stage " << s << " (rank slot pp=" << pipeline::stage_rank(static_cast<int>(s), groups_.layout.pp)
       << "): layers " << first << ".." << last - 1 << " (" << label(first) << " .. " << label(last - 1) << "), "
       << params << " parameters\n";
  }
  return os.str();
}

}  // namespace tandem::parallel
