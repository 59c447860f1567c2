// The offload timeline's file and summary line (timeline_file.h).
#include "tandem/train/timeline_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

namespace tandem::train {

namespace fs = std::filesystem;

void write_timeline(parallel::Engine& engine, bool at_end, const std::string& out_dir, int rank, int64_t timeline_step,
                    bool print) {
  std::unique_ptr<parallel::Timeline> t = engine.take_timeline(at_end);
  if (!t) return;
  const fs::path dir = out_dir.empty() ? fs::path(".") : fs::path(out_dir);
  const fs::path file = dir / ("timeline_rank" + std::to_string(rank) + ".json");
  std::ofstream(file) << t->chrome_trace(rank);
  if (print)
    std::printf("offload timeline of step %lld (rank 0, %s; chrome://tracing reads it): %s\n",
                static_cast<long long>(timeline_step), file.string().c_str(), t->summary().c_str());
}

}  // namespace tandem::train
