// The pipeline schedule a run uses, as one enum from the config down to the pipeline executor, and its one
// spelling in configs, messages and plans.
#pragma once

#include <string>
#include <vector>

namespace tandem::spec {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved };

// "gpipe" | "1f1b" | "interleaved"; anything else throws an Error naming parallel.schedule and the valid names.
ScheduleKind schedule_from_name(const std::string& name);
std::string schedule_name(ScheduleKind kind);

// Every name schedule_from_name takes, in the enum's order.
std::vector<std::string> schedule_names();

}  // namespace tandem::spec
