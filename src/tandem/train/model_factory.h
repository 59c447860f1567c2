// Builds the model a config's "model" names, through nn, for one tensor-parallel slot. With config/model_config.cc,
// the one place that tells the model families apart: a new family is one more case here.
#pragma once

#include "tandem/config/model_config.h"
#include "tandem/nn/model.h"

namespace tandem::train {

nn::Model build_model(const config::ModelConfig& model, nn::TpSlot tp = {});

}  // namespace tandem::train
