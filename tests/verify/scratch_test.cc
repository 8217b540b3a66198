// Scratch memory (verify/scratch.h): aligned, disjoint blocks from one region,
// zeros where asked for even on memory handed out before, and the default
// resource beyond the region.

#include "verify/scratch.h"

#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace loom::verify {
namespace {

bool AllZero(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) {
    if (c[i] != 0) return false;
  }
  return true;
}

TEST(ScratchTest, BlocksAreAlignedAndDisjoint) {
  Scratch scratch(4 << 20);
  char* a = static_cast<char*>(scratch.allocate(3, 1));
  auto* b = static_cast<int64_t*>(scratch.allocate(5 * sizeof(int64_t), alignof(int64_t)));
  char* c = static_cast<char*>(scratch.allocate(100, 64));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % alignof(int64_t), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % 64, 0u);
  std::memset(a, 1, 3);
  for (int i = 0; i < 5; ++i) b[i] = -1;
  std::memset(c, 2, 100);
  EXPECT_EQ(a[2], 1);
  EXPECT_EQ(b[0], -1);
  EXPECT_EQ(b[4], -1);
  EXPECT_EQ(c[0], 2);
  EXPECT_TRUE(a + 3 <= reinterpret_cast<char*>(b));
  EXPECT_TRUE(reinterpret_cast<char*>(b + 5) <= c);
}

TEST(ScratchTest, ZeroedMemoryIsZeroAfterReuse) {
  Scratch scratch(4 << 20);
  void* first = scratch.allocate(4096, 8);
  std::memset(first, 0xff, 4096);
  // The last block given back is handed out again.
  scratch.deallocate(first, 4096, 8);
  void* again = scratch.AllocateZeroed(8192, 8);
  EXPECT_EQ(again, first);
  EXPECT_TRUE(AllZero(again, 8192));
}

TEST(ScratchTest, VectorsGrowPastTheRegion) {
  Scratch scratch(1 << 20);  // a 2 MiB region
  std::pmr::vector<int64_t> small(&scratch), large(&scratch);
  small.assign(8, 7);
  large.resize(1 << 20);  // 8 MiB
  std::iota(large.begin(), large.end(), 0);
  EXPECT_EQ(large[(1 << 20) - 1], (1 << 20) - 1);
  EXPECT_EQ(small[7], 7);
  void* zeros = scratch.AllocateZeroed(1 << 20, 16);
  EXPECT_TRUE(AllZero(zeros, 1 << 20));
  scratch.deallocate(zeros, 1 << 20, 16);
}

TEST(ScratchTest, SmallScratchUsesTheDefaultResource) {
  Scratch scratch(1000);
  std::pmr::vector<int> v(1000, 3, &scratch);
  EXPECT_EQ(v[999], 3);
  void* zeros = scratch.AllocateZeroed(4096, 8);
  EXPECT_TRUE(AllZero(zeros, 4096));
  scratch.deallocate(zeros, 4096, 8);
}

}  // namespace
}  // namespace loom::verify
