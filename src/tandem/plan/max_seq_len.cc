#include "tandem/plan/max_seq_len.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <utility>

#include "tandem/core/error.h"
#include "tandem/core/units.h"

namespace tandem::plan {

namespace {

std::string bytes_str(int64_t b) { return format_bytes(static_cast<uint64_t>(std::max<int64_t>(b, 0))); }

// What stops the candidates of a length where none fits (`found.no_fit`, the smallest peak first): the one closest to
// fitting the devices, with the device it is over on and the term that pushes it over ("The closest, dp1,...,ckpt,
// needs 141.3 GiB per device, on stage 1 of replica 0: activations 40.1 GiB push it 312.0 MiB over, at ..."), and
// when an offloaded candidate fits the devices but not the node's host memory, that one too.
std::string closest_words(const SearchResult& found) {
  const Candidate* device = nullptr;
  const Candidate* host = nullptr;
  for (const Candidate& c : found.no_fit) {
    if (!c.short_of_host && !device) device = &c;
    if (c.short_of_host && !host) host = &c;
  }
  std::ostringstream os;
  if (device) {
    const RankMemory& w = device->memory.worst();
    os << "The closest, " << device->name() << ", needs " << bytes_str(device->memory.peak())
       << " per device, on stage " << w.pp_rank << " of replica " << w.dp_rank << ": " << device->why_not << ".";
  }
  if (host)
    os << (device ? " " : "") << host->name() << " fits the devices (" << bytes_str(host->memory.peak())
       << " per device), but " << host->why_not << ".";
  return os.str();
}

// Each pipeline stage's peak (replicas hold the same but for padding): "62.1 GiB" or "stage 0 62.1 GiB, stage 1 ...".
std::string peaks_by_stage(const MemoryPrediction& m) {
  if (m.layout.pp == 1) return bytes_str(m.peak());
  std::ostringstream os;
  for (int s = 0; s < m.layout.pp; ++s) {
    int64_t most = 0;
    for (const RankMemory& r : m.ranks)
      if (r.pp_rank == s) most = std::max(most, r.peak);
    os << (s ? ", " : "") << "stage " << s << " " << bytes_str(most);
  }
  return os.str();
}

}  // namespace

void check_seq_len_options(const SearchOptions& opt, const SeqLenOptions& options) {
  const int64_t step = options.step;
  const SeqLenLimit& limit = options.limit;
  if (step < 1)
    TANDEM_FAIL("--max-seq-len: the lengths tried are multiples of --seq-len-step, which is ", step,
                ": give a positive number of tokens, e.g. 1024");
  if (opt.device_memory == 0)
    TANDEM_FAIL(
        "--max-seq-len: there is no device memory budget, so every length would fit: give --device-memory "
        "(e.g. 141GiB) or set the config's device_memory");
  if (limit.tokens < step)
    TANDEM_FAIL("--max-seq-len: the longest length allowed, ", limit.tokens, " tokens (", limit.what,
                "), is shorter than the step of the lengths tried, ", step, " tokens: give --seq-len-step ",
                limit.tokens, " or less", limit.asked ? ", or --max-seq-len " + std::to_string(step) + " or more" : "");
}

SeqLenResult search_max_seq_len(const std::function<PlannedModel(int64_t)>& model_at, const SearchOptions& opt,
                                const SeqLenOptions& options) {
  check_seq_len_options(opt, options);
  const int64_t step = options.step;
  const SeqLenLimit& limit = options.limit;

  SeqLenResult r;
  r.step = step;
  r.limit = limit;
  const int64_t most = limit.tokens / step;  // the lengths tried are k x step, k in [1, most]
  r.last = most * step;
  SearchOptions any = opt;
  any.first_fit_only = true;
  // Whether anything fits at k x step. A length where nothing fits keeps its candidates: the last such one tried is
  // the shortest known not to fit (doubling stops at the first, bisection only moves it down), whose closest
  // candidate says what stops the search.
  auto fits = [&](int64_t k) {
    const auto start = std::chrono::steady_clock::now();
    SearchResult found = search_layouts(model_at(k * step), any);
    SeqLenProbe p;
    p.seq_len = k * step;
    p.fits = !found.fit.empty();
    const Candidate* c = p.fits ? &found.fit.front() : found.no_fit.empty() ? nullptr : &found.no_fit.front();
    if (c) {
      p.candidate = c->name();
      p.peak = c->memory.peak();
    }
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.probes.push_back(p);
    if (options.progress) options.progress(format_probe(p));
    if (!p.fits) r.at_next = std::move(found);
    return p.fits;
  };

  // lo: the longest k known to fit (0: none); hi: the shortest known not to (0: none tried yet).
  int64_t lo = 0, hi = 0;
  if (!fits(1)) {
    hi = 1;
  } else {
    lo = 1;
    for (int64_t k = 2; hi == 0 && lo < most; k *= 2) {
      const int64_t try_k = std::min(k, most);  // the last doubling is cut to the limit
      if (fits(try_k))
        lo = try_k;
      else
        hi = try_k;
    }
    while (hi > lo + 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (fits(mid))
        lo = mid;
      else
        hi = mid;
    }
  }
  r.longest = lo * step;
  r.next = hi * step;
  if (lo > 0) {
    // Every candidate at the answer, to name the fastest that reaches it (the probe stopped at the first).
    if (options.progress)
      options.progress("  ranking every candidate at seq_len " + std::to_string(r.longest) + " ...");
    SearchOptions all = opt;
    all.first_fit_only = false;
    r.at_longest = search_layouts(model_at(r.longest), all);
    TANDEM_CHECK(!r.at_longest.fit.empty(), "a length that fitted at its first candidate has none that fits");
  }
  return r;
}

std::string format_probe(const SeqLenProbe& p) {
  char line[256];
  std::snprintf(line, sizeof line, "  seq_len %8lld  %-13s %-46s %11s  (%.1f s)", static_cast<long long>(p.seq_len),
                p.fits ? "fits" : "does not fit", p.candidate.empty() ? "-" : p.candidate.c_str(),
                p.candidate.empty() ? "" : bytes_str(p.peak).c_str(), p.seconds);
  return line;
}

std::string format_max_seq_len(const SeqLenResult& r, const SearchOptions& opt) {
  std::ostringstream os;
  const std::string budget = bytes_str(static_cast<int64_t>(opt.device_memory));
  const int64_t sequences = opt.global_batch;
  if (r.longest == 0) {
    os << "Nothing fits even at seq_len " << r.next << " (the shortest length tried, --seq-len-step) in " << budget
       << " per device.";
    if (!r.at_next.no_fit.empty()) {
      os << " " << closest_words(r.at_next);
    } else {
      os << " No layout of " << opt.devices << " device" << (opt.devices == 1 ? "" : "s")
         << " can hold the model with its global batch.";
    }
    os << "\n";
    return os.str();
  }
  const Candidate& best = r.at_longest.fit.front();
  const TimePrediction& t = best.time;
  os << "Longest seq_len that fits: " << r.longest << " tokens, " << sequences << " sequence"
     << (sequences == 1 ? "" : "s") << " a step (" << r.longest * sequences << " tokens)\n";
  char speed[96];
  std::snprintf(speed, sizeof speed, t.step_s >= 100 ? "%.0f %s, step %.0f s" : "%.0f %s, step %.3g s", t.tokens_per_s,
                t.unit, t.step_s);
  os << "  fastest there: " << best.name() << " (" << speed << ")\n";
  os << "  predicted peak per device " << bytes_str(best.memory.peak()) << " of " << budget;
  if (best.memory.layout.pp > 1) os << " (" << peaks_by_stage(best.memory) << ")";
  if (best.memory.host_peak() > 0) os << "; host memory " << bytes_str(best.memory.host_peak()) << " a rank";
  os << "\n  " << r.at_longest.fit.size() << (r.at_longest.fit.size() == 1 ? " candidate fits" : " candidates fit")
     << " there; config: " << best.config_keys() << ", \"model\": {\"seq_len\": " << r.longest << "}\n";
  if (r.next == 0) {
    os << "What stops it: seq_len " << r.last << " is the limit, " << r.limit.what;
    if (r.last != r.limit.tokens)
      os << " (" << r.limit.tokens << " tokens, rounded down to a multiple of " << r.step << ")";
    os << ".";
    if (r.limit.what.find("max_position_embeddings") != std::string::npos)
      os << " The model has no positions past it (the search adds no rope scaling).";
    os << "\n";
    return os.str();
  }
  os << "What stops seq_len " << r.next << ": nothing fits in " << budget << " per device. ";
  if (r.at_next.no_fit.empty()) {
    os << "No layout can hold the model.\n";
    return os.str();
  }
  os << closest_words(r.at_next) << "\n";
  return os.str();
}

}  // namespace tandem::plan
