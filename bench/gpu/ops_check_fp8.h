// The FP8 checks' shared helpers (defined in ops_check_fp8_blocks.cc where not inline here), and the functions that
// ops_check_fp8.cc (one scale a tensor, the linear layer) calls in ops_check_fp8_blocks.cc (several scales);
// ops_check_fp8.cc says what the checks do.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops_check.h"
#include "tandem/ops/fp8_scale.h"

namespace tandem::ops_check {

inline const char* fmt_name(DType t) { return t == DType::E4M3 ? "e4m3" : "e5m2"; }
inline uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

inline constexpr ops::Fp8Blocks kOneScale{};  // one scale for the tensor (tensorwise)

inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  std::vector<uint8_t> v(t.nbytes());
  t.copy_to_host(v.data());
  return v;
}

// The same tensor on the host (any dtype, FP8 included): the CPU op's operand or output in the GPU's dtype.
inline Tensor host_copy(Suite& s, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype(), s.host(), "host copy");
  h.copy_from(t);
  return h;
}

// How many bytes differ, and the first difference as text (`x`: the input, read at the element a byte came from).
std::pair<int64_t, std::string> diff_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                           const std::vector<float>& x, int64_t r, int64_t c, bool transposed);

// An FP8 operand (R, K) quantized by the CPU op from normals in `blocks`: the bytes and inverse scales on both sides.
// `spread`: row i and the 128-column block j scaled by 2^(i % 9 - 4) and 2^(j % 5 - 2), so that every block's scale
// differs from its neighbours'.
struct Fp8Operand {
  Tensor cpu_q, cpu_inv, gpu_q, gpu_inv;
};
Fp8Operand fp8_operand(Suite& s, const Shape& shape, DType format, uint64_t seed, float stddev,
                       ops::Fp8Blocks blocks = kOneScale, bool spread = false);

// Fills t (bf16) with N(0, stddev) values from a pool of 2^24 normals on the device, copied over it piece by piece:
// random data at the cost of a device copy (a tensor cores' timing on constant data runs at a higher clock).
void fill_random(const Tensor& pool, const Tensor& t, float stddev);

// ops_check_fp8_blocks.cc, called by check_fp8 and bench_fp8: amax and fp8_quantize with several scales, fp8_matmul
// with several scales, and the three recipes' timings (`pool`: the normals fill_random copies from).
void check_amax_blocks(Suite& s);
void check_quantize_blocks(Suite& s);
void check_fp8_matmul_blocks(Suite& s);
void bench_fp8_recipes(CudaDevice& dev, const Tensor& pool);

}  // namespace tandem::ops_check
