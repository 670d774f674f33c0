// A persistent pool of worker threads: created once with the model, reused by every kernel.
// Owner of the fast implementation: see thread_pool.cpp. This header is the contract.
#pragma once
#include <cstdint>

namespace tg {

class ThreadPool {
 public:
  // n_threads counts the calling thread; 1 means "run everything inline, create no threads"
  // (the only mode the non-threaded WASM builds may use: there, any n_threads gives size() == 1).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  static constexpr int kMaxThreads = 1024;  // larger requests are clamped

  // Calls fn(begin, end) on disjoint contiguous chunks covering [0, n), across the pool, and
  // returns when all are done. Never allocates. Chunks smaller than min_chunk are not split off.
  // The split is at most size() chunks of near-equal length, each run by whichever thread claims it
  // first (the caller included), so equal-cost items balance and a descheduled worker holds
  // nothing up; a call made from inside a chunk runs inline on that thread.
  // One caller at a time: the pool is driven by the thread that owns the model.
  template <class F>
  void parallel_for(int64_t n, int64_t min_chunk, F&& fn) {
    run(n, min_chunk, 1, &trampoline<F>, static_cast<void*>(&fn));
  }

  // Scratch memory for kernels (packed matmul panels, per-row buffers): kScratchFloats floats per
  // thread, 64-byte aligned, allocated once in the constructor so that nothing is allocated (and a
  // WASM memory never grows) during a step. Like parallel_for, but fn(begin, end, scratch) also
  // gets the scratch of the thread running the chunk; no two concurrent chunks share one. A call
  // nested inside a chunk runs inline with that chunk's scratch, so a kernel that keeps data in
  // its scratch must not call into the pool from its chunk.
  // The items are split finer, into up to kChunksPerThread × size() chunks: the kernels that use
  // scratch (GEMM blocks, attention heads) are the long ones, and with one chunk per thread the
  // caller waited for a slower or late worker for up to half a kernel (measured in WebAssembly
  // under Node: 7-20% of a training step); finer chunks let the faster thread take the difference.
  // Only for items whose results do not depend on where a chunk boundary falls.
  static constexpr int64_t kScratchFloats = int64_t(5) << 16;  // 1.25 MiB per thread
  static constexpr int kChunksPerThread = 4;
  template <class F>
  void parallel_for_scratch(int64_t n, int64_t min_chunk, F&& fn) {
    run(n, min_chunk, kChunksPerThread, &trampoline_scratch<F>, static_cast<void*>(&fn));
  }

 private:
  using Task = void (*)(void* ctx, int64_t begin, int64_t end, float* scratch);
  template <class F>
  static void trampoline(void* ctx, int64_t begin, int64_t end, float*) {
    (*static_cast<F*>(ctx))(begin, end);
  }
  template <class F>
  static void trampoline_scratch(void* ctx, int64_t begin, int64_t end, float* scratch) {
    (*static_cast<F*>(ctx))(begin, end, scratch);
  }
  void run(int64_t n, int64_t min_chunk, int chunks_per_thread, Task task, void* ctx);

  int n_threads_;
  struct Impl;
  Impl* impl_ = nullptr;
};

}  // namespace tg
