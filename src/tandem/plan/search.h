// Search: every layout of a world size for one config, each predicted (memory model and time model) and
// ranked, and the text `tandem plan` prints: the table of the fastest layouts that fit, and --explain's full
// breakdown of one of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/plan/memory_model.h"
#include "tandem/plan/rates.h"
#include "tandem/plan/time_model.h"

namespace tandem::plan {

struct SearchOptions {
  int devices = 1;
  int nodes = 1;               // tp stays inside a node: tp <= devices / nodes
  uint64_t device_memory = 0;  // bytes per device; 0: no limit
  Rates rates;
  int dtype_bytes = 4;        // compute dtype (see Setup)
  int cpu_threads = 1;        // see Setup
  int64_t global_batch = 1;   // samples per step; every candidate keeps it
  int64_t default_micro = 1;  // --explain's micro-batch when the spec names none
  // --explain's schedule and activation checkpointing when the spec names none (the config's).
  spec::ScheduleKind default_schedule = spec::ScheduleKind::OneFOneB;
  bool default_checkpointing = false;
  // parallel.keep_attention as the config says: every candidate with activation checkpointing keeps attention's
  // output for the recomputation (",keep" in its name).
  bool keep_attention = false;
  // Offload: host memory per node for the ranks on it (0: no limit), and whether to try offloaded candidates when
  // a layout does not fit on the devices.
  uint64_t host_memory = 0;
  bool offload = true;
  spec::Tiles tiles;  // the config's "tiles", which every candidate runs with
  // Stop at the first candidate that fits: the question is only whether anything does (the longest-sequence search
  // asks it once per length tried). `fit` then holds that one, and `no_fit` those tried before it.
  bool first_fit_only = false;
  // Context parallelism (parallel.context) as one more axis, for the models that take it (the llama family): each
  // sequence split over cp devices of a node, beside tp.
  bool context = true;
};

struct Candidate {
  Setup setup;
  MemoryPrediction memory;
  TimePrediction time;
  bool fits = false;
  std::string why_not;         // what pushes the worst device over the budget (or the node's host memory)
  bool short_of_host = false;  // fits the devices, but its offloaded state is over the node's host memory
  // "dp2,pp2,tp1,zero1,micro16" (+ ",cp2" after tp, ",ckpt", ",cpu_ckpt", ",v2", ",offload", ",offload_param",
  // ",ratio0.8"): the spelling --explain takes.
  std::string name() const;
  // The config keys that select it: "parallel", "zero_optimization" (with its offload objects) and
  // "train_micro_batch_size_per_gpu", as JSON and as a user would write them.
  config::Json config() const;
  std::string config_keys() const;
};

struct SearchResult {
  std::vector<Candidate> fit;     // fastest first
  std::vector<Candidate> no_fit;  // smallest peak first
  int64_t layouts = 0;            // (dp, pp, tp) triples tried
};

// Every dp x pp x tp = devices (tp within a node, heads / vocabulary / widths divisible), ZeRO 0-3 (0 only when
// dp == 1), activation checkpointing off and on, every micro-batch size that divides the global batch per
// replica, 1F1B and (pp > 1, m a multiple of pp) interleaved with v = 2; with opt.offload, a checkpointing candidate
// that does not fit on the devices is tried again with the checkpointed inputs in host memory (cpu_checkpointing),
// and a candidate that does not fit is tried again with its optimizer offloaded to host memory (ZeRO 1-3, or one
// replica), and at ZeRO 3 (or one replica) with its parameters too; where the offloaded optimizer fits on one device
// (pp and tp 1), also with the first layer's optimizer kept on the device (offload_optimizer.ratio below 1), whose
// update is then not the one the next step waits for.
SearchResult search_layouts(const PlannedModel& model, const SearchOptions& opt);

Candidate evaluate(MemoryModel& memory, const Setup& setup, const SearchOptions& opt);

// "dp2,pp2,tp1,zero1,micro16[,ckpt|,ckpt0|,cpu_ckpt][,v2|,gpipe|,1f1b][,offload|,offload_param][,ratio<r>]" (cpu_ckpt:
// checkpointing with the inputs in host memory): a missing one of dp
// / pp / tp is derived from the devices, a missing zero is 0, a missing micro is opt.default_micro, a missing schedule
// and checkpointing are opt's defaults (the config's).
Setup parse_candidate(const std::string& spec, const SearchOptions& opt);

// Why the worst device of `memory` exceeds `budget`, in one line.
std::string why_not_fits(const MemoryPrediction& memory, uint64_t budget);

std::string format_table(const SearchResult& result, const SearchOptions& opt, size_t top);
std::string format_explain(const Candidate& candidate, const SearchOptions& opt);

}  // namespace tandem::plan
