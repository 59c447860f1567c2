// The diagnosis variables (diagnostics.h): the one place that reads them from the environment.
#include "tandem/core/diagnostics.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tandem/core/error.h"

namespace tandem {

Diagnostics Diagnostics::from_environment() {
  Diagnostics d;
  const char* profile = std::getenv("TANDEM_PROFILE");
  d.profile = profile != nullptr && *profile != '\0' && std::string_view(profile) != "0";
  if (const char* s = std::getenv("TANDEM_TIMELINE")) d.timeline_step = std::atoll(s);
  if (const char* spec = std::getenv("TANDEM_FAULT")) {
    long long step = -1;
    char kind[16] = {0};
    if (std::sscanf(spec, "rank=%d,step=%lld,kind=%15s", &d.fault.rank, &step, kind) != 3)
      TANDEM_FAIL("TANDEM_FAULT='", spec, "' is not rank=R,step=S,kind=hang|kill|exit|kill_in_write");
    d.fault.step = step;
    d.fault.kind = kind;
  }
  if (const char* s = std::getenv("TANDEM_PROGRESS_S")) {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end != s && v >= 0) d.progress_s = v;
  }
  return d;
}

}  // namespace tandem
