#include "tandem/core/philox.h"

namespace tandem {

PhiloxBlock philox4x32(PhiloxBlock c, uint64_t key) {
  philox4x32_rounds(c.data(), key);
  return c;
}

uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace tandem
