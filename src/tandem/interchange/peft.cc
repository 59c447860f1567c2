// PEFT adapter files (peft.h): the reader, the writer and the merge.
#include "tandem/interchange/peft.h"

#include <algorithm>
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

// One adapter tensor: Tandem's name, PEFT's, its logical shape in Tandem. A module's A (r, in) and B (out, r) are the
// same in both. An expert parameter's (peft_names.h): A (E, r, in) is PEFT's (E r, in) element for element; B
// (E, out, r) is PEFT's (out, r E) with its columns interleaved, B_e[o, k] = lora_B[o, k E + e].
struct AdapterTensor {
  std::string tandem, peft;
  Shape shape;
  bool experts = false;  // an expert parameter's A or B
  bool b = false;        // a B

  // PEFT's shape for a Tandem tensor of `s`, this tensor's kind.
  Shape peft_shape(const Shape& s) const {
    if (!experts || s.size() != 3) return s;
    return b ? Shape{s[1], s[2] * s[0]} : Shape{s[0] * s[1], s[2]};
  }
  // Where Tandem's element i is in PEFT's tensor.
  int64_t peft_index(int64_t i) const {
    if (!experts || !b) return i;
    const int64_t E = shape[0], out = shape[1], r = shape[2], e = i / (out * r), o = i / r % out, k = i % r;
    return o * r * E + k * E + e;
  }
};

std::vector<AdapterTensor> adapter_tensors(const spec::ModelConfig& model, const spec::LoraConfig& lora) {
  std::vector<AdapterTensor> out;
  const int64_t r = lora.r;
  for (const LoraSite& s : lora_targets(model, lora)) {
    const bool e = s.experts > 0;
    out.push_back({tandem_lora_a_name(s.site), peft_lora_a_name(s.peft), e ? Shape{s.experts, r, s.in} : Shape{r, s.in},
                   e, false});
    out.push_back({tandem_lora_b_name(s.site), peft_lora_b_name(s.peft),
                   e ? Shape{s.experts, s.out, r} : Shape{s.out, r}, e, true});
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
    if (it == by_tandem_.end())
      return " Tandem's '" + name + "' is no adapter of lora.target_modules or target_parameters;";
    const std::string& peft = it->second.peft;
    if (!file_.contains(peft)) return " missing '" + peft + "' (for '" + name + "');";
    const Shape want = it->second.peft_shape(shape);
    if (file_.shape(peft) != want)
      return " '" + peft + "' is " + shape_str(file_.shape(peft)) + ", '" + name + "' needs " + shape_str(want) +
             " (A is (r, in), B is (out, r); an expert parameter's (E r, in) and (out, r E));";
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
    const AdapterTensor& t = by_tandem_.at(name);
    const Elements e(file_, t.peft);
    for (int64_t i = begin; i < end; ++i) out[i - begin] = e[t.peft_index(i)];
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
  std::vector<std::vector<float>> reordered;  // the interleaved Bs in PEFT's layout
  reordered.reserve(tensors.size());
  for (const AdapterTensor& t : tensors) {
    const float* data = adapter(adapters, t.tandem, t.shape).data;
    if (t.experts && t.b) {
      std::vector<float>& v = reordered.emplace_back(static_cast<size_t>(shape_numel(t.shape)));
      for (int64_t i = 0; i < shape_numel(t.shape); ++i) v[static_cast<size_t>(t.peft_index(i))] = data[i];
      data = v.data();
    }
    entries.push_back({t.peft, DType::F32, t.peft_shape(t.shape), data});
  }
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
      {"target_parameters", lora.target_parameters.empty() ? config::Json() : config::Json(lora.target_parameters)},
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
    // A module's adapter is one expert's: W (out, in) at its rows += s B A; an expert parameter's each W_e += s B_e
    // A_e.
    const int64_t experts = std::max<int64_t>(site.experts, 1);
    const Shape a_shape = site.experts ? Shape{experts, r, site.in} : Shape{r, site.in};
    const Shape b_shape = site.experts ? Shape{experts, site.out, r} : Shape{site.out, r};
    const float* a_all = adapter(adapters, tandem_lora_a_name(site.site), a_shape).data;  // (E, r, in)
    const float* b_all = adapter(adapters, tandem_lora_b_name(site.site), b_shape).data;  // (E, out, r)
    const auto w = weights.find(site.weight);
    TANDEM_CHECK(w != weights.end(), "merge: no base weight '", site.weight, "'");
    TANDEM_CHECK(static_cast<int64_t>(w->second.size()) >= (site.row + experts * site.out) * site.in, "merge: '",
                 site.weight, "' is smaller than its adapters' rows");
    for (int64_t e = 0; e < experts; ++e) {
      const float* a = a_all + e * r * site.in;                              // (r, in)
      const float* b = b_all + e * site.out * r;                             // (out, r)
      float* rows = w->second.data() + (site.row + e * site.out) * site.in;  // (out, in) of the weight's rows
      for (int64_t o = 0; o < site.out; ++o)
        for (int64_t i = 0; i < site.in; ++i) {
          double acc = 0;
          for (int64_t k = 0; k < r; ++k) acc += static_cast<double>(b[o * r + k]) * a[k * site.in + i];
          rows[o * site.in + i] = static_cast<float>(rows[o * site.in + i] + s * acc);
        }
    }
  }
}

}  // namespace tandem::interchange
