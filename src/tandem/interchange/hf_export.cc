// The Hugging Face exporter (hf_export.h): the name map of hf_names.h applied backwards.
#include "tandem/interchange/hf_export.h"

#include <cstdio>
#include <filesystem>

#include "tandem/checkpoint/atomic_file.h"
#include "tandem/checkpoint/safetensors.h"
#include "tandem/config/hf_config.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/interchange/hf_names.h"

namespace tandem::interchange {
namespace {

struct HfTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;
  std::vector<uint16_t> half;  // bf16 copy when asked
};

std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k, n);
  return buf;
}

}  // namespace

int write_hf_folder(const std::string& dir, const spec::ModelConfig& model,
                    const std::map<std::string, HostWeights>& weights, const HfExportOptions& options) {
  namespace fs = std::filesystem;
  const std::vector<HfMapping> maps = hf_name_map(model);
  if (maps.size() != weights.size())
    TANDEM_FAIL("cannot export: the checkpoint holds ", weights.size(), " parameters, its model has ", maps.size());
  std::vector<HfTensor> tensors;
  for (const HfMapping& m : maps) {
    const auto it = weights.find(m.name);
    if (it == weights.end()) TANDEM_FAIL("cannot export: the checkpoint has no '", m.name, "'");
    if (it->second.shape != m.shape)
      TANDEM_FAIL("cannot export: '", m.name, "' is ", shape_str(it->second.shape), ", its model says ",
                  shape_str(m.shape));
    const int64_t cols = hf_columns(m.shape);
    for (const HfPiece& p : m.pieces) {
      HfTensor t{p.hf_name, hf_piece_shape(p, m.shape), {}, {}};
      t.values.resize(static_cast<size_t>(shape_numel(t.shape)));
      for (int64_t i = p.row * cols; i < (p.row + p.rows) * cols; ++i)
        t.values[static_cast<size_t>(hf_index(p, m.shape, t.shape, i))] = it->second.data[i];
      if (options.bf16) {
        t.half.resize(t.values.size());
        for (size_t i = 0; i < t.values.size(); ++i) t.half[i] = f32_to_bf16(t.values[i]);
        t.values = {};
      }
      tensors.push_back(std::move(t));
    }
  }

  // Shards as transformers cuts them: tensors in order, a new shard when the next would overflow this one.
  const size_t element = options.bf16 ? 2 : 4;
  std::vector<std::vector<const HfTensor*>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const HfTensor& t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(t.shape)) * element;
    if (!shards.back().empty() && in_shard + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&t);
    in_shard += bytes;
    total += bytes;
  }

  const fs::path out(dir);
  config::Json weight_map = config::Json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = shards.size() == 1 ? "model.safetensors" : shard_name(k + 1, shards.size());
    std::vector<checkpoint::TensorEntry> entries;
    for (const HfTensor* t : shards[k]) {
      entries.push_back({t->name, options.bf16 ? DType::BF16 : DType::F32, t->shape,
                         options.bf16 ? static_cast<const void*>(t->half.data()) : t->values.data()});
      weight_map[t->name] = file;
    }
    checkpoint::write_safetensors((out / file).string(), entries, {{"format", "pt"}}, options.progress);
  }
  if (shards.size() > 1) {
    const config::Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    checkpoint::write_file_atomic((out / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  }
  const config::Json hf = config::hf_config_from_model(model, options.bf16 ? "bfloat16" : "float32");
  checkpoint::write_file_atomic((out / "config.json").string(), hf.dump(2) + "\n");
  return static_cast<int>(shards.size());
}

}  // namespace tandem::interchange
