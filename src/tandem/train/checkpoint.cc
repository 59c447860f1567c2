#include "tandem/train/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "tandem/checkpoint/atomic_file.h"
#include "tandem/checkpoint/progress.h"
#include "tandem/checkpoint/safetensors.h"
#include "tandem/interchange/weight_source.h"
#include "tandem/train/checkpoint_format.h"
#include "tandem/train/checkpoint_writer.h"
#include "tandem/train/run_lock.h"

namespace tandem::train {

namespace fs = std::filesystem;
using format::complete_checkpoint_paths;
using format::shard_from_json;

namespace {

config::Json read_manifest(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  if (!in) TANDEM_FAIL("checkpoint '", dir.string(), "' has no readable manifest.json");
  config::Json m;
  try {
    m = config::Json::parse(in);
  } catch (const std::exception& e) {
    TANDEM_FAIL("checkpoint manifest '", (dir / "manifest.json").string(), "' is not valid JSON: ", e.what());
  }
  if (m.value("format", "") != format::kFormat || m.value("version", 0) != format::kVersion)
    TANDEM_FAIL("'", dir.string(), "' is not a Tandem checkpoint of format version ", format::kVersion);
  return m;
}

// One saved piece: elements [offset, offset + count) of the flattened tp slot `shard` of a parameter.
struct Piece {
  const checkpoint::SafetensorsFile* file;
  std::string key;  // tensor name prefix in the file
  nn::Shard shard;
  int64_t offset, count;
};

// Every rank file of a checkpoint, checksummed, with an index of its pieces by parameter name.
class CheckpointReader {
 public:
  // `progress`, when given, is told the bytes checksummed (every file is read once whole).
  CheckpointReader(const fs::path& dir, checkpoint::Progress* progress) : dir_(dir), manifest_(read_manifest(dir)) {
    for (const auto& [file, info] : manifest_.at("files").items()) {
      const fs::path path = dir / file;
      if (!fs::exists(path)) TANDEM_FAIL("checkpoint '", dir.string(), "' is missing ", file);
      const uint32_t want = info.at("crc32").get<uint32_t>();
      const uint32_t got = checkpoint::crc32_file(path.string(), progress);
      if (want != got)
        TANDEM_FAIL("checkpoint file '", path.string(), "' is corrupted: crc32 ", got, " but the manifest says ", want,
                    ". Resume from an earlier checkpoint (the newest ", "complete ones are kept).");
      files_.push_back(std::make_unique<checkpoint::SafetensorsFile>(path.string()));
      const auto& meta = files_.back()->metadata();
      const auto it = meta.find("pieces");
      if (it == meta.end()) TANDEM_FAIL("checkpoint file '", path.string(), "' has no piece table");
      const config::Json table = config::Json::parse(it->second);  // outlives the loop over its items
      for (const auto& [key, p] : table.items()) {
        const std::string name = p.at("name").get<std::string>();
        pieces_[name].push_back({files_.back().get(), key, shard_from_json(p.at("shard")),
                                 p.at("offset").get<int64_t>(), p.at("count").get<int64_t>()});
        shapes_[name] = p.at("shape").get<Shape>();
      }
    }
  }

  const config::Json& manifest() const { return manifest_; }
  const std::map<std::string, Shape>& shapes() const { return shapes_; }
  // The bytes of every rank file, as the manifest gives them.
  uint64_t file_bytes() const {
    uint64_t total = 0;
    for (const auto& [file, info] : manifest_.at("files").items()) total += info.at("bytes").get<uint64_t>();
    return total;
  }

  // The logical tensor of `name` for one of "value", "exp_avg", "exp_avg_sq"; throws if some element was
  // never saved.
  std::vector<float> assemble(const std::string& name, const std::string& what) const {
    const Shape& shape = shapes_.at(name);
    std::vector<float> out(static_cast<size_t>(shape_numel(shape)), 0.0f);
    std::vector<char> seen(out.size(), 0);
    for (const Piece& p : pieces_.at(name)) {
      const std::string key = p.key + "/" + what;
      TANDEM_CHECK(p.file->nbytes(key) == static_cast<size_t>(p.count) * 4, "piece ", key, " of ", p.file->path());
      const float* src = static_cast<const float*>(p.file->data(key));
      for (int64_t i = 0; i < p.count; ++i) {
        const auto g = static_cast<size_t>(p.shard.global_index(p.offset + i));
        out[g] = src[i];
        seen[g] = 1;
      }
    }
    if (std::find(seen.begin(), seen.end(), 0) != seen.end())
      TANDEM_FAIL("checkpoint '", dir_.string(), "' does not hold every element of '", name, "'");
    return out;
  }

 private:
  fs::path dir_;
  config::Json manifest_;
  std::vector<std::unique_ptr<checkpoint::SafetensorsFile>> files_;
  std::map<std::string, std::vector<Piece>> pieces_;
  std::map<std::string, Shape> shapes_;
};

}  // namespace

std::string save_checkpoint(const std::string& root, int64_t step, parallel::Engine& engine, const config::Json& cfg,
                            int keep, layout::Groups& groups) {
  CheckpointWriterOptions o;
  o.root = root;
  o.keep = keep;
  o.async = false;
  o.config = cfg;
  CheckpointWriter writer(engine, groups, o);
  writer.save(step);
  return (fs::path(root) / format::step_folder_name(step)).string();
}

std::vector<std::string> complete_checkpoints(const std::string& root) {
  std::vector<std::string> out;
  for (const fs::path& p : complete_checkpoint_paths(root)) out.push_back(p.string());
  return out;
}

CheckpointSummary read_checkpoint_summary(const std::string& folder) {
  const config::Json m = read_manifest(fs::path(folder));
  return {m.at("step").get<int64_t>(), m.at("config")};
}

std::string find_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (!fs::exists(p)) TANDEM_FAIL("cannot resume from '", path, "': no such file or folder");
  if (fs::exists(p / "manifest.json")) return p.string();
  for (const fs::path& root : {p / "checkpoints", p}) {
    auto all = complete_checkpoint_paths(root);
    if (!all.empty()) return all.back().string();
  }
  // A job that still runs there has not written its first checkpoint yet: its run has not ended.
  if (const std::string who = RunFolderLock::holder(path); !who.empty())
    TANDEM_FAIL("cannot resume from '", path, "': it is in use by a job (", who,
                ") that has not written its first checkpoint yet, so there is nothing to resume. Wait for its first "
                "checkpoint (checkpoint.every sets when) or for that job to end (SIGTERM saves a checkpoint), then "
                "resume");
  if (fs::exists(p / "metrics.jsonl"))
    TANDEM_FAIL("cannot resume from '", path, "': its run ended before its first checkpoint (it holds metrics.jsonl ",
                "but no complete checkpoint under checkpoints/), so there is nothing to resume: start the run again, ",
                "into this folder with --out ", path, " --overwrite");
  TANDEM_FAIL("cannot resume from '", path, "': it holds no complete checkpoint (a folder step_<k> with a ",
              "manifest.json, directly or under checkpoints/)");
}

// The bytes of the rank files a checkpoint's manifest lists, before anything is read (0 when it cannot say).
uint64_t manifest_file_bytes(const fs::path& dir) {
  try {
    uint64_t total = 0;
    const config::Json manifest = read_manifest(dir);  // outlives the loop over its items
    for (const auto& [file, info] : manifest.at("files").items()) total += info.at("bytes").get<uint64_t>();
    return total;
  } catch (const std::exception&) {
    return 0;
  }
}

int64_t load_checkpoint(const std::string& folder, parallel::Engine& engine, layout::Groups& groups,
                        const checkpoint::ProgressOptions& pace) {
  // Every rank checksums every file, then takes its own slices: rank 0 says how the reading goes.
  const uint64_t values_bytes = static_cast<uint64_t>(engine.model().num_parameters()) * 3 * sizeof(float);
  checkpoint::Progress progress("resuming from " + folder + " (checksums, then the state)",
                                manifest_file_bytes(folder) + values_bytes, groups.rank == 0, pace);
  const CheckpointReader reader{fs::path(folder), &progress};
  // Check everything before touching the model. A checkpoint holds the trainable parameters (the adapters alone under
  // LoRA, whose frozen base comes from the pretrained weights again).
  std::ostringstream mismatch;
  std::vector<const nn::Parameter*> params;
  for (const nn::Parameter* p : engine.model().parameters())
    if (p->trainable) params.push_back(p);
  for (const nn::Parameter* p : params) {
    const auto it = reader.shapes().find(p->name);
    if (it == reader.shapes().end())
      mismatch << " missing '" << p->name << "';";
    else if (it->second != p->global_shape)
      mismatch << " '" << p->name << "' is " << shape_str(it->second) << " there, " << shape_str(p->global_shape)
               << " here;";
  }
  if (reader.shapes().size() != params.size())
    mismatch << " it holds " << reader.shapes().size() << " parameters, this model has " << params.size() << ";";
  if (!mismatch.str().empty())
    TANDEM_FAIL("checkpoint '", folder, "' is of another model:", mismatch.str(),
                " resume with the config it was saved with (its manifest.json holds it)");

  // Assemble each parameter once, then copy out every owned piece of it.
  std::map<std::string, std::vector<std::tuple<int64_t, Tensor, Tensor, Tensor>>> wanted;
  std::map<std::string, const nn::Parameter*> param_of;
  engine.store().visit_owned(
      [&](const nn::Parameter& p, int64_t offset, const Tensor& value, const Tensor& m, const Tensor& v) {
        wanted[p.name].emplace_back(offset, value, m, v);
        param_of[p.name] = &p;
      });
  for (const auto& [name, pieces] : wanted) {
    const nn::Parameter& p = *param_of.at(name);
    for (const char* what : {"value", "exp_avg", "exp_avg_sq"}) {
      const std::vector<float> full = reader.assemble(name, what);
      progress.add(full.size() * sizeof(float));
      for (const auto& [offset, value, m, v] : pieces) {
        const Tensor& dst = std::string(what) == "value" ? value : std::string(what) == "exp_avg" ? m : v;
        std::vector<float> local(static_cast<size_t>(dst.numel()));
        for (size_t i = 0; i < local.size(); ++i)
          local[i] = full[static_cast<size_t>(p.shard.global_index(offset + static_cast<int64_t>(i)))];
        dst.copy_from_host(local.data());
      }
    }
  }
  progress.finish();
  engine.store().values_changed();
  engine.store().optimizer().set_step_count(reader.manifest().at("optimizer_step").get<int64_t>());
  const auto& ls = reader.manifest().at("loss_scale");
  engine.set_loss_scale_state(ls.at("scale").get<double>(), ls.at("good_steps").get<int>(),
                              ls.at("overflows_left").get<int>());
  groups.world->barrier();
  return reader.manifest().at("step").get<int64_t>();
}

void load_initial_weights(const std::string& path, const spec::ModelConfig& model, parallel::Engine& engine, bool print,
                          const checkpoint::ProgressOptions& pace) {
  const std::unique_ptr<interchange::WeightSource> source = interchange::open_weights(path, model);
  const bool hf = interchange::is_hf_folder(path);
  std::ostringstream problems;
  std::set<std::string> wanted;  // the base model's parameters: not LoRA adapters, which such files do not hold
  for (const nn::Parameter* p : engine.model().parameters()) {
    if (p->adapter) continue;
    wanted.insert(p->name);
    problems << source->check(p->name, p->global_shape);
  }
  // A tensor the model does not have means the file is of another model (or names differ): loading the rest
  // would train a model the user did not ask for.
  const std::vector<std::string> extra = source->unused(wanted);
  if (!extra.empty()) {
    problems << " " << extra.size() << " tensor" << (extra.size() > 1 ? "s" : "") << " the model does not have (";
    for (size_t i = 0; i < std::min<size_t>(extra.size(), 5); ++i)
      problems << (i ? ", " : "") << "'" << extra[i] << "'";
    problems << (extra.size() > 5 ? ", ..." : "") << ");";
  }
  if (!problems.str().empty())
    TANDEM_FAIL(
        "cannot initialise from '", path, "':", problems.str(),
        hf ? " the folder must hold exactly this model's parameters in Hugging Face's names (docs/huggingface.md)"
           : " the file must hold exactly this model's parameters (tandem export writes such a file)");
  // Each owned piece is read in runs of consecutive logical elements: a shard of a tensor-parallel slot is
  // whole rows or row segments, so the runs are long and nothing but this rank's elements is read.
  const auto read_piece = [&](const nn::Parameter& p, int64_t offset, int64_t n, float* local) {
    for (int64_t i = 0; i < n;) {
      const int64_t first = p.shard.global_index(offset + i);
      int64_t len = 1;
      while (i + len < n && p.shard.global_index(offset + i + len) == first + len) ++len;
      source->read(p.name, first, first + len, local + i);
      for (int64_t k = 0; k < len; ++k)
        if (!std::isfinite(local[i + k]))
          TANDEM_FAIL("cannot initialise from '", path, "': tensor '", p.name, "' holds ", local[i + k], " at element ",
                      first + k, ": the file's weights are not finite (was it saved from a run that diverged?)");
      i += len;
    }
  };
  uint64_t owned = 0;
  engine.store().visit_owned([&](const nn::Parameter&, int64_t, const Tensor& value, const Tensor&, const Tensor&) {
    owned += static_cast<uint64_t>(value.numel()) * sizeof(float);
  });
  checkpoint::Progress progress("loading initial weights from " + path + " (this rank's part, as fp32)", owned, print,
                                pace);
  engine.store().visit_owned(
      [&](const nn::Parameter& p, int64_t offset, const Tensor& value, const Tensor&, const Tensor&) {
        if (p.adapter) return;
        std::vector<float> local(static_cast<size_t>(value.numel()));
        read_piece(p, offset, value.numel(), local.data());
        value.copy_from_host(local.data());
        progress.add(static_cast<uint64_t>(value.numel()) * sizeof(float));
      });
  engine.store().write_frozen(read_piece);  // the frozen base under LoRA
  progress.finish();
  engine.store().values_changed();
}

std::map<std::string, LogicalTensor> read_checkpoint_weights(const std::string& folder, bool print,
                                                             const checkpoint::ProgressOptions& pace) {
  checkpoint::Progress check("reading checkpoint " + folder + ": checksums", manifest_file_bytes(folder), print, pace);
  const CheckpointReader reader{fs::path(folder), &check};
  check.finish();
  uint64_t total = 0;
  for (const auto& [name, shape] : reader.shapes()) total += static_cast<uint64_t>(shape_numel(shape)) * sizeof(float);
  checkpoint::Progress progress("reading checkpoint " + folder + ": weights", total, print, pace);
  std::map<std::string, LogicalTensor> out;
  for (const auto& [name, shape] : reader.shapes()) {
    out[name] = {shape, reader.assemble(name, "value")};
    progress.add(out[name].values.size() * sizeof(float));
  }
  progress.finish();
  return out;
}

uint64_t checkpoint_weight_bytes(const std::string& folder) {
  const config::Json m = read_manifest(fs::path(folder));
  return static_cast<uint64_t>(m.at("num_parameters").get<int64_t>()) * sizeof(float);
}

}  // namespace tandem::train
