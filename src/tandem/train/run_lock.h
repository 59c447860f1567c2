// The lock that makes a run folder one job's: flock(2) on <run>/tandem.lock, held by the job's rank 0 for as long as
// the RunFolderLock lives, so the kernel releases it on any death (a stale lock file never blocks). The file says
// who holds it (host, pid, since when), for the refusal of a second job. It does not decide what a folder may hold
// (run_folder.h does).
#pragma once

#include <string>

namespace tandem::train {

class RunFolderLock {
 public:
  RunFolderLock() = default;  // holds nothing
  ~RunFolderLock();
  RunFolderLock(RunFolderLock&& other) noexcept;
  RunFolderLock& operator=(RunFolderLock&& other) noexcept;
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

  // Creates `folder` when missing and takes its lock at once (never waits), writing this process's host, pid and
  // start time into the lock file; throws Error naming the holder and what to do when another job has it.
  static RunFolderLock acquire(const std::string& folder);
  // "host H, pid P, since T" of the job that holds `folder`'s lock now, or empty when nobody does (no lock file,
  // or its holder died). Only for a folder this process does not hold itself: flock locks of two opens of one file
  // exclude each other even within a process.
  static std::string holder(const std::string& folder);
  // The lock file of `folder`.
  static std::string path_in(const std::string& folder);

  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace tandem::train
