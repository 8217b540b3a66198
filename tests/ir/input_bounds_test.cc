// Inputs that would make a reader grow without bound, hang or overflow are
// refused with one error that names the place: files that are not regular files
// or are too large, tensors too large for 64-bit sizes, layer tags and
// micro-batch counts beyond Loom's bounds.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/graph.h"
#include "ir/json_util.h"
#include "ir/text_format.h"

namespace loom::ir {
namespace {

TEST(InputBoundsTest, ReadersTakeRegularFilesOnly) {
  const std::string dir = ::testing::TempDir();
  auto directory = ReadTextFile(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_TRUE(absl::StrContains(directory.status().message(), "is a directory"));
  auto device = ReadTextFile("/dev/zero");
  ASSERT_FALSE(device.ok());
  EXPECT_TRUE(absl::StrContains(device.status().message(), "not a regular file"));
  const std::string fifo = dir + "input_bounds.fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = ReadTextFile(fifo);  // returns at once: nothing opens it
  ASSERT_FALSE(from_fifo.ok());
  EXPECT_TRUE(absl::StrContains(from_fifo.status().message(), "not a regular file"));
  std::remove(fifo.c_str());
  const std::string link = dir + "input_bounds.link";
  std::remove(link.c_str());
  ASSERT_EQ(::symlink("/dev/urandom", link.c_str()), 0);
  EXPECT_FALSE(ReadTextFile(link).ok());
  std::remove(link.c_str());
}

TEST(InputBoundsTest, FilesAboveTheLimitAreRefused) {
  const std::string path = ::testing::TempDir() + "input_bounds.txt";
  {
    std::ofstream out(path);
    out << std::string(100, 'x');
  }
  EXPECT_TRUE(ReadTextFile(path, 100).ok());
  auto big = ReadTextFile(path, 99);
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(absl::StrContains(big.status().message(), "above the 99 bytes")) << big.status();
  std::remove(path.c_str());
}

TEST(InputBoundsTest, TensorsWhoseSizesOverflowAreRefusedAtTheirLine) {
  for (const char* shape : {"f32[4611686018427387904,4611686018427387904]",
                            "f32[3037000499,3037000499]", "f32[1099511627776,1099511627776]"}) {
    const std::string text =
        std::string("graph \"t\" {\n  %x = input ") + shape + "\n  output %x\n}\n";
    auto g = ParseGraph(text, "huge.loom");
    ASSERT_FALSE(g.ok()) << shape;
    EXPECT_TRUE(absl::StrContains(g.status().message(), "huge.loom:2:")) << g.status();
    EXPECT_TRUE(absl::StrContains(g.status().message(), "above the 1 PiB")) << g.status();
  }
  // Four TiB is large, and still a tensor.
  auto big = ParseGraph("graph \"t\" {\n  %x = input f32[1048576,1048576]\n  output %x\n}\n",
                        "big.loom");
  EXPECT_TRUE(big.ok()) << big.status();
}

TEST(InputBoundsTest, LayerAndMicrobatchTagsAreBounded) {
  const std::string ok = "graph \"t\" {\n  %x = input f32[2]\n"
                         "  %y = neg(%x) : f32[2] @forward layer=1023 mb=1023\n  output %y\n}\n";
  EXPECT_TRUE(ParseGraph(ok, "t.loom").ok());
  for (const char* tag : {"layer=1024", "layer=2147483647", "mb=1024", "layer=-5"}) {
    const std::string text = std::string("graph \"t\" {\n  %x = input f32[2]\n"
                                         "  %y = neg(%x) : f32[2] @forward ") +
                             tag + "\n  output %y\n}\n";
    auto g = ParseGraph(text, "t.loom");
    ASSERT_FALSE(g.ok()) << tag;
    EXPECT_TRUE(absl::StrContains(g.status().message(), "t.loom:3:")) << g.status();
    EXPECT_TRUE(absl::StrContains(g.status().message(), "is outside")) << g.status();
  }
}

TEST(InputBoundsTest, TrainingStepsTakeBoundedMicrobatchCounts) {
  auto forward = ParseGraph(
      "graph \"f\" {\n  %x = input f32[4,2]\n  %w = parameter f32[2,2]\n"
      "  %y = matmul(%x, %w) : f32[4,2] @forward\n  %l = sum_squares(%y) : f32[] loss @forward\n"
      "  output %l\n}\n",
      "f.loom");
  ASSERT_TRUE(forward.ok()) << forward.status();
  TrainingOptions options;
  options.microbatches = kMaxMicrobatches + 1;
  auto step = BuildTrainingStep(*forward, options);
  ASSERT_FALSE(step.ok());
  EXPECT_TRUE(absl::StrContains(step.status().message(), "micro-batches 1025 is outside 1..1024"))
      << step.status();
}

}  // namespace
}  // namespace loom::ir
