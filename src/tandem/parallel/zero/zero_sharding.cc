#include "tandem/parallel/zero/zero_sharding.h"

#include "tandem/ops/ops.h"

namespace tandem::parallel {

ZeroSharding::ZeroSharding(int stage, comm::Communicator& group, Device& device, DType compute, bool values_offloaded)
    : group_(group),
      stage_(group.size() > 1 ? stage : 0),
      device_(device),
      compute_(compute),
      values_offloaded_(values_offloaded) {
  TANDEM_CHECK(stage >= 0 && stage <= 3, "ZeRO stage ", stage);
}

void ZeroSharding::gather(Unit& u, const std::function<void(const Tensor& own)>& fill_own) {
  if (u.full_values.defined()) return;
  PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
  u.full_values = Tensor::empty({padded(u)}, compute_, device_, u.label + " gathered parameters");
  if (u.frozen) {
    group_.all_gather(u.owned_values_device, u.full_values);  // already in the compute dtype
    u.point_values(u.full_values);
    return;
  }
  // Gathered in the compute dtype: half the bytes of the fp32 master when computing in bf16 or f16.
  const Tensor own = owned(u, u.full_values);
  fill_own(own);
  if (size() > 1) group_.all_gather(own, u.full_values);
  u.point_values(u.full_values);
}

void ZeroSharding::release(Unit& u) const {
  u.point_values(Tensor());
  u.full_values = Tensor();
}

void ZeroSharding::refresh(Unit& u, Pending& pending) {
  if (stage_ == 0) {
    if (compute_ != DType::F32) ops::cast(u.master, u.full_values);
    return;
  }
  if (compute_ != DType::F32) ops::cast(u.master, owned(u, u.full_values));
  regather(u, &pending);
}

void ZeroSharding::regather(Unit& u, Pending* pending) {
  const Tensor own = owned(u, u.full_values);
  if (pending)
    pending->push_back(group_.all_gather_async(own, u.full_values));
  else
    group_.all_gather(own, u.full_values);
}

void ZeroSharding::open_gradients(Unit& u) {
  PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
  u.full_grads = Tensor::zeros({padded(u)}, DType::F32, device_, u.label + " gradients");
  u.point_grads(u.full_grads);
}

Tensor ZeroSharding::reduced(const Unit& u) {
  PurposeScope scope(device_, MemoryPurpose::ZeroBuffers);
  Tensor out = Tensor::empty({u.shard}, DType::F32, device_, u.label + " reduced gradient");  // (shard)
  group_.reduce_scatter(u.full_grads, out);
  return out;
}

void ZeroSharding::close_gradients(Unit& u) {
  const Tensor r = reduced(u);  // (shard)
  ops::axpy(1.0f, r, u.owned_grads);
  u.point_grads(Tensor());
  u.full_grads = Tensor();
}

void ZeroSharding::reduce(const std::vector<Unit*>& units) {
  if (stage_ >= 2 || size() == 1) return;
  // Every unit's reduction started, then waited for: the transfers queue back to back.
  Pending pending;
  for (Unit* u : units) {
    if (stage_ == 0)
      pending.push_back(group_.all_reduce_async(u->full_grads, comm::ReduceOp::Sum));
    else
      pending.push_back(group_.reduce_scatter_async(u->full_grads, u->owned_grads, comm::ReduceOp::Sum));
  }
  for (auto& r : pending) r->wait();
}

}  // namespace tandem::parallel
