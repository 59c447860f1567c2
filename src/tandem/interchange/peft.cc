// PEFT adapter files (peft.h): the reader, the writer and the merge.
#include "tandem/interchange/peft.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "tandem/checkpoint/atomic_file.h"
#include "tandem/checkpoint/safetensors.h"
#include "tandem/config/config.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/interchange/elements.h"
#include "tandem/interchange/peft_names.h"

namespace tandem::interchange {
namespace {

namespace fs = std::filesystem;

// One adapter tensor: Tandem's name, PEFT's, its logical shape.
struct AdapterTensor {
  std::string tandem, peft;
  Shape shape;
};

std::vector<AdapterTensor> adapter_tensors(const spec::ModelConfig& model, const spec::LoraConfig& lora) {
  std::vector<AdapterTensor> out;
  for (const LoraSite& s : lora_targets(model, lora)) {
    out.push_back({tandem_lora_a_name(s.site), peft_lora_a_name(s.module), {lora.r, s.in}});
    out.push_back({tandem_lora_b_name(s.site), peft_lora_b_name(s.module), {s.out, lora.r}});
  }
  return out;
}

class PeftAdapterFile final : public WeightSource {
 public:
  PeftAdapterFile(const std::string& dir, const spec::ModelConfig& model, const spec::LoraConfig& lora)
      : path_((fs::path(dir) / "adapter_model.safetensors").string()), file_(path_) {
    for (AdapterTensor& t : adapter_tensors(model, lora)) by_tandem_[t.tandem] = std::move(t);
  }
  const std::string& path() const override { return path_; }

  std::string check(const std::string& name, const Shape& shape) const override {
    const auto it = by_tandem_.find(name);
    if (it == by_tandem_.end()) return " Tandem's '" + name + "' is no adapter of lora.target_modules;";
    const std::string& peft = it->second.peft;
    if (!file_.contains(peft)) return " missing '" + peft + "' (for '" + name + "');";
    if (file_.shape(peft) != shape)
      return " '" + peft + "' is " + shape_str(file_.shape(peft)) + ", '" + name + "' needs " + shape_str(shape) +
             " (A is (r, in), B is (out, r));";
    const DType d = file_.dtype(peft);
    if (d != DType::F32 && d != DType::BF16 && d != DType::F16)
      return " '" + peft + "' is " + dtype_name(d) + ", not F32, BF16 or F16;";
    return "";
  }

  std::vector<std::string> unused(const std::set<std::string>& names) const override {
    std::set<std::string> used;
    for (const auto& [tandem, t] : by_tandem_)
      if (names.count(tandem)) used.insert(t.peft);
    std::vector<std::string> out;
    for (const std::string& n : file_.names())
      if (!used.count(n)) out.push_back(n);
    return out;
  }

  void read(const std::string& name, int64_t begin, int64_t end, float* out) const override {
    const Elements e(file_, by_tandem_.at(name).peft);
    for (int64_t i = begin; i < end; ++i) out[i - begin] = e[i];
  }

 private:
  std::string path_;
  checkpoint::SafetensorsFile file_;
  std::map<std::string, AdapterTensor> by_tandem_;
};

const HostWeights& adapter(const std::map<std::string, HostWeights>& adapters, const std::string& name,
                           const Shape& shape) {
  const auto it = adapters.find(name);
  if (it == adapters.end()) TANDEM_FAIL("the checkpoint has no LoRA adapter '", name, "'");
  if (it->second.shape != shape)
    TANDEM_FAIL("the checkpoint's '", name, "' is ", shape_str(it->second.shape), ", its config says ",
                shape_str(shape));
  return it->second;
}

}  // namespace

std::unique_ptr<WeightSource> open_peft_adapter(const std::string& dir, const spec::ModelConfig& model,
                                                const spec::LoraConfig& lora) {
  return std::make_unique<PeftAdapterFile>(dir, model, lora);
}

int write_peft_folder(const std::string& dir, const spec::ModelConfig& model, const spec::LoraConfig& lora,
                      const std::string& base_model, const std::map<std::string, HostWeights>& adapters) {
  const std::vector<AdapterTensor> tensors = adapter_tensors(model, lora);
  std::vector<checkpoint::TensorEntry> entries;
  for (const AdapterTensor& t : tensors)
    entries.push_back({t.peft, DType::F32, t.shape, adapter(adapters, t.tandem, t.shape).data});
  checkpoint::write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), entries, {{"format", "pt"}});

  config::Json targets;
  if (!lora.target_regex.empty()) {
    targets = lora.target_regex;
  } else if (lora.target_modules.size() == 1 && lora.target_modules[0] == "all-linear") {
    targets = config::Json::array();
    for (const LoraSite& s : lora_targets(model, lora)) targets.push_back(s.module);
  } else {
    targets = lora.target_modules;
  }
  const double alpha = lora.lora_alpha;
  config::Json cfg = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base_model.empty() ? config::Json() : config::Json(base_model)},
      {"r", lora.r},
      {"lora_alpha", alpha == std::floor(alpha) ? config::Json(static_cast<int64_t>(alpha)) : config::Json(alpha)},
      {"lora_dropout", lora.lora_dropout},
      {"target_modules", targets},
      {"use_rslora", lora.use_rslora},
      {"bias", "none"},
      // GPT-2's projections are Conv1D, which PEFT adapts with fan_in_fan_out (A and B keep their shapes).
      {"fan_in_fan_out", std::holds_alternative<spec::GptConfig>(model)},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"modules_to_save", nullptr},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr},
      {"rank_pattern", config::Json::object()},
      {"alpha_pattern", config::Json::object()},
      {"use_dora", false},
      {"lora_bias", false},
      {"revision", nullptr}};
  checkpoint::write_file_atomic((fs::path(dir) / "adapter_config.json").string(), cfg.dump(2) + "\n");
  return static_cast<int>(entries.size());
}

void merge_lora(const spec::ModelConfig& model, const spec::LoraConfig& lora,
                const std::map<std::string, HostWeights>& adapters,
                std::map<std::string, std::vector<float>>& weights) {
  const double s = lora.scaling();
  const int64_t r = lora.r;
  for (const LoraSite& site : lora_targets(model, lora)) {
    const float* a = adapter(adapters, tandem_lora_a_name(site.site), {r, site.in}).data;   // (r, in)
    const float* b = adapter(adapters, tandem_lora_b_name(site.site), {site.out, r}).data;  // (out, r)
    const auto w = weights.find(site.weight);
    TANDEM_CHECK(w != weights.end(), "merge: no base weight '", site.weight, "'");
    float* rows = w->second.data() + site.row * site.in;  // (out, in) of the weight's rows
    TANDEM_CHECK(static_cast<int64_t>(w->second.size()) >= (site.row + site.out) * site.in, "merge: '", site.weight,
                 "' is smaller than its adapters' rows");
    for (int64_t o = 0; o < site.out; ++o)
      for (int64_t i = 0; i < site.in; ++i) {
        double acc = 0;
        for (int64_t k = 0; k < r; ++k) acc += static_cast<double>(b[o * r + k]) * a[k * site.in + i];
        rows[o * site.in + i] = static_cast<float>(rows[o * site.in + i] + s * acc);
      }
  }
}

}  // namespace tandem::interchange
