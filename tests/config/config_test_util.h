// What the config tests share: two minimal configs, a temporary folder for config files, and a doc's text.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "tandem/config/config.h"

namespace tandem::config {

inline Json mlp_cfg() {
  return Json::parse(R"({"train_batch_size": 8, "model": {"type": "mlp", "sizes": [4, 8, 3]}})");
}

inline Json gpt_cfg() {
  return Json::parse(R"({"train_batch_size": 8,
    "model": {"type": "gpt", "vocab_size": 256, "seq_len": 16, "dim": 32, "layers": 2, "heads": 4}})");
}

// The text of docs/NAME in the source tree (empty when it cannot be read).
inline std::string read_doc(const std::string& name) {
  std::ifstream in(std::filesystem::path(TANDEM_SOURCE_DIR) / "docs" / name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("tandem_config_test_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace tandem::config
