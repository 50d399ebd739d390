// Variant selection (kernels/cpu/isa.h): detection, the CED_CPU_ISA and
// CED_CPU_HIDE environment variables, and their errors.
#include "kernels/cpu/isa.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gemm_packed.h"

namespace ced::kernels {
namespace {

class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~EnvGuard() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(IsaTest, NamesRoundTrip) {
  for (int i = 0; i < kNumCpuIsas; ++i) {
    CpuIsa parsed;
    ASSERT_TRUE(ParseCpuIsa(CpuIsaName(static_cast<CpuIsa>(i)), &parsed));
    EXPECT_EQ(static_cast<int>(parsed), i);
  }
  CpuIsa parsed;
  EXPECT_FALSE(ParseCpuIsa("avx512f", &parsed));
  EXPECT_FALSE(ParseCpuIsa("", &parsed));
}

TEST(IsaTest, SupportedListIsOrderedAndStartsWithGeneric) {
  EnvGuard hide("CED_CPU_HIDE", nullptr);
  const auto isas = SupportedCpuIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), CpuIsa::kGeneric);
  for (size_t i = 1; i < isas.size(); ++i) EXPECT_LT(isas[i - 1], isas[i]);
  EXPECT_EQ(BestCpuIsa(), isas.back());
#if defined(__x86_64__)
  // Every x86-64 machine this project targets has at least AVX2 + FMA; the
  // variant must then be detected, or the engine runs the portable code.
  EXPECT_EQ(CpuSupports(CpuIsa::kAvx2), __builtin_cpu_supports("avx2") != 0 &&
                                            __builtin_cpu_supports("fma") != 0);
  EXPECT_EQ(CpuSupports(CpuIsa::kAvx512), __builtin_cpu_supports("avx512f") != 0 &&
                                              __builtin_cpu_supports("avx512bw") != 0 &&
                                              __builtin_cpu_supports("avx512vl") != 0 &&
                                              __builtin_cpu_supports("avx512dq") != 0);
#endif
}

TEST(IsaTest, EnvironmentValidation) {
  {
    EnvGuard env("CED_CPU_ISA", nullptr);
    EXPECT_EQ(ValidateCpuIsaEnv(), "");
  }
  {
    EnvGuard env("CED_CPU_ISA", "auto");
    EXPECT_EQ(ValidateCpuIsaEnv(), "");
  }
  {
    EnvGuard env("CED_CPU_ISA", "generic");
    EXPECT_EQ(ValidateCpuIsaEnv(), "");
  }
  {
    EnvGuard env("CED_CPU_ISA", "sse9");
    const std::string e = ValidateCpuIsaEnv();
    EXPECT_NE(e.find("CED_CPU_ISA=sse9"), std::string::npos) << e;
    EXPECT_NE(e.find("unknown kernel variant"), std::string::npos) << e;
    EXPECT_NE(e.find("generic"), std::string::npos) << e;
  }
}

TEST(IsaTest, PrefetchAndWeightEnvironmentValidation) {
  // Each tuning variable: the values taken, and one refused with its message.
  struct Case {
    const char* name;
    std::vector<const char*> ok;
    const char* bad;
    const char* message;
  };
  const Case cases[] = {
      {"CED_CPU_PREFETCH", {"auto", "nta", "l2", ""}, "t0",
       "CED_CPU_PREFETCH=t0: unknown prefetch hint (expected auto, nta or l2)"},
      {"CED_CPU_WEIGHTS", {"auto", "f32", ""}, "bf8",
       "CED_CPU_WEIGHTS=bf8: unknown packed-weight storage (expected auto or f32)"},
  };
  EnvGuard isa("CED_CPU_ISA", nullptr);
  for (const Case& c : cases) {
    for (const char* ok : c.ok) {
      EnvGuard env(c.name, ok);
      EXPECT_EQ(ValidateCpuIsaEnv(), "") << c.name << "=" << ok;
    }
    EnvGuard env(c.name, c.bad);
    const std::string e = ValidateCpuIsaEnv();
    EXPECT_NE(e.find(c.message), std::string::npos) << e;
  }
}

TEST(IsaTest, PrefetchHintFollowsTheVendorAndIsReported) {
#if defined(__x86_64__) || defined(__i386__)
  if (std::getenv("CED_CPU_PREFETCH") == nullptr) {
    __builtin_cpu_init();
    EXPECT_EQ(ActivePrefetchHint(),
              __builtin_cpu_is("intel") ? PrefetchHint::kL2 : PrefetchHint::kNonTemporal);
  }
#endif
  const PrefetchHint old = ActivePrefetchHint();
  for (PrefetchHint hint : {PrefetchHint::kNonTemporal, PrefetchHint::kL2}) {
    SetActivePrefetchHint(hint);
    EXPECT_EQ(ActivePrefetchHint(), hint);
    const std::string want = "; prefetch " + std::string(PrefetchHintName(hint)) +
                             ": set by the process; weights ";
    EXPECT_NE(CpuIsaSummary().find(want), std::string::npos) << CpuIsaSummary();
  }
  SetActivePrefetchHint(old);
}

TEST(IsaTest, HiddenVariantsAreUnsupportedAndRefused) {
  EnvGuard hide("CED_CPU_HIDE", "avx512");
  EXPECT_FALSE(CpuSupports(CpuIsa::kAvx512));
  EXPECT_NE(BestCpuIsa(), CpuIsa::kAvx512);
  {
    EnvGuard env("CED_CPU_ISA", "avx512");
    const std::string e = ValidateCpuIsaEnv();
    EXPECT_NE(e.find("CED_CPU_ISA=avx512: this CPU cannot run the avx512 kernels"),
              std::string::npos)
        << e;
  }
  EXPECT_FALSE(SetActiveCpuIsa(CpuIsa::kAvx512));
  EnvGuard hide2("CED_CPU_HIDE", "avx2");
  EXPECT_FALSE(CpuSupports(CpuIsa::kAvx2));
  EXPECT_FALSE(CpuSupports(CpuIsa::kAvx512));
  EXPECT_EQ(BestCpuIsa(), CpuIsa::kGeneric);
  EXPECT_TRUE(CpuSupports(CpuIsa::kGeneric));
}

TEST(IsaTest, SwitchingRepacksAndReports) {
  for (CpuIsa isa : SupportedCpuIsas()) {
    ASSERT_TRUE(SetActiveCpuIsa(isa));
    EXPECT_EQ(ActiveCpuIsa(), isa);
    EXPECT_EQ(CpuIsaSummary().rfind(std::string(CpuIsaName(isa)) + " (cpu: ", 0), 0u)
        << CpuIsaSummary();
    const float w[4] = {1, 2, 3, 4};
    EXPECT_TRUE(PackedMatrix(w, 2, 2).MatchesActiveVariant());
  }
  SetActiveCpuIsa(BestCpuIsa());
}

}  // namespace
}  // namespace ced::kernels
