#include "tandem/plan/breakdown.h"

#include <sstream>

#include "tandem/core/units.h"

namespace tandem::plan {

const char* term_name(Term t) {
  switch (t) {
    case Term::Parameters:
      return "parameters";
    case Term::Gradients:
      return "gradients";
    case Term::Optimizer:
      return "optimizer state";
    case Term::ZeroBuffers:
      return "ZeRO buffers";
    case Term::Activations:
      return "activations";
    case Term::Transient:
      return "transients";
    case Term::Communication:
      return "pipeline buffers";
    case Term::Other:
      return "batch and workspaces";
  }
  return "?";
}

Term Breakdown::largest() const {
  int best = 0;
  for (int i = 1; i < kTerms; ++i)
    if (bytes[i] > bytes[best]) best = i;
  return static_cast<Term>(best);
}

std::string Breakdown::describe() const {
  std::ostringstream os;
  bool any = false;
  for (int i = 0; i < kTerms; ++i) {
    if (bytes[i] == 0) continue;
    os << (any ? ", " : "") << term_name(static_cast<Term>(i)) << " "
       << format_bytes(static_cast<uint64_t>(std::max<int64_t>(bytes[i], 0)));
    any = true;
  }
  return os.str();
}

}  // namespace tandem::plan
