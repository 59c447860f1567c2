#include "test_subset.h"

namespace tandem::testing {

namespace {
std::vector<std::string>& report() {
  static std::vector<std::string> lines;
  return lines;
}
}  // namespace

std::string requested_subset() {
  const char* s = std::getenv("TANDEM_TEST_SUBSET");
  return s ? s : "";
}

void note_left_out(const std::string& matrix, const std::vector<std::string>& names, size_t kept) {
  std::string line = matrix + ": " + std::to_string(kept) + " of " + std::to_string(kept + names.size()) +
                     " cases run under subset " + requested_subset() + "; left out (the release suite runs them):";
  for (size_t i = 0; i < names.size(); ++i) line += (i ? ", " : " ") + names[i];
  report().push_back(line);
}

std::vector<std::string> left_out_report() { return report(); }

}  // namespace tandem::testing
