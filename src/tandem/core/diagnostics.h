// The environment variables kept for diagnosis, read in one place (Diagnostics::from_environment, once, by the app)
// and passed on as a value: the op profile, the offload timeline, fault injection for the fault tests and the pace of
// the progress lines. None of them changes what is computed; settings that do are config keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

// TANDEM_FAULT="rank=R,step=S,kind=hang|kill|exit|kill_in_write": rank R hangs, dies by SIGKILL or exits(9) at the
// start of step S (1-based), or (kill_in_write) dies by SIGKILL halfway through writing its file of step S's
// checkpoint.
struct FaultInjection {
  int rank = -1;  // -1: none
  int64_t step = -1;
  std::string kind;
};

struct Diagnostics {
  bool profile = false;              // TANDEM_PROFILE set to anything but "" or "0": the op profile (ops/profile.h)
  int64_t timeline_step = 0;         // TANDEM_TIMELINE=S: the offload timeline of step S (1-based); 0: none
  FaultInjection fault;              // TANDEM_FAULT
  std::optional<double> progress_s;  // TANDEM_PROGRESS_S=S: progress lines after S s and every S s (0: at every add)

  // Reads the four variables; throws for a TANDEM_FAULT it cannot read.
  static Diagnostics from_environment();
};

}  // namespace tandem
