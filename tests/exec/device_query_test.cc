#include "exec/device_query.h"

#include "gtest/gtest.h"

namespace loom::exec {
namespace {

// Without CUDA every query says so; with CUDA but no device the test skips.
TEST(DeviceQueryTest, SmokeKernelRunsOrSkipsCleanly) {
  if (!BuiltWithCuda()) {
    EXPECT_EQ(CudaDeviceCount().status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(CudaSmokeTest().code(), absl::StatusCode::kUnimplemented);
    GTEST_SKIP() << "built without CUDA";
  }
  auto count = CudaDeviceCount();
  if (!count.ok() || *count == 0) GTEST_SKIP() << "no CUDA device";
  EXPECT_TRUE(CudaSmokeTest().ok()) << CudaSmokeTest();
}

// A CUDA build links NCCL and reports its version.
TEST(DeviceQueryTest, NcclVersionInCudaBuild) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  auto v = NcclVersion();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->substr(0, 6), "NCCL 2");
}

}  // namespace
}  // namespace loom::exec
