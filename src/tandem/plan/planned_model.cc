// planned_model: a config's model as the planner builds, feeds and counts it.
#include "tandem/plan/planned_model.h"

#include "tandem/nn/linear.h"
#include "tandem/train/model_factory.h"

namespace tandem::plan {

Shape PlannedModel::input_shape(int64_t micro) const {
  Shape s{micro};
  s.insert(s.end(), sample_shape.begin(), sample_shape.end());
  return s;
}

PlannedModel planned_model(const spec::ModelConfig& model, const spec::LoraConfig& lora, const spec::Fp8Config& fp8) {
  PlannedModel m;
  m.build = [model, lora, fp8](nn::TpSlot tp) { return train::build_model(model, tp, lora, fp8); };
  const spec::ModelIO io = spec::model_io(model);
  m.type = spec::model_type(model);
  m.rows_per_sample = spec::rows_per_sample(model);
  m.extra_flops_per_row = spec::extra_flops_per_row(model);
  m.offloadable = !lora.enabled;
  if (io.tokens) {
    m.sample_shape = {io.seq_len};
    m.input_dtype = DType::I32;
    m.unit = "tok/s";
  } else {
    m.sample_shape = {io.features};
    m.input_dtype = DType::F32;
  }
  m.validate = [model, lora, fp8, seq_len = io.seq_len](const layout::ParallelPlan& plan, int64_t micro,
                                                        int64_t micro_batches) {
    layout::validate_for_model(plan, model, micro_batches);
    if (micro > 0) nn::check_fp8_context(fp8, micro, seq_len, plan.layout.cp);
    // FP8's products split over tp slots need whole blocks a slot (Linear::use_fp8): one slot's layers built to see.
    if (fp8.enabled && plan.layout.tp > 1) train::build_model(model, nn::TpSlot{0, plan.layout.tp}, lora, fp8);
  };
  return m;
}

}  // namespace tandem::plan
