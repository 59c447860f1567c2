#include "tandem/core/tensor.h"

#include <cstring>
#include <sstream>

namespace tandem {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ")";
  return os.str();
}

Storage::Storage(Device& device, size_t bytes, std::string_view what)
    : device_(&device), data_(device.allocate(bytes, what)), bytes_(bytes) {}

Storage::~Storage() { device_->release(data_, bytes_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device& device, std::string_view what) {
  for (int64_t d : shape) TANDEM_CHECK(d >= 0, "negative dimension in ", shape_str(shape), " for ", std::string(what));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(device, t.nbytes(), what);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device& device, std::string_view what) {
  Tensor t = empty(shape, dtype, device, what);
  t.fill_zero();
  return t;
}

int64_t Tensor::dim(int i) const {
  const int r = rank();
  if (i < 0) i += r;
  TANDEM_CHECK(i >= 0 && i < r, "dim ", i, " out of range for shape ", shape_str(shape_));
  return shape_[i];
}

Device& Tensor::device() const {
  TANDEM_CHECK(defined(), "device() of an undefined tensor");
  return storage_->device();
}

Tensor Tensor::view(const Shape& shape) const {
  TANDEM_CHECK(shape_numel(shape) == numel(), "cannot view ", shape_str(shape_), " as ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::flat_slice(int64_t begin, int64_t count, const Shape& shape) const {
  TANDEM_CHECK(begin >= 0 && count >= 0 && begin + count <= numel(), "slice [", begin, ", ", begin + count, ") out of ",
               numel(), " elements");
  TANDEM_CHECK(shape_numel(shape) == count, "slice of ", count, " elements cannot have shape ", shape_str(shape));
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(begin) * dtype_size(dtype_);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  TANDEM_CHECK(rank() >= 1, "rows() of a scalar");
  const int64_t row = numel() / std::max<int64_t>(shape_[0], 1);
  Shape s = shape_;
  s[0] = count;
  TANDEM_CHECK(begin >= 0 && begin + count <= shape_[0], "rows [", begin, ", ", begin + count, ") out of ", shape_[0]);
  return flat_slice(begin * row, count * row, s);
}

void* Tensor::raw() const {
  TANDEM_CHECK(defined(), "data of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_;
}

uint16_t* Tensor::u16() const {
  TANDEM_CHECK(dtype_ == DType::BF16 || dtype_ == DType::F16, "tensor holds ", dtype_name(dtype_),
               ", asked for 16-bit storage");
  return data<uint16_t>();
}

void Tensor::fill_zero() const {
  if (numel() > 0) device().fill_zero(raw(), nbytes());
}

void Tensor::copy_from(const Tensor& other) const {
  TANDEM_CHECK(other.numel() == numel() && other.dtype_ == dtype_, "copy of ", shape_str(other.shape_), " ",
               dtype_name(other.dtype_), " into ", shape_str(shape_), " ", dtype_name(dtype_));
  if (numel() == 0) return;
  if (&other.device() == &device()) {
    device().copy(raw(), other.raw(), nbytes());
  } else if (other.device().kind() == DeviceKind::Cpu) {
    device().copy_from_host(raw(), other.raw(), nbytes());
  } else if (device().kind() == DeviceKind::Cpu) {
    other.device().copy_to_host(raw(), other.raw(), nbytes());
  } else if (!other.device().holds_data()) {
    fill_zero();  // a counting device's values read as zeros; no host buffer to pass them through
  } else {
    std::vector<char> host(nbytes());
    other.device().copy_to_host(host.data(), other.raw(), nbytes());
    device().copy_from_host(raw(), host.data(), nbytes());
  }
}

void Tensor::copy_to_host(void* dst) const {
  if (numel() > 0) device().copy_to_host(dst, raw(), nbytes());
}

void Tensor::copy_from_host(const void* src) const {
  if (numel() > 0) device().copy_from_host(raw(), src, nbytes());
}

std::vector<float> Tensor::to_host_floats() const {
  std::vector<char> bytes(nbytes());
  copy_to_host(bytes.data());
  std::vector<float> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype_) {
      case DType::F32:
        std::memcpy(&out[i], bytes.data() + 4 * i, 4);
        break;
      case DType::I32: {
        int32_t v;
        std::memcpy(&v, bytes.data() + 4 * i, 4);
        out[i] = static_cast<float>(v);
        break;
      }
      case DType::BF16:
      case DType::F16: {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = dtype_ == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
        break;
      }
      case DType::E4M3:
      case DType::E5M2: {
        const auto b = static_cast<uint8_t>(bytes[i]);
        out[i] = dtype_ == DType::E4M3 ? e4m3_to_f32(b) : e5m2_to_f32(b);
        break;
      }
    }
  }
  return out;
}

}  // namespace tandem
