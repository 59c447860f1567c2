// The two weight sources (weight_source.h), read through Elements (elements.h).
#include "tandem/interchange/weight_source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tandem/checkpoint/safetensors.h"
#include "tandem/config/hf_config.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/interchange/elements.h"
#include "tandem/interchange/hf_names.h"

namespace tandem::interchange {
namespace {

namespace fs = std::filesystem;

std::string shape_problem(const std::string& name, const Shape& there, const Shape& here) {
  return " '" + name + "' is " + shape_str(there) + " there, " + shape_str(here) + " here;";
}

class TandemFile final : public WeightSource {
 public:
  explicit TandemFile(const std::string& path) : path_(path), file_(path) {}
  const std::string& path() const override { return path_; }
  std::string check(const std::string& name, const Shape& shape) const override {
    if (!file_.contains(name)) return " missing '" + name + "';";
    if (file_.shape(name) != shape) return shape_problem(name, file_.shape(name), shape);
    return "";
  }
  std::vector<std::string> unused(const std::set<std::string>& names) const override {
    std::vector<std::string> out;
    for (const std::string& n : file_.names())
      if (!names.count(n)) out.push_back(n);
    return out;
  }
  void read(const std::string& name, int64_t begin, int64_t end, float* out) const override {
    const Elements e(file_, name);
    for (int64_t i = begin; i < end; ++i) out[i - begin] = e[i];
  }

 private:
  std::string path_;
  checkpoint::SafetensorsFile file_;
};

class HfFolder final : public WeightSource {
 public:
  HfFolder(const std::string& dir, const spec::ModelConfig& model) : path_(dir) {
    // The folder's config.json, read as a file of Hugging Face's format: only its family is compared.
    const config::Json hf_model = config::model_from_hf_config(config::read_hf_config(dir), dir);
    const std::string type = spec::model_type(model);
    if (hf_model.at("type") != type)
      TANDEM_FAIL("cannot initialise a '", type, "' model from '", dir, "': its config.json is of a ",
                  hf_model.at("type").get<std::string>(), " model");
    open_files();
    for (HfMapping& m : hf_name_map(model)) maps_[m.name] = std::move(m);
  }
  const std::string& path() const override { return path_; }

  std::string check(const std::string& name, const Shape& shape) const override {
    const auto it = maps_.find(name);
    if (it == maps_.end()) return " Tandem's '" + name + "' has no Hugging Face counterpart;";
    if (it->second.shape != shape) return shape_problem(name, it->second.shape, shape);
    std::string out;
    for (const HfPiece& p : it->second.pieces) {
      const auto f = file_of_.find(p.hf_name);
      if (f == file_of_.end()) {
        out += " missing '" + p.hf_name + "' (for '" + name + "');";
        continue;
      }
      const Shape have = f->second->shape(p.hf_name), want = hf_piece_shape(p, shape);
      const bool ok = p.leading_rows ? have.size() == want.size() && have[0] >= want[0] &&
                                           std::equal(have.begin() + 1, have.end(), want.begin() + 1)
                                     : have == want;
      if (!ok)
        out += " '" + p.hf_name + "' is " + shape_str(have) + ", '" + name + "' needs " +
               (p.leading_rows ? "at least " : "") + shape_str(want) +
               (p.leading_rows ? " (n_positions must be at least seq_len)" : "") + ";";
    }
    return out;
  }

  std::vector<std::string> unused(const std::set<std::string>& names) const override {
    std::set<std::string> used;
    for (const auto& [name, m] : maps_)
      if (names.count(name))
        for (const HfPiece& p : m.pieces) used.insert(p.hf_name);
    // A head saved beside tied embeddings: transformers ties it on load, so it never counts.
    if (!maps_.count("head.weight")) used.insert(hf_tied_head_name());
    std::vector<std::string> out;
    for (const auto& [hf, file] : file_of_)
      if (!used.count(hf) && !is_hf_buffer(hf)) out.push_back(hf);
    return out;
  }

  void read(const std::string& name, int64_t begin, int64_t end, float* out) const override {
    const HfMapping& m = maps_.at(name);
    for (int64_t i = begin; i < end;) {
      const HfPiece& p = piece_of(m, i);
      const checkpoint::SafetensorsFile& file = *file_of_.at(p.hf_name);
      const Elements e(file, p.hf_name);
      const Shape hf_shape = file.shape(p.hf_name);
      const int64_t piece_end = std::min(end, (p.row + p.rows) * hf_columns(m.shape));
      for (; i < piece_end; ++i) out[i - begin] = e[hf_index(p, m.shape, hf_shape, i)];
    }
  }

 private:
  void open_files() {
    const fs::path dir(path_);
    const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
    std::vector<std::string> files;
    std::map<std::string, std::string> weight_map;
    if (fs::exists(index)) {
      std::ifstream in(index);
      std::ostringstream text;
      text << in.rdbuf();
      const config::Json j = config::Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.contains("weight_map") || !j.at("weight_map").is_object())
        TANDEM_FAIL("'", index.string(), "' is not a safetensors index: it needs a \"weight_map\" object of tensor ",
                    "name to shard file");
      for (const auto& [tensor, file] : j.at("weight_map").items()) {
        if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
          TANDEM_FAIL("'", index.string(), "': the shard of '", tensor, "' is ", file.dump(),
                      ", not a file name in the folder");
        weight_map[tensor] = file.get<std::string>();
      }
    } else if (fs::exists(single)) {
      files.push_back("model.safetensors");
    } else {
      TANDEM_FAIL("Hugging Face folder '", path_, "' has neither model.safetensors nor model.safetensors.index.json",
                  fs::exists(dir / "pytorch_model.bin")
                      ? ": it holds pytorch_model.bin, which Tandem does not read; save it again with "
                        "save_pretrained(..., safe_serialization=True)"
                      : "");
    }
    for (const auto& [tensor, file] : weight_map) {
      (void)tensor;
      if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
    }
    for (const std::string& f : files) {
      const fs::path p = dir / f;
      if (!fs::exists(p)) TANDEM_FAIL("Hugging Face folder '", path_, "' lacks the shard '", f, "' its index names");
      files_.push_back(std::make_unique<checkpoint::SafetensorsFile>(p.string()));
      for (const std::string& t : files_.back()->names()) {
        if (!weight_map.empty()) {
          const auto w = weight_map.find(t);
          if (w == weight_map.end() || w->second != f)
            TANDEM_FAIL("'", p.string(), "' holds '", t, "', which the index places ",
                        w == weight_map.end() ? std::string("nowhere") : "in '" + w->second + "'");
        }
        if (!file_of_.emplace(t, files_.back().get()).second)
          TANDEM_FAIL("Hugging Face folder '", path_, "' holds '", t, "' twice");
      }
    }
    for (const auto& [tensor, file] : weight_map)
      if (!file_of_.count(tensor))
        TANDEM_FAIL("'", index.string(), "' places '", tensor, "' in '", file, "', which does not hold it");
  }

  std::string path_;
  std::vector<std::unique_ptr<checkpoint::SafetensorsFile>> files_;
  std::map<std::string, const checkpoint::SafetensorsFile*> file_of_;  // Hugging Face name -> its file
  std::map<std::string, HfMapping> maps_;                              // Tandem name -> its pieces
};

}  // namespace

bool is_hf_folder(const std::string& path) {
  return fs::is_directory(path) && fs::exists(fs::path(path) / "config.json");
}

std::unique_ptr<WeightSource> open_weights(const std::string& path, const spec::ModelConfig& model) {
  if (is_hf_folder(path)) return std::make_unique<HfFolder>(path, model);
  if (fs::is_directory(path))
    TANDEM_FAIL("cannot initialise from '", path, "': a folder must be a Hugging Face model (config.json and ",
                "model.safetensors); otherwise name a safetensors file such as tandem export writes");
  return std::make_unique<TandemFile>(path);
}

}  // namespace tandem::interchange
