// The front end of ring attention's ops (attention_pair.h): each call's tensors checked, then run by the CPU or the
// CUDA kernels, or counted on a counting device as counting.cc counts the op table's (the planned backend's kernels'
// scratch taken and freed, the work added to the device's log).
#include "tandem/ops/attention_pair.h"

#include "tandem/device/counting_device.h"
#include "tandem/ops/cpu/attention_pair.h"
#include "tandem/ops/cuda/attention_pair.h"
#include "tandem/ops/op_checks.h"
#include "tandem/ops/work.h"

namespace tandem::ops {
namespace {

using namespace checks;

// q (B, Tq, H D) and kv (B, Tk, 2 Hkv D) of one dtype, H a multiple of Hkv; the blocks' places inside the documents'
// sequences.
void check_pair(const char* op, const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place) {
  TANDEM_CHECK(q.rank() == 3 && kv.rank() == 3 && q.dim(0) == kv.dim(0), op, ": q ", shape_str(q.shape()), " and kv ",
               shape_str(kv.shape()), " are not (B, Tq, H D) and (B, Tk, 2 Hkv D)");
  TANDEM_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, op, ": ", heads, " heads over ", kv_heads,
               " kv heads");
  TANDEM_CHECK(q.dim(2) % heads == 0 && kv.dim(2) == 2 * kv_heads * (q.dim(2) / heads), op, ": q ",
               shape_str(q.shape()), " of ", heads, " heads and kv ", shape_str(kv.shape()), " of ", kv_heads,
               " heads differ in head dim");
  TANDEM_CHECK(place.q0 >= 0 && place.k0 >= 0, op, ": blocks at positions ", place.q0, " and ", place.k0);
  if (place.documents.defined()) {
    check_devices(op, q, place.documents);
    check_dtype(op, "documents", place.documents, DType::I32);
    TANDEM_CHECK(place.documents.rank() == 2 && place.documents.dim(0) == q.dim(0) &&
                     place.q0 + q.dim(1) <= place.documents.dim(1) && place.k0 + kv.dim(1) <= place.documents.dim(1),
                 op, ": documents ", shape_str(place.documents.shape()), " do not hold the query block [", place.q0,
                 ", ", place.q0 + q.dim(1), ") and the key block [", place.k0, ", ", place.k0 + kv.dim(1),
                 ") of B = ", q.dim(0), " sequences");
  }
  check_compute(op, {{"q", q}, {"kv", kv}});
}

void check_output(const char* op, const Tensor& q, int heads, const Tensor& y, const Tensor& lse) {
  check_f32(op, "lse", lse);
  TANDEM_CHECK(y.shape() == q.shape() && lse.shape() == Shape({q.dim(0), heads, q.dim(1)}), op, ": y ",
               shape_str(y.shape()), " and lse ", shape_str(lse.shape()), " for q ", shape_str(q.shape()), " of ",
               heads, " heads");
}

// q k^T and P v, 2 B H Tq Tk D multiply-adds each where every key precedes every query; half of that where the blocks
// meet (a causal pair), as attention_gqa's causal attention is counted.
double pair_flops(const Tensor& q, const Tensor& kv, const PairPlace& place) {
  const double full = 4.0 * static_cast<double>(q.dim(0)) * static_cast<double>(q.dim(1)) *
                      static_cast<double>(kv.dim(1)) * static_cast<double>(q.dim(2));
  return place.k0 + kv.dim(1) <= place.q0 + 1 ? full : full / 2;
}

double head_dim(const Tensor& q, int heads) { return static_cast<double>(q.dim(2)) / heads; }

// On a counting device (t's): the planned backend's kernel's scratch (`cpu`, `gpu` bytes) taken and freed, the work
// recorded.
// `attention_flops`: a block pair's at head dim `head_dim`, forward or `backward`.
void count(const Tensor& t, int64_t cpu, int64_t gpu, double attention_flops, double head_dim, bool backward,
           double bytes) {
  device::CountingDevice* d = device::as_counting(t.device());
  const int64_t scratch = d->planned() == DeviceKind::Cuda ? gpu : cpu;
  const PurposeScope scope(*d, MemoryPurpose::Transient);
  if (scratch > 0) d->release(d->allocate(static_cast<size_t>(scratch), "op scratch"), static_cast<size_t>(scratch));
  device::WorkLog& w = d->work();
  w.ops += 1;
  add_attention(w, attention_flops, head_dim, backward);
  w.bytes += bytes;
}

// Whether the GPU's kernels run the call (a CUDA tensor in a CUDA build); else the CPU's, which refuse any other
// device.
bool on_gpu(const char* op, const Tensor& t) {
  if (t.device().kind() == DeviceKind::Cpu) return false;
#ifdef TANDEM_WITH_CUDA
  if (t.device().kind() == DeviceKind::Cuda) return true;
#endif
  no_backend(op, t);
}

int threads_of(const Tensor& t) { return device::as_counting(t.device())->cpu_threads(); }

}  // namespace

void attention_pair_forward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                            const Tensor& y, const Tensor& lse) {
  const char* op = "attention_pair_forward";
  check_devices(op, q, kv, y, lse);
  check_pair(op, q, kv, heads, kv_heads, place);
  check_output(op, q, heads, y, lse);
  check_f32(op, "y", y);
  if (device::as_counting(q.device()))
    return count(q, cpu::attention_pair_forward_scratch(threads_of(q), q, kv, heads, kv_heads), 0,
                 pair_flops(q, kv, place), head_dim(q, heads), false, 0);
#ifdef TANDEM_WITH_CUDA
  if (on_gpu(op, q)) return cuda::attention_pair_forward(q, kv, heads, kv_heads, place, y, lse);
#else
  on_gpu(op, q);
#endif
  cpu::attention_pair_forward(q, kv, heads, kv_heads, place, y, lse);
}

void attention_merge(const Tensor& y_part, const Tensor& lse_part, const Tensor& y, const Tensor& lse) {
  const char* op = "attention_merge";
  check_devices(op, y, lse, y_part, lse_part);
  for (const Named& t : {Named{"y", y}, Named{"lse", lse}, Named{"y_part", y_part}, Named{"lse_part", lse_part}})
    check_f32(op, t.first, t.second);
  check_same_shape(op, "y", y, "y_part", y_part);
  check_same_shape(op, "lse", lse, "lse_part", lse_part);
  TANDEM_CHECK(y.rank() == 3 && lse.rank() == 3 && lse.dim(0) == y.dim(0) && lse.dim(2) == y.dim(1) && lse.dim(1) > 0 &&
                   y.dim(2) % lse.dim(1) == 0,
               op, ": y ", shape_str(y.shape()), " and lse ", shape_str(lse.shape()),
               " are not (B, T, H D) and (B, H, T)");
  const double bytes = 4.0 * 3 * static_cast<double>(y.numel() + lse.numel());
  if (device::as_counting(y.device())) return count(y, 0, 0, 0, 1, false, bytes);  // no scratch, no attention FLOPs
#ifdef TANDEM_WITH_CUDA
  if (on_gpu(op, y)) return cuda::attention_merge(y_part, lse_part, y, lse);
#else
  on_gpu(op, y);
#endif
  cpu::attention_merge(y_part, lse_part, y, lse);
}

void attention_pair_backward(const Tensor& q, const Tensor& kv, int heads, int kv_heads, const PairPlace& place,
                             const Tensor& y, const Tensor& lse, const Tensor& dy, const Tensor& dq,
                             const Tensor& dkv) {
  const char* op = "attention_pair_backward";
  check_devices(op, q, kv, y, lse, dy, dq, dkv);
  check_pair(op, q, kv, heads, kv_heads, place);
  check_output(op, q, heads, y, lse);
  check_compute(op, {{"q", q}, {"y", y}, {"dy", dy}});
  check_same_shape(op, "y", y, "dy", dy);
  check_same_shape(op, "q", q, "dq", dq);
  check_same_shape(op, "kv", kv, "dkv", dkv);
  check_f32(op, "dq", dq);
  check_f32(op, "dkv", dkv);
  if (device::as_counting(q.device()))
    return count(q, cpu::attention_pair_backward_scratch(threads_of(q), q, kv, heads, kv_heads),
                 cuda::attention_pair_backward_scratch_bytes(q.dim(0), heads, q.dim(1)), 2.5 * pair_flops(q, kv, place),
                 head_dim(q, heads), true, 0);
#ifdef TANDEM_WITH_CUDA
  if (on_gpu(op, q)) return cuda::attention_pair_backward(q, kv, heads, kv_heads, place, y, lse, dy, dq, dkv);
#else
  on_gpu(op, q);
#endif
  cpu::attention_pair_backward(q, kv, heads, kv_heads, place, y, lse, dy, dq, dkv);
}

}  // namespace tandem::ops
