// One process per GPU: `loom run --backend cuda` started twice with torchrun's
// environment runs a dp2 plan across two GPUs. Skips, saying why, without two
// GPUs or without the CUDA backend.

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exec/backend.h"
#include "exec/device_query.h"
#include "gtest/gtest.h"
#include "tests/tools/cli_test_util.h"

namespace loom::tools::testing {
namespace {

TEST(CudaLaunchTest, TwoProcessesRunADataParallelPlan) {
  auto backend = exec::MakeBackend("cuda", exec::ExecOptions{});
  if (!backend.ok()) GTEST_SKIP() << backend.status().message();
  auto gpus = exec::CudaDeviceCount();
  if (!gpus.ok() || *gpus < 2) GTEST_SKIP() << "one process per GPU needs two GPUs";
  const std::string plan = ::testing::TempDir() + "launch_plan.json";
  Result p = RunCli({"plan", "--model", "llama3-8b", "--tiny", "--layers", "2", "--dp", "2",
                     "--microbatches", "2", "-o", plan});
  ASSERT_EQ(p.code, kExitOk) << p.err;
  std::vector<std::string> out(2);
  std::vector<int> code(2, -1);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      const std::string cmd = absl::StrCat(
          "RANK=", r, " WORLD_SIZE=2 LOCAL_RANK=", r, " MASTER_ADDR=127.0.0.1 MASTER_PORT=29561 ",
          LOOM_BINARY, " run ", plan,
          " --model llama3-8b --tiny --layers 2 --backend cuda --steps 2 --check 2>&1");
      out[r] = RunShell(cmd, code[r]);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(code[r], 0) << "rank " << r << ":\n" << out[r];
    EXPECT_TRUE(absl::StrContains(out[r], "within tolerance")) << out[r];
  }
}

}  // namespace
}  // namespace loom::tools::testing
