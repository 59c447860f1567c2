#include "tandem/train/run_folder.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/run_lock.h"

namespace tandem::train {

namespace fs = std::filesystem;

namespace {

// The same folder however it was spelt ("runs/a", "./runs/a/"), for comparing.
fs::path canonical_or_plain(const fs::path& p) {
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

// What of another run `out` holds, for the message: "metrics.jsonl and 3 checkpoints (step_00000004 ..
// step_00000012)"; empty when it holds nothing of a run.
std::string run_contents(const fs::path& out) {
  std::string what;
  if (fs::exists(out / "metrics.jsonl")) what = "metrics.jsonl";
  const fs::path ckpts = out / "checkpoints";
  if (fs::is_directory(ckpts) && !fs::is_empty(ckpts)) {
    const std::vector<std::string> all = complete_checkpoints(ckpts.string());
    std::string c = all.empty() ? "an unfinished checkpoint under checkpoints/"
                                : std::to_string(all.size()) + " checkpoint" + (all.size() > 1 ? "s" : "") + " (" +
                                      fs::path(all.front()).filename().string() +
                                      (all.size() > 1 ? " .. " + fs::path(all.back()).filename().string() : "") + ")";
    what += (what.empty() ? "" : " and ") + c;
  }
  return what;
}

std::string timestamp_name() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &local);
  return buf;
}

// <root>/latest -> the newest run of this root, when it is a link Tandem made (or absent); anything else there is
// the user's and is left alone.
void point_latest(const fs::path& root, const fs::path& run) {
  const fs::path link = root / "latest";
  std::error_code ec;
  if (fs::is_symlink(link, ec))
    fs::remove(link, ec);
  else if (fs::exists(link, ec))
    return;
  fs::create_directory_symlink(run.filename(), link, ec);  // best effort: a link is a convenience
}

}  // namespace

std::string run_folder_of(const std::string& checkpoint) {
  // As the user spelt it (runs/latest stays runs/latest), unless the spelling hides it (a trailing "..").
  fs::path c = fs::path(checkpoint).lexically_normal();
  if (c.filename().empty()) c = c.parent_path();
  if (c.parent_path().filename() != "checkpoints") c = canonical_or_plain(checkpoint);
  if (c.parent_path().filename() != "checkpoints") return "";
  const fs::path run = c.parent_path().parent_path();
  return run.empty() ? "." : run.string();
}

void check_run_folder(const std::string& out, const std::string& resume_checkpoint) {
  const fs::path dir(out);
  const std::string resumed_run = resume_checkpoint.empty() ? "" : run_folder_of(resume_checkpoint);
  const bool resuming_here = !resumed_run.empty() && canonical_or_plain(resumed_run) == canonical_or_plain(dir);
  if (!resumed_run.empty() && !resuming_here) {
    const std::string who = RunFolderLock::holder(resumed_run);
    if (!who.empty())
      TANDEM_FAIL("cannot resume from '", resume_checkpoint, "': its run folder '", resumed_run,
                  "' is in use by a job (", who,
                  "), which may replace its checkpoints while they are read. Wait for that job to end (or stop it: "
                  "SIGTERM saves a checkpoint), then resume");
  }
  const std::string held = run_contents(dir);
  if (held.empty()) return;
  if (complete_checkpoints((dir / "checkpoints").string()).empty())
    TANDEM_FAIL("the run folder '", out, "' holds a run that ended before its first checkpoint (", held,
                "): it has nothing to resume. Replace it with --overwrite, or write this run elsewhere with --out DIR "
                "(or leave --out out for a new folder under runs/)");
  if (!resuming_here)
    TANDEM_FAIL("the run folder '", out, "' holds another run (", held, "): continue that run with --resume ", out,
                ", write this one elsewhere with --out DIR (or leave --out out for a new folder under runs/), or "
                "replace it with --overwrite");
  const std::vector<std::string> all = complete_checkpoints((dir / "checkpoints").string());
  const fs::path resumed = canonical_or_plain(resume_checkpoint);
  if (!all.empty() && canonical_or_plain(all.back()) != resumed)
    TANDEM_FAIL("the run folder '", out, "' holds checkpoints after ", resumed.filename().string(), " (the newest is ",
                fs::path(all.back()).filename().string(),
                "): resuming the older one here would mix two continuations of the run. Resume the newest with "
                "--resume ",
                out, ", continue the older one in another folder with --out DIR, or drop the newer checkpoints with ",
                "--overwrite");
}

RunFolder prepare_run_folder(const std::string& out, const std::string& resume_checkpoint, bool overwrite,
                             const std::string& root) {
  fs::path dir(out);
  bool fresh_default = false;
  if (dir.empty() && !resume_checkpoint.empty()) dir = run_folder_of(resume_checkpoint);
  RunFolder run;
  if (dir.empty()) {
    // A new folder of its own: one that another job took in the same second is passed over.
    const std::string base = timestamp_name();
    for (int n = 1;; ++n) {
      dir = fs::path(root) / (n == 1 ? base : base + "-" + std::to_string(n));
      if (fs::exists(dir)) continue;
      try {
        run.lock = RunFolderLock::acquire(dir.string());
      } catch (const Error&) {
        if (n < 100) continue;
        throw;
      }
      if (run_contents(dir).empty()) break;
      run.lock = RunFolderLock();
    }
    fresh_default = true;
  } else {
    run.lock = RunFolderLock::acquire(dir.string());
  }
  if (overwrite) {
    try {
      check_run_folder(dir.string(), resume_checkpoint);
    } catch (const Error&) {
      if (!resume_checkpoint.empty() && !run_folder_of(resume_checkpoint).empty() &&
          canonical_or_plain(run_folder_of(resume_checkpoint)) == canonical_or_plain(dir)) {
        // Resuming here from an older checkpoint: only the checkpoints after it go.
        const fs::path resumed = canonical_or_plain(resume_checkpoint);
        for (const std::string& c : complete_checkpoints((dir / "checkpoints").string()))
          if (canonical_or_plain(c).filename().string() > resumed.filename().string()) fs::remove_all(c);
      } else {
        fs::remove(dir / "metrics.jsonl");
        fs::remove_all(dir / "checkpoints");
      }
    }
  }
  check_run_folder(dir.string(), resume_checkpoint);
  if (fresh_default) point_latest(fs::path(root), dir);
  run.dir = dir.string();
  return run;
}

}  // namespace tandem::train
