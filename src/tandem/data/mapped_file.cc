// Internal to tandem_data: the mmap behind MappedFile (POSIX only).
#include "tandem/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tandem/core/error.h"

namespace tandem::data {

MappedFile::MappedFile(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) TANDEM_FAIL(what, " '", path, "' cannot be opened (", std::strerror(errno), "): check data.path");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TANDEM_FAIL(what, " '", path, "' is not a regular file: data.path must name a file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) TANDEM_FAIL(what, " '", path, "' cannot be memory-mapped (", std::strerror(err), ")");
    // Windows start at random offsets, so read-ahead would mostly fetch pages no one uses.
    ::madvise(p, size_, MADV_RANDOM);
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

void MappedFile::advise_sequential(bool sequential) const {
  if (data_) ::madvise(const_cast<uint8_t*>(data_), size_, sequential ? MADV_SEQUENTIAL : MADV_RANDOM);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace tandem::data
