// The mean loss over the held-out data (evaluate.h).
#include "tandem/train/evaluate.h"

#include <algorithm>

namespace tandem::train {

double evaluate(parallel::Engine& engine, const spec::EvalConfig& eval, const data::Dataset& data,
                const BatchMaker& batches, int64_t global_batch, int64_t rows_per_sample) {
  // Batch k of the held-out data is its "step" k: the same samples at every evaluation, in every layout. The mean
  // over the targets that count (all of them without a loss mask) of every batch.
  const double rows = static_cast<double>(global_batch * rows_per_sample);
  double sum = 0, counted = 0;
  for (int64_t k = 0; k < eval.steps; ++k) {
    sum += engine.evaluate([&](int64_t first, int64_t count) { return batches.make(data, eval.data, k, first, count); },
                           rows);
    counted += static_cast<double>(data.counted_targets(k, 0, global_batch).value_or(rows));
  }
  return sum / std::max(counted, 1.0);
}

}  // namespace tandem::train
