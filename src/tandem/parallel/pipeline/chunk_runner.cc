#include "tandem/parallel/pipeline/chunk_runner.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>

#include "tandem/device/counting_device.h"

namespace tandem::parallel::pipeline {

using device::Breakdown;
using device::CountingDevice;

// One call's effect on the device's accounts, relative to where the call started.
struct ChunkRunner::Effect {
  Breakdown peak;        // at the call's highest point
  Breakdown end;         // when it returned (the output included)
  device::WorkLog work;  // the work it recorded
  std::string where;     // ", at blocks.3 forward": the layer running at the highest point
  bool has_out = false;  // the output: forward's y, backward's dx (undefined for a chunk that takes tokens)
  Shape out_shape;
  DType out_dtype = DType::F32;
  MemoryPurpose out_purpose = MemoryPurpose::Other;
  int64_t out_bytes = 0;
  bool keeps_input = false;  // forward: what it keeps for backward includes its input (checkpointing keeps it)
  MemoryPurpose in_purpose = MemoryPurpose::Other;
  int64_t in_bytes = 0;
  bool operator==(const Effect&) const = default;
};

struct ChunkRunner::Memo {
  bool probed = false;
  bool replayable = false;  // the effects repeat and fit together: every call of this chunk is replayed
  Effect forward, backward;
};

// What one micro-batch's forward left for its backward: the layers' own Saved when run for real; when replayed,
// blocks of bytes by purpose (and the input, when the forward keeps it).
struct ChunkRunner::Held {
  std::vector<nn::Saved> saved;
  std::vector<std::shared_ptr<Storage>> ghosts;
  Breakdown ghost_bytes;
  Tensor input;
  bool replayed = false;
};

namespace {

// Labels the device "<action>, at <layer> forward|backward" around each layer (the action's label is the
// device's when the call starts), then runs the engine's hooks.
class LabellingHooks final : public nn::Model::LayerHooks {
 public:
  LabellingHooks(nn::Model& model, nn::Model::LayerHooks* inner, CountingDevice& device)
      : model_(model), inner_(inner), device_(device), action_(device.label()), live_(device.live_micro_batches()) {}
  ~LabellingHooks() override { device_.set_label(action_, live_); }
  LabellingHooks(const LabellingHooks&) = delete;
  LabellingHooks& operator=(const LabellingHooks&) = delete;

  void before_forward(size_t i) override {
    label(i, " forward");
    if (inner_) inner_->before_forward(i);
  }
  void after_forward(size_t i) override {
    if (inner_) inner_->after_forward(i);
  }
  void before_backward(size_t i) override {
    label(i, " backward");
    if (inner_) inner_->before_backward(i);
  }
  void after_backward(size_t i) override {
    if (inner_) inner_->after_backward(i);
  }

 private:
  void label(size_t i, const char* what) {
    nn::Layer& l = *model_.layers()[i];
    std::string name = l.name();
    if (name.empty()) name = l.parameters().empty() ? "layer " + std::to_string(i) : l.parameters().front()->name;
    device_.set_label(action_ + ", at " + name + what, live_);
  }

  nn::Model& model_;
  nn::Model::LayerHooks* inner_;
  CountingDevice& device_;
  std::string action_;
  int live_;
};

Breakdown elementwise_min(const Breakdown& a, const Breakdown& b) {
  Breakdown r;
  for (size_t i = 0; i < r.bytes.size(); ++i) r.bytes[i] = std::min(a.bytes[i], b.bytes[i]);
  return r;
}
Breakdown positive_part(const Breakdown& a) {
  Breakdown r;
  for (size_t i = 0; i < r.bytes.size(); ++i) r.bytes[i] = std::max<int64_t>(a.bytes[i], 0);
  return r;
}
bool non_negative(const Breakdown& a) {
  return std::all_of(a.bytes.begin(), a.bytes.end(), [](int64_t b) { return b >= 0; });
}

// Allocates `b` on the device, one block per purpose, into `blocks`.
void allocate_blocks(CountingDevice& d, const Breakdown& b, std::vector<std::shared_ptr<Storage>>& blocks) {
  for (size_t i = 0; i < b.bytes.size(); ++i) {
    if (b.bytes[i] <= 0) continue;
    const PurposeScope scope(d, static_cast<MemoryPurpose>(i));
    blocks.push_back(std::make_shared<Storage>(d, static_cast<size_t>(b.bytes[i]), "replayed"));
  }
}

void visit_saved(const nn::Saved& s, const std::function<void(const Tensor&)>& fn) {
  for (const Tensor& t : s.tensors) fn(t);
  for (const nn::Saved& c : s.children) visit_saved(c, fn);
}

}  // namespace

// Runs `call` and writes its effect on `d`'s accounts into `e`, its output described; returns the output.
template <class Call>
Tensor ChunkRunner::measure(CountingDevice& d, Effect& e, Call&& call) {
  const Breakdown start = d.live();
  const device::WorkLog work = d.work();
  const std::string action = d.label();
  d.start_window();
  Tensor out = call();
  e.peak = d.window_at_peak() - start;
  e.end = d.live() - start;
  e.work = d.work() - work;
  const std::string at = d.window_peak_label();
  e.where = at.size() > action.size() && at.compare(0, action.size(), action) == 0 ? at.substr(action.size()) : "";
  e.has_out = out.defined();
  if (e.has_out) {
    e.out_shape = out.shape();
    e.out_dtype = out.dtype();
    e.out_purpose = d.purpose_of(out.allocation());
    e.out_bytes = static_cast<int64_t>(out.allocation_bytes());
  }
  return out;
}

ChunkRunner::ChunkRunner(nn::Model& model, int chunks, bool recompute, nn::Model::LayerHooks* hooks, Device& device,
                         nn::HostCheckpoints* host)
    : model_(model), recompute_(recompute), hooks_(hooks), host_(recompute ? host : nullptr), device_(device) {
  // Hooks whose calls differ from one micro-batch to the next cannot be replayed: such chunks always run. Neither can
  // host checkpoints, whose buffers are reused from one micro-batch to the next.
  if (device.kind() == DeviceKind::Counting && (!hooks || hooks->replayable()) && !host_)
    for (int c = 0; c < chunks; ++c) memo_.push_back(std::make_unique<Memo>());
}

ChunkRunner::~ChunkRunner() = default;

// Before the first forward of a chunk: forward then backward on the same input, again and again until two
// rounds have the same effects (a first round may differ: a backend takes its workspaces with its first op), with
// the device's peak suspended and the work they record taken back: the step being accounted does not make them.
// The effects can then stand for every call of the chunk when a replay can reproduce them.
void ChunkRunner::probe(CountingDevice& d, Memo& m, const LayerRange& range, const Tensor& x, const nn::Batch& batch) {
  constexpr int kMaxRounds = 4;
  m.probed = true;
  const device::WorkLog work = d.work();
  const std::string label = d.label();
  const int live = d.live_micro_batches();
  d.suspend_peak(true);
  std::optional<Effect> last_f, last_b;
  for (int round = 0; round < kMaxRounds; ++round) {
    // The round runs on a fresh input like x, held by nothing but what the forward keeps: in the step only the
    // kept state holds the input, and when a layer lets it go before the backward's highest point matters.
    Tensor input;
    {
      const PurposeScope scope(d, d.purpose_of(x.allocation()));
      input = Tensor::empty(x.shape(), x.dtype(), d, "probe input");
    }
    Held h;
    Effect f, b;
    Tensor y = measure_forward(d, f, range, input, h, batch);
    if (!replayable_forward(d, f, input, y, h)) break;
    input = Tensor();
    measure_backward(d, b, range, y, h, batch);
    y = Tensor();
    if (last_f && *last_f == f && *last_b == b) {
      m.forward = f;
      m.backward = b;
      m.replayable = fits(f, b);
      break;
    }
    last_f = std::move(f);
    last_b = std::move(b);
  }
  d.suspend_peak(false);
  d.work() = work;
  d.set_label(label, live);
}

Tensor ChunkRunner::measure_forward(CountingDevice& d, Effect& e, const LayerRange& range, const Tensor& x, Held& h,
                                    const nn::Batch& batch) {
  const PurposeScope scope(d, MemoryPurpose::Activations);
  LabellingHooks labels(model_, hooks_, d);
  return measure(
      d, e, [&] { return model_.forward_range(range.first, range.second, x, h.saved, recompute_, &labels, batch); });
}

Tensor ChunkRunner::measure_backward(CountingDevice& d, Effect& e, const LayerRange& range, const Tensor& dy, Held& h,
                                     const nn::Batch& batch) {
  const PurposeScope scope(d, MemoryPurpose::Transient);
  LabellingHooks labels(model_, hooks_, d);
  return measure(
      d, e, [&] { return model_.backward_range(range.first, range.second, dy, h.saved, recompute_, &labels, batch); });
}

// A replay holds the output apart from what was kept, so the two must not share memory; it can keep the input,
// which must then be one whole allocation. Fills in whether the forward keeps its input.
bool ChunkRunner::replayable_forward(CountingDevice& d, Effect& f, const Tensor& x, const Tensor& y, const Held& h) {
  bool aliased = y.defined() && static_cast<int64_t>(y.nbytes()) != f.out_bytes;
  for (const nn::Saved& s : h.saved)
    visit_saved(s, [&](const Tensor& t) {
      if (y.defined() && t.shares_storage(y)) aliased = true;
      if (t.shares_storage(x)) f.keeps_input = true;
    });
  if (f.keeps_input) {
    f.in_purpose = d.purpose_of(x.allocation());
    f.in_bytes = static_cast<int64_t>(x.allocation_bytes());
    aliased = aliased || static_cast<int64_t>(x.nbytes()) != f.in_bytes;
  }
  Breakdown rest = f.end;
  if (f.has_out) rest[f.out_purpose] -= f.out_bytes;
  return !aliased && non_negative(rest) && non_negative(f.peak);
}

// What a replayed backward releases before its highest point in purpose `p`: the kept input first when the
// effect lowers that purpose by at least its bytes, then ghosts for the rest. Returns the ghost bytes to release.
int64_t ChunkRunner::ghost_lowering(const Effect& f, const Breakdown& lower, size_t p, bool& release_input) {
  release_input = f.keeps_input && static_cast<size_t>(f.in_purpose) == p && lower.bytes[p] >= f.in_bytes;
  return lower.bytes[p] - (release_input ? f.in_bytes : 0);
}

// A replayed forward leaves `rest` and, when the forward keeps it, its input; the backward's effect must start from
// exactly that: what it lowers at its highest point comes out of those, and it ends with all of them released and
// its own output made.
bool ChunkRunner::fits(const Effect& f, const Effect& b) {
  Breakdown rest = f.end;
  if (f.has_out) rest[f.out_purpose] -= f.out_bytes;
  Breakdown expected_end = Breakdown{} - rest;
  if (f.keeps_input) expected_end[f.in_purpose] -= f.in_bytes;
  if (b.has_out) expected_end[b.out_purpose] += b.out_bytes;
  const Breakdown lower = positive_part(Breakdown{} - b.peak);
  for (size_t p = 0; p < lower.bytes.size(); ++p) {
    bool release_input = false;
    if (ghost_lowering(f, lower, p, release_input) > rest.bytes[p]) return false;
  }
  return expected_end == b.end;
}

Tensor ChunkRunner::forward(const LayerRange& range, int chunk, int key, const Tensor& x, const nn::Batch& batch) {
  TANDEM_CHECK(!held_.count(key), "chunk runner: key ", key, " is already held");
  auto h = std::make_unique<Held>();
  CountingDevice* d = memo_.empty() ? nullptr : device::as_counting(device_);
  Memo* m = d ? memo_.at(static_cast<size_t>(chunk)).get() : nullptr;
  if (m && !m->probed) probe(*d, *m, range, x, batch);
  Tensor y;
  if (!m || !m->replayable) {
    const PurposeScope scope(device_, MemoryPurpose::Activations);
    y = model_.forward_range(range.first, range.second, x, h->saved, recompute_, hooks_, batch, host_);
  } else {
    // Replay: first the part of the end state that was held at the highest point, then the rest of that point,
    // released again, then the remainder of the end state and the output. The device passes through the same
    // highest point, by purpose, and ends where the real call ended.
    const Effect& f = m->forward;
    Breakdown rest = f.end;
    if (f.has_out) rest[f.out_purpose] -= f.out_bytes;
    const Breakdown a = positive_part(elementwise_min(f.peak, rest));
    const std::string action = d->label();
    d->set_label(action + f.where, d->live_micro_batches());
    allocate_blocks(*d, a, h->ghosts);
    {
      std::vector<std::shared_ptr<Storage>> spike;
      allocate_blocks(*d, f.peak - a, spike);
    }
    allocate_blocks(*d, rest - a, h->ghosts);
    d->set_label(action, d->live_micro_batches());
    h->ghost_bytes = rest;
    if (f.has_out) {
      const PurposeScope scope(*d, f.out_purpose);
      y = Tensor::empty(f.out_shape, f.out_dtype, *d, "output (replayed)");
    }
    if (f.keeps_input) h->input = x;
    d->work() += f.work;
    d->count_replay();
    h->replayed = true;
  }
  held_[key] = std::move(h);
  return y;
}

Tensor ChunkRunner::forward_only(const LayerRange& range, const Tensor& x, const nn::Batch& batch) {
  const PurposeScope scope(device_, MemoryPurpose::Activations);
  std::vector<nn::Saved> saved;
  return model_.forward_range(range.first, range.second, x, saved, recompute_, hooks_, batch);
}

Tensor ChunkRunner::backward(const LayerRange& range, int chunk, int key, const Tensor& dy, const nn::Batch& batch) {
  const auto it = held_.find(key);
  TANDEM_CHECK(it != held_.end(), "chunk runner: no forward kept for key ", key);
  std::unique_ptr<Held> h = std::move(it->second);
  held_.erase(it);
  if (!h->replayed) {
    const PurposeScope scope(device_, MemoryPurpose::Transient);
    return model_.backward_range(range.first, range.second, dy, h->saved, recompute_, hooks_, batch, host_);
  }
  // Lower what is lower at the highest point, rise to it, then release everything kept and make the output.
  CountingDevice& d = *device::as_counting(device_);
  const Effect& b = memo_.at(static_cast<size_t>(chunk))->backward;
  const Breakdown lower = positive_part(Breakdown{} - b.peak);
  const std::string action = d.label();
  d.set_label(action + b.where, d.live_micro_batches());
  const Effect& f = memo_.at(static_cast<size_t>(chunk))->forward;
  std::vector<std::shared_ptr<Storage>> kept;
  for (size_t i = 0; i < lower.bytes.size(); ++i) {
    if (lower.bytes[i] == 0) continue;
    bool release_input = false;
    const int64_t ghost = ghost_lowering(f, lower, i, release_input);
    if (release_input) h->input = Tensor();
    if (ghost == 0) continue;
    const auto purpose = static_cast<MemoryPurpose>(i);
    h->ghosts.erase(
        std::remove_if(h->ghosts.begin(), h->ghosts.end(),
                       [&](const std::shared_ptr<Storage>& s) { return d.purpose_of(s->data()) == purpose; }),
        h->ghosts.end());
    Breakdown remains;
    remains[purpose] = h->ghost_bytes[purpose] - ghost;
    allocate_blocks(d, remains, kept);
    h->ghost_bytes[purpose] = remains[purpose];
  }
  {
    std::vector<std::shared_ptr<Storage>> spike;
    allocate_blocks(d, positive_part(b.peak), spike);
  }
  d.set_label(action, d.live_micro_batches());
  kept.clear();
  h.reset();
  Tensor dx;
  if (b.has_out) {
    const PurposeScope scope(d, b.out_purpose);
    dx = Tensor::empty(b.out_shape, b.out_dtype, d, "input gradient (replayed)");
  }
  d.work() += b.work;
  d.count_replay();
  return dx;
}

}  // namespace tandem::parallel::pipeline
