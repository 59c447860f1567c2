// Makes the engine's micro-batches: a dataset's samples, made in host memory, with each position's document when
// the data asks for it, and copied to the device the engine runs on (a CPU device takes them where they are made).
#pragma once

#include <cstdint>

#include "tandem/data/dataset.h"
#include "tandem/device/cpu_device.h"
#include "tandem/parallel/pipeline/executor.h"
#include "tandem/spec/train.h"

namespace tandem::train {

class BatchMaker {
 public:
  // `device`: the one the engine runs on; `host`: where batches are made before they go to it when it is a GPU.
  BatchMaker(device::AccountedDevice& device, device::CpuDevice& host);

  // Samples [first, first + count) of `dataset`'s step `step`; `config` is the data's settings (its document mask).
  parallel::pipeline::MicroBatch make(const data::Dataset& dataset, const spec::DataConfig& config, int64_t step,
                                      int64_t first, int64_t count) const;

 private:
  device::AccountedDevice& device_;
  device::CpuDevice& host_;
};

}  // namespace tandem::train
