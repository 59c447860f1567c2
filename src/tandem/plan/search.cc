#include "tandem/plan/search.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include "tandem/core/units.h"
#include "tandem/parallel/zero/parameter_store.h"

namespace tandem::plan {

namespace {

std::string bytes_str(int64_t b) { return format_bytes(static_cast<uint64_t>(std::max<int64_t>(b, 0))); }

std::string rate_str(double per_s) {
  char buf[32];
  if (per_s >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", per_s / 1e6);
  else if (per_s >= 1e4)
    std::snprintf(buf, sizeof buf, "%.1fk", per_s / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f", per_s);
  return buf;
}

std::string seconds_str(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  else
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  return buf;
}

std::string schedule_label(const layout::ParallelPlan& p) {
  if (p.layout.pp == 1) return "-";
  return p.virtual_stages > 1
             ? spec::schedule_name(spec::ScheduleKind::Interleaved) + " v" + std::to_string(p.virtual_stages)
             : spec::schedule_name(p.schedule);
}

std::vector<int> divisors(int64_t n) {
  std::vector<int> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(static_cast<int>(i));
  return d;
}

// A ratio as `tandem plan` prints it and --explain reads it back: the shortest of %.4g and %.17g that reads back exact.
std::string ratio_str(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", r);
  if (std::stod(buf) != r) std::snprintf(buf, sizeof buf, "%.17g", r);
  return buf;
}

// offload_optimizer.ratio that keeps the first layer's optimizer on the device (parallel::ratio_keeping_first, over
// the model's layers as one rank holds them without tp), or 1 for a model of one layer.
double first_layer_kept_ratio(const PlannedModel& model) {
  const nn::Model built = model.build(nn::TpSlot{});
  std::vector<int64_t> layers;
  for (const auto& l : built.layers()) {
    int64_t n = 0;
    for (const nn::Parameter* p : l->parameters()) n += shape_numel(p->shape);
    layers.push_back(n);
  }
  return parallel::ratio_keeping_first(layers, 1);
}

// Whether the layout holds the model with `m` micro-batches of `micro` samples (0: any micro-batch, not chosen yet).
bool valid_for_model(const layout::ParallelPlan& plan, const PlannedModel& model, int64_t micro, int64_t m) {
  if (!model.validate) return true;
  try {
    model.validate(plan, micro, m);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

std::string Candidate::name() const {
  const auto& l = setup.plan.layout;
  std::ostringstream os;
  os << "dp" << l.dp << ",pp" << l.pp << ",tp" << l.tp;
  if (l.cp > 1) os << ",cp" << l.cp;
  if (l.ep > 1) os << ",ep" << l.ep;
  os << ",zero" << (l.replicas() > 1 ? setup.zero_stage : 0) << ",micro" << setup.micro_batch;
  if (setup.plan.activation_checkpointing) os << ",ckpt";
  if (setup.plan.activation_checkpointing && setup.plan.cpu_checkpointing) os << ",cpu_ckpt";
  if (setup.plan.activation_checkpointing && setup.plan.keep_attention) os << ",keep";
  if (setup.plan.virtual_stages > 1) os << ",v" << setup.plan.virtual_stages;
  if (l.pp > 1 && setup.plan.schedule == spec::ScheduleKind::GPipe)
    os << "," << spec::schedule_name(spec::ScheduleKind::GPipe);
  if (setup.offload_param.enabled())
    os << ",offload_param";
  else if (setup.offload_optimizer.enabled())
    os << ",offload";
  if (setup.offload_optimizer.enabled() && setup.offload_optimizer.ratio < 1)
    os << ",ratio" << ratio_str(setup.offload_optimizer.ratio);
  return os.str();
}

config::Json Candidate::config() const {
  const auto& p = setup.plan;
  config::Json parallel = {{"virtual_gpus", p.layout.dp}, {"pipeline", p.layout.pp}, {"tensor", p.layout.tp}};
  if (p.layout.cp > 1) parallel["context"] = p.layout.cp;
  if (p.layout.ep > 1) parallel["expert"] = p.layout.ep;
  if (p.layout.pp > 1) parallel["schedule"] = spec::schedule_name(p.schedule);
  if (p.virtual_stages > 1) parallel["virtual_stages"] = p.virtual_stages;
  if (p.activation_checkpointing) parallel["activation_checkpointing"] = true;
  if (p.activation_checkpointing && p.cpu_checkpointing) parallel["cpu_checkpointing"] = true;
  if (p.activation_checkpointing && p.keep_attention) parallel["keep_attention"] = true;
  // DeepSpeed's rules: offloading the optimizer needs ZeRO 1-3, the parameters ZeRO 3 (with one replica any stage
  // trains as stage 0).
  int stage = p.layout.replicas() > 1 ? setup.zero_stage : 0;
  config::Json zero = config::Json::object();
  if (setup.offload_optimizer.enabled()) {
    stage = std::max(stage, 1);
    zero["offload_optimizer"] = {{"device", spec::offload_device_name(setup.offload_optimizer.device)},
                                 {"pin_memory", true}};
    if (setup.offload_optimizer.ratio < 1) zero["offload_optimizer"]["ratio"] = setup.offload_optimizer.ratio;
  }
  if (setup.offload_param.enabled()) {
    stage = 3;
    zero["offload_param"] = {{"device", spec::offload_device_name(setup.offload_param.device)}, {"pin_memory", true}};
  }
  zero["stage"] = stage;
  return {{"parallel", parallel}, {"zero_optimization", zero}, {"train_micro_batch_size_per_gpu", setup.micro_batch}};
}

std::string Candidate::config_keys() const {
  const config::Json keys = config();
  std::ostringstream os;
  os << "\"parallel\": " << keys.at("parallel").dump()
     << ", \"zero_optimization\": " << keys.at("zero_optimization").dump()
     << ", \"train_micro_batch_size_per_gpu\": " << keys.at("train_micro_batch_size_per_gpu").dump();
  return os.str();
}

std::string why_not_fits(const MemoryPrediction& memory, uint64_t budget) {
  const RankMemory& w = memory.worst();
  const int64_t over = w.peak - static_cast<int64_t>(budget);
  std::ostringstream os;
  if (w.resident.total() > static_cast<int64_t>(budget)) {
    os << "resident state alone is " << bytes_str(w.resident.total()) << " (" << w.resident.describe() << ")";
    return os.str();
  }
  const device::Breakdown step = w.at_peak - w.resident;
  const MemoryPurpose t = step.largest();
  os << purpose_name(t) << " " << bytes_str(step[t]) << " push it " << bytes_str(over) << " over, at " << w.when;
  return os.str();
}

Candidate evaluate(MemoryModel& memory, const Setup& setup, const SearchOptions& opt) {
  if (!memory.model().offloadable && (setup.offload_optimizer.enabled() || setup.offload_param.enabled()))
    TANDEM_FAIL("a LoRA run offloads nothing (the config refuses offload with \"lora\": only the adapters train); ",
                "leave offload and offload_param out of the layout");
  Candidate c;
  c.setup = setup;
  c.memory = memory.predict(setup, false, opt.device_memory);
  if (!c.memory.resident_only) c.time = predict_time(memory, c.memory, setup, opt.rates, opt.nodes);
  c.fits = opt.device_memory == 0 || c.memory.peak() <= static_cast<int64_t>(opt.device_memory);
  if (!c.fits) {
    c.why_not = why_not_fits(c.memory, opt.device_memory);
    return c;
  }
  const int64_t host = c.memory.host_per_node(opt.devices / opt.nodes);
  if (opt.host_memory && host > static_cast<int64_t>(opt.host_memory)) {
    c.fits = false;
    c.short_of_host = true;
    const bool inputs = setup.plan.activation_checkpointing && setup.plan.cpu_checkpointing;
    c.why_not = std::string(!inputs                             ? "its offloaded state needs "
                            : setup.offload_optimizer.enabled() ? "its offloaded state and checkpointed inputs need "
                                                                : "its checkpointed layer inputs need ") +
                bytes_str(host) + " of host memory per node, over " + bytes_str(static_cast<int64_t>(opt.host_memory));
  }
  return c;
}

SearchResult search_layouts(const PlannedModel& model, const SearchOptions& opt) {
  TANDEM_CHECK(opt.devices >= 1 && opt.nodes >= 1 && opt.devices % opt.nodes == 0, "planner: ", opt.devices,
               " devices do not split evenly over ", opt.nodes, " nodes");
  const int per_node = opt.devices / opt.nodes;
  MemoryModel memory(model);
  SearchResult result;
  const double keep_first = opt.offload ? first_layer_kept_ratio(model) : 1.0;
  Setup base;
  base.dtype_bytes = opt.dtype_bytes;
  base.backend = opt.rates.device == "cuda" ? Backend::Cuda : Backend::Cpu;
  base.cpu_threads = opt.cpu_threads;
  base.tiles = opt.tiles;
  // Context shards (cp > 1) where the options allow them and the model takes them (a gpt's or a llama's sequences; an
  // mlp is refused by valid_for_model), their attention as parallel.context_attention's "auto" picks it (by heads where
  // they split, else by a ring); like tp they stay inside a node, their exchanges beside
  // tp's collectives.
  for (int dp : divisors(opt.devices))
    for (int pp : divisors(opt.devices / dp))
      for (int cp : divisors(opt.devices / (dp * pp))) {
        const int tp = opt.devices / (dp * pp * cp);
        if (cp > 1 && !opt.context) continue;
        if (tp * cp > per_node || opt.global_batch % dp != 0) continue;
        if (cp > 1) {
          layout::ParallelPlan probe;
          probe.layout = layout::Layout{dp, pp, tp, cp};
          if (!valid_for_model(probe, model, 0, opt.global_batch / dp)) continue;
        }
        ++result.layouts;
        for (int micro : divisors(opt.global_batch / dp)) {
          const int64_t m = opt.global_batch / dp / micro;
          // Expert slots (ep > 1) where the model has experts they divide (valid_for_model refuses the rest).
          for (int v : {1, 2})
            for (int ep : divisors(dp * cp)) {
              if (v == 2 && (pp == 1 || m % pp != 0)) continue;
              layout::ParallelPlan plan;
              plan.layout = layout::Layout{dp, pp, tp, cp};
              plan.layout.ep = ep;
              plan.schedule = v > 1 ? spec::ScheduleKind::Interleaved : spec::ScheduleKind::OneFOneB;
              plan.virtual_stages = v;
              if (!valid_for_model(plan, model, micro, m)) continue;
              for (int zero = 0; zero <= (dp * cp > 1 ? 3 : 0); ++zero)
                for (bool ckpt : {false, true}) {
                  // Answered (opt.first_fit_only): the rest of the loops run through without predicting anything.
                  if (opt.first_fit_only && !result.fit.empty()) continue;
                  Setup s = base;
                  s.plan = plan;
                  s.plan.activation_checkpointing = ckpt;
                  s.plan.keep_attention = ckpt && opt.keep_attention;
                  s.zero_stage = zero;
                  s.micro_batch = micro;
                  s.micro_batches = m;
                  Candidate c = evaluate(memory, s, opt);
                  const bool fits = c.fits;
                  (fits ? result.fit : result.no_fit).push_back(std::move(c));
                  // So do checkpoints in host memory: tried only where checkpointing on the devices does not fit.
                  if (!fits && ckpt && opt.offload) {
                    Setup h = s;
                    h.plan.cpu_checkpointing = true;
                    Candidate hc = evaluate(memory, h, opt);
                    (hc.fits ? result.fit : result.no_fit).push_back(std::move(hc));
                  }
                  // Offload costs copies and host time: tried only where the state does not fit on the devices.
                  if (fits || !opt.offload || !model.offloadable) continue;
                  const bool optimizer = dp * cp == 1 || zero >= 1, param = dp * cp == 1 || zero == 3;
                  for (bool with_param : {false, true}) {
                    if (!optimizer || (with_param && !param) || (opt.first_fit_only && !result.fit.empty())) continue;
                    Setup o = s;
                    o.offload_optimizer.device = spec::OffloadDevice::Cpu;
                    o.offload_optimizer.pin_memory = true;
                    if (with_param) o.offload_param = o.offload_optimizer;
                    Candidate oc = evaluate(memory, o, opt);
                    const bool offloaded_fits = oc.fits;
                    (oc.fits ? result.fit : result.no_fit).push_back(std::move(oc));
                    // With room left on one device (no pipeline, no tp split), the first layer's optimizer kept there
                    // too: its update then waits for no host after the backward. Shown only where it fits.
                    if (!offloaded_fits || with_param || pp > 1 || tp > 1 || keep_first >= 1 || opt.first_fit_only)
                      continue;
                    Setup k = o;
                    k.offload_optimizer.ratio = keep_first;
                    Candidate kc = evaluate(memory, k, opt);
                    if (kc.fits) result.fit.push_back(std::move(kc));
                  }
                }
            }
        }
      }
  std::stable_sort(result.fit.begin(), result.fit.end(), [](const Candidate& a, const Candidate& b) {
    if (a.time.tokens_per_s != b.time.tokens_per_s) return a.time.tokens_per_s > b.time.tokens_per_s;
    return a.memory.peak() < b.memory.peak();
  });
  // Smallest peak first; those whose resident state alone is over the budget (their peak a lower bound) last.
  std::stable_sort(result.no_fit.begin(), result.no_fit.end(), [](const Candidate& a, const Candidate& b) {
    if (a.memory.resident_only != b.memory.resident_only) return b.memory.resident_only;
    return a.memory.peak() < b.memory.peak();
  });
  return result;
}

Setup parse_candidate(const std::string& spec, const SearchOptions& opt) {
  Setup s;
  s.dtype_bytes = opt.dtype_bytes;
  s.backend = opt.rates.device == "cuda" ? Backend::Cuda : Backend::Cpu;
  s.cpu_threads = opt.cpu_threads;
  s.tiles = opt.tiles;
  s.micro_batch = opt.default_micro;
  s.plan.schedule = opt.default_schedule;
  s.plan.activation_checkpointing = opt.default_checkpointing;
  s.plan.keep_attention = opt.default_checkpointing && opt.keep_attention;
  if (opt.default_schedule == spec::ScheduleKind::Interleaved) s.plan.virtual_stages = 2;
  int dp = 0, pp = 0, tp = 0, cp = 1, ep = 1;
  std::stringstream in(spec);
  for (std::string tok; std::getline(in, tok, ',');) {
    tok.erase(std::remove(tok.begin(), tok.end(), ' '), tok.end());
    auto number = [&](const std::string& prefix) -> int64_t {
      try {
        size_t used = 0;
        const int64_t v = std::stoll(tok.substr(prefix.size()), &used);
        if (used + prefix.size() == tok.size() && v >= 0) return v;
      } catch (const std::exception&) {
      }
      TANDEM_FAIL("--explain: '", tok, "' is not ", prefix, "<number>");
    };
    auto starts = [&](const char* p) { return tok.rfind(p, 0) == 0; };
    if (tok.empty()) continue;
    if (starts("dp")) {
      dp = static_cast<int>(number("dp"));
    } else if (starts("pp")) {
      pp = static_cast<int>(number("pp"));
    } else if (starts("tp")) {
      tp = static_cast<int>(number("tp"));
    } else if (starts("ep")) {
      ep = std::max(1, static_cast<int>(number("ep")));
    } else if (starts("zero")) {
      s.zero_stage = static_cast<int>(number("zero"));
    } else if (starts("micro")) {
      s.micro_batch = number("micro");
    } else if (tok == "ckpt" || tok == "ckpt1") {
      s.plan.activation_checkpointing = true;
      s.plan.keep_attention = opt.keep_attention;
    } else if (tok == "ckpt0") {
      s.plan.activation_checkpointing = false;
      s.plan.keep_attention = false;
    } else if (tok == "cpu_ckpt") {
      s.plan.activation_checkpointing = true;
      s.plan.cpu_checkpointing = true;
    } else if (tok == "keep") {
      s.plan.activation_checkpointing = true;
      s.plan.keep_attention = true;
    } else if (starts("cp")) {  // after cpu_ckpt, which starts the same
      cp = std::max(1, static_cast<int>(number("cp")));
    } else if (tok == "offload") {
      s.offload_optimizer.device = spec::OffloadDevice::Cpu;
      s.offload_optimizer.pin_memory = true;
    } else if (starts("ratio")) {
      size_t used = 0;
      double r = -1;
      try {
        r = std::stod(tok.substr(5), &used);
      } catch (const std::exception&) {
      }
      if (used + 5 != tok.size() || !(r > 0 && r <= 1))
        TANDEM_FAIL("--explain: '", tok, "' is not ratio<a share in (0, 1]>");
      s.offload_optimizer.ratio = r;
    } else if (tok == "offload_param") {
      s.offload_optimizer.device = spec::OffloadDevice::Cpu;
      s.offload_optimizer.pin_memory = true;
      s.offload_param = s.offload_optimizer;
    } else if (tok == spec::schedule_name(spec::ScheduleKind::Interleaved)) {
      s.plan.virtual_stages = 2;
    } else if (starts("v")) {
      s.plan.virtual_stages = static_cast<int>(number("v"));
    } else if (tok == spec::schedule_name(spec::ScheduleKind::OneFOneB) ||
               tok == spec::schedule_name(spec::ScheduleKind::GPipe)) {
      s.plan.schedule = spec::schedule_from_name(tok);
      s.plan.virtual_stages = 1;
    } else {
      TANDEM_FAIL("--explain: unknown part '", tok,
                  "'; write e.g. \"dp2,pp2,tp1,zero1,micro16\" (optional: cp2, ep2, ckpt, ckpt0, cpu_ckpt or keep, v2, "
                  "gpipe or 1f1b, offload or offload_param, ratio0.8)");
    }
  }
  // As resolve_parallel: given only dp, the virtual GPU is a pipeline; otherwise a missing pp or tp is 1 and
  // a missing dp takes the rest.
  // The context shards (cp) are never derived.
  if (dp && !pp && !tp) {
    pp = opt.devices / (dp * cp);
    tp = 1;
  } else {
    pp = std::max(pp, 1);
    tp = std::max(tp, 1);
    if (!dp) dp = opt.devices / (pp * tp * cp);
  }
  s.plan.layout = layout::Layout{dp, pp, tp, cp};
  s.plan.layout.ep = ep;
  if (s.plan.layout.world() != opt.devices)
    TANDEM_FAIL("--explain: ", s.plan.layout.str(), " is ", s.plan.layout.world(), " devices, not ", opt.devices);
  if (s.plan.virtual_stages > 1) s.plan.schedule = spec::ScheduleKind::Interleaved;
  if (s.plan.layout.pp == 1) {  // a schedule means nothing without a pipeline
    s.plan.virtual_stages = 1;
    s.plan.schedule = spec::ScheduleKind::OneFOneB;
  }
  if (s.micro_batch < 1 || opt.global_batch % (s.micro_batch * dp) != 0)
    TANDEM_FAIL("--explain: micro-batch ", s.micro_batch, " x ", dp, " virtual GPUs does not divide the global batch ",
                opt.global_batch);
  s.micro_batches = opt.global_batch / (s.micro_batch * dp);
  return s;
}

std::string format_table(const SearchResult& r, const SearchOptions& opt, size_t top) {
  std::ostringstream os;
  char line[256];
  const Candidate* any = !r.fit.empty() ? &r.fit.front() : !r.no_fit.empty() ? &r.no_fit.front() : nullptr;
  char head[160];
  std::snprintf(head, sizeof head,
                "  #  layout             schedule        zero  ckpt  offload  micro x m    peak/device  host/rank  "
                "fits  %-9s %s\n",
                any ? any->time.unit : "tok/s", "step");
  os << head;
  auto row = [&](size_t i, const Candidate& c) {
    const auto& l = c.setup.plan.layout;
    const std::string lay = "dp" + std::to_string(l.dp) + " pp" + std::to_string(l.pp) + " tp" + std::to_string(l.tp) +
                            (l.cp > 1 ? " cp" + std::to_string(l.cp) : "") +
                            (l.ep > 1 ? " ep" + std::to_string(l.ep) : "");
    const std::string mb = std::to_string(c.setup.micro_batch) + " x " + std::to_string(c.setup.micro_batches);
    const char* offload = c.setup.offload_param.enabled()        ? "all"
                          : !c.setup.offload_optimizer.enabled() ? "-"
                          : c.setup.offload_optimizer.ratio < 1  ? "part"
                                                                 : "optim";
    const std::string host = c.memory.host_peak() > 0 ? bytes_str(c.memory.host_peak()) : "-";
    std::snprintf(line, sizeof line, "%3zu  %-17s  %-14s  %4d  %-4s  %-7s  %-11s  %11s  %9s  %-4s  %-9s %s\n", i,
                  lay.c_str(), schedule_label(c.setup.plan).c_str(), l.replicas() > 1 ? c.setup.zero_stage : 0,
                  !c.setup.plan.activation_checkpointing ? "off"
                  : c.setup.plan.cpu_checkpointing       ? "host"
                                                         : "on",
                  offload, mb.c_str(), bytes_str(c.memory.peak()).c_str(), host.c_str(), c.fits ? "yes" : "no",
                  c.memory.resident_only ? "-" : rate_str(c.time.tokens_per_s).c_str(),
                  c.memory.resident_only ? "-" : seconds_str(c.time.step_s).c_str());
    os << line;
  };
  for (size_t i = 0; i < std::min(top, r.fit.size()); ++i) row(i + 1, r.fit[i]);
  const std::string budget = opt.device_memory ? bytes_str(static_cast<int64_t>(opt.device_memory)) : "unlimited";
  os << r.fit.size() << " candidate" << (r.fit.size() == 1 ? "" : "s") << " fit in " << budget << " per device ("
     << (r.fit.size() > top ? "top " + std::to_string(top) + " shown" : "all shown") << "); " << r.no_fit.size()
     << " do not.\n";
  if (!r.fit.empty() &&
      (r.fit.front().setup.offload_optimizer.enabled() || r.fit.front().setup.plan.cpu_checkpointing)) {
    const Candidate& best = r.fit.front();
    os << "Nothing fits on the devices alone; the fastest candidate offloads to host memory ("
       << bytes_str(best.memory.host_peak()) << " a rank): set " << best.config_keys() << ".\n";
  }
  // The candidates that fit the devices but not the node's host memory: what is short is host memory.
  const Candidate* least_host = nullptr;
  for (const Candidate& c : r.no_fit)
    if (c.short_of_host && (!least_host || c.memory.host_per_node(opt.devices / opt.nodes) <
                                               least_host->memory.host_per_node(opt.devices / opt.nodes)))
      least_host = &c;
  if (r.fit.empty() && least_host) {
    const int64_t host = least_host->memory.host_per_node(opt.devices / opt.nodes);
    const int64_t given = static_cast<int64_t>(opt.host_memory);
    os << "Nothing fits: device memory is not what is short, host memory is. Every candidate that fits in " << budget
       << " per device offloads state to host memory, and the least any needs is " << bytes_str(host) << " per node ("
       << least_host->name() << "), " << bytes_str(host - given) << " more than the " << bytes_str(given)
       << " usable. With --host-memory " << bytes_str(host) << " (a node with that much free) it would run at "
       << rate_str(least_host->time.tokens_per_s) << " " << least_host->time.unit
       << "; with fewer offloaded bytes (more devices, more nodes, or more device memory "
       << "for offload_optimizer.ratio below 1) it needs less.\n";
  } else if (r.fit.empty() && !r.no_fit.empty()) {
    const Candidate& best = r.no_fit.front();
    os << "Nothing fits in " << budget << " per device. The smallest peak is " << bytes_str(best.memory.peak()) << " ("
       << best.name() << "): that much memory per device would be needed (" << best.why_not << ").\n";
  } else if (!r.no_fit.empty()) {
    os << "Closest that do not fit:\n";
    for (size_t i = 0; i < std::min<size_t>(3, r.no_fit.size()); ++i) {
      row(i + 1, r.no_fit[i]);
      os << "       " << r.no_fit[i].why_not << "\n";
    }
  }
  return os.str();
}

std::string format_explain(const Candidate& c, const SearchOptions& opt) {
  std::ostringstream os;
  const auto& l = c.setup.plan.layout;
  const RankMemory& w = c.memory.worst();
  os << c.name() << ": " << l.str() << ", schedule " << schedule_label(c.setup.plan) << ", ZeRO "
     << (l.dp > 1 ? c.setup.zero_stage : 0) << ", activation checkpointing "
     << (!c.setup.plan.activation_checkpointing ? "off"
         : c.setup.plan.cpu_checkpointing       ? "on (the inputs in host memory)"
                                                : "on")
     << ", micro-batch " << c.setup.micro_batch << " x " << c.setup.micro_batches << " per step, compute dtype "
     << (c.setup.dtype_bytes == 4 ? "fp32" : "16-bit") << "\n\n";
  os << "Memory (predicted peak per device " << bytes_str(c.memory.peak());
  if (opt.device_memory) os << " of " << bytes_str(static_cast<int64_t>(opt.device_memory));
  os << (c.fits ? ", fits" : ", does NOT fit") << ")\n";
  os << "  worst device: stage " << w.pp_rank << " of replica " << w.dp_rank << ", " << w.layers << "\n";
  os << "  its peak comes in the " << w.when << "\n";
  for (int i = 0; i < kMemoryPurposes; ++i) {
    const auto t = static_cast<MemoryPurpose>(i);
    char line[160];
    std::snprintf(line, sizeof line, "    %-22s %12s   (held all step: %s)\n", purpose_name(t),
                  bytes_str(w.at_peak[t]).c_str(), bytes_str(w.resident[t]).c_str());
    os << line;
  }
  os << "  activations: " << bytes_str(w.activations_per_micro_batch) << " per micro-batch x " << w.live_micro_batches
     << " live at the peak (the schedule's bound on this rank: " << w.activation_bound << ")\n";
  if (!c.fits) os << "  over budget: " << c.why_not << "\n";
  os << "  every device:\n";
  for (const RankMemory& r : c.memory.ranks) {
    os << "    replica " << r.dp_rank << " stage " << r.pp_rank << " (x" << l.tp << " tp slots): " << bytes_str(r.peak)
       << " at " << r.when << "\n";
  }
  if (c.memory.host_peak() > 0) {
    os << "\nHost memory (offloaded state; " << bytes_str(c.memory.host_per_node(opt.devices / opt.nodes))
       << " for the " << opt.devices / opt.nodes << " rank" << (opt.devices / opt.nodes > 1 ? "s" : "") << " of a node";
    if (opt.host_memory) os << " of " << bytes_str(static_cast<int64_t>(opt.host_memory));
    os << ")\n";
    for (int i = 0; i < kMemoryPurposes; ++i) {
      const auto t = static_cast<MemoryPurpose>(i);
      if (w.host_at_peak[t] == 0) continue;
      char line[160];
      std::snprintf(line, sizeof line, "    %-22s %12s   (held all step: %s)\n", purpose_name(t),
                    bytes_str(w.host_at_peak[t]).c_str(), bytes_str(w.host_resident[t]).c_str());
      os << line;
    }
    os << "  every rank:";
    for (const RankMemory& r : c.memory.ranks) os << " " << bytes_str(r.host_peak);
    os << "\n";
  }
  const TimePrediction& t = c.time;
  os << "\nTime (rates '" << opt.rates.name << "'; compute and communication do not overlap)\n";
  char flops[32];
  std::snprintf(flops, sizeof flops, "%.3g", t.model_flops_per_device_s / 1e12);
  os << "  step " << seconds_str(t.step_s) << ", " << rate_str(t.tokens_per_s) << " " << t.unit << ", " << flops
     << " model TFLOP/s per device\n";
  os << "  compute " << seconds_str(t.compute_s) << ", pipeline bubble " << seconds_str(t.bubble_s) << " ("
     << static_cast<int>(t.bubble_fraction * 100 + 0.5) << "%), tp " << seconds_str(t.tp_s) << ", pp "
     << seconds_str(t.pp_s) << ", dp/ZeRO " << seconds_str(t.dp_s) << ", optimizer " << seconds_str(t.optimizer_s)
     << "\n";
  if (c.memory.host_peak() > 0)
    os << "  offload: copies to and from host memory " << seconds_str(t.offload_s) << ", host AdamW and gradient sums "
       << seconds_str(t.host_s) << ", of which " << seconds_str(t.offload_hidden_s) << " beside the device's work\n";
  if (c.fits && (c.setup.offload_optimizer.enabled() || c.setup.plan.cpu_checkpointing))
    os << "  config: " << c.config_keys() << "\n";
  return os.str();
}

}  // namespace tandem::plan
