// SPDX-License-Identifier: BSD-3-Clause
#include "host/thread_pool.hpp"

#include "core/knobs.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace flashattn::host {
namespace {

// One parallelFor call, on the caller's stack: the caller returns only when every item has finished and every pool
// thread that joined has left (`inside` is 0), so no thread can touch it afterwards.
struct Job {
  const ItemBody *body = nullptr;
  int64_t count = 0;
  int maxHelpers = 0;  // pool threads allowed besides the caller (guarded by the pool mutex)
  int helpers = 0;     // pool threads that joined (guarded by the pool mutex)
  Job *nextInQueue = nullptr;  // the pool's queue (guarded by the pool mutex)
  std::atomic<int64_t> next{0};
  std::mutex mutex;
  std::condition_variable done;
  int64_t finished = 0;  // guarded by mutex
  int inside = 0;        // pool threads between joining and leaving (guarded by mutex)
  std::exception_ptr error;

  // Runs items until none is left.
  void work() {
    int64_t ran = 0;
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= count) break;
      try {
        (*body)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
      ++ran;
    }
    std::lock_guard<std::mutex> lock(mutex);
    finished += ran;
    if (finished == count) done.notify_all();
  }

  // A pool thread's last touch of the job; the notification is made under the mutex, so the caller (which waits on
  // it) cannot return and free the job before this thread has released it.
  void leave() {
    std::lock_guard<std::mutex> lock(mutex);
    --inside;
    if (inside == 0) done.notify_all();
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

  void run(int64_t count, const ItemBody &body, int threads) {
    if (count <= 0) return;
    Job job;
    job.body = &body;
    job.count = count;
    job.maxHelpers = int(std::min<int64_t>(threads - 1, count - 1));
    if (job.maxHelpers > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      growTo(job.maxHelpers);
      job.nextInQueue = queue_;
      queue_ = &job;
    }
    if (job.maxHelpers > 0) wake_.notify_all();
    job.work();
    if (job.maxHelpers > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      unlink(&job);  // no thread joins from now on
    }
    {
      std::unique_lock<std::mutex> lock(job.mutex);
      job.done.wait(lock, [&] { return job.finished == count && job.inside == 0; });
    }
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  Pool() = default;

  // Threads are made on first need, so a process that never uses the HOST backend starts none.
  void growTo(int helpers) {
    if (int(threads_.capacity()) < helpers) threads_.reserve(std::size_t(kMaxThreadsHint));
    while (int(threads_.size()) < helpers) threads_.emplace_back([this] { workerLoop(); });
  }

  void unlink(Job *job) {
    for (Job **at = &queue_; *at; at = &(*at)->nextInQueue)
      if (*at == job) {
        *at = job->nextInQueue;
        return;
      }
  }

  // Called with the pool mutex held. A job whose items are all taken leaves the queue; one that still has items and
  // room for a helper is joined.
  Job *takeJob() {
    for (Job **at = &queue_; *at;) {
      Job &j = **at;
      if (j.next.load(std::memory_order_relaxed) >= j.count) {
        *at = j.nextInQueue;  // exhausted: its caller is finishing the last items
        continue;
      }
      if (j.helpers < j.maxHelpers) {
        ++j.helpers;
        std::lock_guard<std::mutex> lock(j.mutex);
        ++j.inside;
        return &j;
      }
      at = &j.nextInQueue;
    }
    return nullptr;
  }

  void workerLoop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      Job *job = nullptr;
      wake_.wait(lock, [&] { return stopping_ || (job = takeJob()) != nullptr; });
      if (!job) return;  // stopping
      lock.unlock();
      job->work();
      job->leave();
      lock.lock();
    }
  }

  static constexpr int kMaxThreadsHint = 256;
  std::mutex mutex_;
  std::condition_variable wake_;
  Job *queue_ = nullptr;
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

void parallelFor(int64_t count, ItemBody body) {
  Pool::instance().run(count, body, threadsForNextCall());
}

}  // namespace flashattn::host
