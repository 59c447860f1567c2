// CudaDevice: arena-backed allocation, stream-ordered byte moves, stream ordering helpers and the deferred-error slot.
#include "tandem/device/cuda/cuda_device.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "tandem/core/error.h"
#include "tandem/core/units.h"
#include "tandem/device/cpu_device.h"
#include "tandem/device/cuda/cuda_check.h"
#include "tandem/device/cuda/pinned_host_device.h"

namespace tandem::device {

void throw_library_error(const char* library, const char* call, const char* file, int line, const char* description) {
  TANDEM_FAIL(library, " call ", call, " failed at ", file, ":", line, ": ", description ? description : "(no text)");
}

// ---- CudaEvent ----

CudaEvent::CudaEvent(bool timing) {
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

void CudaEvent::record(cudaStream_t stream) { TANDEM_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void CudaEvent::wait_in(cudaStream_t stream) const { TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }

void CudaEvent::synchronize() const { TANDEM_CUDA_CHECK(cudaEventSynchronize(event_)); }

bool CudaEvent::completed() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaErrorNotReady) return false;
  TANDEM_CUDA_CHECK(e);
  return true;
}

float CudaEvent::ms_since(const CudaEvent& start) const {
  float ms = 0.0f;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

// ---- PinnedBuffer ----

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) TANDEM_CUDA_CHECK(cudaMallocHost(&data_, bytes));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFreeHost(data_);
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

// ---- CudaDevice ----

namespace {

constexpr size_t kGiB = size_t{1} << 30;

ArenaPolicy policy_for(uint64_t first_block_bytes) {
  ArenaPolicy p;
  p.alignment = 256;
  p.block_granularity = size_t{2} << 20;
  p.first_block_bytes = std::max<size_t>(static_cast<size_t>(first_block_bytes), kGiB);
  p.min_block_bytes = kGiB;
  return p;
}

}  // namespace

CudaDevice::CudaDevice(int index, uint64_t budget_bytes) : AccountedDevice(budget_bytes), index_(index) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    TANDEM_FAIL("cuda:", index, " is not available: ", cudaGetErrorString(status),
                " (is there an NVIDIA GPU and driver on this machine?)");
  }
  if (index < 0 || index >= count)
    TANDEM_FAIL("cuda:", index, " does not exist: this machine has ", count, " CUDA device(s)");
  make_current();
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, index_));
  sm_count_ = prop.multiProcessorCount;
  gpu_name_ = prop.name;
  // Non-blocking: the legacy default stream (which a library might use behind our back) does not serialise them.
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&to_host_, cudaStreamNonBlocking));
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&from_host_, cudaStreamNonBlocking));
  TANDEM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&error_slot_), sizeof(DeferredError)));
  TANDEM_CUDA_CHECK(cudaMemsetAsync(error_slot_, 0, sizeof(DeferredError), compute_));
  error_host_ = PinnedBuffer(sizeof(DeferredError));
  std::memset(error_host_.data(), 0, sizeof(DeferredError));
  arena_ = std::make_unique<Arena>(
      policy_for(budget_bytes > 0 ? budget_bytes : plannable_bytes()),
      [this](size_t bytes) { return reserve_block(bytes); }, [this](void* base) { unreserve_block(base); });
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

CudaDevice::~CudaDevice() {
  // Nothing here may throw: errors are ignored, since a destructor cannot report them.
  cudaSetDevice(index_);
  if (compute_) cudaStreamSynchronize(compute_);
  if (comm_) cudaStreamSynchronize(comm_);
  for (cudaStream_t s : {to_host_, from_host_})
    if (s) cudaStreamSynchronize(s);
  tickets_.clear();
  marks_.clear();
  mark_origin_.reset();
  contexts_.clear();  // their handles and workspaces go before the memory and streams they use
  arena_.reset();
  if (error_slot_) cudaFree(error_slot_);
  for (cudaStream_t s : {to_host_, from_host_})
    if (s) cudaStreamDestroy(s);
  if (comm_) cudaStreamDestroy(comm_);
  if (compute_) cudaStreamDestroy(compute_);
}

void CudaDevice::make_current() const { TANDEM_CUDA_CHECK(cudaSetDevice(index_)); }

uint64_t CudaDevice::issue_locked(cudaStream_t stream, uint64_t after) {
  if (after != 0) {
    const auto it = tickets_.find(after);
    if (it != tickets_.end()) it->second.wait_in(stream);
  }
  // Forget what is done, so the table holds only tickets still in flight.
  for (auto it = tickets_.begin(); it != tickets_.end();) it = it->second.completed() ? tickets_.erase(it) : ++it;
  const uint64_t ticket = next_ticket_++;
  tickets_.emplace(ticket, CudaEvent()).first->second.record(stream);
  return ticket;
}

uint64_t CudaDevice::fence() {
  make_current();
  std::lock_guard<std::mutex> lock(transfer_mu_);
  return issue_locked(compute_, 0);
}

uint64_t CudaDevice::copy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, uint64_t after) {
  make_current();
  cudaStream_t stream = kind == cudaMemcpyDeviceToHost ? to_host_ : from_host_;
  std::lock_guard<std::mutex> lock(transfer_mu_);
  if (after != 0) {
    const auto it = tickets_.find(after);
    if (it != tickets_.end()) it->second.wait_in(stream);
  }
  if (bytes > 0) TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
  return issue_locked(stream, 0);
}

uint64_t CudaDevice::copy_to_host_async(void* host_dst, const void* src, size_t bytes, uint64_t after) {
  return copy_async(host_dst, src, bytes, cudaMemcpyDeviceToHost, after);
}

uint64_t CudaDevice::copy_from_host_async(void* dst, const void* host_src, size_t bytes, uint64_t after) {
  return copy_async(dst, host_src, bytes, cudaMemcpyHostToDevice, after);
}

void CudaDevice::device_waits(uint64_t ticket) {
  make_current();
  std::lock_guard<std::mutex> lock(transfer_mu_);
  const auto it = tickets_.find(ticket);
  if (it != tickets_.end()) it->second.wait_in(compute_);
}

void CudaDevice::host_waits(uint64_t ticket) {
  CudaEvent done;
  {
    std::lock_guard<std::mutex> lock(transfer_mu_);
    const auto it = tickets_.find(ticket);
    if (it == tickets_.end()) return;
    done = std::move(it->second);
    tickets_.erase(it);
  }
  done.synchronize();  // outside the lock: other threads keep issuing while this one waits
}

uint64_t CudaDevice::mark(DeviceQueue queue, uint64_t after) {
  make_current();
  cudaStream_t stream = queue == DeviceQueue::ToHost     ? to_host_
                        : queue == DeviceQueue::FromHost ? from_host_
                                                         : compute_;
  std::lock_guard<std::mutex> lock(transfer_mu_);
  if (queue != DeviceQueue::Compute && after != 0) {
    const auto it = tickets_.find(after);
    if (it != tickets_.end()) it->second.wait_in(stream);
  }
  if (!mark_origin_) {
    mark_origin_ = std::make_unique<CudaEvent>(/*timing=*/true);
    mark_origin_->record(compute_);
    mark_origin_->synchronize();
    mark_origin_host_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  const uint64_t id = next_ticket_++;
  marks_.emplace(id, CudaEvent(/*timing=*/true)).first->second.record(stream);
  return id;
}

double CudaDevice::mark_seconds(uint64_t id) {
  CudaEvent event;
  {
    std::lock_guard<std::mutex> lock(transfer_mu_);
    const auto it = marks_.find(id);
    TANDEM_CHECK(it != marks_.end(), "timing mark ", id, " is not one of ", name(), "'s");
    event = std::move(it->second);
    marks_.erase(it);
  }
  event.synchronize();
  return mark_origin_host_s_ + static_cast<double>(event.ms_since(*mark_origin_)) / 1e3;
}

std::unique_ptr<AccountedDevice> CudaDevice::host_memory(bool page_locked) const {
  if (page_locked) return std::make_unique<PinnedHostDevice>(index_);
  return std::make_unique<CpuDevice>(0, index_, "host");
}

uint64_t CudaDevice::plannable_bytes() const {
  make_current();
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  uint64_t unused = 0;
  if (arena_) {
    std::lock_guard<std::mutex> lock(arena_mu_);
    const ArenaStats st = arena_->stats();
    unused = st.reserved_bytes - st.used_bytes;
  }
  const uint64_t available = free + unused;
  return available > kLibraryReserve ? available - kLibraryReserve : 1;
}

void* CudaDevice::reserve_block(size_t bytes) {
  make_current();
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it, or the next launch check would report this handled failure
    return nullptr;
  }
  TANDEM_CUDA_CHECK(status);
  return p;
}

void CudaDevice::unreserve_block(void* base) noexcept {
  // Queued kernels on either stream may still use the block's ranges; let them finish before the driver gets it.
  cudaSetDevice(index_);
  cudaStreamSynchronize(compute_);
  cudaStreamSynchronize(comm_);
  const cudaError_t status = cudaFree(base);
  if (status != cudaSuccess)
    std::fprintf(stderr, "tandem: cudaFree of an arena block on cuda:%d failed: %s\n", index_,
                 cudaGetErrorString(status));
}

void* CudaDevice::raw_allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(arena_mu_);
  void* p = arena_->allocate(bytes);
  if (!p) {
    const ArenaStats s = arena_->stats();
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
    TANDEM_FAIL("out of GPU memory on ", name(), " (", gpu_name_, "): cannot reserve ", format_bytes(bytes),
                "; the arena holds ", format_bytes(s.reserved_bytes), " in ", s.blocks, " block(s), ",
                format_bytes(s.used_bytes), " in use, largest free range ", format_bytes(s.largest_free_bytes),
                "; the driver reports ", format_bytes(free_bytes), " free of ", format_bytes(total_bytes),
                ". Lower the batch size or spread the model over more devices (\"parallel\").");
  }
  return p;
}

void CudaDevice::raw_release(void* ptr) {
  std::lock_guard<std::mutex> lock(arena_mu_);
  arena_->release(ptr);
}

ArenaStats CudaDevice::arena_stats() const {
  std::lock_guard<std::mutex> lock(arena_mu_);
  return arena_->stats();
}

size_t CudaDevice::release_cached() {
  std::lock_guard<std::mutex> lock(arena_mu_);
  return arena_->trim();
}

void CudaDevice::fill_zero(void* ptr, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  TANDEM_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, compute_));
}

void CudaDevice::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  make_current();
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_));
}

void CudaDevice::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  make_current();
  if (bytes > 0) TANDEM_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, compute_));
  queue_error_readback();
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(compute_));
  raise_deferred_error();
}

void CudaDevice::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  if (bytes > kStagingBytes) {
    // Large (weights at load time): from pageable memory, then wait, so host_src may be reused at once.
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, compute_));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(compute_));
    return;
  }
  StagingSlot& slot = free_staging_slot(bytes);
  std::memcpy(slot.buffer.data(), host_src, bytes);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, slot.buffer.data(), bytes, cudaMemcpyHostToDevice, compute_));
  slot.uploaded.record(compute_);
  slot.last_use = ++uploads_;
}

CudaDevice::StagingSlot& CudaDevice::free_staging_slot(size_t bytes) {
  StagingSlot* oldest = nullptr;
  for (StagingSlot& s : staging_) {
    if (s.buffer.bytes() >= bytes && (s.last_use == 0 || s.uploaded.completed())) return s;
    if (!oldest || s.last_use < oldest->last_use) oldest = &s;
  }
  const size_t size = std::max(bytes, size_t{1} << 20);
  if (staging_.size() < kStagingSlots) {
    staging_.push_back(StagingSlot{PinnedBuffer(size), CudaEvent(), 0});
    return staging_.back();
  }
  // Every slot is busy or too small: wait for the oldest upload and reuse its slot, grown if need be.
  oldest->uploaded.synchronize();
  if (oldest->buffer.bytes() < bytes) oldest->buffer = PinnedBuffer(size);
  oldest->last_use = 0;
  return *oldest;
}

void CudaDevice::synchronize() {
  make_current();
  queue_error_readback();
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(compute_));
  raise_deferred_error();
}

void CudaDevice::queue_error_readback() {
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(error_host_.data(), error_slot_, sizeof(DeferredError), cudaMemcpyDeviceToHost, compute_));
}

void CudaDevice::raise_deferred_error() {
  DeferredError e;
  std::memcpy(&e, error_host_.data(), sizeof(e));
  if (!e.claimed) return;
  // Clear the slot (device and host copy) so the error is raised once, then report it.
  std::memset(error_host_.data(), 0, sizeof(DeferredError));
  TANDEM_CUDA_CHECK(cudaMemsetAsync(error_slot_, 0, sizeof(DeferredError), compute_));
  const char* what = reinterpret_cast<const char*>(static_cast<uintptr_t>(e.what));
  const char* hint = reinterpret_cast<const char*>(static_cast<uintptr_t>(e.hint));
  if (e.limit <= 0)
    TANDEM_FAIL(what ? what : "a kernel: value", " ", e.value, " at row ", e.row, " is negative", hint ? hint : "",
                " (reported by a kernel on ", name(), ")");
  TANDEM_FAIL(what ? what : "a kernel: value", " ", e.value, " at row ", e.row, " is out of range [0, ", e.limit, ")",
              hint ? hint : "", " (reported by a kernel on ", name(), ")");
}

CudaEvent CudaDevice::record_compute() {
  CudaEvent e;
  e.record(compute_);
  return e;
}

CudaEvent CudaDevice::record_comm() {
  CudaEvent e;
  e.record(comm_);
  return e;
}

void CudaDevice::compute_wait(const CudaEvent& event) { event.wait_in(compute_); }

void CudaDevice::comm_wait(const CudaEvent& event) { event.wait_in(comm_); }

void CudaDevice::comm_after_compute() { comm_wait(record_compute()); }

void CudaDevice::compute_after_comm() { compute_wait(record_comm()); }

}  // namespace tandem::device
