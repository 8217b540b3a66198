// The CUDA backend against the reference kernels and the single-device
// reference. Every test skips, saying why, on a machine without a GPU or in a
// build without the CUDA backend.

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/backend.h"
#include "exec/cpu_kernels.h"
#include "exec/host_ops.h"
#include "exec/training.h"
#include "gtest/gtest.h"
#include "tests/ir/op_samples.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"

namespace loom::exec {
namespace {

// Skips the test when the CUDA backend cannot run here.
#define LOOM_SKIP_WITHOUT_CUDA()                                        \
  do {                                                                  \
    auto probe = MakeBackend("cuda", ExecOptions{});                    \
    if (!probe.ok()) GTEST_SKIP() << probe.status().message();          \
  } while (false)

// Largest |a - b| over the largest |b| (at least 1e-30).
double Relative(const ir::HostTensor& a, const ir::HostTensor& b) {
  return MaxDiff(a, b) / std::max(MaxAbs(b), 1e-30);
}

// Every op sample's outputs on the GPU agree with the reference kernel in fp64,
// and every op family but the MoE routing ops has a CUDA kernel.
TEST(CudaBackendTest, OpsAgreeWithTheReferenceKernels) {
  LOOM_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(7);
  std::map<std::string, int> host_ops;
  for (const ir::testing::OpSample& sample : ir::testing::AllSamples(/*seed=*/11)) {
    SCOPED_TRACE(std::string(ir::OpKindName(sample.kind)) + " " + sample.label);
    std::vector<ir::HostTensor> values = ir::testing::SampleInputs(sample, rng);
    std::vector<const ir::HostTensor*> in;
    for (const ir::HostTensor& v : values) in.push_back(&v);
    ir::Task task;
    task.kind = sample.kind;
    task.attrs = sample.attrs;
    std::vector<ir::HostTensor> expected;
    ASSERT_TRUE(RunTaskKernel(task, in, ir::DType::kF64, expected, nullptr).ok());
    bool on_gpu = false;
    auto got = RunTaskOnCuda(task, in, ir::DType::kF64, &on_gpu);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_LE(Relative((*got)[i], expected[i]), 1e-12) << "output " << i;
    }
    if (!on_gpu) ++host_ops[std::string(ir::OpKindName(sample.kind))];
  }
  for (const auto& [kind, count] : host_ops) {
    EXPECT_TRUE(kind.rfind("moe_", 0) == 0 || kind.rfind("topk_gate", 0) == 0)
        << kind << " ran on the host";
  }
}

struct GpuCase {
  std::string name;
  std::string model;
  transform::Strategy strategy;
  int layers = 2;
  int64_t batch = 0;
};

class CudaTraining : public ::testing::TestWithParam<GpuCase> {};

// Three steps on the GPU stay within fp32's tolerance of the reference.
TEST_P(CudaTraining, MatchesTheReference) {
  LOOM_SKIP_WITHOUT_CUDA();
  const GpuCase& c = GetParam();
  ir::Graph spec = loom::testing::TinyStep(c.model, c.strategy.microbatches, c.layers,
                                           c.batch > 0 ? c.batch : 2 * c.strategy.dp);
  auto plan = transform::Parallelize(spec, c.strategy);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (ir::DType precision : {ir::DType::kF32, ir::DType::kF64}) {
    ExecOptions exec;
    exec.precision = precision;
    auto backend = MakeBackend("cuda", exec);
    ASSERT_TRUE(backend.ok()) << backend.status();
    TrainOptions train;
    train.steps = 3;
    train.check = true;
    train.precision = precision;
    auto report = RunTraining(spec, *plan, **backend, train);
    ASSERT_TRUE(report.ok()) << report.status();
    const double tolerance = precision == ir::DType::kF32 ? 1e-5 : 1e-10;
    const CheckReport& check = *report->check;
    EXPECT_LE(std::max({check.loss, check.gradients, check.parameters}), tolerance)
        << check.worst;
    // Memory is measured as the lowering predicts, activations included.
    bool some_activations = false;
    for (size_t d = 0; d < report->devices.size(); ++d) {
      EXPECT_EQ(report->devices[d].peak_bytes, report->predicted_peak_bytes[d]) << "device " << d;
      EXPECT_EQ(report->devices[d].peak_activation_bytes,
                report->predicted_peak_activation_bytes[d])
          << "device " << d;
      some_activations |= report->devices[d].peak_activation_bytes > 0;
    }
    EXPECT_TRUE(some_activations);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaTraining,
    ::testing::Values(GpuCase{"llama3_dp2_tp2_pp2", "llama3-8b", testing::Make(2, 2, 2, 4)},
                      GpuCase{"gpt2_tp4_sp", "gpt2", testing::Make(1, 4, 1, 1, 1, true), 2, 2},
                      GpuCase{"llama3_zero3", "llama3-8b", testing::Make(2, 2, 1, 2, 1, false, 3)},
                      GpuCase{"moe_ep4", "deepseek-v3-671b",
                              [] {
                                transform::Strategy s = testing::Make(4, 1, 1, 2);
                                s.ep = 4;
                                return s;
                              }(),
                              2, 4}),
    [](const ::testing::TestParamInfo<GpuCase>& info) { return info.param.name; });

// Without a GPU (or the CUDA build) the backend is refused with a reason, and
// `loom run --backend cuda` says so rather than crash.
TEST(CudaBackendTest, RefusedWithAReasonWhereItCannotRun) {
  auto backend = MakeBackend("cuda", ExecOptions{});
  if (backend.ok()) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable) << backend.status();
  EXPECT_FALSE(backend.status().message().empty());
}

}  // namespace
}  // namespace loom::exec
