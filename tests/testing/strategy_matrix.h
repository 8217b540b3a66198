#ifndef LOOM_TESTS_TESTING_STRATEGY_MATRIX_H_
#define LOOM_TESTS_TESTING_STRATEGY_MATRIX_H_

// The matrix of parallel strategies every stage is tested on: tiny gpt2, llama3
// and DeepSeek-V3 models under dp, tp, sp, pp, vpp, ZeRO, recompute, ep and cp.

#include <cstdint>
#include <string>
#include <vector>

#include "transform/strategy.h"

namespace loom::testing {

using transform::Strategy;

struct Case {
  std::string name;
  std::string model;
  Strategy strategy;
  int layers = 0;
  int64_t batch = 0;
};

inline Strategy Make(int dp, int tp, int pp, int mb, int vpp = 1, bool sp = false, int zero = 0,
              bool recompute = false) {
  Strategy s;
  s.dp = dp;
  s.tp = tp;
  s.pp = pp;
  s.microbatches = mb;
  s.vpp = vpp;
  s.sp = sp;
  s.zero = zero;
  s.recompute = recompute;
  return s;
}

// `s` with the sequence split over cp context-parallel ranks, in 2cp load-balanced
// chunks (`balanced`, Megatron-LM's) or cp contiguous ones.
inline Strategy WithCp(Strategy s, int cp, bool balanced = true) {
  s.cp = cp;
  s.cp_balanced = balanced;
  return s;
}

inline std::vector<Case> Matrix() {
  std::vector<Case> cases;
  for (const char* model : {"gpt2", "llama3-8b"}) {
    std::string m = model;
    std::string tag = m == "gpt2" ? "gpt2" : "llama3";
    cases.push_back({tag + "_single", m, Make(1, 1, 1, 1)});
    cases.push_back({tag + "_dp2", m, Make(2, 1, 1, 2)});
    cases.push_back({tag + "_tp2", m, Make(1, 2, 1, 1)});
    cases.push_back({tag + "_tp4_sp", m, Make(1, 4, 1, 1, 1, true), 2, 2});
    cases.push_back({tag + "_pp2", m, Make(1, 1, 2, 2)});
    cases.push_back({tag + "_pp4_vpp2", m, Make(1, 1, 4, 2, 2), 8});
    cases.push_back({tag + "_dp2_tp2_pp2_mb2", m, Make(2, 2, 2, 2)});
    cases.push_back({tag + "_dp2_tp2_sp", m, Make(2, 2, 1, 1, 1, true)});
    cases.push_back({tag + "_zero1_dp2", m, Make(2, 1, 1, 2, 1, false, 1)});
    cases.push_back({tag + "_zero2_dp2_tp2", m, Make(2, 2, 1, 2, 1, false, 2)});
    cases.push_back({tag + "_zero3_tp2", m, Make(2, 2, 1, 1, 1, false, 3)});
    cases.push_back({tag + "_recompute_tp2_pp2", m, Make(1, 2, 2, 2, 1, false, 0, true)});
    cases.push_back({tag + "_dp2_tp2_pp2_sp_zero1_recompute", m,
                     Make(2, 2, 2, 2, 1, true, 1, true)});
    cases.push_back({tag + "_dp4_tp2_pp2", m, Make(4, 2, 2, 2), 0, 4});
    cases.push_back({tag + "_cp2", m, WithCp(Make(1, 1, 1, 1), 2)});
    cases.push_back({tag + "_dp2_tp2_pp2_cp2_sp", m, WithCp(Make(2, 2, 2, 2, 1, true), 2)});
    cases.push_back({tag + "_dp2_cp2_zero2", m, WithCp(Make(2, 1, 1, 2, 1, false, 2), 2)});
  }
  cases.push_back({"llama3_cp4", "llama3-8b", WithCp(Make(1, 1, 1, 1), 4)});
  cases.push_back({"llama3_cp2_contiguous", "llama3-8b", WithCp(Make(1, 1, 1, 1), 2, false)});
  cases.push_back({"llama3_dp2_pp2_cp2_zero1_recompute", "llama3-8b",
                   WithCp(Make(2, 1, 2, 2, 1, false, 1, true), 2)});
  // Mixture of experts: data, tensor, pipeline and expert parallelism.
  const std::string moe = "deepseek-v3-671b";
  cases.push_back({"moe_single", moe, Make(1, 1, 1, 1)});
  cases.push_back({"moe_dp2", moe, Make(2, 1, 1, 2)});
  cases.push_back({"moe_tp2", moe, Make(1, 2, 1, 1)});
  cases.push_back({"moe_pp2", moe, Make(1, 1, 2, 2)});
  Strategy ep4 = Make(4, 1, 1, 1);
  ep4.ep = 4;
  cases.push_back({"moe_ep4", moe, ep4});
  Strategy ep4dp2 = Make(8, 1, 1, 2);
  ep4dp2.ep = 4;
  cases.push_back({"moe_ep4_dp2", moe, ep4dp2});
  Strategy ep2tp2pp2 = Make(2, 2, 2, 2);
  ep2tp2pp2.ep = 2;
  cases.push_back({"moe_ep2_tp2_pp2", moe, ep2tp2pp2});
  cases.push_back({"moe_zero3_tp2", moe, Make(2, 2, 1, 1, 1, false, 3)});
  cases.push_back({"moe_dp2_tp2_cp2", moe, WithCp(Make(2, 2, 1, 2), 2)});
  return cases;
}

// The strategies the bf16 mixed-precision step is tested on: ZeRO 1 to 3 (the
// masters sharded like the moments), pipelines (gpt2's tied embedding updated on
// two stages), sequence parallelism with recomputation, and expert parallelism.
inline std::vector<Case> Bf16Matrix() {
  std::vector<Case> cases;
  cases.push_back({"llama3_dp2_tp2_pp2_zero1_mb2", "llama3-8b", Make(2, 2, 2, 2, 1, false, 1)});
  cases.push_back({"llama3_dp2_tp2_pp2_sp_zero1_recompute", "llama3-8b",
                   Make(2, 2, 2, 2, 1, true, 1, true)});
  cases.push_back({"llama3_zero2_dp2_tp2", "llama3-8b", Make(2, 2, 1, 2, 1, false, 2)});
  cases.push_back({"llama3_zero3_tp2", "llama3-8b", Make(2, 2, 1, 1, 1, false, 3)});
  cases.push_back({"gpt2_dp2_pp2_zero1", "gpt2", Make(2, 1, 2, 2, 1, false, 1)});
  Strategy ep2 = Make(4, 2, 2, 2, 1, false, 1);
  ep2.ep = 2;
  cases.push_back({"moe_dp4_ep2_tp2_pp2_zero1", "deepseek-v3-671b", ep2});
  return cases;
}

}  // namespace loom::testing

#endif  // LOOM_TESTS_TESTING_STRATEGY_MATRIX_H_
