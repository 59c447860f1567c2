// The engine's micro-batches from a dataset, on the engine's device (batch_maker.h).
#include "tandem/train/batch_maker.h"

namespace tandem::train {

BatchMaker::BatchMaker(device::AccountedDevice& device, device::CpuDevice& host) : device_(device), host_(host) {}

parallel::pipeline::MicroBatch BatchMaker::make(const data::Dataset& dataset, const spec::DataConfig& config,
                                                int64_t step, int64_t first, int64_t count) const {
  Device& host = device_.kind() == DeviceKind::Cpu ? static_cast<Device&>(device_) : host_;
  data::Batch batch = dataset.batch(step, first, count, host);
  const Tensor docs = config.document_mask ? data::document_ids(batch.inputs, config.eos_token_id, host) : Tensor();
  if (device_.kind() == DeviceKind::Cpu)
    return parallel::pipeline::MicroBatch{batch.inputs, batch.targets, docs, {}, {}};
  const auto on_device = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return Tensor();
    Tensor d = Tensor::empty(t.shape(), t.dtype(), device_, name);
    d.copy_from(t);
    return d;
  };
  return parallel::pipeline::MicroBatch{on_device(batch.inputs, "batch inputs"),
                                        on_device(batch.targets, "batch targets"),
                                        on_device(docs, "batch documents"),
                                        {},
                                        {}};
}

}  // namespace tandem::train
