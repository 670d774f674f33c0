// A persistent pool of worker threads: created once with the model, reused by every kernel.
// Owner of the fast implementation: see thread_pool.cpp. This header is the contract.
#pragma once
#include <cstdint>

namespace tg {

class ThreadPool {
 public:
  // n_threads counts the calling thread; 1 means "run everything inline, create no threads"
  // (the only mode the non-threaded WASM builds may use).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) on disjoint contiguous chunks covering [0, n), across the pool, and
  // returns when all are done. Never allocates. Chunks smaller than min_chunk are not split off.
  template <class F>
  void parallel_for(int64_t n, int64_t min_chunk, F&& fn) {
    run(n, min_chunk, &trampoline<F>, static_cast<void*>(&fn));
  }

 private:
  using Task = void (*)(void* ctx, int64_t begin, int64_t end);
  template <class F>
  static void trampoline(void* ctx, int64_t begin, int64_t end) {
    (*static_cast<F*>(ctx))(begin, end);
  }
  void run(int64_t n, int64_t min_chunk, Task task, void* ctx);

  int n_threads_;
  struct Impl;
  Impl* impl_ = nullptr;
};

}  // namespace tg
