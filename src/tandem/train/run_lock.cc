// RunFolderLock (run_lock.h): flock, because a lock taken with it belongs to the open file and goes when the holder's
// last descriptor closes, also when the process is killed; fcntl's record locks would be lost as soon as any other
// descriptor of the file in this process closed.
#include "tandem/train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

#include "tandem/core/error.h"

namespace tandem::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = "tandem.lock";

std::string now_text() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %z", &local);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown host";
  return buf;
}

// What the lock file of a held lock says. Its holder writes it just after taking the lock, so a file read at that
// moment may still be empty: try again for up to a second.
std::string read_holder(int fd) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    char buf[1024];
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0) {
      const auto j = nlohmann::json::parse(std::string(buf, static_cast<size_t>(n)), nullptr, false);
      if (j.is_object() && j.contains("host") && j.contains("pid") && j.contains("since"))
        return "host " + j["host"].get<std::string>() + ", pid " + std::to_string(j["pid"].get<long long>()) +
               ", since " + j["since"].get<std::string>();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "a job that has not written its name into the lock file";
}

}  // namespace

std::string RunFolderLock::path_in(const std::string& folder) { return (fs::path(folder) / kLockName).string(); }

RunFolderLock::~RunFolderLock() {
  // Closing the descriptor releases the lock. The file stays: removing it would let a job that opened it just
  // before lock a file that no longer has a name, beside a third job that locks a new one.
  if (fd_ >= 0) ::close(fd_);
}

RunFolderLock::RunFolderLock(RunFolderLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

RunFolderLock& RunFolderLock::operator=(RunFolderLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

RunFolderLock RunFolderLock::acquire(const std::string& folder) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) TANDEM_FAIL("cannot create the run folder '", folder, "': ", ec.message());
  const std::string path = path_in(folder);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    TANDEM_FAIL("cannot open the lock file '", path, "' of the run folder (", std::strerror(errno),
                "): check that the folder is writable");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string who = err == EWOULDBLOCK ? read_holder(fd) : "";
    ::close(fd);
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK || err == EINVAL) {
      // A file system without flock (Lustre mounted without it, some FUSE ones): training must not be refused for
      // that, but the user should know the folder is not guarded.
      std::fprintf(stderr,
                   "warning: the file system of '%s' does not support flock (%s): a second job into this run folder "
                   "would not be refused\n",
                   folder.c_str(), std::strerror(err));
      return RunFolderLock();
    }
    if (err != EWOULDBLOCK)
      TANDEM_FAIL("cannot lock the run folder '", folder, "' (flock on '", path, "': ", std::strerror(err), ")");
    TANDEM_FAIL("the run folder '", folder, "' is in use by another job (", who,
                "): a run folder belongs to one job. Wait for that job to end (or stop it: SIGTERM saves a "
                "checkpoint), or write this run elsewhere with --out DIR");
  }
  const nlohmann::json me = {{"host", host_name()}, {"pid", static_cast<long long>(::getpid())}, {"since", now_text()}};
  const std::string text = me.dump() + "\n";
  // Best effort: the lock is what excludes, the text only names the holder in another job's message.
  if (::ftruncate(fd, 0) == 0) {
    const ssize_t written = ::pwrite(fd, text.data(), text.size(), 0);
    (void)written;
  }
  RunFolderLock lock;
  lock.fd_ = fd;
  return lock;
}

std::string RunFolderLock::holder(const std::string& folder) {
  const std::string path = path_in(folder);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string who;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0)
    who = errno == EWOULDBLOCK ? read_holder(fd) : "";
  else
    ::flock(fd, LOCK_UN);
  ::close(fd);
  return who;
}

}  // namespace tandem::train
