#include "tandem/plan/chunk_replay.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>

namespace tandem::plan {

using device::Breakdown;
using device::CountingDevice;

// One call's effect on the device's accounts, relative to where the call started.
struct ChunkReplay::Effect {
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

struct ChunkReplay::Memo {
  bool probed = false;
  bool replayable = false;  // the effects repeat and fit together: every call of this chunk is replayed
  Effect forward, backward;
};

// What one replayed forward left for its backward: blocks of bytes by purpose, and the input when the forward keeps
// it.
struct ChunkReplay::Ghosts {
  std::vector<std::shared_ptr<Storage>> blocks;
  Breakdown bytes;
  Tensor input;
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

ChunkReplay::ChunkReplay(parallel::pipeline::ChunkRunner& runner, CountingDevice& device)
    : runner_(runner), device_(device) {
  TANDEM_CHECK(!runner.host(), "chunk replay: a chunk whose inputs wait in host memory runs every call");
}

ChunkReplay::~ChunkReplay() = default;

// Runs `call` and writes its effect on the device's accounts into `e`, its output described; returns the output.
template <class Call>
Tensor ChunkReplay::measure(Effect& e, Call&& call) {
  CountingDevice& d = device_;
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

// Before the first forward of a chunk: forward then backward on the same input, again and again until two
// rounds have the same effects (a first round may differ: a backend takes its workspaces with its first op), with
// the device's peak suspended and the work they record taken back: the step being accounted does not make them.
// The effects can then stand for every call of the chunk when a replay can reproduce them.
void ChunkReplay::probe(Memo& m, const LayerRange& range, const Tensor& x, const nn::Batch& batch) {
  constexpr int kMaxRounds = 4;
  CountingDevice& d = device_;
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
    std::vector<nn::Saved> saved;
    Effect f, b;
    Tensor y = measure_forward(f, range, input, saved, batch);
    if (!replayable_forward(f, input, y, saved)) break;
    input = Tensor();
    measure_backward(b, range, y, saved, batch);
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

Tensor ChunkReplay::measure_forward(Effect& e, const LayerRange& range, const Tensor& x, std::vector<nn::Saved>& saved,
                                    const nn::Batch& batch) {
  const PurposeScope scope(device_, MemoryPurpose::Activations);
  nn::Model& model = runner_.model();
  LabellingHooks labels(model, runner_.hooks(), device_);
  return measure(
      e, [&] { return model.forward_range(range.first, range.second, x, saved, runner_.recompute(), &labels, batch); });
}

Tensor ChunkReplay::measure_backward(Effect& e, const LayerRange& range, const Tensor& dy,
                                     std::vector<nn::Saved>& saved, const nn::Batch& batch) {
  const PurposeScope scope(device_, MemoryPurpose::Transient);
  nn::Model& model = runner_.model();
  LabellingHooks labels(model, runner_.hooks(), device_);
  return measure(e, [&] {
    return model.backward_range(range.first, range.second, dy, saved, runner_.recompute(), &labels, batch);
  });
}

// A replay holds the output apart from what was kept, so the two must not share memory; it can keep the input,
// which must then be one whole allocation. Fills in whether the forward keeps its input.
bool ChunkReplay::replayable_forward(Effect& f, const Tensor& x, const Tensor& y,
                                     const std::vector<nn::Saved>& saved) const {
  bool aliased = y.defined() && static_cast<int64_t>(y.nbytes()) != f.out_bytes;
  for (const nn::Saved& s : saved)
    visit_saved(s, [&](const Tensor& t) {
      if (y.defined() && t.shares_storage(y)) aliased = true;
      if (t.shares_storage(x)) f.keeps_input = true;
    });
  if (f.keeps_input) {
    f.in_purpose = device_.purpose_of(x.allocation());
    f.in_bytes = static_cast<int64_t>(x.allocation_bytes());
    aliased = aliased || static_cast<int64_t>(x.nbytes()) != f.in_bytes;
  }
  Breakdown rest = f.end;
  if (f.has_out) rest[f.out_purpose] -= f.out_bytes;
  return !aliased && non_negative(rest) && non_negative(f.peak);
}

// What a replayed backward releases before its highest point in purpose `p`: the kept input first when the
// effect lowers that purpose by at least its bytes, then ghosts for the rest. Returns the ghost bytes to release.
int64_t ChunkReplay::ghost_lowering(const Effect& f, const Breakdown& lower, size_t p, bool& release_input) {
  release_input = f.keeps_input && static_cast<size_t>(f.in_purpose) == p && lower.bytes[p] >= f.in_bytes;
  return lower.bytes[p] - (release_input ? f.in_bytes : 0);
}

// A replayed forward leaves `rest` and, when the forward keeps it, its input; the backward's effect must start from
// exactly that: what it lowers at its highest point comes out of those, and it ends with all of them released and
// its own output made.
bool ChunkReplay::fits(const Effect& f, const Effect& b) {
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

Tensor ChunkReplay::forward(const LayerRange& range, int chunk, int key, const Tensor& x, const nn::Batch& batch) {
  TANDEM_CHECK(!replayed_.count(key), "chunk replay: key ", key, " is already held");
  std::unique_ptr<Memo>& slot = memo_[chunk];
  if (!slot) slot = std::make_unique<Memo>();
  Memo& m = *slot;
  if (!m.probed) probe(m, range, x, batch);
  if (!m.replayable) return runner_.forward(range, chunk, key, x, batch);
  // Replay: first the part of the end state that was held at the highest point, then the rest of that point,
  // released again, then the remainder of the end state and the output. The device passes through the same
  // highest point, by purpose, and ends where the real call ended.
  CountingDevice& d = device_;
  auto h = std::make_unique<Ghosts>();
  const Effect& f = m.forward;
  Breakdown rest = f.end;
  if (f.has_out) rest[f.out_purpose] -= f.out_bytes;
  const Breakdown a = positive_part(elementwise_min(f.peak, rest));
  const std::string action = d.label();
  d.set_label(action + f.where, d.live_micro_batches());
  allocate_blocks(d, a, h->blocks);
  {
    std::vector<std::shared_ptr<Storage>> spike;
    allocate_blocks(d, f.peak - a, spike);
  }
  allocate_blocks(d, rest - a, h->blocks);
  d.set_label(action, d.live_micro_batches());
  h->bytes = rest;
  Tensor y;
  if (f.has_out) {
    const PurposeScope scope(d, f.out_purpose);
    y = Tensor::empty(f.out_shape, f.out_dtype, d, "output (replayed)");
  }
  if (f.keeps_input) h->input = x;
  d.work() += f.work;
  d.count_replay();
  replayed_[key] = std::move(h);
  return y;
}

Tensor ChunkReplay::forward_only(const LayerRange& range, const Tensor& x, const nn::Batch& batch) {
  return runner_.forward_only(range, x, batch);
}

Tensor ChunkReplay::backward(const LayerRange& range, int chunk, int key, const Tensor& dy, const nn::Batch& batch) {
  const auto it = replayed_.find(key);
  if (it == replayed_.end()) return runner_.backward(range, chunk, key, dy, batch);
  std::unique_ptr<Ghosts> h = std::move(it->second);
  replayed_.erase(it);
  // Lower what is lower at the highest point, rise to it, then release everything kept and make the output.
  CountingDevice& d = device_;
  const Memo& m = *memo_.at(chunk);
  const Effect& b = m.backward;
  const Breakdown lower = positive_part(Breakdown{} - b.peak);
  const std::string action = d.label();
  d.set_label(action + b.where, d.live_micro_batches());
  const Effect& f = m.forward;
  std::vector<std::shared_ptr<Storage>> kept;
  for (size_t i = 0; i < lower.bytes.size(); ++i) {
    if (lower.bytes[i] == 0) continue;
    bool release_input = false;
    const int64_t ghost = ghost_lowering(f, lower, i, release_input);
    if (release_input) h->input = Tensor();
    if (ghost == 0) continue;
    const auto purpose = static_cast<MemoryPurpose>(i);
    h->blocks.erase(
        std::remove_if(h->blocks.begin(), h->blocks.end(),
                       [&](const std::shared_ptr<Storage>& s) { return d.purpose_of(s->data()) == purpose; }),
        h->blocks.end());
    Breakdown remains;
    remains[purpose] = h->bytes[purpose] - ghost;
    allocate_blocks(d, remains, kept);
    h->bytes[purpose] = remains[purpose];
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

}  // namespace tandem::plan
