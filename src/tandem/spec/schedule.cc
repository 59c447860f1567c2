// The schedule names: the only place they are spelt.
#include "tandem/spec/schedule.h"

#include "tandem/core/error.h"

namespace tandem::spec {

namespace {
constexpr ScheduleKind kKinds[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved};
}  // namespace

ScheduleKind schedule_from_name(const std::string& name) {
  for (const ScheduleKind kind : kKinds)
    if (schedule_name(kind) == name) return kind;
  TANDEM_FAIL("parallel.schedule '", name, "' is not one of gpipe, 1f1b, interleaved");
}

std::string schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe:
      return "gpipe";
    case ScheduleKind::OneFOneB:
      return "1f1b";
    case ScheduleKind::Interleaved:
      return "interleaved";
  }
  TANDEM_CHECK(false, "unhandled ScheduleKind ", static_cast<int>(kind));
}

std::vector<std::string> schedule_names() {
  std::vector<std::string> names;
  for (const ScheduleKind kind : kKinds) names.push_back(schedule_name(kind));
  return names;
}

}  // namespace tandem::spec
