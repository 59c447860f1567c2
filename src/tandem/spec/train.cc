// The names of spec/train.h's enums that config files spell: the only place they are spelt.
#include "tandem/spec/train.h"

namespace tandem::spec {

const char* offload_device_name(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::None:
      return "none";
    case OffloadDevice::Cpu:
      return "cpu";
    case OffloadDevice::Nvme:
      return "nvme";
  }
  return "?";
}

const char* data_type_name(DataType t) {
  switch (t) {
    case DataType::Synthetic:
      return "synthetic";
    case DataType::Text:
      return "text";
    case DataType::Tokens:
      return "tokens";
  }
  return "?";
}

}  // namespace tandem::spec
