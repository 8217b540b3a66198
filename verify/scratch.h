#ifndef LOOM_VERIFY_SCRATCH_H_
#define LOOM_VERIFY_SCRATCH_H_

// Scratch memory for the passes over a whole plan: one region taken from the
// system at once, with huge pages asked for where the system has them, handed
// out front to back and given back whole. The passes fill arrays as large as
// the plan; taken a 4 KiB page at a time, the first touches of those pages cost
// about as much as the passes' own work on a large plan.

#include <cstddef>
#include <memory_resource>

namespace loom::verify {

class Scratch : public std::pmr::memory_resource {
 public:
  // Room for about `bytes`; what does not fit comes from the default resource,
  // as everything does where `bytes` is small (under 1 MiB).
  explicit Scratch(size_t bytes);
  ~Scratch() override;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // `bytes` of zeros (memory the region never handed out is zero already).
  void* AllocateZeroed(size_t bytes, size_t alignment);

 private:
  void* do_allocate(size_t bytes, size_t alignment) override;
  void do_deallocate(void* p, size_t bytes, size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  char* region_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
  size_t high_ = 0;  // the region past this was never handed out
};

}  // namespace loom::verify

#endif  // LOOM_VERIFY_SCRATCH_H_
