#include "tandem/train/train_state.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tandem/checkpoint/atomic_file.h"
#include "tandem/checkpoint/safetensors.h"

namespace tandem::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "tandem-checkpoint";
constexpr int kVersion = 1;

std::string step_folder_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// Complete checkpoints (those with a manifest) under `root`, oldest first.
std::vector<fs::path> complete_checkpoints(const fs::path& root) {
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

std::vector<checkpoint::TensorEntry> entries(const std::vector<optim::Segment>& segs, const std::vector<Tensor>& ts,
                                             const std::string& suffix) {
  std::vector<checkpoint::TensorEntry> out;
  for (size_t i = 0; i < segs.size(); ++i)
    out.push_back({segs[i].name + suffix, DType::F32, ts[i].shape(), ts[i].raw()});
  return out;
}

}  // namespace

std::string save_checkpoint(const std::string& root, int64_t step, const nn::Model& model, const optim::AdamW& opt,
                            const config::Json& cfg, int keep) {
  const fs::path final_dir = fs::path(root) / step_folder_name(step);
  const fs::path tmp_dir = fs::path(root) / (step_folder_name(step) + ".tmp");
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);

  std::vector<checkpoint::TensorEntry> weights;
  for (nn::Parameter* p : model.parameters()) weights.push_back({p->name, DType::F32, p->shape, p->value.raw()});
  checkpoint::write_safetensors((tmp_dir / "model.safetensors").string(), weights, {{"format", "pt"}});
  std::vector<checkpoint::TensorEntry> moments = entries(opt.segments(), opt.exp_avg(), ".exp_avg");
  for (auto& e : entries(opt.segments(), opt.exp_avg_sq(), ".exp_avg_sq")) moments.push_back(e);
  checkpoint::write_safetensors((tmp_dir / "optimizer.safetensors").string(), moments,
                                {{"optimizer", "AdamW"}, {"step", std::to_string(opt.step_count())}});

  config::Json manifest = {{"format", kFormat},
                           {"version", kVersion},
                           {"step", step},
                           {"optimizer_step", opt.step_count()},
                           {"data_position", {{"step", step}}},
                           {"rng", {{"seed", cfg.value("seed", 0)}, {"generator", "philox4x32-10"}}},
                           {"num_parameters", model.num_parameters()},
                           {"config", cfg}};
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    manifest["files"][f] = {{"crc32", checkpoint::crc32_file((tmp_dir / f).string())},
                            {"bytes", fs::file_size(tmp_dir / f)}};
  checkpoint::write_file_atomic((tmp_dir / "manifest.json").string(), manifest.dump(2) + "\n");

  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
  auto all = complete_checkpoints(root);
  for (size_t i = 0; i + std::max(keep, 1) < all.size(); ++i) fs::remove_all(all[i]);
  return final_dir.string();
}

std::string find_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (!fs::exists(p)) TANDEM_FAIL("cannot resume from '", path, "': no such file or folder");
  if (fs::exists(p / "manifest.json")) return p.string();
  for (const fs::path& root : {p / "checkpoints", p}) {
    auto all = complete_checkpoints(root);
    if (!all.empty()) return all.back().string();
  }
  TANDEM_FAIL("cannot resume from '", path, "': it holds no complete checkpoint (a folder step_<k> with a ",
              "manifest.json, directly or under checkpoints/)");
}

int64_t load_checkpoint(const std::string& folder, nn::Model& model, optim::AdamW& opt) {
  const fs::path dir(folder);
  config::Json manifest;
  {
    std::ifstream in(dir / "manifest.json");
    if (!in) TANDEM_FAIL("checkpoint '", folder, "' has no readable manifest.json");
    try {
      manifest = config::Json::parse(in);
    } catch (const std::exception& e) {
      TANDEM_FAIL("checkpoint manifest '", (dir / "manifest.json").string(), "' is not valid JSON: ", e.what());
    }
  }
  if (manifest.value("format", "") != kFormat)
    TANDEM_FAIL("'", folder, "' is not a Tandem checkpoint (manifest format is not \"", kFormat, "\")");
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    const fs::path file = dir / f;
    if (!fs::exists(file)) TANDEM_FAIL("checkpoint '", folder, "' is missing ", f);
    const uint32_t want = manifest.at("files").at(f).at("crc32").get<uint32_t>();
    const uint32_t got = checkpoint::crc32_file(file.string());
    if (want != got)
      TANDEM_FAIL("checkpoint file '", file.string(), "' is corrupted: crc32 ", got, " but the manifest says ", want,
                  ". Resume from an earlier checkpoint.");
  }
  checkpoint::SafetensorsFile weights((dir / "model.safetensors").string());
  checkpoint::SafetensorsFile moments((dir / "optimizer.safetensors").string());

  // Check everything before touching the model.
  const auto params = model.parameters();
  std::ostringstream mismatch;
  for (nn::Parameter* p : params) {
    if (!weights.contains(p->name))
      mismatch << " missing '" << p->name << "';";
    else if (weights.shape(p->name) != p->shape || weights.dtype(p->name) != DType::F32)
      mismatch << " '" << p->name << "' is " << shape_str(weights.shape(p->name)) << " there, " << shape_str(p->shape)
               << " here;";
  }
  if (weights.names().size() != params.size())
    mismatch << " it holds " << weights.names().size() << " tensors, this model has " << params.size() << ";";
  if (!mismatch.str().empty())
    TANDEM_FAIL("checkpoint '", folder, "' is of another model:", mismatch.str(),
                " resume with the config it was saved with (its manifest.json holds it)");
  const auto& segs = opt.segments();
  for (const auto& seg : segs)
    for (const char* sfx : {".exp_avg", ".exp_avg_sq"})
      if (!moments.contains(seg.name + sfx) || moments.nbytes(seg.name + sfx) != seg.value.nbytes())
        TANDEM_FAIL("checkpoint '", folder, "' has no optimizer state for '", seg.name, sfx, "' of the right size");

  for (nn::Parameter* p : params) std::memcpy(p->value.raw(), weights.data(p->name), p->value.nbytes());
  for (size_t i = 0; i < segs.size(); ++i) {
    std::memcpy(opt.exp_avg()[i].raw(), moments.data(segs[i].name + ".exp_avg"), segs[i].value.nbytes());
    std::memcpy(opt.exp_avg_sq()[i].raw(), moments.data(segs[i].name + ".exp_avg_sq"), segs[i].value.nbytes());
  }
  opt.set_step_count(manifest.at("optimizer_step").get<int64_t>());
  return manifest.at("step").get<int64_t>();
}

}  // namespace tandem::train
