// The op profile (profile.h): the timed backend tables, the rows they fill, the steps and the printed table. One
// recorder per process (a process drives one device); every entry point takes its lock.
#include "tandem/ops/profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "tandem/ops/work.h"
#ifdef TANDEM_WITH_CUDA
#include "tandem/ops/cuda/op_timer.h"
#endif

namespace tandem::ops::profile {
namespace {

// Off until set_enabled (the trainer turns it on with TANDEM_PROFILE, core/diagnostics.h).
std::atomic<bool> g_enabled{false};

struct Totals {
  double calls = 0, ms = 0, flops = 0, bytes = 0;
};

struct Recorder {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> rows;  // (op, detail) of each row
  std::map<std::pair<std::string, std::string>, size_t> index;
  std::vector<Totals> current;             // the open step, one entry per row (rows made later are appended)
  std::vector<std::vector<Totals>> steps;  // closed steps
  std::vector<double> step_ms;             // their wall times
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

size_t row_of(OpId id, std::string detail) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  std::pair<std::string, std::string> key{op_name(id), std::move(detail)};
  auto it = r.index.find(key);
  if (it != r.index.end()) return it->second;
  r.rows.push_back(key);
  r.current.emplace_back();
  return r.index.emplace(std::move(key), r.rows.size() - 1).first->second;
}

void note_call(size_t row, const OpWork& w) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  Totals& t = r.current.at(row);
  t.calls += 1;
  t.flops += w.flops();
  t.bytes += w.bytes;
}

void add_ms(size_t row, double ms) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.current.at(row).ms += ms;
}

// matmul rows by shape and dtype: "M x N x K", then a and b as stored (n) or transposed (t), then the dtypes.
std::string matmul_detail(const Tensor& a, const Tensor& c, bool trans_a, bool trans_b) {
  const int64_t m = rows_of(c), n = cols_of(c), k = trans_a ? rows_of(a) : cols_of(a);
  char buf[128];
  std::snprintf(buf, sizeof buf, "%lldx%lldx%lld %c%c %s->%s", static_cast<long long>(m), static_cast<long long>(n),
                static_cast<long long>(k), trans_a ? 't' : 'n', trans_b ? 't' : 'n', dtype_name(a.dtype()).c_str(),
                dtype_name(c.dtype()).c_str());
  return buf;
}

template <OpId id, class... A>
std::string detail_of(const A&... a) {
  if constexpr (id == OpId::matmul) {
    const auto& [x, y, c, trans_a, trans_b, beta] = std::tie(a...);
    return matmul_detail(x, c, trans_a, trans_b);
  } else if constexpr (id == OpId::linear_forward) {
    const auto& [x, weight, bias, residual, y] = std::tie(a...);
    return matmul_detail(x, y, false, true);
  } else if constexpr (id == OpId::linear_weight_grad) {
    const auto& [dy, x, dweight, dbias] = std::tie(a...);
    return matmul_detail(dy, dweight, true, false);
  } else {
    return "";
  }
}

// Host clock: CPU ops have finished when they return.
struct CpuClock {
  static const Backend& real() { return cpu::backend(); }
  explicit CpuClock(const Tensor&) : start(std::chrono::steady_clock::now()) {}
  void stop(size_t row) {
    add_ms(row, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  void abandon() {}
  std::chrono::steady_clock::time_point start;
};

#ifdef TANDEM_WITH_CUDA
// CUDA events on the compute stream, read when the step closes.
struct CudaClock {
  static const Backend& real() { return cuda::backend(); }
  explicit CudaClock(const Tensor& t) : on(t) { cuda::timer_start(on); }
  void stop(size_t row) { cuda::timer_stop(on, row); }
  void abandon() { cuda::timer_abandon(on); }
  const Tensor& on;
};
#endif

// Times `call` (the real entry) under the op's row. The row and the work are worked out before the clock starts.
template <class Clock, class R, class F>
R timed_call(OpId id, std::string detail, const OpWork& work, const Tensor* on, F&& call) {
  if (on == nullptr) return call();
  const size_t row = row_of(id, std::move(detail));
  Clock clock(*on);
  if constexpr (std::is_void_v<R>) {
    try {
      call();
    } catch (...) {
      clock.abandon();
      throw;
    }
    clock.stop(row);
    note_call(row, work);
  } else {
    R result{};
    try {
      result = call();
    } catch (...) {
      clock.abandon();
      throw;
    }
    clock.stop(row);
    note_call(row, work);
    return result;
  }
}

template <class Clock>
struct Timed {
#define TANDEM_OP_TIMED(R, name, params, args)                                                                     \
  static R name params {                                                                                           \
    return timed_call<Clock, R>(OpId::name, detail_of<OpId::name>(TANDEM_OP_UNPAREN args),                         \
                                work_of<OpId::name>(TANDEM_OP_UNPAREN args), first_tensor(TANDEM_OP_UNPAREN args), \
                                [&] { return Clock::real().name args; });                                          \
  }
  TANDEM_OPS(TANDEM_OP_TIMED)
#undef TANDEM_OP_TIMED
};

template <class Clock>
const Backend& timed_table(const char* name) {
#define TANDEM_OP_ENTRY(R, op, params, args) .op = &Timed<Clock>::op,
  static const Backend table{.name = name, TANDEM_OPS(TANDEM_OP_ENTRY)};
#undef TANDEM_OP_ENTRY
  return table;
}

std::string rate(const Row& r) {
  char buf[64];
  if (r.ms <= 0) return "-";
  if (r.flops > 0) {
    std::snprintf(buf, sizeof buf, "%.1f TFLOP/s", r.flops / (r.ms * 1e-3) / 1e12);
  } else if (r.bytes > 0) {
    std::snprintf(buf, sizeof buf, "%.0f GB/s", r.bytes / (r.ms * 1e-3) / 1e9);
  } else {
    return "-";
  }
  return buf;
}

}  // namespace

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

void set_enabled(bool on) { g_enabled.store(on); }

const Backend& cpu_backend() { return timed_table<CpuClock>("cpu (timed)"); }

#ifdef TANDEM_WITH_CUDA
const Backend& cuda_backend() { return timed_table<CudaClock>("cuda (timed)"); }
#endif

void end_step(std::chrono::steady_clock::time_point start) {
#ifdef TANDEM_WITH_CUDA
  cuda::timer_drain([](size_t row, double ms) { add_ms(row, ms); });
#endif
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.steps.push_back(r.current);
  r.step_ms.push_back(ms);
  r.current.assign(r.rows.size(), Totals{});
}

void reset() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.rows.clear();
  r.index.clear();
  r.current.clear();
  r.steps.clear();
  r.step_ms.clear();
}

double Summary::op_ms() const {
  double s = 0;
  for (const Row& r : ops)
    if (r.detail.empty()) s += r.ms;
  return s;
}

Summary summary() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  Summary s;
  s.steps_run = static_cast<int>(r.steps.size());
  if (s.steps_run == 0) return s;
  s.first = s.steps_run > 2 ? 2 : 0;
  s.steps = s.steps_run - s.first;
  const double k = 1.0 / s.steps;
  std::vector<Row> rows(r.rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].op = r.rows[i].first;
    rows[i].detail = r.rows[i].second;
  }
  for (int step = s.first; step < s.steps_run; ++step) {
    s.step_ms += r.step_ms[step] * k;
    const std::vector<Totals>& t = r.steps[step];
    for (size_t i = 0; i < t.size(); ++i) {
      rows[i].calls += t[i].calls * k;
      rows[i].ms += t[i].ms * k;
      rows[i].flops += t[i].flops * k;
      rows[i].bytes += t[i].bytes * k;
    }
  }
  // One row per op name (the sum of its shape rows for matmul), then that op's shape rows.
  std::map<std::string, Row> by_op;
  std::map<std::string, std::vector<Row>> details;
  for (const Row& row : rows) {
    Row& total = by_op[row.op];
    total.op = row.op;
    total.calls += row.calls;
    total.ms += row.ms;
    total.flops += row.flops;
    total.bytes += row.bytes;
    if (!row.detail.empty()) details[row.op].push_back(row);
  }
  std::vector<Row> totals;
  for (auto& [op, row] : by_op)
    if (row.calls > 0) totals.push_back(row);
  auto slower_first = [](const Row& a, const Row& b) { return a.ms > b.ms; };
  std::stable_sort(totals.begin(), totals.end(), slower_first);
  for (const Row& total : totals) {
    s.ops.push_back(total);
    std::vector<Row>& d = details[total.op];
    std::stable_sort(d.begin(), d.end(), slower_first);
    for (const Row& row : d)
      if (row.calls > 0) s.ops.push_back(row);
  }
  return s;
}

std::string table(const Summary& s, const std::string& who) {
  if (s.steps == 0) return "";
  std::string out;
  char line[256];
  auto add = [&](const char* fmt, auto... v) {
    std::snprintf(line, sizeof line, fmt, v...);
    out += line;
  };
  const double pct = s.step_ms > 0 ? 100.0 / s.step_ms : 0.0;
  add("op profile (%s): mean of steps %d-%d of %d, step %.2f ms\n", who.c_str(), s.first + 1, s.steps_run, s.steps_run,
      s.step_ms);
  out += "  matmul and linear rows: M x N x K, a and b as stored (n) or transposed (t), input -> output dtype\n";
  add("  %-44s %8s %10s %7s  %s\n", "op", "calls", "ms/step", "% step", "rate");
  double calls = 0;
  for (const Row& r : s.ops) {
    const std::string name = r.detail.empty() ? r.op : "  " + r.detail;
    if (r.detail.empty()) calls += r.calls;
    add("  %-44s %8.0f %10.2f %6.1f%%  %s\n", name.c_str(), r.calls, r.ms, r.ms * pct, rate(r).c_str());
  }
  const double ops_ms = s.op_ms();
  add("  %-44s %8.0f %10.2f %6.1f%%\n", "all ops", calls, ops_ms, ops_ms * pct);
  add("  %-44s %8s %10.2f %6.1f%%\n", "host gaps and sync (step - all ops)", "", s.step_ms - ops_ms,
      (s.step_ms - ops_ms) * pct);
  out +=
      "  (the gaps hold launch gaps, host waits, copies, memsets and collectives: none of them is an op, and "
      "collectives, on their own stream, are not timed)\n";
  return out;
}

}  // namespace tandem::ops::profile
