// `tandem plan --max-seq-len`: the longest sequence a model trains at on given devices. Only the length T changes:
// at each length tried, every candidate the layout search tries (search.h: layouts, ZeRO stage, micro-batch,
// activation checkpointing, offload, with the config's tiles) is tried with the config's global batch of sequences,
// and the length fits when one of them fits every device's memory (and the node's host memory). A step's memory grows
// with T, so the lengths, multiples of a step, are searched by doubling and then by bisection: about 2 log2(limit /
// step) lengths, each answered at its first candidate that fits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tandem/plan/planned_model.h"
#include "tandem/plan/search.h"
#include "tandem/plan/seq_len_model.h"

namespace tandem::plan {

// One length tried.
struct SeqLenProbe {
  int64_t seq_len = 0;
  bool fits = false;
  // The candidate that fits, else the one closest to fitting (the smallest peak) with what pushes it over.
  std::string candidate;
  int64_t peak = 0;  // that candidate's peak per device
  double seconds = 0;
};

struct SeqLenOptions {
  int64_t step = 1024;  // the lengths tried are its multiples
  SeqLenLimit limit;    // the longest allowed (a length past it is not tried)
  // Given a line after each length tried (format_probe) and before the last search, so that a long search says how
  // far it has come.
  std::function<void(const std::string& line)> progress;
};

struct SeqLenResult {
  int64_t step = 0;
  SeqLenLimit limit;
  int64_t last = 0;         // the longest length allowed: the largest multiple of step within the limit
  int64_t longest = 0;      // the longest length that fits; 0: not even one step does
  SearchResult at_longest;  // every candidate at `longest`, the fastest that fits first
  // The length after `longest` (longest + step), where nothing fits, and every candidate there (the smallest peak
  // first); 0 when `longest` is `last`: then the limit is what stops the search.
  int64_t next = 0;
  SearchResult at_next;
  std::vector<SeqLenProbe> probes;  // in the order tried
};

// Throws Error, saying what to change, when the step, the limit or the budget make no sense: a step below 1, a limit
// below the step, no device memory budget.
void check_seq_len_options(const SearchOptions& opt, const SeqLenOptions& options);

// `model_at(T)`: the model at T tokens (SeqLenModel::at). `opt`: the search of every length (its device_memory must
// be set: without a budget every length fits). Checks the options first (check_seq_len_options).
SeqLenResult search_max_seq_len(const std::function<PlannedModel(int64_t)>& model_at, const SearchOptions& opt,
                                const SeqLenOptions& options);

// "  seq_len   16384  fits   dp1,pp1,tp2,zero0,micro1,ckpt  62.1 GiB  (3.2 s)": a probe as the search prints it.
std::string format_probe(const SeqLenProbe& probe);

// The answer: the longest length, the fastest candidate that reaches it with its peak on every device, and what stops
// the next length (the device and the term over the budget), or the limit.
std::string format_max_seq_len(const SeqLenResult& result, const SearchOptions& opt);

}  // namespace tandem::plan
