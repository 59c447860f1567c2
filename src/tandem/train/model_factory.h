// Builds the model a config's "model" object names (mlp or gpt) and says what data it consumes.
#pragma once

#include "tandem/config/config.h"
#include "tandem/data/dataset.h"
#include "tandem/nn/model.h"

namespace tandem::train {

nn::Model build_model(const config::Json& model_cfg, nn::TpSlot tp = {});
// What the model reads and predicts, for make_dataset.
data::ModelIO model_io(const config::Json& model_cfg);
// Tokens (gpt) or samples (mlp) that one sample contributes to the loss.
int64_t rows_per_sample(const config::Json& model_cfg);

}  // namespace tandem::train
