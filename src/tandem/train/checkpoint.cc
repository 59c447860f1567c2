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
#include "tandem/checkpoint/safetensors.h"
#include "tandem/interchange/weight_source.h"

namespace tandem::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "tandem-checkpoint";
constexpr int kVersion = 2;

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

// [outer, split, inner, part, parts], then the unequal fused blocks when there are any.
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

config::Json read_manifest(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  if (!in) TANDEM_FAIL("checkpoint '", dir.string(), "' has no readable manifest.json");
  config::Json m;
  try {
    m = config::Json::parse(in);
  } catch (const std::exception& e) {
    TANDEM_FAIL("checkpoint manifest '", (dir / "manifest.json").string(), "' is not valid JSON: ", e.what());
  }
  if (m.value("format", "") != kFormat || m.value("version", 0) != kVersion)
    TANDEM_FAIL("'", dir.string(), "' is not a Tandem checkpoint of format version ", kVersion);
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
  explicit CheckpointReader(const fs::path& dir) : dir_(dir), manifest_(read_manifest(dir)) {
    for (const auto& [file, info] : manifest_.at("files").items()) {
      const fs::path path = dir / file;
      if (!fs::exists(path)) TANDEM_FAIL("checkpoint '", dir.string(), "' is missing ", file);
      const uint32_t want = info.at("crc32").get<uint32_t>();
      const uint32_t got = checkpoint::crc32_file(path.string());
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
  const fs::path final_dir = fs::path(root) / step_folder_name(step);
  const fs::path tmp_dir = fs::path(root) / (step_folder_name(step) + ".tmp");
  if (groups.rank == 0) {
    fs::remove_all(tmp_dir);
    fs::create_directories(tmp_dir);
  }
  groups.world->barrier();

  // This rank's pieces: what it updates, once per logical element (dp rank 0 at ZeRO stage 0, where every
  // replica holds everything; tp slot 0 for parameters every slot holds whole).
  const bool replicated_state = engine.store().zero_stage() == 0;
  std::vector<std::vector<float>> host;  // keeps the bytes alive until written
  std::vector<checkpoint::TensorEntry> entries;
  config::Json pieces = config::Json::object();
  engine.store().visit_owned(
      [&](const nn::Parameter& p, int64_t offset, const Tensor& value, const Tensor& m, const Tensor& v) {
        // Once per logical element: not a tied replica (its original is saved where it lives).
        if (p.replica || (replicated_state && groups.coord.dp != 0) || (!p.shard.sharded() && groups.coord.tp != 0))
          return;
        const std::string key = p.name + "@" + std::to_string(p.shard.part) + ":" + std::to_string(offset);
        pieces[key] = {{"name", p.name},
                       {"shape", p.global_shape},
                       {"shard", shard_json(p.shard)},
                       {"offset", offset},
                       {"count", value.numel()}};
        for (const auto& [what, t] :
             {std::pair<const char*, const Tensor*>{"value", &value}, {"exp_avg", &m}, {"exp_avg_sq", &v}}) {
          host.push_back(t->to_host_floats());
          entries.push_back({key + "/" + what, DType::F32, {t->numel()}, host.back().data()});
        }
      });
  const fs::path mine = tmp_dir / rank_file_name(groups.rank);
  checkpoint::write_safetensors(mine.string(), entries, {{"pieces", pieces.dump()}});
  const uint32_t crc = checkpoint::crc32_file(mine.string());
  const auto bytes = static_cast<double>(fs::file_size(mine));

  config::Json files = config::Json::object();
  for (int r = 0; r < groups.layout.world(); ++r) {
    const double c = groups.world->all_reduce_scalar(r == groups.rank ? static_cast<double>(crc) : 0.0);
    const double b = groups.world->all_reduce_scalar(r == groups.rank ? bytes : 0.0);
    files[rank_file_name(r)] = {{"crc32", static_cast<uint32_t>(c)}, {"bytes", static_cast<uint64_t>(b)}};
  }
  if (groups.rank == 0) {
    const auto& l = groups.layout;
    config::Json manifest = {
        {"format", kFormat},
        {"version", kVersion},
        {"step", step},
        {"optimizer_step", engine.store().optimizer().step_count()},
        {"data_position", {{"step", step}}},
        {"rng", {{"seed", cfg.value("seed", 0)}, {"generator", "philox4x32-10"}}},
        {"loss_scale",
         {{"scale", engine.loss_scale()},
          {"good_steps", engine.loss_scale_good_steps()},
          {"overflows_left", engine.loss_scale_overflows_left()}}},
        {"saved_by",
         {{"virtual_gpus", l.dp}, {"pipeline", l.pp}, {"tensor", l.tp}, {"zero_stage", engine.store().zero_stage()}}},
        {"num_parameters", engine.model().num_parameters()},
        {"files", files},
        {"config", cfg}};
    checkpoint::write_file_atomic((tmp_dir / "manifest.json").string(), manifest.dump(2) + "\n");
    fs::remove_all(final_dir);
    fs::rename(tmp_dir, final_dir);
    checkpoint::fsync_directory(root);
    auto all = complete_checkpoint_paths(root);
    for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < all.size(); ++i) fs::remove_all(all[i]);
  }
  groups.world->barrier();
  return final_dir.string();
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
  TANDEM_FAIL("cannot resume from '", path, "': it holds no complete checkpoint (a folder step_<k> with a ",
              "manifest.json, directly or under checkpoints/)");
}

int64_t load_checkpoint(const std::string& folder, parallel::Engine& engine, layout::Groups& groups) {
  const CheckpointReader reader{fs::path(folder)};
  // Check everything before touching the model.
  std::ostringstream mismatch;
  const auto params = engine.model().parameters();
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
      for (const auto& [offset, value, m, v] : pieces) {
        const Tensor& dst = std::string(what) == "value" ? value : std::string(what) == "exp_avg" ? m : v;
        std::vector<float> local(static_cast<size_t>(dst.numel()));
        for (size_t i = 0; i < local.size(); ++i)
          local[i] = full[static_cast<size_t>(p.shard.global_index(offset + static_cast<int64_t>(i)))];
        dst.copy_from_host(local.data());
      }
    }
  }
  engine.store().values_changed();
  engine.store().optimizer().set_step_count(reader.manifest().at("optimizer_step").get<int64_t>());
  const auto& ls = reader.manifest().at("loss_scale");
  engine.set_loss_scale_state(ls.at("scale").get<double>(), ls.at("good_steps").get<int>(),
                              ls.at("overflows_left").get<int>());
  groups.world->barrier();
  return reader.manifest().at("step").get<int64_t>();
}

void load_initial_weights(const std::string& path, const config::ModelConfig& model, parallel::Engine& engine) {
  const std::unique_ptr<interchange::WeightSource> source = interchange::open_weights(path, model);
  const bool hf = interchange::is_hf_folder(path);
  std::ostringstream problems;
  std::set<std::string> wanted;
  for (const nn::Parameter* p : engine.model().parameters()) {
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
  engine.store().visit_owned(
      [&](const nn::Parameter& p, int64_t offset, const Tensor& value, const Tensor&, const Tensor&) {
        std::vector<float> local(static_cast<size_t>(value.numel()));
        const auto n = static_cast<int64_t>(local.size());
        for (int64_t i = 0; i < n;) {
          const int64_t first = p.shard.global_index(offset + i);
          int64_t len = 1;
          while (i + len < n && p.shard.global_index(offset + i + len) == first + len) ++len;
          source->read(p.name, first, first + len, local.data() + i);
          for (int64_t k = 0; k < len; ++k)
            if (!std::isfinite(local[static_cast<size_t>(i + k)]))
              TANDEM_FAIL("cannot initialise from '", path, "': tensor '", p.name, "' holds ",
                          local[static_cast<size_t>(i + k)], " at element ", first + k,
                          ": the file's weights are not finite (was it saved from a run that diverged?)");
          i += len;
        }
        value.copy_from_host(local.data());
      });
  engine.store().values_changed();
}

std::map<std::string, LogicalTensor> read_checkpoint_weights(const std::string& folder) {
  const CheckpointReader reader{fs::path(folder)};
  std::map<std::string, LogicalTensor> out;
  for (const auto& [name, shape] : reader.shapes()) out[name] = {shape, reader.assemble(name, "value")};
  return out;
}

}  // namespace tandem::train
