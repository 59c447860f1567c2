// Element i of one tensor of a safetensors file as a float, from F32, BF16 or F16 (other dtypes refused when the
// reader is made, naming the file and the tensor): what the weight sources (weight_source.cc, peft.cc) read with.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "tandem/checkpoint/safetensors.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"

namespace tandem::interchange {

class Elements {
 public:
  Elements(const checkpoint::SafetensorsFile& file, const std::string& name)
      : bytes_(static_cast<const uint8_t*>(file.data(name))), dtype_(file.dtype(name)) {
    if (dtype_ != DType::F32 && dtype_ != DType::BF16 && dtype_ != DType::F16)
      TANDEM_FAIL("'", file.path(), "': tensor '", name, "' is ", dtype_name(dtype_),
                  "; weights must be F32, BF16 or F16");
  }
  float operator[](int64_t i) const {
    if (dtype_ == DType::F32) {
      float f;
      std::memcpy(&f, bytes_ + 4 * i, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, bytes_ + 2 * i, 2);
    return dtype_ == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }

 private:
  const uint8_t* bytes_;
  DType dtype_;
};

}  // namespace tandem::interchange
