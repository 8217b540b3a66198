#include "verify/scratch.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace loom::verify {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

Scratch::Scratch(size_t bytes) {
  // Less than this is not worth a region of its own (nor a huge page's zeroing).
  constexpr size_t kSmall = size_t{1} << 20;
  if (bytes < kSmall) return;
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;  // everything from the default resource
  // Advice only: without huge pages the region is ordinary memory.
  (void)madvise(p, size, MADV_HUGEPAGE);
  region_ = static_cast<char*>(p);
  size_ = size;
}

Scratch::~Scratch() {
  if (region_ != nullptr) munmap(region_, size_);
}

void* Scratch::do_allocate(size_t bytes, size_t alignment) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(region_);
  const uintptr_t at = (base + used_ + alignment - 1) / alignment * alignment;
  if (region_ != nullptr && at + bytes <= base + size_) {
    used_ = at + bytes - base;
    if (used_ > high_) high_ = used_;
    return reinterpret_cast<void*>(at);
  }
  return std::pmr::get_default_resource()->allocate(bytes, alignment);
}

void* Scratch::AllocateZeroed(size_t bytes, size_t alignment) {
  const size_t high = high_;
  char* p = static_cast<char*>(allocate(bytes, alignment));
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base = reinterpret_cast<uintptr_t>(region_);
  if (region_ != nullptr && at >= base && at < base + size_) {
    const size_t offset = at - base;
    if (offset < high) std::memset(p, 0, std::min(bytes, high - offset));
  } else {
    std::memset(p, 0, bytes);
  }
  return p;
}

void Scratch::do_deallocate(void* p, size_t bytes, size_t alignment) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base = reinterpret_cast<uintptr_t>(region_);
  if (region_ != nullptr && at >= base && at < base + size_) {
    // The last allocation is given back (a vector growing in place); others
    // stay until the region goes.
    if (at + bytes == base + used_) used_ = at - base;
    return;
  }
  std::pmr::get_default_resource()->deallocate(p, bytes, alignment);
}

}  // namespace loom::verify
