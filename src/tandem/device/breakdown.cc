#include "tandem/device/breakdown.h"

#include <algorithm>
#include <sstream>

#include "tandem/core/units.h"

namespace tandem {

const char* purpose_name(MemoryPurpose p) {
  switch (p) {
    case MemoryPurpose::Parameters:
      return "parameters";
    case MemoryPurpose::Gradients:
      return "gradients";
    case MemoryPurpose::Optimizer:
      return "optimizer state";
    case MemoryPurpose::ZeroBuffers:
      return "ZeRO buffers";
    case MemoryPurpose::Activations:
      return "activations";
    case MemoryPurpose::Transient:
      return "transients";
    case MemoryPurpose::Communication:
      return "pipeline buffers";
    case MemoryPurpose::Other:
      return "batch and workspaces";
  }
  return "?";
}

namespace device {

MemoryPurpose Breakdown::largest() const {
  size_t best = 0;
  for (size_t i = 1; i < bytes.size(); ++i)
    if (bytes[i] > bytes[best]) best = i;
  return static_cast<MemoryPurpose>(best);
}

std::string Breakdown::describe() const {
  std::ostringstream os;
  bool any = false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] == 0) continue;
    os << (any ? ", " : "") << purpose_name(static_cast<MemoryPurpose>(i)) << " "
       << format_bytes(static_cast<uint64_t>(std::max<int64_t>(bytes[i], 0)));
    any = true;
  }
  return os.str();
}

}  // namespace device
}  // namespace tandem
