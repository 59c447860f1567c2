// The op front end of the mixture-of-experts ops (ops.h's last section): devices, dtypes and shapes checked, then the
// device's backend. Legend: N tokens, E experts, k choices per token, M = N k routed rows, C channels.
#include "tandem/ops/op_checks.h"
#include "tandem/ops/ops.h"

namespace tandem::ops {

using namespace checks;

namespace {

// A (rows, cols) table of `dtype`.
void check_table(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t cols, DType dtype) {
  check_dtype(op, name, t, dtype);
  TANDEM_CHECK(t.rank() == 2 && t.dim(0) == rows && t.dim(1) == cols, op, ": ", name, " ", shape_str(t.shape()),
               " is not (", rows, ", ", cols, ")");
}

// logits or probs (N, E) f32 and the choices idx (N, k) i32 of the same rows, 0 < k <= E. Returns k.
int check_choices(const char* op, const char* table_name, const Tensor& table, const Tensor& idx) {
  check_f32(op, table_name, table);
  TANDEM_CHECK(table.rank() == 2 && table.dim(1) > 0, op, ": ", table_name, " ", shape_str(table.shape()),
               " is not (N, E)");
  check_dtype(op, "idx", idx, DType::I32);
  TANDEM_CHECK(idx.rank() == 2 && idx.dim(0) == table.dim(0) && idx.dim(1) > 0 && idx.dim(1) <= table.dim(1), op,
               ": idx ", shape_str(idx.shape()), " is not (N, k) with 0 < k <= E for ", table_name, " ",
               shape_str(table.shape()));
  return static_cast<int>(idx.dim(1));
}

// The routed rows yg (M, C) of the tokens y (N, C) by pos (N, k) i32: both in one compute dtype.
void check_routed(const char* op, const char* rows_name, const Tensor& rows, const char* routed_name,
                  const Tensor& routed, const Tensor& pos) {
  check_compute(op, {{rows_name, rows}, {routed_name, routed}});
  TANDEM_CHECK(rows.rank() == 2, op, ": ", rows_name, " ", shape_str(rows.shape()), " is not (N, C)");
  check_dtype(op, "pos", pos, DType::I32);
  TANDEM_CHECK(pos.rank() == 2 && pos.dim(0) == rows.dim(0), op, ": pos ", shape_str(pos.shape()),
               " is not (N, k) for ", rows_name, " ", shape_str(rows.shape()));
  check_table(op, routed_name, routed, pos.numel(), rows.dim(1), rows.dtype());
  TANDEM_CHECK(!overlaps(rows, routed), op, ": ", rows_name, " and ", routed_name, " overlap");
}

}  // namespace

void moe_route(const Tensor& logits, int k, bool normalize, const Tensor& probs, const Tensor& idx,
               const Tensor& weights) {
  const char* op = "moe_route";
  check_devices(op, probs, logits, idx, weights);
  TANDEM_CHECK(check_choices(op, "logits", logits, idx) == k, op, ": idx ", shape_str(idx.shape()), " for k = ", k);
  check_table(op, "probs", probs, logits.dim(0), logits.dim(1), DType::F32);
  check_table(op, "weights", weights, logits.dim(0), k, DType::F32);
  return backend_of(op, probs).moe_route(logits, k, normalize, probs, idx, weights);
}

void moe_route_backward(const Tensor& probs, const Tensor& idx, const Tensor& dweights, bool normalize,
                        const Tensor& aux, const Tensor& dlogits) {
  const char* op = "moe_route_backward";
  check_devices(op, dlogits, probs, idx, dweights);
  const int k = check_choices(op, "probs", probs, idx);
  check_table(op, "dweights", dweights, probs.dim(0), k, DType::F32);
  check_table(op, "dlogits", dlogits, probs.dim(0), probs.dim(1), DType::F32);
  if (aux.defined()) {
    check_devices(op, dlogits, aux);
    check_table(op, "aux", aux.view({1, aux.numel()}), 1, probs.dim(1), DType::F32);
  }
  TANDEM_CHECK(!overlaps(dlogits, probs) && !overlaps(dlogits, dweights), op, ": dlogits overlaps its inputs");
  return backend_of(op, dlogits).moe_route_backward(probs, idx, dweights, normalize, aux, dlogits);
}

void moe_route_stats(const Tensor& probs, const Tensor& idx, const Tensor& counts, const Tensor& probsum) {
  const char* op = "moe_route_stats";
  check_devices(op, counts, probs, idx, probsum);
  check_choices(op, "probs", probs, idx);
  check_table(op, "counts", counts.view({1, counts.numel()}), 1, probs.dim(1), DType::F32);
  check_table(op, "probsum", probsum.view({1, probsum.numel()}), 1, probs.dim(1), DType::F32);
  return backend_of(op, counts).moe_route_stats(probs, idx, counts, probsum);
}

void moe_aux_loss(const Tensor& counts, const Tensor& probsum, float scale, const Tensor& sum) {
  const char* op = "moe_aux_loss";
  check_devices(op, sum, counts, probsum);
  check_f32(op, "counts", counts);
  check_f32(op, "probsum", probsum);
  check_f32(op, "sum", sum);
  check_same_shape(op, "counts", counts, "probsum", probsum);
  TANDEM_CHECK(sum.numel() == 1, op, ": sum ", shape_str(sum.shape()), " is not one element");
  return backend_of(op, sum).moe_aux_loss(counts, probsum, scale, sum);
}

void moe_order(const Tensor& idx, int experts, const Tensor& pos, const Tensor& offsets) {
  const char* op = "moe_order";
  check_devices(op, pos, idx, offsets);
  check_dtype(op, "idx", idx, DType::I32);
  TANDEM_CHECK(idx.rank() == 2 && experts > 0, op, ": idx ", shape_str(idx.shape()), " is not (N, k), or ", experts,
               " experts");
  check_table(op, "pos", pos, idx.dim(0), idx.dim(1), DType::I32);
  check_table(op, "offsets", offsets.view({1, offsets.numel()}), 1, experts + 1, DType::I32);
  TANDEM_CHECK(idx.numel() < (int64_t{1} << 31), op, ": ", idx.numel(), " routed rows do not fit i32 rows");
  return backend_of(op, pos).moe_order(idx, experts, pos, offsets);
}

std::vector<int64_t> moe_expert_rows(const Tensor& offsets, int64_t rows) {
  const char* op = "moe_expert_rows";
  check_devices(op, offsets);
  check_dtype(op, "offsets", offsets, DType::I32);
  TANDEM_CHECK(offsets.rank() == 1 && offsets.dim(0) >= 2 && rows >= 0, op, ": offsets ", shape_str(offsets.shape()),
               " is not (E + 1), or ", rows, " rows");
  return backend_of(op, offsets).moe_expert_rows(offsets, rows);
}

namespace {

// a (M, K) or dy (M, N) split into groups of `rows` (summing to M) against a stack of G matrices: each (N, K).
void check_groups(const char* op, const char* rows_name, const Tensor& grouped, const char* stack_name,
                  const Tensor& stack, const std::vector<int64_t>& rows) {
  TANDEM_CHECK(grouped.rank() == 2, op, ": ", rows_name, " ", shape_str(grouped.shape()), " is not (M, ...)");
  TANDEM_CHECK(stack.rank() == 3 && stack.dim(0) == static_cast<int64_t>(rows.size()), op, ": ", stack_name, " ",
               shape_str(stack.shape()), " is not a stack of ", rows.size(), " matrices, one per group");
  int64_t sum = 0;
  for (int64_t r : rows) {
    TANDEM_CHECK(r >= 0, op, ": a group of ", r, " rows");
    sum += r;
  }
  TANDEM_CHECK(sum == grouped.dim(0), op, ": the groups hold ", sum, " rows, ", rows_name, " ",
               shape_str(grouped.shape()), " has ", grouped.dim(0));
}

}  // namespace

void grouped_matmul(const Tensor& a, const Tensor& b, const Tensor& c, const std::vector<int64_t>& rows, bool trans_b,
                    float beta) {
  const char* op = "grouped_matmul";
  check_devices(op, c, a, b);
  check_compute(op, {{"a", a}, {"b", b}});
  TANDEM_CHECK(c.dtype() == a.dtype() || c.dtype() == DType::F32, op, ": c holds ", dtype_name(c.dtype()),
               ", expected ", dtype_name(a.dtype()), " or f32");
  check_groups(op, "a", a, "b", b, rows);
  const int64_t n = trans_b ? b.dim(1) : b.dim(2), k = trans_b ? b.dim(2) : b.dim(1);
  TANDEM_CHECK(a.dim(1) == k && c.rank() == 2 && c.dim(0) == a.dim(0) && c.dim(1) == n, op, ": a ",
               shape_str(a.shape()), ", b ", shape_str(b.shape()), (trans_b ? " transposed" : ""), " and c ",
               shape_str(c.shape()), " do not chain");
  return backend_of(op, c).grouped_matmul(a, b, c, rows, trans_b, beta);
}

void grouped_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw, const std::vector<int64_t>& rows) {
  const char* op = "grouped_weight_grad";
  check_devices(op, dw, dy, x);
  check_compute(op, {{"dy", dy}, {"x", x}});
  TANDEM_CHECK(dw.dtype() == dy.dtype() || dw.dtype() == DType::F32, op, ": dw holds ", dtype_name(dw.dtype()),
               ", expected ", dtype_name(dy.dtype()), " or f32");
  check_groups(op, "dy", dy, "dw", dw, rows);
  TANDEM_CHECK(x.rank() == 2 && x.dim(0) == dy.dim(0) && dw.dim(1) == dy.dim(1) && dw.dim(2) == x.dim(1), op, ": dy ",
               shape_str(dy.shape()), " and x ", shape_str(x.shape()), " do not make dw ", shape_str(dw.shape()));
  return backend_of(op, dw).grouped_weight_grad(dy, x, dw, rows);
}

void moe_gather(const Tensor& x, const Tensor& pos, const Tensor& xg) {
  const char* op = "moe_gather";
  check_devices(op, xg, x, pos);
  check_routed(op, "x", x, "xg", xg, pos);
  return backend_of(op, xg).moe_gather(x, pos, xg);
}

void moe_combine(const Tensor& yg, const Tensor& pos, const Tensor& weights, const Tensor& y) {
  const char* op = "moe_combine";
  check_devices(op, y, yg, pos);
  check_routed(op, "y", y, "yg", yg, pos);
  if (weights.defined()) {
    check_devices(op, y, weights);
    check_table(op, "weights", weights, pos.dim(0), pos.dim(1), DType::F32);
  }
  return backend_of(op, y).moe_combine(yg, pos, weights, y);
}

void moe_combine_backward(const Tensor& dy, const Tensor& yg, const Tensor& pos, const Tensor& weights,
                          const Tensor& dyg, const Tensor& dweights) {
  const char* op = "moe_combine_backward";
  check_devices(op, dyg, dy, yg, pos, weights, dweights);
  check_routed(op, "dy", dy, "yg", yg, pos);
  check_routed(op, "dy", dy, "dyg", dyg, pos);
  TANDEM_CHECK(!overlaps(yg, dyg), op, ": yg and dyg overlap");
  check_table(op, "weights", weights, pos.dim(0), pos.dim(1), DType::F32);
  check_table(op, "dweights", dweights, pos.dim(0), pos.dim(1), DType::F32);
  return backend_of(op, dyg).moe_combine_backward(dy, yg, pos, weights, dyg, dweights);
}

}  // namespace tandem::ops
