// CPU initial values (ops.h random_fill): core/random_fill.h's draws on the host's cores.
#include "tandem/ops/cpu/cpu_ops.h"

namespace tandem::ops::cpu {

void random_fill(const Tensor& out, const RandomFill& fill) { random_fill_host(out.f32(), out.numel(), fill); }

}  // namespace tandem::ops::cpu
