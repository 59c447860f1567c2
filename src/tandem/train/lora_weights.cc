// PEFT adapters into the engine, and a LoRA run's base out of its config (lora_weights.h).
#include "tandem/train/lora_weights.h"

#include <cmath>
#include <memory>
#include <set>
#include <sstream>

#include "tandem/interchange/peft.h"
#include "tandem/interchange/weight_source.h"
#include "tandem/train/model_factory.h"

namespace tandem::train {

void load_peft_adapter(const std::string& dir, const spec::ModelConfig& model, const spec::LoraConfig& lora,
                       parallel::Engine& engine) {
  const std::unique_ptr<interchange::WeightSource> source = interchange::open_peft_adapter(dir, model, lora);
  std::ostringstream problems;
  std::set<std::string> wanted;
  for (const nn::Parameter* p : engine.model().parameters()) {
    if (!p->adapter) continue;
    wanted.insert(p->name);
    problems << source->check(p->name, p->global_shape);
  }
  const std::vector<std::string> extra = source->unused(wanted);
  if (!extra.empty()) {
    problems << " " << extra.size() << " tensor" << (extra.size() > 1 ? "s" : "") << " no adapter of the targets is (";
    for (size_t i = 0; i < std::min<size_t>(extra.size(), 5); ++i)
      problems << (i ? ", " : "") << "'" << extra[i] << "'";
    problems << (extra.size() > 5 ? ", ..." : "") << ");";
  }
  if (!problems.str().empty())
    TANDEM_FAIL("cannot start from the adapter '", source->path(), "':", problems.str(),
                " lora.from_pretrained must hold exactly the adapters of its adapter_config.json's target_modules on "
                "this model, as PEFT's save_pretrained writes them (docs/huggingface.md)");
  engine.store().visit_owned(
      [&](const nn::Parameter& p, int64_t offset, const Tensor& value, const Tensor&, const Tensor&) {
        if (!p.adapter) return;
        std::vector<float> local(static_cast<size_t>(value.numel()));
        const auto n = static_cast<int64_t>(local.size());
        // A and B are split by whole rows or columns: runs of consecutive logical elements.
        for (int64_t i = 0; i < n;) {
          const int64_t first = p.shard.global_index(offset + i);
          int64_t len = 1;
          while (i + len < n && p.shard.global_index(offset + i + len) == first + len) ++len;
          source->read(p.name, first, first + len, local.data() + i);
          i += len;
        }
        for (size_t k = 0; k < local.size(); ++k)
          if (!std::isfinite(local[k]))
            TANDEM_FAIL("cannot start from the adapter '", source->path(), "': '", p.name, "' holds ", local[k],
                        ": its weights are not finite");
        value.copy_from_host(local.data());
      });
  engine.store().values_changed();
}

std::map<std::string, LogicalTensor> lora_base_weights(const config::Json& saved) {
  const spec::ModelConfig model = config::model_config(saved.at("model"));
  const spec::LoraConfig lora = config::lora_config(saved);
  const nn::Model whole = build_model(model, nn::TpSlot{}, lora);  // unmaterialised: names, shapes, initialisation
  const std::string from = saved.at("model").value("from_pretrained", "");
  std::unique_ptr<interchange::WeightSource> source;
  if (!from.empty()) source = interchange::open_weights(from, model);
  std::map<std::string, LogicalTensor> out;
  for (const nn::Parameter* p : whole.parameters()) {
    if (p->adapter) continue;
    const int64_t n = shape_numel(p->global_shape);
    if (!source) {
      out[p->name] = {p->global_shape, nn::initial_values(*p, saved.value("seed", uint64_t{0}), 0, n)};
      continue;
    }
    const std::string problem = source->check(p->name, p->global_shape);
    if (!problem.empty())
      TANDEM_FAIL("the base model '", from, "' the LoRA run was trained on no longer fits its config:", problem,
                  " restore the folder model.from_pretrained names");
    std::vector<float> v(static_cast<size_t>(n));
    source->read(p->name, 0, n, v.data());
    out[p->name] = {p->global_shape, std::move(v)};
  }
  return out;
}

}  // namespace tandem::train
