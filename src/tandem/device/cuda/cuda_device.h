// CudaDevice: one GPU as a tandem Device. It owns a caching memory arena (large cudaMalloc blocks, never one per
// tensor, never managed memory), a compute stream and a communication stream, per-device contexts for the op
// libraries, and a slot where kernels report bad input (an id out of range) without a host sync.
//
// Stream order and memory reuse: every op, fill_zero and copy runs on the compute stream, and a block released by
// a tensor goes straight back to the free list although kernels reading it may still be queued. That is safe because
// the next user of the block is also queued on the compute stream, after them. Work on the comm stream is not
// covered: whoever runs a collective on a tensor must keep that tensor alive until the compute stream has waited for
// the collective (record_comm() then compute_wait()), so its memory is not handed out while NCCL still reads it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <vector>

#include "tandem/device/accounted_device.h"
#include "tandem/device/cuda/arena.h"

namespace tandem::device {

// A cudaEvent_t owned by value. Timing is off unless asked for (cheaper record and wait).
class CudaEvent {
 public:
  explicit CudaEvent(bool timing = false);
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(cudaStream_t stream);
  void wait_in(cudaStream_t stream) const;       // `stream` waits for the work recorded before this event
  void synchronize() const;                      // the host waits
  bool completed() const;                        // the work recorded before it has finished (no wait)
  float ms_since(const CudaEvent& start) const;  // both recorded with timing on, this one completed
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Page-locked host memory (cudaMallocHost): the fast and truly asynchronous side of host <-> device copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Where kernels report the first bad input they meet (first writer wins through an atomicCAS on `claimed`). `what`
// and `hint` hold addresses of host string literals that the kernel only copies. The device turns a claimed slot
// into an Error at the next synchronize() or copy_to_host(). Plain integers, so .cu and .cc files agree on layout.
struct DeferredError {
  int32_t claimed;
  int32_t pad;
  int64_t row;
  int64_t value;
  int64_t limit;  // the value should lie in [0, limit); 0 means it only had to be non-negative
  uint64_t what;  // const char*: "<op>: token id"
  uint64_t hint;  // const char*: appended to the message, may be 0
};

class CudaDevice final : public AccountedDevice {
 public:
  // Memory: the arena's first block reserves the whole budget, or without one plannable_bytes(), at the first
  // allocation: one block, so that what the planner counts as fitting is not lost to gaps between blocks (in 1 GiB
  // blocks a 7.7B gpt failed with 6 GiB free in 238 MiB pieces). Later blocks, when that one is full or could not be
  // had, are at least 1 GiB. Throws Error when there is no such GPU.
  explicit CudaDevice(int index = 0, uint64_t budget_bytes = 0);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return "cuda:" + std::to_string(index_); }

  // On the compute stream (asynchronous with respect to the host).
  void fill_zero(void* ptr, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  // On the compute stream, then the host waits; this also raises any deferred kernel error.
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  // Copies host_src into pinned staging memory and queues the upload on the compute stream: the caller may reuse
  // host_src at once and the host does not wait for the GPU (up to kStagingBytes a copy; larger ones wait).
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  // Waits for the compute stream, then throws the first bad input a kernel reported since the last check.
  void synchronize() override;

  // Offload's copies (device_interface.h) on the stream of their direction, each ordered after its fence; tickets
  // are events.
  // A fence is an event on the compute stream. Thread-safe: the host optimizer's thread issues uploads.
  uint64_t fence() override;
  uint64_t copy_to_host_async(void* host_dst, const void* src, size_t bytes, uint64_t after) override;
  uint64_t copy_from_host_async(void* dst, const void* host_src, size_t bytes, uint64_t after) override;
  void device_waits(uint64_t ticket) override;
  void host_waits(uint64_t ticket) override;
  // Timing events, turned into the host's clock through one event the host waited for (the first mark).
  uint64_t mark(DeviceQueue queue, uint64_t after) override;
  double mark_seconds(uint64_t mark) override;
  // Page-locked (cudaMallocHost) host memory when asked, plain host memory otherwise.
  std::unique_ptr<AccountedDevice> host_memory(bool page_locked) const override;

  // The GPU's free memory now, less kLibraryReserve for what NCCL's communicators and the CUDA libraries allocate
  // outside the arena (about 2 GiB on an H200), plus what the arena holds unused.
  uint64_t plannable_bytes() const override;
  static constexpr uint64_t kLibraryReserve = uint64_t{2} << 30;

  int index() const { return index_; }
  int sm_count() const { return sm_count_; }
  std::string gpu_name() const { return gpu_name_; }
  // Makes this GPU the calling thread's current device (kernel launches go to the current device).
  void make_current() const;

  cudaStream_t compute_stream() const { return compute_; }
  cudaStream_t comm_stream() const { return comm_; }
  // Ordering between the two streams: record an event on one, make the other wait for it.
  CudaEvent record_compute();
  CudaEvent record_comm();
  void compute_wait(const CudaEvent& event);
  void comm_wait(const CudaEvent& event);
  void comm_after_compute();  // the comm stream waits for all compute work queued so far
  void compute_after_comm();  // and the other way round

  // The device address of the deferred-error slot, for kernels to report into.
  DeferredError* deferred_error_slot() const { return error_slot_; }

  // What the arena holds from the driver and what of it is in use.
  ArenaStats arena_stats() const;
  // Gives the blocks without live tensors back to the driver (waiting for both streams first); returns the bytes.
  size_t release_cached();

  // One object of type T per device, built on first use as T(*this) and destroyed with the device before its
  // memory and streams: where op libraries keep handles, plan caches and workspaces instead of globals.
  template <class T>
  T& context() {
    std::lock_guard<std::recursive_mutex> lock(contexts_mu_);
    auto it = contexts_.find(std::type_index(typeid(T)));
    if (it == contexts_.end()) {
      ContextPtr made(new T(*this), [](void* p) { delete static_cast<T*>(p); });
      it = contexts_.emplace(std::type_index(typeid(T)), std::move(made)).first;
    }
    return *static_cast<T*>(it->second.get());
  }

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_release(void* ptr) override;

 private:
  using ContextPtr = std::unique_ptr<void, void (*)(void*)>;

  // A pinned buffer whose last upload has finished, at least `bytes` large (made on demand, kStagingSlots at
  // most; when all are busy, waits for the oldest).
  struct StagingSlot {
    PinnedBuffer buffer;
    CudaEvent uploaded;
    uint64_t last_use = 0;
  };
  StagingSlot& free_staging_slot(size_t bytes);
  static constexpr size_t kStagingBytes = size_t{64} << 20;
  static constexpr size_t kStagingSlots = 8;

  void* reserve_block(size_t bytes);
  void unreserve_block(void* base) noexcept;
  // Queues the copy of the error slot into host memory; read_deferred_error() after the stream sync.
  void queue_error_readback();
  void raise_deferred_error();

  int index_;
  int sm_count_ = 0;
  std::string gpu_name_;
  // A ticket's event, recorded; the stream waits on `after` first. Under transfer_mu_.
  uint64_t issue_locked(cudaStream_t stream, uint64_t after);
  uint64_t copy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, uint64_t after);

  cudaStream_t compute_ = nullptr;
  cudaStream_t comm_ = nullptr;
  cudaStream_t to_host_ = nullptr;    // copies to host memory (offload, checkpoints)
  cudaStream_t from_host_ = nullptr;  // copies from host memory: PCIe moves both directions at once
  std::mutex transfer_mu_;
  uint64_t next_ticket_ = 1;
  std::map<uint64_t, CudaEvent> tickets_;   // not yet known to be done; a ticket missing here is done
  std::map<uint64_t, CudaEvent> marks_;     // timing events by mark
  std::unique_ptr<CudaEvent> mark_origin_;  // recorded and waited for at the first mark
  double mark_origin_host_s_ = 0;           // the host's steady clock then
  mutable std::mutex arena_mu_;  // AccountedDevice serialises raw_*, but arena_stats() and release_cached() do not
  std::unique_ptr<Arena> arena_;
  DeferredError* error_slot_ = nullptr;  // device memory
  PinnedBuffer error_host_;              // one DeferredError
  std::vector<StagingSlot> staging_;     // host -> device uploads in flight or done
  uint64_t uploads_ = 0;
  std::recursive_mutex contexts_mu_;  // recursive: a context may build another context in its constructor
  std::map<std::type_index, ContextPtr> contexts_;
};

}  // namespace tandem::device
