// Free space (disk_space.h), through statvfs: std::filesystem::space reports the same f_bavail but cannot tell a
// missing path from an unreadable one, and the nearest existing parent is what a write into a new folder meets.
#include "tandem/checkpoint/disk_space.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tandem/core/error.h"
#include "tandem/core/units.h"

namespace tandem::checkpoint {

namespace fs = std::filesystem;

uint64_t free_bytes(const std::string& path) {
  fs::path p = fs::absolute(fs::path(path.empty() ? "." : path)).lexically_normal();
  std::error_code ec;
  while (!fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  struct statvfs st {};
  if (::statvfs(p.c_str(), &st) != 0)
    TANDEM_FAIL("cannot read the free space of the file system holding '", path, "' (statvfs on '", p.string(),
                "': ", std::strerror(errno), ")");
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

std::string space_refusal(const std::string& path, const SpaceNeed& need, uint64_t free) {
  if (need.bytes <= free) return "";
  return "not enough disk space for " + need.what + ": they need " + format_bytes(need.bytes) + " (" +
         std::to_string(need.bytes) + " bytes) on the file system of '" + path + "', which has " + format_bytes(free) +
         " (" + std::to_string(free) + " bytes) free: " + need.advice;
}

void check_free_space(const std::string& path, const SpaceNeed& need) {
  const std::string refusal = space_refusal(path, need, free_bytes(path));
  if (!refusal.empty()) TANDEM_FAIL(refusal);
}

}  // namespace tandem::checkpoint
