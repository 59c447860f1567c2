#!/usr/bin/env bash
# The host AdamW of an offloaded optimizer beside the host's memory bandwidth and beside torch's CPU AdamW, in one
# call: bash bench/host_adamw.sh BUILD_DIR [PYTHON] [PARAMS]. Prints Tandem's rate, the copy bandwidth, torch's rate
# (its default and its fused CPU AdamW, the best of them counted) and the ratio.
set -euo pipefail
build="${1:?usage: bench/host_adamw.sh BUILD_DIR [PYTHON] [PARAMS]}"
python="${2:-python3}"
params="${3:-134217728}"
"$build/bench/host_adamw_bench" --params "$params" | tee /tmp/host_adamw_tandem.txt
"$python" - "$params" <<'PY' | tee /tmp/host_adamw_torch.txt
import sys, time, torch
n = int(sys.argv[1])
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
best = 0.0
for fused in (False, True):
    p = torch.nn.Parameter(torch.rand(n))
    p.grad = torch.rand(n) * 1e-3
    try:
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, fused=fused)
        opt.step()
    except (RuntimeError, TypeError) as e:
        print(f"torch AdamW fused={fused}: not available ({e})")
        continue
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    rate = n / min(times)
    best = max(best, rate)
    print(f"torch AdamW fused={fused}: {rate / 1e9:.3f} Gparam/s")
print(f"torch best: {best / 1e9:.3f} Gparam/s")
PY
tandem=$(sed -n 's/^host AdamW: \([0-9.]*\) Gparam.*/\1/p' /tmp/host_adamw_tandem.txt)
torch=$(sed -n 's/^torch best: \([0-9.]*\) Gparam.*/\1/p' /tmp/host_adamw_torch.txt)
"$python" -c "print(f'Tandem / torch CPU AdamW: {$tandem / $torch:.2f}x')"
