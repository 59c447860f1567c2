// Rates: the speeds the time model turns work into seconds with. Built-in sets for an H200 and for a small CPU
// host; `tandem calibrate` measures a host's and writes them as JSON, which `tandem plan --rates FILE` reads.
#pragma once

#include <string>

#include "tandem/config/config.h"

namespace tandem::plan {

struct Rates {
  std::string name = "cpu";       // what they describe: "h200", "cpu", or the calibrated host
  std::string device = "cpu";     // "cpu" | "cuda": whose op scratch the memory model assumes
  double gemm_flops = 30e9;       // FLOP/s of large matmuls in a 16-bit compute dtype
  double gemm_flops_fp32 = 30e9;  // FLOP/s of large matmuls in fp32
  double gemm_flops_fp8 = 30e9;   // FLOP/s of large FP8 matmuls (fp8_matmul; on the CPU the fp32 product it runs)
  double grouped_flops = 30e9;    // FLOP/s of a mixture of experts' grouped products (many small ones), 16-bit
  // FLOP/s of causal attention's forward and backward, 16-bit compute dtype; on a "cuda" device at head dim 128, a
  // narrower head running at D / 128 of it (ops::attention_head_weight).
  double attention_forward_flops = 30e9;
  double attention_backward_flops = 30e9;
  double memory_bw = 8e9;    // B/s of elementwise work (bytes read plus bytes written)
  double op_overhead_s = 0;  // fixed cost of each op (kernel launch, small-kernel tail), on top of its work
  // Collectives inside one node, as bus bandwidth (NCCL's busbw: an all-reduce of S bytes over n ranks takes
  // 2 (n-1)/n S / busbw; a reduce-scatter or all-gather (n-1)/n S / busbw).
  double tp_bus_bw = 4e9;
  double dp_bus_bw = 4e9;
  double pp_p2p_bw = 4e9;          // B/s of one send between neighbouring stages in a node
  double inter_node_bus_bw = 1e9;  // for any group that spans nodes
  double inter_node_p2p_bw = 1e9;
  double latency_s = 20e-6;  // fixed cost of one collective or message
  // Offload: the host's memory traffic (bytes read plus written: the host AdamW moves 28 bytes a parameter, a
  // gradient sum 12), and copies between the device and host memory (page-locked for a GPU), each way.
  double host_memory_bw = 8e9;
  double to_host_bw = 8e9;
  double from_host_bw = 8e9;
};

// "h200" (bf16 GEMM 650 TFLOP/s at model shapes, attention at head dim 128 540 TFLOP/s forward and 400 backward, 8 us
// per op, NCCL all-reduce bus bandwidth 329 GB/s, HBM 4.0 TB/s; its host: 47 GB/s of AdamW traffic, 55 GB/s of
// page-locked copies each way) or "cpu" (what a 2-core host gives: 30 GFLOP/s, collectives through shared memory).
// Throws for other names.
Rates builtin_rates(const std::string& name);
// A built-in name, or a JSON file as save_rates writes it (keys it leaves out keep the "cpu" defaults, or the
// defaults of the built-in set its "base" key names).
Rates load_rates(const std::string& name_or_path);
void save_rates(const Rates& rates, const std::string& path);
config::Json rates_to_json(const Rates& rates);
Rates rates_from_json(const config::Json& json);

}  // namespace tandem::plan
