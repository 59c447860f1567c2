// Saving and restoring everything a run needs to continue bit-exactly: weights (safetensors, the model's
// parameter names), AdamW moments, the step (which is also the data position: samples are keyed by step),
// the seed and the config. A checkpoint is a folder "step_<k>" written under a temporary name, its files
// checksummed in manifest.json, then renamed: a folder without a manifest is not a checkpoint.
#pragma once

#include <string>

#include "tandem/config/config.h"
#include "tandem/nn/model.h"
#include "tandem/optim/adamw.h"

namespace tandem::train {

// Writes <root>/step_<step> and keeps the newest `keep` checkpoints under <root>. Returns the folder.
std::string save_checkpoint(const std::string& root, int64_t step, const nn::Model& model, const optim::AdamW& opt,
                            const config::Json& cfg, int keep);

// `path` is a checkpoint folder or a run folder (its newest complete checkpoint under checkpoints/ is used).
std::string find_checkpoint(const std::string& path);

// Verifies checksums and that the checkpoint holds exactly this model's parameters, then loads weights and
// moments. Returns the step it was saved at. Nothing is modified when it throws.
int64_t load_checkpoint(const std::string& folder, nn::Model& model, optim::AdamW& opt);

}  // namespace tandem::train
