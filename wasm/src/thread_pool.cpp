// The persistent pool. Workers are started once in the constructor and joined in the destructor.
// A parallel_for publishes (task, ctx, n), a claim word (generation, chunk count, next chunk) and a
// new wake-up word; the caller and the woken workers claim chunks one at a time until none is
// left, and the caller returns when all claimed chunks are done. Nobody waits for a worker that has
// not started, so a pool larger than the work, or than the free cores of a busy machine, costs
// nothing but wake-ups.
// Idle workers spin on the generation for a short while (the gaps between the kernels of one
// training step are microseconds, far shorter than a futex wake-up) and then block on a condition
// variable, so an idle model costs no CPU.
#include "thread_pool.h"

#include <cstddef>
#include <new>

#if defined(__EMSCRIPTEN__) && !defined(__EMSCRIPTEN_PTHREADS__)
#define TG_POOL_HAS_THREADS 0  // no pthreads in this WASM build: everything runs inline
#else
#define TG_POOL_HAS_THREADS 1
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#endif

namespace tg {

namespace {

// Set while a thread runs a chunk: a parallel_for made from inside a chunk then runs inline.
thread_local float* t_chunk_scratch = nullptr;

float* allocate_scratch(int n_threads) {
  size_t floats = size_t(n_threads) * size_t(ThreadPool::kScratchFloats);
  return static_cast<float*>(::operator new[](floats * sizeof(float), std::align_val_t(64)));
}

void free_scratch(float* p) { ::operator delete[](p, std::align_val_t(64)); }

#if TG_POOL_HAS_THREADS
// Chunk c of n items split into `chunks` near-equal contiguous pieces.
inline void chunk_bounds(int64_t n, int64_t chunks, int64_t c, int64_t* begin, int64_t* end) {
  *begin = n * c / chunks;
  *end = n * (c + 1) / chunks;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}
// How long an idle worker (or the waiting caller) spins before it blocks (or yields).
constexpr auto kSpinTime = std::chrono::microseconds(300);
#endif

}  // namespace

#if TG_POOL_HAS_THREADS

struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  float* scratch = nullptr;

  // The published job; written by the caller before `claim` (release), read by a thread after it
  // claims a chunk (acquire), and stable until `done` reaches the chunk count.
  Task task = nullptr;
  void* ctx = nullptr;
  int64_t n = 0;
  bool stop = false;

  // Chunks are claimed, not assigned: claim = generation << 32 | chunks << 16 | next unclaimed
  // chunk. Whoever is running (the caller first, workers as they wake) takes the next chunk, so a
  // worker that the OS has not scheduled yet delays nothing: the others take its share. The
  // generation in the word keeps a late worker from claiming in a job it never saw.
  std::atomic<uint64_t> claim{0};
  std::atomic<int64_t> done{0};
  uint32_t generation = 0;  // the caller's counter

  // Wake-up word (the generation) for idle workers, and the sleeping ones' condition variable.
  std::atomic<uint64_t> job{0};
  std::atomic<int> sleepers{0};
  std::mutex mutex;
  std::condition_variable wake;

  void worker_loop(int index);
  uint64_t wait_for_job(uint64_t seen);
  void run_chunks(uint64_t gen, float* my_scratch);
};

// Returns the first job word that differs from `seen`.
uint64_t ThreadPool::Impl::wait_for_job(uint64_t seen) {
  auto start = std::chrono::steady_clock::now();
  for (int spins = 0;; spins++) {
    uint64_t word = job.load(std::memory_order_acquire);
    if (word != seen) return word;
    cpu_relax();
    if ((spins & 63) == 63 && std::chrono::steady_clock::now() - start > kSpinTime) break;
  }
  // Block. sleepers and job are both seq_cst so that either the caller sees this sleeper and
  // notifies under the mutex, or this thread sees the new job before waiting.
  std::unique_lock<std::mutex> lock(mutex);
  sleepers.fetch_add(1);
  uint64_t word;
  while ((word = job.load()) == seen) wake.wait(lock);
  sleepers.fetch_sub(1);
  return word;
}

// Claims and runs chunks of job `gen` until none is left (or a different job is published).
void ThreadPool::Impl::run_chunks(uint64_t gen, float* my_scratch) {
  uint64_t word = claim.load(std::memory_order_acquire);
  for (;;) {
    if (word >> 32 != (gen & 0xffffffffu)) return;
    int64_t chunks = int64_t((word >> 16) & 0xffff), next = int64_t(word & 0xffff);
    if (next >= chunks) return;
    if (!claim.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
      continue;  // word now holds the current value
    int64_t begin, end;
    chunk_bounds(n, chunks, next, &begin, &end);
    t_chunk_scratch = my_scratch;
    task(ctx, begin, end, my_scratch);
    t_chunk_scratch = nullptr;
    done.fetch_add(1, std::memory_order_acq_rel);
    word = claim.load(std::memory_order_acquire);
  }
}

void ThreadPool::Impl::worker_loop(int index) {
  uint64_t seen = 0;
  float* my_scratch = scratch + int64_t(index) * kScratchFloats;
  for (;;) {
    seen = wait_for_job(seen);
    if (stop) return;
    run_chunks(seen, my_scratch);
  }
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads < 1             ? 1
                 : n_threads > kMaxThreads ? kMaxThreads
                                           : n_threads) {
  impl_ = new Impl();
  impl_->scratch = allocate_scratch(n_threads_);
  impl_->workers.reserve(size_t(n_threads_ - 1));
  for (int i = 1; i < n_threads_; i++)
    impl_->workers.emplace_back([this, i] { impl_->worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  if (!impl_->workers.empty()) {
    impl_->stop = true;
    impl_->job.store(uint64_t(++impl_->generation));
    {
      std::lock_guard<std::mutex> lock(impl_->mutex);
      impl_->wake.notify_all();
    }
    for (auto& t : impl_->workers) t.join();
  }
  free_scratch(impl_->scratch);
  delete impl_;
}

void ThreadPool::run(int64_t n, int64_t min_chunk, int chunks_per_thread, Task task, void* ctx) {
  if (n <= 0) return;
  if (t_chunk_scratch) {  // nested inside a chunk: inline
    task(ctx, 0, n, t_chunk_scratch);
    return;
  }
  int64_t chunks = n_threads_ == 1 ? 1 : int64_t(n_threads_) * chunks_per_thread;
  if (n < chunks) chunks = n;
  if (min_chunk > 1 && n / min_chunk < chunks) chunks = n / min_chunk;
  if (chunks <= 1) {
    t_chunk_scratch = impl_->scratch;
    task(ctx, 0, n, impl_->scratch);
    t_chunk_scratch = nullptr;
    return;
  }
  Impl& im = *impl_;
  im.task = task;
  im.ctx = ctx;
  im.n = n;
  im.done.store(0, std::memory_order_relaxed);
  uint64_t gen = ++im.generation;
  im.claim.store(gen << 32 | uint64_t(chunks) << 16, std::memory_order_release);
  im.job.store(gen);  // seq_cst: see wait_for_job
  if (im.sleepers.load() > 0) {
    std::lock_guard<std::mutex> lock(im.mutex);
    im.wake.notify_all();
  }
  im.run_chunks(gen, im.scratch);
  // Every chunk is claimed; wait for the ones other threads are still running.
  auto start = std::chrono::steady_clock::now();
  for (int spins = 0; im.done.load(std::memory_order_acquire) != chunks; spins++) {
    cpu_relax();
    // Past the spin time a worker was descheduled mid-chunk (a busy machine): give the core away.
    if ((spins & 63) == 63 && std::chrono::steady_clock::now() - start > kSpinTime)
      std::this_thread::yield();
  }
}

#else  // no threads: one scratch, everything inline

struct ThreadPool::Impl {
  float* scratch = nullptr;
};

ThreadPool::ThreadPool(int) : n_threads_(1) {
  impl_ = new Impl();
  impl_->scratch = allocate_scratch(1);
}

ThreadPool::~ThreadPool() {
  free_scratch(impl_->scratch);
  delete impl_;
}

void ThreadPool::run(int64_t n, int64_t, int, Task task, void* ctx) {
  if (n <= 0) return;
  float* scratch = t_chunk_scratch ? t_chunk_scratch : impl_->scratch;
  float* outer = t_chunk_scratch;
  t_chunk_scratch = scratch;
  task(ctx, 0, n, scratch);
  t_chunk_scratch = outer;
}

#endif

}  // namespace tg
