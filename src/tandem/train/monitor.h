// Watching a run as DeepSpeed users do: its monitors "tensorboard" (event files, event_file.h) and "csv_monitor" (one
// CSV file per tag, `<tag with / and spaces as _>.csv` holding the rows "step,<the tag's last part>"), in
// output_path/job_name, fed the same (tag, value, step) events. It writes what it is given; the trainer chooses the
// tags (DeepSpeed's where they exist) and the step (the samples trained so far, DeepSpeed's global_samples).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/spec/train.h"
#include "tandem/train/event_file.h"

namespace tandem::train {

struct MonitorEvent {
  std::string tag;  // "Train/Samples/train_loss"
  double value;
};

class Monitor {
 public:
  // The folder of a monitor: output_path/job_name, where an empty output_path is `run_dir` (the current folder when
  // there is no run folder).
  static std::string folder(const spec::MonitorConfig& config, const std::string& run_dir);

  // Opens what is enabled of the two; the lines of `describe()` say where they write.
  Monitor(const spec::MonitorConfig& tensorboard, const spec::MonitorConfig& csv, const std::string& run_dir);
  bool enabled() const { return events_ != nullptr || !csv_dir_.empty(); }
  std::string describe() const;

  // The events of one step at `step`, flushed (a crash loses nothing written before it).
  void write(const std::vector<MonitorEvent>& events, int64_t step);

 private:
  std::unique_ptr<EventFileWriter> events_;
  std::string csv_dir_;
};

}  // namespace tandem::train
