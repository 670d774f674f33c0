// Placeholder implementation: runs inline. The persistent std::thread pool replaces it.
#include "thread_pool.h"

namespace tg {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {}
ThreadPool::~ThreadPool() {}

void ThreadPool::run(int64_t n, int64_t, Task task, void* ctx) {
  if (n > 0) task(ctx, 0, n);
}

}  // namespace tg
