// metrics.jsonl, a run's one JSON line per step, flushed as each is written. A resumed run keeps the lines of the
// steps up to its checkpoint's and continues the file.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "tandem/train/step_metrics.h"

namespace tandem::train {

class MetricsFile {
 public:
  MetricsFile() = default;  // closed: writes nothing
  // OUT/metrics.jsonl for a run starting after step `start` (0: fresh, the file emptied); `predicted_peak_bytes`
  // (0: not known, not written) goes beside each step's measured peak.
  MetricsFile(const std::string& out_dir, int64_t start, int64_t predicted_peak_bytes);

  void write(const StepMetrics& m);

 private:
  std::ofstream file_;
  int64_t predicted_peak_bytes_ = 0;
};

}  // namespace tandem::train
