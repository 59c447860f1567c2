// UnitBuilder: the ParameterStore's units (unit.h), made once when the store is built: which parameters form a unit (a
// layer's trainable ones, its frozen ones, each tied parameter alone), each unit's placement (its optimizer state on
// the device, in host memory or in a swap file, by offload_optimizer's device and ratio; its owned values by
// offload_param), its buffers in those places, its optimizer segments, and its initial values drawn from the seed on
// the device that runs the step (initial_values.cc). What the units do in a step is the store's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/device/accounted_device.h"
#include "tandem/nn/model.h"
#include "tandem/optim/adamw.h"
#include "tandem/parallel/zero/swap_files.h"
#include "tandem/parallel/zero/unit.h"
#include "tandem/parallel/zero/zero_sharding.h"

namespace tandem::parallel {

// offload_optimizer.ratio's rule, in one place for the store and the planner: in a rank's layer order, a unit is
// offloaded once the parameters up to and including it are more than 1 - ratio of the rank's (`held`), so the first
// layers stay on the device (their gradients come last in the backward: their update is the one nothing after it
// hides) and at least `ratio` of the parameters go to the host.
bool ratio_offloads(int64_t seen_through_unit, int64_t held, double ratio);
// The ratio under which that rule keeps exactly the first `kept` (>= 1) of layers holding `layer_params` on the device:
// four digits where they do, or 1 when nothing would be left to offload.
double ratio_keeping_first(const std::vector<int64_t>& layer_params, size_t kept);

// How a store runs what it offloads, chosen by whoever builds it: a training run makes the swap files and updates on
// a thread of its own; the planner's run on a counting device (plan/memory_model.cc) makes no file, only the buffers
// whose bytes it plans, and updates inline, accounting in order; a profiled run updates inline, its op table being
// one thread's (train/trainer.cc).
struct OffloadRun {
  bool swap_files = true;     // nvme: the swap files made (false: their sizes placed, nothing read or written)
  bool update_thread = true;  // offloaded units' updates on the updater's thread (false: at once, in submit)
};

// What the store offloads, and where to.
struct OffloadOptions {
  spec::OffloadConfig optimizer;            // offload_optimizer
  spec::OffloadConfig param;                // offload_param
  device::AccountedDevice* host = nullptr;  // the host memory offloaded state lives in (needed when either is on)
  int micro_batches = 1;                    // per step: each unit's backward runs this many times
  OffloadRun run;
};

// A store's units, as built.
struct Units {
  std::vector<std::unique_ptr<Unit>> all;     // in the rank's layer order
  std::vector<std::vector<int>> of_layer;     // by model layer: indices into `all`; empty for layers without them
  std::vector<optim::Segment> segments;       // the optimizer's, unit by unit
  std::vector<nn::Parameter*> segment_param;  // by segment: its parameter
  std::vector<int64_t> segment_start;         // by segment: where it starts in its unit's owned master
};

class UnitBuilder {
 public:
  struct Setup {
    nn::Model& model;
    ZeroSharding& zero;     // the units' sharding over dp: what this rank owns of each
    ZeroSharding* experts;  // an expert slot's experts' sharding (over edp); null without expert parallelism
    Device& device;         // where the step runs
    Device* host;           // offloaded state's memory; null without offload
    SwapFiles& swap;        // nvme: the regions of swapped state and values, placed here
    DType compute;          // the values' dtype
    uint64_t seed;          // initial values
    const OffloadOptions& offload;
    bool has_tied_group;  // a tied parameter's uses may sit on two pipeline stages
  };
  explicit UnitBuilder(const Setup& setup) : s_(setup) {}

  // The units of `layers` (this rank's, in order), their buffers made and their initial values drawn; a swapped unit's
  // master is drawn by draw_swapped once the swap files are open.
  Units build(const std::vector<size_t>& layers);
  // nvme: each swapped unit's initial master drawn and written to its region of the (open) optimizer's swap file.
  void draw_swapped(const std::vector<std::unique_ptr<Unit>>& units);

 private:
  // The unit of `params` (used by `layer`), its buffers and its optimizer segments; returns its index. `offload`: its
  // optimizer state goes to host memory; `uses`: the layers of this rank that use it (2 for a tied parameter both of
  // whose uses it holds); `zero`: its sharding.
  int add(size_t layer, std::vector<nn::Parameter*> params, std::string label, bool offload, int uses,
          ZeroSharding& zero);
  // A frozen unit's compute-dtype values, initialised from the seed (add's part for frozen parameters).
  void add_frozen_values(Unit& u);
  // dst (elements [first, first + numel) of p's initial values; any float dtype, on the device or in host memory) =
  // those values, drawn on the device.
  void draw_initial(const nn::Parameter& p, const Tensor& dst, int64_t first);
  int index_of_new(size_t layer, std::unique_ptr<Unit> u);

  Setup s_;
  Units units_;
};

}  // namespace tandem::parallel
