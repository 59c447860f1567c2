// Shared by the fuzz targets: the scratch file the file readers are fed through, and how a broken property
// is reported. What each target feeds and checks is in its own file.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace tandem::fuzz {

// A property the target checks on top of the sanitizers failed: abort, so libFuzzer saves the input as a crash.
[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what.c_str());
  std::abort();
}

// One file per process, overwritten by each input: a file per input would spend most of the time in the
// file system.
class ScratchFile {
 public:
  // Made under $TMPDIR (tools/fuzz.sh points it into build/fuzz), so a crashed run leaves nothing in /tmp.
  explicit ScratchFile(const std::string& tag) {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir && *dir ? dir : "/tmp") + "/tandem-fuzz-" + tag + "-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    const int fd = ::mkstemp(buf.data());
    if (fd < 0) die("cannot create a scratch file", pattern);
    ::close(fd);
    path_ = buf.data();
  }
  ~ScratchFile() { ::unlink(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }

  // Replaces the file's contents with `size` bytes; a short write would make the target judge other bytes.
  // Writing over the old bytes and then cutting the file, rather than opening with O_TRUNC, keeps ext4 from
  // flushing to disk on every close (its auto_da_alloc), which made the file targets about 20 times slower.
  void write(const void* data, size_t size) const {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) die("cannot open the scratch file", path_);
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t left = size; left > 0;) {
      const ssize_t n = ::write(fd, p, left);
      if (n <= 0) die("cannot write the scratch file", path_);
      p += n;
      left -= static_cast<size_t>(n);
    }
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) die("cannot truncate the scratch file", path_);
    ::close(fd);
  }

 private:
  // A broken harness is not a finding about Tandem; say so plainly instead of crashing like one.
  [[noreturn]] static void die(const char* what, const std::string& path) {
    std::fprintf(stderr, "fuzz harness: %s '%s'\n", what, path.c_str());
    std::_Exit(2);
  }

  std::string path_;
};

}  // namespace tandem::fuzz
