// A process that dies of SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT first
// writes the signal, the faulting address and a stack (one frame per line,
// `binary(+offset) [address]`; `addr2line -Cfe <binary> <offset>` names the
// function and line) to stderr, i.e. the service's log, then dies of the same
// signal as before (a core dump where enabled). Nothing else changes.
#pragma once

namespace ced::cli {

void InstallCrashReport();

}  // namespace ced::cli
