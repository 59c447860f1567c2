// Internal to tandem_config: "auto" values, as configs written for the Hugging Face Trainer's DeepSpeed
// integration carry them: resolved where the Trainer resolves them, refused anywhere else.
#pragma once

#include <string>

#include "tandem/config/config.h"

namespace tandem::config {

// The top-level key under which validation records which keys were "auto", so that what they became can be
// said once even though validate() runs several times; parse() leaves it out of TrainConfig::raw.
constexpr const char* kAutoRecord = "auto_resolved";

// Before the schema: each "auto" the Trainer would fill becomes what it fills when its arguments keep their
// defaults (docs/deepspeed.md): batch keys are derived like absent ones (the per-device batch is the
// Trainer's 8 when nothing else gives the batch), optimizer parameters and the scheduler's peak and end take
// Tandem's defaults, the rest the Trainer's values; the keys are recorded under kAutoRecord.
void resolve_auto(Json& cfg);

// After the schema: checks the record, and refuses "auto" at any key the Trainer does not fill, naming it.
void check_auto(const Json& cfg);

// One line saying what each "auto" of the validated `cfg` became (batch sizes as resolved in `batch`); empty
// when the config had none.
std::string auto_line(const Json& cfg, const BatchSizes& batch);

}  // namespace tandem::config
