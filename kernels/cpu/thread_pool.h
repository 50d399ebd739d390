// The CPU kernels' worker team: one process-wide pool of threads that run
// parallel loops, with a short spin before sleeping.
//
// Why not an OpenMP parallel region per op: a decode step is about a hundred
// small ops (a GEMV over a few hundred KiB of weights, a norm, attention over
// one query), and with OMP_WAIT_POLICY=passive every region start and end is a
// futex sleep and wake-up, which costs more than the op. Here a worker that
// finished a loop spins for a short while (kSpinMicros) waiting for the next
// one, so back-to-back ops in a step hand over in well under a microsecond,
// and an idle engine's workers sleep (no CPU burnt between requests).
//
// The pool has omp_get_max_threads() threads counting the caller (so
// OMP_NUM_THREADS sizes it). A loop called while another thread holds the
// pool, or from inside a loop, runs serially on the calling thread. So do
// loops for a short while after one ended waiting on a worker that other
// processes kept off the cores (fewer free cores than threads).
#pragma once

#include <functional>

namespace ced::kernels {

// Threads of the pool, the caller included (>= 1).
int PoolThreads();

// Runs fn(i) for every i in [0, n), spread over the pool's threads (dynamic:
// each thread takes the next index), and returns when all calls are done.
// `parallel` false, or n <= 1, runs the loop on the calling thread.
void ParallelFor(int n, const std::function<void(int)>& fn, bool parallel = true);

// Runs fn(thread, threads) once for each thread index in [0, threads)
// (threads <= PoolThreads(); 0 = all) and returns when all are done. The
// caller runs index 0, then every index no worker has claimed yet (a worker
// that lost its core is not waited for), so calls must not wait on each
// other. When the pool is busy, runs fn(0, 1) alone: code must split its
// work by the `threads` it is given.
void ParallelRun(const std::function<void(int, int)>& fn, int threads = 0);

}  // namespace ced::kernels
