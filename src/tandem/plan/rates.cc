#include "tandem/plan/rates.h"

#include <filesystem>
#include <fstream>

#include "tandem/core/error.h"

namespace tandem::plan {

Rates builtin_rates(const std::string& name) {
  Rates r;
  if (name == "cpu") return r;
  if (name == "h200") {
    r.name = "h200";
    r.device = "cuda";
    // bf16 GEMMs at transformer shapes (d 1600-5120): 888 TFLOP/s at 8192^3 (989 peak), less on thinner ones.
    // This rate and op_overhead_s were fitted to nine 1- and 2-GPU training runs (docs/benchmarks.md).
    r.gemm_flops = 650e12;
    r.gemm_flops_fp32 = 50e12;  // plain fp32 (no TF32): 67 TFLOP/s peak
    // FP8 tensor cores (1979 TFLOP/s peak, twice bf16's): fitted to the Llama 3.2 1B and 8-layer Llama-3-8B runs of
    // 2026-12-02 in FP8 so their predicted steps err as the same runs' in bf16 do (4-5% slow; docs/benchmarks.md).
    r.gemm_flops_fp8 = 1300e12;
    // The experts' grouped products, one cuBLASLt product per expert over its rows: 56-76 TFLOP/s in the op profile
    // of the 8-layer Qwen3-30B-A3B shape (128 experts of about 256 rows a product), fitted so that shape's step at
    // micro 4 x 2 is predicted at the 579 ms measured beside transformers (docs/benchmarks.md, 2026-12-04; another
    // call of that day ran the same step in 413 ms).
    r.grouped_flops = 75e12;
    // cuDNN's fused attention at head dim 128 (bf16, 32 query heads over 8, causal; ops_check on an H100, whose tensor
    // cores the H200 shares): forward 553-609 TFLOP/s and the deterministic backward 383-455 from T 2k to 128k
    // (the backward in blocks past 32k). At head dim 64 the same rates, halved, give 270 and 200, where cuDNN ran
    // 256 and 199 at T 1024 on an H200 (the rate the gpt runs above were fitted with).
    r.attention_forward_flops = 540e12;
    r.attention_backward_flops = 400e12;
    r.memory_bw = 4.0e12;    // HBM3e, 4.8 TB/s peak
    r.op_overhead_s = 8e-6;  // launch and tail of each kernel: what makes micro-batches of 1-2 slower
    r.tp_bus_bw = 329e9;     // NCCL all-reduce bus bandwidth over NVLink inside a node
    r.dp_bus_bw = 329e9;
    r.pp_p2p_bw = 300e9;         // one NVLink send
    r.inter_node_bus_bw = 45e9;  // a 400 Gb/s NIC per GPU
    r.inter_node_p2p_bw = 45e9;
    r.latency_s = 15e-6;
    // Its host, measured beside the GPU on 2026-12-01 (16 cores, 128 GiB): page-locked copies 54.8 GB/s up and
    // 55.1 GB/s down. The host's work is priced at the rate that reproduces the host AdamW spans (the update and
    // the cast of its values) of the offloaded runs' timelines of 2026-12-02 over the bytes the counting host
    // logs: 906 ms for the 2.80B and 2.00 s for the 6.28B (docs/benchmarks.md), predicted 0.90 and 2.02 s.
    r.host_memory_bw = 118e9;
    r.to_host_bw = 55.1e9;
    r.from_host_bw = 54.8e9;
    return r;
  }
  TANDEM_FAIL("unknown rates '", name, "': use \"h200\", \"cpu\" or a JSON file written by `tandem calibrate`");
}

config::Json rates_to_json(const Rates& r) {
  return config::Json{{"name", r.name},
                      {"device", r.device},
                      {"gemm_flops", r.gemm_flops},
                      {"gemm_flops_fp32", r.gemm_flops_fp32},
                      {"gemm_flops_fp8", r.gemm_flops_fp8},
                      {"grouped_flops", r.grouped_flops},
                      {"attention_forward_flops", r.attention_forward_flops},
                      {"attention_backward_flops", r.attention_backward_flops},
                      {"memory_bw", r.memory_bw},
                      {"op_overhead_s", r.op_overhead_s},
                      {"tp_bus_bw", r.tp_bus_bw},
                      {"dp_bus_bw", r.dp_bus_bw},
                      {"pp_p2p_bw", r.pp_p2p_bw},
                      {"inter_node_bus_bw", r.inter_node_bus_bw},
                      {"inter_node_p2p_bw", r.inter_node_p2p_bw},
                      {"latency_s", r.latency_s},
                      {"host_memory_bw", r.host_memory_bw},
                      {"to_host_bw", r.to_host_bw},
                      {"from_host_bw", r.from_host_bw}};
}

Rates rates_from_json(const config::Json& j) {
  Rates r = builtin_rates(j.value("base", std::string("cpu")));
  const config::Json known = rates_to_json(r);
  // "attention_flops": one rate for both directions, as files written before the two were apart say it.
  for (const auto& [key, value] : j.items())
    if (key != "base" && key != "attention_flops" && !known.contains(key))
      TANDEM_FAIL("rates: unknown key '", key, "'; known keys: ", known.dump());
  r.name = j.value("name", r.name);
  r.device = j.value("device", r.device);
  if (r.device != "cpu" && r.device != "cuda") TANDEM_FAIL("rates: device '", r.device, "' is not cpu or cuda");
  auto num = [&](const char* key, double& field) {
    if (!j.contains(key)) return;
    field = j.at(key).get<double>();
    if (!(field > 0)) TANDEM_FAIL("rates: ", key, " must be positive, got ", j.at(key).dump());
  };
  num("gemm_flops", r.gemm_flops);
  num("gemm_flops_fp32", r.gemm_flops_fp32);
  num("gemm_flops_fp8", r.gemm_flops_fp8);
  num("grouped_flops", r.grouped_flops);
  num("attention_flops", r.attention_forward_flops);
  num("attention_flops", r.attention_backward_flops);
  num("attention_forward_flops", r.attention_forward_flops);
  num("attention_backward_flops", r.attention_backward_flops);
  num("memory_bw", r.memory_bw);
  if (j.contains("op_overhead_s")) {
    r.op_overhead_s = j.at("op_overhead_s").get<double>();
    if (!(r.op_overhead_s >= 0))
      TANDEM_FAIL("rates: op_overhead_s must be 0 or more, got ", j.at("op_overhead_s").dump());
  }
  num("tp_bus_bw", r.tp_bus_bw);
  num("dp_bus_bw", r.dp_bus_bw);
  num("pp_p2p_bw", r.pp_p2p_bw);
  num("inter_node_bus_bw", r.inter_node_bus_bw);
  num("inter_node_p2p_bw", r.inter_node_p2p_bw);
  num("latency_s", r.latency_s);
  num("host_memory_bw", r.host_memory_bw);
  num("to_host_bw", r.to_host_bw);
  num("from_host_bw", r.from_host_bw);
  return r;
}

Rates load_rates(const std::string& name_or_path) {
  if (name_or_path == "cpu" || name_or_path == "h200") return builtin_rates(name_or_path);
  if (!std::filesystem::exists(name_or_path))
    TANDEM_FAIL("rates '", name_or_path, "': no such file, and not a built-in set (\"h200\", \"cpu\")");
  std::ifstream in(name_or_path);
  config::Json j;
  try {
    j = config::Json::parse(in);
  } catch (const std::exception& e) {
    TANDEM_FAIL("rates file '", name_or_path, "' is not valid JSON: ", e.what());
  }
  return rates_from_json(j);
}

void save_rates(const Rates& r, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) TANDEM_FAIL("cannot write the rates file '", path, "'");
  out << rates_to_json(r).dump(2) << "\n";
  if (!out) TANDEM_FAIL("writing the rates file '", path, "' failed");
}

}  // namespace tandem::plan
