#include "tandem/core/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "tandem/core/error.h"

namespace tandem {

uint64_t parse_bytes(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    TANDEM_FAIL("cannot read '", text, "' as a size: write a number with an optional unit, e.g. \"512MiB\"");
  }
  std::string unit;
  for (size_t i = pos; i < text.size(); ++i)
    if (!std::isspace(static_cast<unsigned char>(text[i]))) unit += static_cast<char>(std::tolower(text[i]));
  double scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "kb")
    scale = 1e3;
  else if (unit == "mb")
    scale = 1e6;
  else if (unit == "gb")
    scale = 1e9;
  else if (unit == "tb")
    scale = 1e12;
  else if (unit == "kib")
    scale = 1024.0;
  else if (unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    TANDEM_FAIL("unknown unit in size '", text, "': use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB");
  if (!(value >= 0) || std::isinf(value)) TANDEM_FAIL("size '", text, "' must be a non-negative number");
  return static_cast<uint64_t>(std::llround(value * scale));
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string format_duration(double seconds) {
  char buf[32];
  if (!(seconds >= 0) || std::isinf(seconds)) return "?";
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  } else if (seconds < 3600) {
    const long s = std::lround(seconds);
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    const long m = std::lround(seconds / 60);
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", m / 60, m % 60);
  }
  return buf;
}

}  // namespace tandem
