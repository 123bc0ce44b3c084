// SPDX-License-Identifier: BSD-3-Clause
#include "host/thread_pool.hpp"

#include "core/knobs.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace flashattn::host {
namespace {

// One parallelFor call. Shared ownership because a worker may still hold it (having found no item left) after the
// caller has returned.
struct Job {
  const std::function<void(int64_t)> *body = nullptr;
  int64_t count = 0;
  int maxHelpers = 0;  // pool threads allowed besides the caller (guarded by the pool mutex)
  int helpers = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
  std::mutex mutex;
  std::condition_variable allFinished;
  std::exception_ptr error;

  // Runs items until none is left; whoever finishes the last one wakes the caller.
  void work() {
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= count) return;
      try {
        (*body)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
      if (finished.fetch_add(1, std::memory_order_acq_rel) + 1 == count) {
        std::lock_guard<std::mutex> lock(mutex);
        allFinished.notify_all();
      }
    }
  }
};

class Pool {
 public:
  static Pool &instance() {
    static Pool pool;
    return pool;
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto &t : threads_) t.join();
  }

  void run(int64_t count, const std::function<void(int64_t)> &body, int threads) {
    if (count <= 0) return;
    auto job = std::make_shared<Job>();
    job->body = &body;
    job->count = count;
    job->maxHelpers = int(std::min<int64_t>(threads - 1, count - 1));
    if (job->maxHelpers > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      growTo(job->maxHelpers);
      queue_.push_back(job);
    }
    if (job->maxHelpers > 0) wake_.notify_all();
    job->work();
    {
      std::unique_lock<std::mutex> lock(job->mutex);
      job->allFinished.wait(lock, [&] { return job->finished.load(std::memory_order_acquire) == count; });
    }
    if (job->maxHelpers > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      removeFromQueue(job.get());
    }
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  Pool() = default;

  // Threads are made on first need, so a process that never uses the HOST backend starts none.
  void growTo(int helpers) {
    while (int(threads_.size()) < helpers) threads_.emplace_back([this] { workerLoop(); });
  }

  void removeFromQueue(const Job *job) {
    auto it = std::find_if(queue_.begin(), queue_.end(), [&](const std::shared_ptr<Job> &j) { return j.get() == job; });
    if (it != queue_.end()) queue_.erase(it);
  }

  std::shared_ptr<Job> takeJob() {
    for (auto it = queue_.begin(); it != queue_.end();) {
      Job &j = **it;
      if (j.next.load(std::memory_order_relaxed) >= j.count) {
        it = queue_.erase(it);  // exhausted: its caller is finishing the last items
        continue;
      }
      if (j.helpers < j.maxHelpers) {
        ++j.helpers;
        return *it;
      }
      ++it;
    }
    return nullptr;
  }

  void workerLoop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      std::shared_ptr<Job> job;
      wake_.wait(lock, [&] { return stopping_ || (job = takeJob()) != nullptr; });
      if (!job) return;  // stopping
      lock.unlock();
      job->work();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

constexpr int kMaxThreads = 256;

}  // namespace

int threadsForNextCall() {
  int threads = int(std::thread::hardware_concurrency());
  if (threads < 1) threads = 1;
  if (const char *env = knobValue(Knob::HostThreads)) {
    char *end = nullptr;
    const long asked = std::strtol(env, &end, 10);
    // A test may ask for more threads than cores, to shuffle the interleaving; garbage is ignored.
    if (end != env && *end == '\0' && asked >= 1) threads = int(std::min<long>(asked, kMaxThreads));
  }
  return threads;
}

void parallelFor(int64_t count, const std::function<void(int64_t)> &body) {
  Pool::instance().run(count, body, threadsForNextCall());
}

}  // namespace flashattn::host
