// The evaluation: the mean loss over the held-out data's batches, the same samples at every evaluation and in every
// layout.
#pragma once

#include <cstdint>

#include "tandem/data/dataset.h"
#include "tandem/parallel/engine.h"
#include "tandem/spec/train.h"
#include "tandem/train/batch_maker.h"

namespace tandem::train {

// The mean loss over eval.steps global batches of `global_batch` samples of `data` (eval.data's), each sample
// `rows_per_sample` loss rows, after the engine's last update.
double evaluate(parallel::Engine& engine, const spec::EvalConfig& eval, const data::Dataset& data,
                const BatchMaker& batches, int64_t global_batch, int64_t rows_per_sample);

}  // namespace tandem::train
