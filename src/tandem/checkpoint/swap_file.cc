#include "tandem/checkpoint/swap_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tandem/checkpoint/disk_space.h"
#include "tandem/core/error.h"
#include "tandem/core/units.h"

namespace tandem::checkpoint {

namespace {

// An unnamed file in `dir`: O_TMPFILE where the filesystem has it, else a named one removed at once. -1 and errno
// on failure.
int open_unnamed(const std::string& dir, int extra_flags) {
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | extra_flags, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR)) return fd;
  std::string path = dir + "/tandem-swap-XXXXXX";
  const int named = ::mkostemp(path.data(), extra_flags);
  if (named >= 0) ::unlink(path.c_str());
  return named;
}

}  // namespace

SwapFile::SwapFile(const std::string& dir, uint64_t bytes, const std::string& what)
    : dir_(dir), what_(what), bytes_(round_up(bytes)) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    TANDEM_FAIL("nvme_path '", dir, "' for ", what, " is not a folder: create it on a fast local disk, or offload to ",
                "\"cpu\" instead");
  fd_ = open_unnamed(dir, O_DIRECT);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) fd_ = open_unnamed(dir, 0);  // a filesystem without direct I/O (tmpfs)
  if (fd_ < 0)
    TANDEM_FAIL("cannot create a swap file in nvme_path '", dir, "' for ", what, ": ", std::strerror(errno),
                errno == EACCES || errno == EROFS ? " (the folder is not writable: choose another nvme_path)" : "");
  const SpaceNeed need{what, bytes_, "free space there, choose another nvme_path, or offload to \"cpu\" instead"};
  const std::string refusal = space_refusal(dir, need, free_bytes(dir));
  const int e = refusal.empty() ? ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes_)) : ENOSPC;
  if (e != 0) {
    ::close(fd_);
    fd_ = -1;
    TANDEM_FAIL(!refusal.empty() ? refusal
                                 : "cannot reserve " + format_bytes(bytes_) + " for " + what + " in nvme_path '" + dir +
                                       "': " + std::strerror(e));
  }
}

SwapFile::~SwapFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SwapFile::read(uint64_t offset, void* dst, size_t bytes) const {
  auto* p = static_cast<char*>(dst);
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::pread(fd_, p + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      TANDEM_FAIL("reading ", format_bytes(bytes), " of ", what_, " at offset ", offset, " in nvme_path '", dir_,
                  "' failed: ", n < 0 ? std::strerror(errno) : "the file ended early");
    done += static_cast<size_t>(n);
  }
}

void SwapFile::write(uint64_t offset, const void* src, size_t bytes) const {
  const auto* p = static_cast<const char*>(src);
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::pwrite(fd_, p + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      TANDEM_FAIL("writing ", format_bytes(bytes), " of ", what_, " at offset ", offset, " in nvme_path '", dir_,
                  "' failed: ", n < 0 ? std::strerror(errno) : "nothing was written");
    done += static_cast<size_t>(n);
  }
}

}  // namespace tandem::checkpoint
