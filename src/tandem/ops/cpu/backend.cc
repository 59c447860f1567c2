// The CPU backend's table (backend.h): every op of op_list.h, and the scratch its kernels allocate.
#include "tandem/ops/cpu/cpu_ops.h"

namespace tandem::ops::cpu {

const Backend& backend() {
#define TANDEM_OP_ENTRY(R, name, params, args) .name = &cpu::name,
  static const Backend table{.name = "cpu", TANDEM_OPS(TANDEM_OP_ENTRY)};
#undef TANDEM_OP_ENTRY
  return table;
}

const Scratch& scratch() {
  static const Scratch table = [] {
    Scratch s;
    s.matmul = &matmul_scratch;
    s.linear_forward = &linear_forward_scratch;
    s.fp8_matmul = &fp8_matmul_scratch;
    s.linear_weight_grad = &linear_weight_grad_scratch;
    s.grouped_matmul = &grouped_matmul_scratch;
    s.grouped_weight_grad = &grouped_weight_grad_scratch;
    s.attention_gqa_forward = &attention_gqa_forward_scratch;
    s.attention_gqa_backward = &attention_gqa_backward_scratch;
    s.attention_gqa_documents_forward = &attention_gqa_documents_forward_scratch;
    s.attention_gqa_documents_backward = &attention_gqa_documents_backward_scratch;
    return s;
  }();
  return table;
}

}  // namespace tandem::ops::cpu
