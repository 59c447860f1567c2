#include "tandem/core/philox.h"

#include "tandem/core/random_fill.h"

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

namespace {
PhiloxBlock block_at(uint64_t seed, uint64_t stream, uint64_t index) {
  PhiloxBlock b;
  philox_block_at(seed, stream, index, b.data());
  return b;
}
}  // namespace

float normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxBlock b = block_at(seed, stream, index);
  return normal_from_words(b[0], b[1]);
}

float uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
  return uniform_from_bits(block_at(seed, stream, index)[2]);
}

uint64_t bits64_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxBlock b = block_at(seed, stream, index);
  return (static_cast<uint64_t>(b[3]) << 32) | b[2];
}

}  // namespace tandem
