// The schedule names: the only place they are spelt.
#include "tandem/spec/schedule.h"

#include "tandem/core/error.h"

namespace tandem::spec {

ScheduleKind schedule_from_name(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "interleaved") return ScheduleKind::Interleaved;
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
  return {schedule_name(ScheduleKind::GPipe), schedule_name(ScheduleKind::OneFOneB),
          schedule_name(ScheduleKind::Interleaved)};
}

}  // namespace tandem::spec
