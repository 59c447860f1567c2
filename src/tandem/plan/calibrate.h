// Calibration: measures this host's rates for the time model. GEMM rate from a 1024^3 ops::matmul on the CPU
// device, memory bandwidth from a large copy, and, when a communicator of more than one rank is given (a run
// under mpirun), the all-reduce bus bandwidth, the point-to-point bandwidth and the latency between its ranks.
#pragma once

#include <string>

#include "tandem/comm/communicator.h"
#include "tandem/plan/rates.h"

namespace tandem::plan {

struct Calibration {
  Rates rates;
  std::string report;  // one line per measurement
};

// Starts from `base` and replaces what it measures. Collective over `world` when it has more than one rank
// (every rank must call it); null or one rank: the collective rates stay `base`'s.
Calibration calibrate(const Rates& base, comm::Communicator* world);

}  // namespace tandem::plan
