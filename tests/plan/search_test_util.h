// The layout search tests' options and printing (test_search.cc, test_search_large.cc).
#pragma once

#include <cstdint>
#include <cstdio>

#include "tandem/plan/search.h"

namespace tandem::testing {

// Without offload: these cases are about what fits on the devices themselves (Offload.* tries host memory too).
inline plan::SearchOptions search_options(int devices, uint64_t memory, int64_t global) {
  plan::SearchOptions o;
  o.devices = devices;
  o.device_memory = memory;
  o.rates = plan::builtin_rates("cpu");
  o.cpu_threads = 1;
  o.global_batch = global;
  o.offload = false;
  return o;
}

inline void print_search(const char* title, const plan::SearchResult& r, const plan::SearchOptions& o) {
  std::printf("[%s]\n%s\n", title, plan::format_table(r, o, 8).c_str());
}

}  // namespace tandem::testing
