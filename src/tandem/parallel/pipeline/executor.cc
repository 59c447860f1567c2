#include "tandem/parallel/pipeline/executor.h"

#include <string>

namespace tandem::parallel::pipeline {

namespace {
constexpr int kActivation = 0, kGradient = 1;
}

PipelineExecutor::PipelineExecutor(nn::Model& model, ExecutorSetup setup, comm::Communicator& pp,
                                   nn::Model::LayerHooks* hooks, Device& device)
    : model_(model),
      s_(std::move(setup)),
      pp_(pp),
      hooks_(hooks),
      device_(device),
      total_stages_(s_.pp * s_.virtual_stages) {
  TANDEM_CHECK(static_cast<int>(s_.chunks.size()) == s_.virtual_stages, "chunks ", s_.chunks.size(), " for ",
               s_.virtual_stages, " virtual stages");
  for (int c = 0; c < s_.virtual_stages; ++c) {
    Shape shape = s_.input_shape;
    for (size_t l = 0; l < s_.chunks[c].first; ++l) shape = model_.layers()[l]->output_shape(shape);
    in_shapes_.push_back(shape);
    for (size_t l = s_.chunks[c].first; l < s_.chunks[c].second; ++l) shape = model_.layers()[l]->output_shape(shape);
    out_shapes_.push_back(shape);
  }
  if (s_.recompute && s_.checkpoint_host)
    host_checkpoints_ = std::make_unique<nn::HostCheckpoints>(device_, *s_.checkpoint_host, s_.checkpoint_host_layers);
  runner_ = std::make_unique<ChunkRunner>(model_, s_.recompute, hooks_, device_, host_checkpoints_.get());
  chunk_calls_ = runner_.get();
}

void PipelineExecutor::set_chunk_calls(std::unique_ptr<ChunkCalls> calls) {
  TANDEM_CHECK(calls, "pipeline executor: no chunk calls");
  TANDEM_CHECK(chunk_calls_->held() == 0, "pipeline executor: chunk calls replaced with activations held");
  replacement_ = std::move(calls);
  chunk_calls_ = replacement_.get();
}

void ActionLabels::before(const Action& a, int live_micro_batches) {
  std::string label = (a.kind == ActionKind::Forward    ? "forward"
                       : a.kind == ActionKind::Backward ? "backward"
                                                        : action_kind_name(a.kind)) +
                      std::string(" of micro-batch ") + std::to_string(a.micro_batch);
  if (virtual_stages_ > 1) label += " (chunk " + std::to_string(a.chunk) + ")";
  device_.set_label(std::move(label), live_micro_batches);
}

// The kind is the lowest bit: communicators may route activations and gradients on separate channels. The balance
// sums' messages come after every stage's tensors' tags.
int PipelineExecutor::tag(int kind, int receiver_stage, int mb, bool sums) const {
  return ((((sums ? total_stages_ : 0) + receiver_stage) * s_.micro_batches + mb) << 1) | kind;
}

void PipelineExecutor::run(const std::function<MicroBatch(int)>& batch, const nn::LossSink& sink,
                           const std::function<void(const Tensor&, const Tensor&)>& loss, bool forward_only) {
  std::map<int, Tensor> input, output, grad, input_grad;  // by key(mb, chunk)
  // The micro-batches made so far and not yet done with on this rank, and the action each is last used by.
  std::map<int, MicroBatch> made;
  std::map<int, size_t> last_use;
  const auto runs = [&](const Action& a) {
    return a.kind == ActionKind::Forward || (a.kind == ActionKind::Backward && !forward_only);
  };
  for (size_t i = 0; i < s_.actions.size(); ++i)
    if (runs(s_.actions[i])) last_use[s_.actions[i].micro_batch] = i;
  // Each part is kept only where and while it is read: the inputs by the first stage's forward, the targets by the
  // last stage (its head's backward, when the model computes the loss), the documents by every attention.
  const bool first_rank = s_.pp_rank == 0, last_rank = s_.pp_rank == s_.pp - 1;
  const auto micro_batch = [&](int mb) -> MicroBatch& {
    auto it = made.find(mb);
    if (it == made.end()) {
      const PurposeScope scope(device_, MemoryPurpose::Other);
      it = made.emplace(mb, batch(mb)).first;
      if (!first_rank) it->second.inputs = Tensor();
      if (!last_rank) it->second.targets = Tensor();
    }
    return it->second;
  };
  const bool own_loss = model_.computes_loss();
  const auto layer_batch = [&](const MicroBatch& mb) {
    return nn::Batch{mb.targets,    mb.documents,     own_loss ? &sink : nullptr,
                     !forward_only, s_.tiles,         s_.context,
                     mb.samples,    mb.balance.get(), !forward_only && s_.recompute && s_.keep_attention};
  };
  std::vector<std::pair<std::unique_ptr<comm::Request>, Tensor>> sends;  // kept alive until complete
  auto take = [](std::map<int, Tensor>& m, int k, const char* what) {
    auto it = m.find(k);
    TANDEM_CHECK(it != m.end(), "pipeline executor: no ", what, " for key ", k);
    Tensor t = it->second;
    m.erase(it);
    return t;
  };
  // A mixture of experts' balance sums (setup.balance_sums) by key: received from the neighbouring stage, not yet
  // copied into the micro-batch's, and the micro-batch's to send with its activation or gradient.
  std::map<int, Tensor> sums_in, sums_out;
  const auto receive_sums = [&](int peer, int t, int k) {
    if (s_.balance_sums == 0) return;
    Tensor sums = Tensor::empty({s_.balance_sums}, DType::F32, device_, "received balance sums");  // (2E)
    pp_.recv(sums, peer, t);
    sums_in[k] = sums;
  };
  const auto sums_of = [&](const MicroBatch& mb) -> const Tensor& {  // (2E), made whole by the engine
    TANDEM_CHECK(mb.balance && mb.balance->sums.numel() == s_.balance_sums, "pipeline executor: ", s_.balance_sums,
                 " balance sums travel, but a micro-batch holds ", mb.balance ? mb.balance->sums.numel() : 0);
    return mb.balance->sums;
  };
  // Before a chunk's layers run: the sums the neighbouring stage sent, where it sent them, replace this rank's.
  const auto take_sums = [&](const MicroBatch& mb, int k) {
    auto it = sums_in.find(k);
    if (it == sums_in.end()) return;
    sums_of(mb).copy_from(it->second);
    sums_in.erase(it);
  };
  const auto keep_sums = [&](const MicroBatch& mb, int k) {
    if (s_.balance_sums > 0) sums_out[k] = sums_of(mb);
  };
  const auto send_sums = [&](int peer, int t, int k) {
    if (s_.balance_sums == 0) return;
    Tensor sums = take(sums_out, k, "balance sums");
    sends.emplace_back(pp_.send_async(sums, peer, t), sums);
  };

  for (size_t i = 0; i < s_.actions.size(); ++i) {
    const Action& a = s_.actions[i];
    const bool gradient_action =
        a.kind == ActionKind::RecvGradient || a.kind == ActionKind::Backward || a.kind == ActionKind::SendGradient;
    if (forward_only && gradient_action) continue;
    const int k = key(a.micro_batch, a.chunk);
    const int stage = stage_of(a.chunk);
    const LayerRange range = s_.chunks[a.chunk];
    const int live = static_cast<int>(chunk_calls_->held()) + (a.kind == ActionKind::Forward ? 1 : 0);
    for (const auto& o : observers_) o->before(a, live);
    switch (a.kind) {
      case ActionKind::RecvActivation: {
        const PurposeScope scope(device_, MemoryPurpose::Communication);
        Tensor t = Tensor::empty(in_shapes_[a.chunk], s_.activation_dtype, device_, "received activation");
        pp_.recv(t, a.peer, tag(kActivation, stage, a.micro_batch));
        input[k] = t;
        receive_sums(a.peer, tag(kActivation, stage, a.micro_batch, true), k);
        break;
      }
      case ActionKind::Forward: {
        MicroBatch& mb = micro_batch(a.micro_batch);
        take_sums(mb, k);
        Tensor x = stage == 0 ? mb.inputs : take(input, k, "input activation");
        Tensor y = forward_only ? chunk_calls_->forward_only(range, x, layer_batch(mb))
                                : chunk_calls_->forward(range, a.chunk, k, x, layer_batch(mb));
        if (stage == 0) mb.inputs = Tensor();  // the first layer keeps what its backward needs
        if (stage == total_stages_ - 1) {
          if (!own_loss) {
            const PurposeScope scope(device_, MemoryPurpose::Transient);
            loss(y, mb.targets);  // y now holds d(loss)/d(logits)
          }
          // d(loss)/d(logits), or nothing when the head computes the loss (and its gradient) in its backward
          if (!forward_only) grad[k] = y;
          if (!own_loss) mb.targets = Tensor();
        } else if (a.chunk + 1 < s_.virtual_stages && s_.pp == 1) {
          input[key(a.micro_batch, a.chunk + 1)] = y;  // the next stage is this rank's next chunk
        } else {
          output[k] = y;
          keep_sums(mb, k);  // this stage's running sums go with y
        }
        break;
      }
      case ActionKind::SendActivation: {
        Tensor y = take(output, k, "output activation");
        sends.emplace_back(pp_.send_async(y, a.peer, tag(kActivation, stage + 1, a.micro_batch)), y);
        send_sums(a.peer, tag(kActivation, stage + 1, a.micro_batch, true), k);
        break;
      }
      case ActionKind::RecvGradient: {
        const PurposeScope scope(device_, MemoryPurpose::Communication);
        Tensor t = Tensor::empty(out_shapes_[a.chunk], s_.activation_dtype, device_, "received gradient");
        pp_.recv(t, a.peer, tag(kGradient, stage, a.micro_batch));
        grad[k] = t;
        receive_sums(a.peer, tag(kGradient, stage, a.micro_batch, true), k);
        break;
      }
      case ActionKind::Backward: {
        MicroBatch& mb = micro_batch(a.micro_batch);
        take_sums(mb, k);  // the totals, for this chunk's routers
        Tensor dy = take(grad, k, "output gradient");
        Tensor dx = chunk_calls_->backward(range, a.chunk, k, dy, layer_batch(mb));
        if (stage == 0) break;
        if (a.chunk > 0 && s_.pp == 1) {
          grad[key(a.micro_batch, a.chunk - 1)] = dx;
        } else {
          input_grad[k] = dx;
          keep_sums(mb, k);  // the totals go with dx
        }
        break;
      }
      case ActionKind::SendGradient: {
        Tensor dx = take(input_grad, k, "input gradient");
        sends.emplace_back(pp_.send_async(dx, a.peer, tag(kGradient, stage - 1, a.micro_batch)), dx);
        send_sums(a.peer, tag(kGradient, stage - 1, a.micro_batch, true), k);
        break;
      }
    }
    for (const auto& o : observers_) o->after(a);
    if (runs(a) && last_use.at(a.micro_batch) == i) made.erase(a.micro_batch);
  }
  for (auto& [req, t] : sends) req->wait();
  TANDEM_CHECK(input.empty() && output.empty() && grad.empty() && input_grad.empty() && sums_in.empty() &&
                   sums_out.empty() && chunk_calls_->held() == 0,
               "pipeline executor: the schedule left tensors behind");
}

}  // namespace tandem::parallel::pipeline
