#include "kernels/cpu/isa.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "kernels/cpu/gemm_packed.h"  // PackedBf16Allowed

namespace ced::kernels {
namespace {

constexpr const char* kEnv = "CED_CPU_ISA";
constexpr const char* kHideEnv = "CED_CPU_HIDE";
constexpr const char* kPrefetchEnv = "CED_CPU_PREFETCH";
constexpr const char* kWeightsEnv = "CED_CPU_WEIGHTS";

// CED_CPU_HIDE=avx512[,avx2]: behave as on a CPU without these variants (a
// hidden avx2 hides avx512 too), to exercise fallbacks and start-up errors
// on any machine.
bool Hidden(CpuIsa isa) {
  const char* env = std::getenv(kHideEnv);
  if (env == nullptr || isa == CpuIsa::kGeneric) return false;
  const std::string_view list(env);
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    CpuIsa hidden;
    if (ParseCpuIsa(list.substr(start, end - start), &hidden) &&
        static_cast<int>(hidden) <= static_cast<int>(isa)) {
      return true;
    }
    start = end + 1;
  }
  return false;
}

bool Detect(CpuIsa isa) {
  if (Hidden(isa)) return false;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's CPU model also checks XCR0: a feature whose register state the
  // OS does not save is reported absent.
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::kGeneric:
      return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("avx");
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
#else
  return isa == CpuIsa::kGeneric;
#endif
}

std::string CpuFeatures() {
  std::string s;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const char* names[] = {"sse4.2", "avx",      "avx2",     "fma",        "avx512f",
                         "avx512bw", "avx512vl", "avx512dq", "vpclmulqdq", "avx512bf16"};
  // __builtin_cpu_supports needs a literal: one call per name.
  const int have[] = {__builtin_cpu_supports("sse4.2"),     __builtin_cpu_supports("avx"),
                       __builtin_cpu_supports("avx2"),       __builtin_cpu_supports("fma"),
                       __builtin_cpu_supports("avx512f"),    __builtin_cpu_supports("avx512bw"),
                       __builtin_cpu_supports("avx512vl"),   __builtin_cpu_supports("avx512dq"),
                       __builtin_cpu_supports("vpclmulqdq"), __builtin_cpu_supports("avx512bf16")};
  for (size_t i = 0; i < sizeof(have) / sizeof(have[0]); ++i) {
    if (!have[i]) continue;
    if (!s.empty()) s += ' ';
    s += names[i];
  }
#endif
  return s.empty() ? "baseline" : s;
}

std::string SupportedList() {
  std::string s;
  for (CpuIsa isa : SupportedCpuIsas()) {
    if (!s.empty()) s += ", ";
    s += CpuIsaName(isa);
  }
  return s;
}

// The value of one of the CED_CPU_* variables when it sets something (not
// unset, empty or `auto`), else null.
const char* SetValue(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0' || std::string_view(env) == "auto") return nullptr;
  return env;
}

// CED_CPU_ISA when it names a variant (or anything but `auto`), else null.
const char* ForcedEnv() { return SetValue(kEnv); }

// Stops the process (status 2) with ValidateCpuIsaEnv()'s message when a
// CED_CPU_* variable is invalid: the first use of each setting calls it, so
// a binary that did not validate at start-up still never runs with one.
void ExitOnInvalidEnv() {
  const std::string error = ValidateCpuIsaEnv();
  if (!error.empty()) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    std::exit(2);
  }
}

std::once_flag g_once;
std::atomic<int> g_active{-1};
bool g_forced = false;

void Init() {
  std::call_once(g_once, [] {
    ExitOnInvalidEnv();
    CpuIsa isa = BestCpuIsa();
    if (const char* env = ForcedEnv(); env != nullptr) {
      ParseCpuIsa(env, &isa);
      g_forced = true;
    }
    int expected = -1;
    g_active.compare_exchange_strong(expected, static_cast<int>(isa));
  });
}

}  // namespace

std::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric: return "generic";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

bool ParseCpuIsa(std::string_view name, CpuIsa* out) {
  for (int i = 0; i < kNumCpuIsas; ++i) {
    const auto isa = static_cast<CpuIsa>(i);
    if (CpuIsaName(isa) == name) {
      *out = isa;
      return true;
    }
  }
  return false;
}

bool CpuSupports(CpuIsa isa) { return Detect(isa); }

std::vector<CpuIsa> SupportedCpuIsas() {
  std::vector<CpuIsa> out;
  for (int i = 0; i < kNumCpuIsas; ++i) {
    if (Detect(static_cast<CpuIsa>(i))) out.push_back(static_cast<CpuIsa>(i));
  }
  return out;
}

CpuIsa BestCpuIsa() { return SupportedCpuIsas().back(); }

namespace {

bool ParsePrefetchHint(std::string_view name, PrefetchHint* out) {
  for (PrefetchHint h : {PrefetchHint::kNonTemporal, PrefetchHint::kL2}) {
    if (PrefetchHintName(h) == name) {
      *out = h;
      return true;
    }
  }
  return false;
}

bool IsIntel() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}

std::once_flag g_prefetch_once;
std::atomic<int> g_prefetch{-1};
bool g_prefetch_forced = false;  // by CED_CPU_PREFETCH
std::atomic<bool> g_prefetch_set{false};  // by SetActivePrefetchHint

std::string ValidatePrefetchEnv() {
  const char* env = SetValue(kPrefetchEnv);
  PrefetchHint hint;
  if (env == nullptr || ParsePrefetchHint(env, &hint)) return "";
  return std::string(kPrefetchEnv) + "=" + env +
         ": unknown prefetch hint (expected auto, nta or l2)";
}

// CED_CPU_WEIGHTS: unset, empty, `auto` or `f32`.
std::string ValidateWeightsEnv() {
  const char* env = SetValue(kWeightsEnv);
  if (env == nullptr || std::string_view(env) == "f32") return "";
  return std::string(kWeightsEnv) + "=" + env +
         ": unknown packed-weight storage (expected auto or f32)";
}

}  // namespace

bool PackedBf16Allowed() {
  static const bool allowed = [] {
    ExitOnInvalidEnv();
    return SetValue(kWeightsEnv) == nullptr;  // else `f32`
  }();
  return allowed;
}

std::string_view PrefetchHintName(PrefetchHint hint) {
  return hint == PrefetchHint::kL2 ? "l2" : "nta";
}

PrefetchHint ActivePrefetchHint() {
  const int v = g_prefetch.load(std::memory_order_acquire);
  if (v >= 0) return static_cast<PrefetchHint>(v);
  std::call_once(g_prefetch_once, [] {
    ExitOnInvalidEnv();
    PrefetchHint hint = IsIntel() ? PrefetchHint::kL2 : PrefetchHint::kNonTemporal;
    if (const char* env = SetValue(kPrefetchEnv); env != nullptr) {
      ParsePrefetchHint(env, &hint);
      g_prefetch_forced = true;
    }
    int expected = -1;
    g_prefetch.compare_exchange_strong(expected, static_cast<int>(hint));
  });
  return static_cast<PrefetchHint>(g_prefetch.load(std::memory_order_acquire));
}

void SetActivePrefetchHint(PrefetchHint hint) {
  ActivePrefetchHint();  // reads (and checks) the environment first
  g_prefetch_set.store(true);
  g_prefetch.store(static_cast<int>(hint), std::memory_order_release);
}

namespace {

std::string ValidateIsaEnv() {
  const char* env = ForcedEnv();
  if (env == nullptr) return "";
  CpuIsa isa;
  if (!ParseCpuIsa(env, &isa)) {
    return std::string(kEnv) + "=" + env +
           ": unknown kernel variant (expected auto, generic, avx2 or avx512; this CPU supports " +
           SupportedList() + ")";
  }
  if (!CpuSupports(isa)) {
    return std::string(kEnv) + "=" + env + ": this CPU cannot run the " + env +
           " kernels (it supports " + SupportedList() + "; CPU features: " + CpuFeatures() + ")";
  }
  return "";
}

}  // namespace

std::string ValidateCpuIsaEnv() {
  for (const std::string& error : {ValidateIsaEnv(), ValidatePrefetchEnv(), ValidateWeightsEnv()}) {
    if (!error.empty()) return error;
  }
  return "";
}

CpuIsa ActiveCpuIsa() {
  const int v = g_active.load(std::memory_order_acquire);
  if (v >= 0) return static_cast<CpuIsa>(v);
  Init();
  return static_cast<CpuIsa>(g_active.load(std::memory_order_acquire));
}

bool SetActiveCpuIsa(CpuIsa isa) {
  if (!CpuSupports(isa)) return false;
  Init();
  g_active.store(static_cast<int>(isa), std::memory_order_release);
  return true;
}

std::string CpuIsaSummary() {
  const CpuIsa isa = ActiveCpuIsa();
  std::string s(CpuIsaName(isa));
  s += " (cpu: " + CpuFeatures() + "; ";
  const char* env = std::getenv(kEnv);
  if (g_forced && env != nullptr) {
    s += std::string("forced by ") + kEnv + "=" + env;
  } else if (isa != BestCpuIsa()) {
    s += "set by the process; best is " + std::string(CpuIsaName(BestCpuIsa()));
  } else {
    s += "best this CPU supports";
  }
  const PrefetchHint hint = ActivePrefetchHint();
  s += "; prefetch " + std::string(PrefetchHintName(hint)) + ": ";
  if (g_prefetch_set.load()) {
    s += "set by the process";
  } else if (g_prefetch_forced) {
    s += std::string("forced by ") + kPrefetchEnv + "=" + std::getenv(kPrefetchEnv);
  } else {
    s += IsIntel() ? "Intel CPU" : "not an Intel CPU";
  }
  s += PackedBf16Allowed() ? "; weights bf16 where lossless"
                           : std::string("; weights f32: forced by ") + kWeightsEnv + "=f32";
  return s + ")";
}

}  // namespace ced::kernels
