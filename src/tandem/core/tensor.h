// Tensor: a shape, a dtype and a view into reference-counted storage held on one Device.
// Always contiguous (row-major); a view shares storage at a byte offset. Math lives in tandem/ops.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tandem/core/device_interface.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"

namespace tandem {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "(2, 3, 4)"

// Memory owned by a device; returned to it when the last Tensor viewing it is gone.
class Storage {
 public:
  Storage(Device& device, size_t bytes, std::string_view what);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device& device() const { return *device_; }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  Device* device_;
  void* data_;
  size_t bytes_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds no storage

  // Uninitialised memory for `shape` on `device`; `what` names it in out-of-memory messages.
  static Tensor empty(const Shape& shape, DType dtype, Device& device, std::string_view what);
  static Tensor zeros(const Shape& shape, DType dtype, Device& device, std::string_view what);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const;  // negative counts from the end
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device& device() const;

  // Whether both view the same storage (the same allocation), and that allocation's start and size.
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  const void* allocation() const { return storage_ ? storage_->data() : nullptr; }
  size_t allocation_bytes() const { return storage_ ? storage_->bytes() : 0; }

  // The same elements under another shape of equal numel.
  Tensor view(const Shape& shape) const;
  // Elements [begin, begin + count) of the flattened tensor, as a tensor of `shape` (numel == count).
  Tensor flat_slice(int64_t begin, int64_t count, const Shape& shape) const;
  // Rows [begin, begin + count) along dim 0.
  Tensor rows(int64_t begin, int64_t count) const;

  void* raw() const;
  template <class T>
  T* data() const {
    return static_cast<T*>(raw());
  }
  float* f32() const { return checked<float>(DType::F32); }
  int32_t* i32() const { return checked<int32_t>(DType::I32); }
  uint16_t* u16() const;  // bf16 or f16 storage

  void fill_zero() const;
  // Same numel and dtype; `other` may live on another device (then the bytes go through the host).
  void copy_from(const Tensor& other) const;
  void copy_to_host(void* dst) const;          // nbytes() bytes
  void copy_from_host(const void* src) const;  // nbytes() bytes
  // The elements as floats on the host (f32, bf16 and f16 converted; i32 as values): for tests and metrics.
  std::vector<float> to_host_floats() const;

 private:
  template <class T>
  T* checked(DType want) const {
    TANDEM_CHECK(dtype_ == want, "tensor holds ", dtype_name(dtype_), ", asked for ", dtype_name(want));
    return data<T>();
  }

  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::F32;
};

}  // namespace tandem
