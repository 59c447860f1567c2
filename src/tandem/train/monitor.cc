// The DeepSpeed monitors (monitor.h). CSV files are appended to, as DeepSpeed's csv_monitor does, so a resumed run
// continues them; the header row goes only into a file that is new or empty.
#include "tandem/train/monitor.h"

#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "tandem/core/error.h"

namespace tandem::train {

namespace fs = std::filesystem;

namespace {

// The shortest text that reads back as the same double, as Python's csv module writes a float.
std::string number_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string csv_file_name(const std::string& tag) {
  std::string name = tag;
  for (char& c : name)
    if (c == '/' || c == ' ') c = '_';
  return name + ".csv";
}

}  // namespace

std::string Monitor::folder(const spec::MonitorConfig& config, const std::string& run_dir) {
  const fs::path base = !config.output_path.empty() ? fs::path(config.output_path)
                        : !run_dir.empty()          ? fs::path(run_dir)
                                                    : fs::path(".");
  return (base / config.job_name).string();
}

Monitor::Monitor(const spec::MonitorConfig& tensorboard, const spec::MonitorConfig& csv, const std::string& run_dir) {
  if (tensorboard.enabled) events_ = std::make_unique<EventFileWriter>(folder(tensorboard, run_dir));
  if (csv.enabled) {
    csv_dir_ = folder(csv, run_dir);
    std::error_code ec;
    fs::create_directories(csv_dir_, ec);
    if (ec) TANDEM_FAIL("cannot create the csv_monitor folder '", csv_dir_, "': ", ec.message());
  }
}

std::string Monitor::describe() const {
  std::string out;
  if (events_)
    out += "tensorboard: " + events_->path() + " (tensorboard --logdir " +
           fs::path(events_->path()).parent_path().string() + ")\n";
  if (!csv_dir_.empty()) out += "csv_monitor: " + csv_dir_ + "/<tag>.csv\n";
  return out;
}

void Monitor::write(const std::vector<MonitorEvent>& events, int64_t step) {
  const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (events_) {
    for (const MonitorEvent& e : events) events_->add_scalar(e.tag, e.value, step, wall);
    events_->flush();
  }
  if (csv_dir_.empty()) return;
  for (const MonitorEvent& e : events) {
    const fs::path file = fs::path(csv_dir_) / csv_file_name(e.tag);
    std::error_code ec;
    const bool empty = !fs::exists(file, ec) || fs::file_size(file, ec) == 0;
    std::ofstream out(file, std::ios::app);
    if (!out) TANDEM_FAIL("cannot write the csv_monitor file '", file.string(), "'");
    if (empty) out << "step," << e.tag.substr(e.tag.rfind('/') + 1) << "\n";
    out << step << "," << number_text(e.value) << "\n";
    if (!out.flush()) TANDEM_FAIL("cannot write the csv_monitor file '", file.string(), "'");
  }
}

}  // namespace tandem::train
