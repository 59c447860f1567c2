// The names and labels of a checkpoint folder (checkpoint_format.h).
#include "tandem/train/checkpoint_format.h"

#include <algorithm>
#include <cstdio>

#include "tandem/core/error.h"

namespace tandem::train::format {

namespace fs = std::filesystem;

std::string step_folder_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string rank_file_name(int rank) { return "rank_" + std::to_string(rank) + ".safetensors"; }

std::vector<fs::path> complete_checkpoint_paths(const fs::path& root) {
  std::vector<fs::path> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos &&
        fs::exists(e.path() / "manifest.json"))
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

config::Json shard_json(const nn::Shard& s) {
  config::Json j = {s.outer, s.split, s.inner, s.part, s.parts};
  if (!s.blocks.empty()) j.push_back(s.blocks);
  return j;
}

nn::Shard shard_from_json(const config::Json& j) {
  nn::Shard s;
  s.outer = j.at(0).get<int64_t>();
  s.split = j.at(1).get<int64_t>();
  s.inner = j.at(2).get<int64_t>();
  s.part = j.at(3).get<int>();
  s.parts = j.at(4).get<int>();
  if (j.size() > 5) s.blocks = j.at(5).get<std::vector<int64_t>>();
  TANDEM_CHECK(s.valid(s.outer * s.split * s.inner), "checkpoint piece with an inconsistent shard ", j.dump());
  return s;
}

}  // namespace tandem::train::format
