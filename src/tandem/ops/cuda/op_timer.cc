// CUDA event pairs around op calls (op_timer.h). Each CudaDevice keeps its own events (an event belongs to the device
// that was current when it was made) in a per-device context; a process-wide list of those contexts lets one drain
// read them all.
#include "tandem/ops/cuda/op_timer.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "tandem/ops/cuda/cuda_util.h"

namespace tandem::ops::cuda {
namespace {

struct TimerContext;

// The live contexts, for timer_drain. A context adds itself when made and leaves when its device goes.
std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<TimerContext*>& registry() {
  static std::vector<TimerContext*> contexts;
  return contexts;
}

struct TimerContext {
  explicit TimerContext(device::CudaDevice& d) : dev(d) {
    std::lock_guard<std::mutex> lock(registry_mu());
    registry().push_back(this);
  }
  ~TimerContext() {
    std::lock_guard<std::mutex> lock(registry_mu());
    auto& r = registry();
    r.erase(std::remove(r.begin(), r.end(), this), r.end());
  }
  TimerContext(const TimerContext&) = delete;
  TimerContext& operator=(const TimerContext&) = delete;

  // An event with timing on: a spare one, or a new one (made while `dev` is current).
  device::CudaEvent take() {
    if (spare.empty()) return device::CudaEvent(true);
    device::CudaEvent e = std::move(spare.back());
    spare.pop_back();
    return e;
  }

  struct Pair {
    size_t row;
    device::CudaEvent start, stop;
  };
  device::CudaDevice& dev;
  std::vector<device::CudaEvent> open;  // starts of the calls in progress, innermost last
  std::vector<Pair> queued;             // finished calls whose times are not read yet
  std::vector<device::CudaEvent> spare;
  std::mutex mu;
};

}  // namespace

void timer_start(const Tensor& on) {
  device::CudaDevice& dev = cuda_device(on);  // also makes it current, for take()
  TimerContext& ctx = dev.context<TimerContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  device::CudaEvent start = ctx.take();
  start.record(dev.compute_stream());
  ctx.open.push_back(std::move(start));
}

void timer_stop(const Tensor& on, size_t row) {
  device::CudaDevice& dev = cuda_device(on);
  TimerContext& ctx = dev.context<TimerContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  TANDEM_CHECK(!ctx.open.empty(), "op profile: a CUDA timer stop without its start");
  device::CudaEvent stop = ctx.take();
  stop.record(dev.compute_stream());
  ctx.queued.push_back(TimerContext::Pair{row, std::move(ctx.open.back()), std::move(stop)});
  ctx.open.pop_back();
}

void timer_abandon(const Tensor& on) {
  device::CudaDevice& dev = cuda_device(on);
  TimerContext& ctx = dev.context<TimerContext>();
  std::lock_guard<std::mutex> lock(ctx.mu);
  if (ctx.open.empty()) return;
  ctx.spare.push_back(std::move(ctx.open.back()));
  ctx.open.pop_back();
}

void timer_drain(const std::function<void(size_t row, double ms)>& add) {
  std::lock_guard<std::mutex> registry_lock(registry_mu());
  for (TimerContext* ctx : registry()) {
    std::lock_guard<std::mutex> lock(ctx->mu);
    ctx->dev.make_current();
    for (TimerContext::Pair& p : ctx->queued) {
      p.stop.synchronize();
      add(p.row, static_cast<double>(p.stop.ms_since(p.start)));
      ctx->spare.push_back(std::move(p.start));
      ctx->spare.push_back(std::move(p.stop));
    }
    ctx->queued.clear();
  }
}

}  // namespace tandem::ops::cuda
