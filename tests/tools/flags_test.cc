#include "tools/flags.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom::tools {
namespace {

absl::StatusOr<int64_t> Bytes(const std::string& value, int64_t max = int64_t{1} << 60) {
  FlagSet flags("test", "");
  flags.AddString("--memory", "BYTES", "");
  absl::Status parsed = flags.Parse({"--memory", value});
  if (!parsed.ok()) return parsed;
  return flags.GetBytes("--memory", -1, max);
}

TEST(FlagsTest, BytesWithAndWithoutUnits) {
  EXPECT_EQ(*Bytes("85899345920"), 85899345920);
  EXPECT_EQ(*Bytes("80GiB"), int64_t{80} << 30);
  EXPECT_EQ(*Bytes("80gib"), int64_t{80} << 30);
  EXPECT_EQ(*Bytes("80 GiB"), int64_t{80} << 30);
  EXPECT_EQ(*Bytes("1.5TiB"), int64_t{3} << 39);
  EXPECT_EQ(*Bytes("80GB"), 80'000'000'000);
  EXPECT_EQ(*Bytes("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*Bytes("3kB"), 3000);
  EXPECT_EQ(*Bytes("7B"), 7);
  EXPECT_EQ(*Bytes("2.01GB"), 2'010'000'000);  // exact, not a float product
  EXPECT_EQ(*Bytes("1.07GB"), 1'070'000'000);
  EXPECT_EQ(*Bytes(".5KiB"), 512);
}

TEST(FlagsTest, BytesRefusedWithTheFlagNamed) {
  for (const char* bad : {"80Gb/s", "80 GiBs", "-1GiB", "GiB", "0.5B", "1e30", "2EiB", "80 G", "1.2.3GB",
                          "0.0000000001KB", "."}) {
    auto r = Bytes(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(std::string(r.status().message()).find("flag '--memory' expects bytes"),
              std::string::npos)
        << r.status();
  }
  EXPECT_FALSE(Bytes("2GiB", int64_t{1} << 30).ok());  // above the maximum
}

}  // namespace
}  // namespace loom::tools
