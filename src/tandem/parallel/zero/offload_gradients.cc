// ParameterStore's offloaded units (parameter_store.h), the device's side: their gradients down to host memory as
// each backward ends, their updates handed to the OffloadUpdater (offload_updater.h, which runs them and uploads the
// new values) once the step's gradient is whole, and their values made current before each use. The device side of
// each copy is ordered by the device's transfer tickets (device_interface.h): a copy starts after the device work it
// depends on, and device work that reads its result waits for it.
#include <utility>

#include "tandem/ops/ops.h"
#include "tandem/parallel/zero/parameter_store.h"

namespace tandem::parallel {

void ParameterStore::make_current(Unit& u) {
  wait_updated(u);
  device_.device_waits(u.upload);
  if (!u.stale) return;
  u.zero->regather(u);
  u.stale = false;
}

void ParameterStore::prepare_gradient(Unit& u) {
  PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
  const Shape full{u.zero->padded(u)};
  if (u.zero->grads_transient() || u.arrived == 0) {
    u.full_grads = Tensor::zeros(full, DType::F32, device_, u.label + " gradients");
  } else {
    // The sum of the step's earlier micro-batches, back up for this backward to add into.
    finish_download();
    u.full_grads = Tensor::empty(full, DType::F32, device_, u.label + " gradients");
    device_.device_waits(device_.copy_from_host_async(u.full_grads.raw(), u.full_grads_host.raw(),
                                                      u.full_grads.nbytes(), device_.fence()));
  }
  u.point_grads(u.full_grads);
}

void ParameterStore::download_gradient(Unit& u) {
  wait_updated(u);  // the last update read this unit's gradient shard, which the copy overwrites
  finish_download();
  PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
  const bool last = ++u.arrived >= micro_batches_ * u.uses;
  GradientDownload d;
  d.unit = &u;
  d.last = last;
  d.source = u.full_grads;         // the full sum so far; with one replica also the owned shard
  Tensor dst = u.full_grads_host;  // where the copy lands on the host
  if (u.zero->grads_transient() || last) {
    if (u.zero->size() > 1) d.source = u.zero->reduced(u);
    // At stages 0-1 the step's one reduced sum; at 2-3 the step's first micro-batch goes straight into the host
    // shard and the later ones land beside it, to be added.
    dst = u.owned_grads;
    if (u.zero->grads_transient() && u.arrived > 1) {
      PurposeScope host_scope(host(), MemoryPurpose::ZeroBuffers);
      d.staging = dst = Tensor::empty({u.shard}, DType::F32, host(), u.label + " gradient from the device");
    }
  }
  u.point_grads(Tensor());
  u.full_grads = Tensor();
  const uint64_t fence = device_.fence();
  const auto copy = [&] { return device_.copy_to_host_async(dst.raw(), d.source.raw(), d.source.nbytes(), fence); };
  d.ticket = observer_ ? observer_->gradient_down(u.label, fence, copy) : copy();
  download_ = std::move(d);
}

void ParameterStore::finish_download() {
  if (!download_) return;
  device_.host_waits(download_->ticket);
  if (download_->staging.defined()) ops::axpy(1.0f, download_->staging, download_->unit->owned_grads);
  Unit& u = *download_->unit;
  const bool complete = download_->last;
  download_.reset();
  // The unit's gradient of the step is whole on the host: with the update in the backward, it starts now.
  if (complete && in_backward_) queue_update(u, in_backward_->lr, in_backward_->grad_scale);
}

void ParameterStore::queue_update(Unit& u, float lr, float grad_scale) {
  if (u.queued) return;
  u.queued = true;
  // The upload overwrites values the step's backward reads: it starts after everything queued so far. The step it
  // belongs to and whether it is watched are decided here: the next step's begin_step() counts the next step and
  // tells the observer while this update may still run.
  updater_->submit({&u, lr, grad_scale, adamw_->step_count(), device_.fence(),
                    observer_ && observer_->watches_update() ? observer_ : nullptr});
}

void ParameterStore::start_update(float lr, float grad_scale) {
  // Units no backward reached this step have a zero gradient; the rest were queued as their gradients came down when
  // the update runs in the backward (begin_step), and are queued here, in layer order, when it runs after it.
  for (const auto& u : units_) {
    if (!u->offloaded() || u->queued) continue;
    if (u->arrived == 0) {
      wait_updated(*u);
      u->owned_grads.fill_zero();
    }
    queue_update(*u, lr, grad_scale);
  }
  in_backward_ = std::nullopt;
}

void ParameterStore::finish_update() { updater_->finish(); }

}  // namespace tandem::parallel
