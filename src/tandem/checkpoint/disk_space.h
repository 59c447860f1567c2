// Free space on disk, checked before a long write instead of discovered when it fails: the free bytes of the file
// system that holds a path, and the refusal, with the numbers, when what is to be written does not fit. Used for
// checkpoints, exports and any other file a run will write; it does not decide what those bytes are.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::checkpoint {

// The bytes an unprivileged writer may still write (statvfs: f_bavail x f_frsize) on the file system holding
// `path`, or, when `path` does not exist yet, its nearest existing parent folder.
uint64_t free_bytes(const std::string& path);

// What is to be written where, for check_free_space.
struct SpaceNeed {
  std::string what;    // "3 checkpoints (keep 2, and 1 being written) of 1.2 GiB"
  uint64_t bytes = 0;  // all of it
  std::string advice;  // what to change when it does not fit: "lower checkpoint.keep, or ..."
};

// The message for `need` on the file system of `path` with `free` bytes, or empty when it fits.
std::string space_refusal(const std::string& path, const SpaceNeed& need, uint64_t free);

// Throws Error (space_refusal's text) when `need.bytes` exceed free_bytes(path).
void check_free_space(const std::string& path, const SpaceNeed& need);

}  // namespace tandem::checkpoint
