// The CUDA backend is a plugin loaded only when asked for (exec/cuda_plugin.h):
// the command links no CUDA library and starts small, and `--backend cuda` says
// in one line why it cannot run when the plugin is missing or is no plugin.

#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exec/device_query.h"
#include "gtest/gtest.h"
#include "tests/tools/cli_test_util.h"

namespace loom::tools::testing {
namespace {

TEST(CudaPluginTest, TheCommandLinksNoCudaLibrary) {
  int code = -1;
  const std::string libs = RunShell(absl::StrCat("ldd ", LOOM_BINARY, " 2>&1"), code);
  if (code != 0) GTEST_SKIP() << "ldd is not available here: " << libs;
  ASSERT_TRUE(absl::StrContains(libs, "libc.so")) << libs;  // ldd did list the libraries
  for (const char* cuda : {"libcuda.", "libcudart", "libcublas", "libnccl"}) {
    EXPECT_FALSE(absl::StrContains(libs, cuda)) << cuda << " is linked:\n" << libs;
  }
}

TEST(CudaPluginTest, HelpStartsWithoutTheGpuLibraries) {
  int code = -1;
  const std::string kib =
      RunShell(absl::StrCat(LOOM_PEAK_RSS_BINARY, " ", LOOM_BINARY, " --help"), code);
  ASSERT_EQ(code, 0) << "loom --help did not run";
  EXPECT_LT(std::stol(kib), 64 * 1024) << "loom --help peaked at " << kib << " KiB";
}

class CudaPluginRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = ::testing::TempDir() + "cuda_plugin_plan.json";
    Result p = RunCli({"plan", "--model", "llama3-8b", "--tiny", "--layers", "1", "-o", plan_});
    ASSERT_EQ(p.code, kExitOk) << p.err;
  }
  // `loom run --backend cuda` with LOOM_CUDA_PLUGIN set to `plugin`: its error
  // output and exit code.
  std::string RunWithPlugin(const std::string& plugin, int& code) {
    return RunShell(absl::StrCat("LOOM_CUDA_PLUGIN='", plugin, "' ", LOOM_BINARY, " run ", plan_,
                                 " --model llama3-8b --tiny --layers 1 --backend cuda 2>&1 >/dev/null"),
                    code);
  }
  std::string plan_;
};

TEST_F(CudaPluginRunTest, AMissingPluginIsNamed) {
  int code = -1;
  const std::string err = RunWithPlugin("/nonexistent/libloom_cuda.so", code);
  EXPECT_EQ(code, kExitBadInput) << err;
  EXPECT_EQ(Lines(err), 1) << err;
  if (exec::BuiltWithCuda()) {
    EXPECT_TRUE(absl::StrContains(err, "/nonexistent/libloom_cuda.so cannot be loaded")) << err;
  } else {
    EXPECT_TRUE(absl::StrContains(err, "has no CUDA backend")) << err;
  }
}

TEST_F(CudaPluginRunTest, ALibraryThatIsNoPluginIsRefused) {
  if (!exec::BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  Dl_info info;
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(&std::fopen), &info), 0);
  int code = -1;
  const std::string err = RunWithPlugin(info.dli_fname, code);
  EXPECT_EQ(code, kExitBadInput) << err;
  EXPECT_EQ(Lines(err), 1) << err;
  EXPECT_TRUE(absl::StrContains(err, "has no entry point LoomCudaPlugin")) << err;
}

}  // namespace
}  // namespace loom::tools::testing
