// Runs kernel tests once per kernel variant this CPU supports
// (kernels/cpu/isa.h): the variant is part of each test's name.
#pragma once

#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"

namespace ced::kernels {

// Activates `isa` for the duration of a test; restores the best afterwards.
class ScopedCpuIsa {
 public:
  explicit ScopedCpuIsa(CpuIsa isa) { ok_ = SetActiveCpuIsa(isa); }
  ~ScopedCpuIsa() { SetActiveCpuIsa(BestCpuIsa()); }
  bool ok() const { return ok_; }

 private:
  bool ok_ = false;
};

class IsaTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(SetActiveCpuIsa(GetParam())) << CpuIsaName(GetParam());
    ASSERT_EQ(ActiveCpuIsa(), GetParam());
  }
  void TearDown() override { SetActiveCpuIsa(BestCpuIsa()); }
};

inline std::string IsaParamName(const ::testing::TestParamInfo<CpuIsa>& info) {
  return std::string(CpuIsaName(info.param));
}

}  // namespace ced::kernels

// Instantiates an IsaTest-derived fixture for every supported variant.
#define CED_INSTANTIATE_FOR_EVERY_ISA(fixture)                                         \
  INSTANTIATE_TEST_SUITE_P(Isa, fixture,                                               \
                           ::testing::ValuesIn(::ced::kernels::SupportedCpuIsas()), \
                           ::ced::kernels::IsaParamName)
