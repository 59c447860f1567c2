// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011): the value at a counter depends only
// on (key, counter), so any device can produce any slice of a tensor's initial values on its own.
// The rounds are an inline function that device code compiles too (ops/cuda draws dropout masks with it), so the host
// and the GPU draw the same bits.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "tandem/core/host_device.h"

namespace tandem {

using PhiloxBlock = std::array<uint32_t, 4>;

// Ten rounds of Philox4x32 on the counter c[0..3] under the 64-bit `key`, in place.
inline TANDEM_HOST_DEVICE void philox4x32_rounds(uint32_t c[4], uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    const uint32_t c0 = static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, c1 = static_cast<uint32_t>(p1);
    const uint32_t c2 = static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, c3 = static_cast<uint32_t>(p0);
    c[0] = c0;
    c[1] = c1;
    c[2] = c2;
    c[3] = c3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
}

// The Philox block of element `index` of `stream` under `seed` into c[0..3]: the counter is (index, stream), 32 bits a
// word, low word first. Every draw (normal_at, uniform_at, the kernels) takes its words from this block.
inline TANDEM_HOST_DEVICE void philox_block_at(uint64_t seed, uint64_t stream, uint64_t index, uint32_t c[4]) {
  c[0] = static_cast<uint32_t>(index);
  c[1] = static_cast<uint32_t>(index >> 32);
  c[2] = static_cast<uint32_t>(stream);
  c[3] = static_cast<uint32_t>(stream >> 32);
  philox4x32_rounds(c, seed);
}

// uniform_at's word (below) of element `index` of `stream` under `seed`, computed where it is called.
inline TANDEM_HOST_DEVICE uint32_t philox_uniform_word(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t c[4];
  philox_block_at(seed, stream, index, c);
  return c[2];
}

// Ten rounds of Philox4x32 on `counter` under the 64-bit `key`.
PhiloxBlock philox4x32(PhiloxBlock counter, uint64_t key);

// FNV-1a 64-bit hash of a name: the stream id of a parameter.
uint64_t hash_name(std::string_view name);

// Uniform in (0, 1]: never 0, so log() is safe.
inline TANDEM_HOST_DEVICE float uniform_from_bits(uint32_t bits) {
  return (static_cast<float>(bits >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

}  // namespace tandem
