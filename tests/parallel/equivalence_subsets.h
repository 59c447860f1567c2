// The "sanitized" subsets of the equivalence matrices in test_equivalence.cc: what the AddressSanitizer + UBSan suite
// runs in place of the whole matrix (tandem_mpi_subset in tests/CMakeLists.txt; the release suite runs every case).
// Each parallel feature runs once, in the smallest case that reaches its code; the comment says which code that is.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tandem {

inline std::map<std::string, std::vector<std::string>> equivalence_subsets(int world) {
  if (world == 8)
    return {{"sanitized",
             {
                 "llama_dp2_pp2_tp2_zero1_1f1b",  // all three axes at once: the 8-process groups, tp inside a stage
             }}};
  return {{"sanitized",
           {
               "gpt_dp4_pp1_tp1_zero3",        // ZeRO-3: parameters gathered before use, gradients reduce-scattered
               "mlp_dp4_pp1_tp1_zero1",        // ZeRO-1: gradients all-reduced, the optimizer state sharded; the mlp
               "gpt_dp2_pp1_tp2_zero2",        // ZeRO-2 beside tp: reduce-scatter over dp of tp-split gradients
               "mlp_dp1_pp1_tp4_zero0",        // tp 4: column- and row-parallel linears, their all-reduces
               "gpt_dp1_pp4_tp1_zero0_gpipe",  // GPipe over 4 stages: every send and receive of the pipeline
               "gpt_dp2_pp2_tp1_zero1_1f1b",   // 1F1B beside dp: the schedule's steady state, the dp reduce after it
               "gpt_dp1_pp4_tp1_zero0_interleaved_v2_recompute",       // interleaved chunks, activation recomputation
               "gpt_tied_dp1_pp4_tp1_zero0_1f1b",                      // the tied head's gradient summed across stages
               "llama_dp2_pp1_tp2_zero3",                              // GQA, RoPE and SwiGLU split over tp at ZeRO-3
               "llama_lora_dp2_pp1_tp2_zero3",                         // LoRA: frozen units sharded, adapters over tp
               "llama_lora_dropout_dp2_pp2_tp1_zero1_1f1b_recompute",  // dropout masks drawn again in recomputation
               "llama_docs_dp2_pp2_tp1_zero1_gpipe",                   // document masks on every stage
               "llama_tiles_dp1_pp2_tp2_zero0_1f1b_recompute",         // the loss in chunks over tp, the MLP in tiles
               "llama_fp8_dp2_pp1_tp2_zero2",                          // FP8 per-tensor scales: amax over tp
               "llama_fp8_rowwise_dp2_pp1_tp2_zero3",  // per-row scales of rows split over tp, after ZeRO-3's gather
               "gpt_dp2_pp1_tp2_zero3_bf16",           // bf16 compute against fp32 masters, sharded
           }}};
}

inline std::map<std::string, std::vector<std::string>> offload_subsets(int world) {
  if (world == 8)
    return {{"sanitized",
             {
                 "gpt_dp2_pp2_tp2_zero3_bf16_param",  // parameters and optimizer on the host, all three axes
             }}};
  return {{"sanitized",
           {
               "gpt_dp4_pp1_tp1_zero3_bf16_param",    // offload_param: the weights come up from the host for each use
               "gpt_dp2_pp2_tp1_zero1_fp16",          // fp16 with loss scaling: the host update skips an overflow
               "gpt_dp2_pp2_tp1_zero2_fp32_ratio50",  // offload_optimizer.ratio: first layers on the device
               "llama_dp2_pp2_tp1_zero3_fp32_ratio50_recompute_nvme",  // the swap file: state read and written back
               "gpt_dp4_pp1_tp1_zero2_bf16_unclipped_pieces1000",      // the update in the backward, sent up in pieces
               "gpt_tied_dp1_pp1_tp4_zero1_fp32_accum1_unclipped",     // a tied unit's two backward passes a step
           }}};
}

}  // namespace tandem
