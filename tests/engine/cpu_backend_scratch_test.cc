// The CPU backend keeps freed scratch blocks of 2 MiB and more for the next
// request of the same size (engine/backend/cpu/cpu_backend.cc ScratchCache):
// the engine's per-chunk buffers then stop faulting fresh pages in.
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>

#include "engine/backend/backend.h"
#include "gtest/gtest.h"

namespace ced {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::unique_ptr<Backend> Cpu() {
  auto backend = CreateBackend("cpu");
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

TEST(CpuBackendScratchTest, AFreedLargeBlockServesTheNextRequestOfItsSize) {
  std::unique_ptr<Backend> be = Cpu();
  ASSERT_NE(be, nullptr);
  void* a = be->AllocScratch(3 * kMiB);
  ASSERT_NE(a, nullptr);
  std::memset(a, 0x5a, 3 * kMiB);  // writable over its whole size
  be->Free(a);
  void* b = be->AllocScratch(3 * kMiB + 12345);  // rounds to the same 4 MiB
  EXPECT_EQ(b, a);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % (2 * kMiB), 0u) << "huge-page aligned";
  void* c = be->AllocScratch(3 * kMiB);  // `a` is in use: another block
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c, b);
  be->Free(b);
  be->Free(c);
  // Both come back, each once.
  std::set<void*> again = {be->AllocScratch(4 * kMiB), be->AllocScratch(4 * kMiB)};
  EXPECT_EQ(again, (std::set<void*>{b, c}));
  for (void* p : again) be->Free(p);
}

TEST(CpuBackendScratchTest, OtherSizesAndZeroedAllocationsAreNotMixedIn) {
  std::unique_ptr<Backend> be = Cpu();
  ASSERT_NE(be, nullptr);
  void* big = be->AllocScratch(6 * kMiB);
  ASSERT_NE(big, nullptr);
  std::memset(big, 0x7f, 6 * kMiB);
  be->Free(big);
  void* other = be->AllocScratch(2 * kMiB);  // another size: a block of its own
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other, big);
  // Alloc (zeroed) never hands out a cached scratch block: it is all zeros.
  auto* zeroed = static_cast<uint8_t*>(be->Alloc(6 * kMiB));
  ASSERT_NE(zeroed, nullptr);
  size_t nonzero = 0;
  for (size_t i = 0; i < 6 * kMiB; ++i) nonzero += zeroed[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  be->Free(zeroed);
  be->Free(other);
  // Small scratch goes straight to the allocator (nothing to keep).
  void* small = be->AllocScratch(4096);
  ASSERT_NE(small, nullptr);
  be->Free(small);
}

}  // namespace
}  // namespace ced
