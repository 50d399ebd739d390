#include "services/cli/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>

namespace ced::cli {
namespace {

void WriteAll(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

// The handled signals' names (strsignal may translate, i.e. lock and allocate).
const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "Segmentation fault";
    case SIGBUS:
      return "Bus error";
    case SIGILL:
      return "Illegal instruction";
    case SIGFPE:
      return "Floating point exception";
    case SIGABRT:
      return "Aborted";
  }
  return "Signal";
}

void OnCrash(int sig, siginfo_t* info, void*) {
  char line[160];
  // snprintf of strings, integers and pointers takes no lock and allocates
  // nothing in glibc; the handler runs once (SA_RESETHAND).
  const int n = std::snprintf(line, sizeof line, "*** ced: %s (signal %d) at address %p, pid %d; stack:\n",
                              SignalName(sig), sig, info != nullptr ? info->si_addr : nullptr,
                              static_cast<int>(getpid()));
  if (n > 0) WriteAll(line, static_cast<size_t>(n) < sizeof line ? n : sizeof line - 1);
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  static const char kEnd[] = "*** end of stack\n";
  WriteAll(kEnd, sizeof kEnd - 1);
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void InstallCrashReport() {
  // backtrace() loads the unwinder on its first call, which allocates: do it
  // now rather than in a handler.
  void* warm[2];
  (void)backtrace(warm, 2);
  // A stack overflow leaves no stack for the handler: run it on its own.
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  (void)sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = OnCrash;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) (void)sigaction(sig, &sa, nullptr);
}

}  // namespace ced::cli
