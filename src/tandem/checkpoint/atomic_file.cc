// Atomic writes and CRC-32 of files (see atomic_file.h); POSIX calls, since fsync has no std:: equivalent.
#include "tandem/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "tandem/checkpoint/progress.h"
#include "tandem/core/error.h"

namespace tandem::checkpoint {
namespace {

std::string errno_text() { return std::strerror(errno); }

std::string parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path), tmp_(path + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    TANDEM_FAIL("cannot create '", tmp_, "' (", errno_text(), "): check that the directory exists and is writable");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  TANDEM_CHECK(fd_ >= 0, "write to '", tmp_, "' after commit");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) TANDEM_FAIL("cannot write '", tmp_, "' (", errno_text(), "): is the disk full?");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  TANDEM_CHECK(fd_ >= 0, "commit of '", tmp_, "' twice");
  // The data must be on disk before the rename makes it visible, or a crash could expose an empty file.
  if (::fsync(fd_) != 0) TANDEM_FAIL("cannot flush '", tmp_, "' to disk (", errno_text(), ")");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    TANDEM_FAIL("cannot close '", tmp_, "' (", errno_text(), ")");
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp_.c_str());
    TANDEM_FAIL("cannot rename '", tmp_, "' to '", path_, "' (", err, ")");
  }
  fsync_directory(parent_dir(path_));
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFileWriter w(path);
  w.write(bytes.data(), bytes.size());
  w.commit();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) TANDEM_FAIL("cannot open directory '", dir, "' to flush it (", errno_text(), ")");
  const int rc = ::fsync(fd);
  const int err = rc != 0 ? errno : 0;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); the rename is still as durable as they allow.
  if (rc != 0 && err != EINVAL) TANDEM_FAIL("cannot flush directory '", dir, "' (", std::strerror(err), ")");
}

uint32_t crc32_file(const std::string& path, Progress* progress) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) TANDEM_FAIL("cannot open '", path, "' to checksum it (", errno_text(), ")");
  std::vector<unsigned char> buf(1 << 20);
  uLong crc = ::crc32(0L, Z_NULL, 0);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    crc = ::crc32(crc, buf.data(), static_cast<uInt>(n));
    if (progress) progress->add(n);
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) TANDEM_FAIL("cannot read '", path, "' to checksum it");
  return static_cast<uint32_t>(crc);
}

uint32_t crc32_bytes(uint32_t crc, const void* data, size_t bytes) {
  // zlib takes 32-bit lengths: 1 GiB at a time.
  const auto* p = static_cast<const unsigned char*>(data);
  uLong c = crc;
  while (bytes > 0) {
    const size_t n = std::min(bytes, size_t{1} << 30);
    c = ::crc32(c, p, static_cast<uInt>(n));
    p += n;
    bytes -= n;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace tandem::checkpoint
