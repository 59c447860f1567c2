// `tandem export` of LoRA checkpoints (lora_export.h): the adapters in PEFT's files, or merged into the base.
#include "lora_export.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <vector>

#include "tandem/checkpoint/safetensors.h"
#include "tandem/interchange/hf_export.h"
#include "tandem/interchange/peft.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/lora_weights.h"

namespace tandem::app {
namespace {

namespace fs = std::filesystem;

// Removes a previous export's files of this kind from `dir`, so they cannot mix with this one's.
void remove_previous(const std::string& dir, bool adapter) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    const bool ours =
        adapter ? n.rfind("adapter_", 0) == 0
                : n == "config.json" || (n.rfind("model", 0) == 0 && n.find(".safetensors") != std::string::npos);
    if (ours) fs::remove(e.path());
  }
}

}  // namespace

int export_lora(const LoraExport& e, const config::Json& saved) {
  const spec::ModelConfig model = config::model_config(saved.at("model"));
  const spec::LoraConfig lora = config::lora_config(saved);
  const auto adapters = train::read_checkpoint_weights(e.checkpoint);
  std::map<std::string, interchange::HostWeights> host;
  for (const auto& [name, t] : adapters) host[name] = {t.shape, t.values.data()};
  if (e.format == "peft") {
    fs::create_directories(e.to);
    remove_previous(e.to, true);
    const int n =
        interchange::write_peft_folder(e.to, model, lora, saved.at("model").value("from_pretrained", ""), host);
    std::printf("wrote a PEFT LoRA adapter (r %lld, %d tensors, fp32) from %s to %s\n", static_cast<long long>(lora.r),
                n, e.checkpoint.c_str(), e.to.c_str());
    return 0;
  }
  // The base as the run had it, the adapters merged into it in fp32.
  std::map<std::string, train::LogicalTensor> base = train::lora_base_weights(saved);
  std::map<std::string, std::vector<float>> weights;
  for (auto& [name, t] : base) weights[name] = std::move(t.values);
  interchange::merge_lora(model, lora, host, weights);
  std::map<std::string, interchange::HostWeights> merged;
  for (const auto& [name, v] : weights) merged[name] = {base.at(name).shape, v.data()};
  if (e.format == "safetensors") {
    std::vector<checkpoint::TensorEntry> entries;
    for (const auto& [name, w] : merged) entries.push_back({name, DType::F32, w.shape, w.data});
    checkpoint::write_safetensors(e.to, entries, {{"format", "pt"}, {"source", e.checkpoint}});
    std::printf("wrote %zu tensors of the merged model from %s to %s\n", entries.size(), e.checkpoint.c_str(),
                e.to.c_str());
    return 0;
  }
  fs::create_directories(e.to);
  remove_previous(e.to, false);
  interchange::HfExportOptions o;
  o.bf16 = e.bf16;
  o.max_shard_bytes = e.max_shard_bytes;
  const int files = interchange::write_hf_folder(e.to, model, merged, o);
  std::printf("wrote a Hugging Face %s model with its LoRA adapters merged (%s, %d weight file%s) from %s to %s\n",
              spec::model_type(model).c_str(), e.bf16 ? "bf16" : "fp32", files, files > 1 ? "s" : "",
              e.checkpoint.c_str(), e.to.c_str());
  return 0;
}

}  // namespace tandem::app
