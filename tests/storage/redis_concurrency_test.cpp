// Tests of include/ratelimit/storage/redis.hpp: exactness under contention ("atomic or nothing"
// in docs/semantics.md). With time frozen, threads of one process and threads of several
// processes (tests/support/redis_worker.cpp) on one key admit exactly the limit. Each test starts
// its own redis-server; everything here is tagged [concurrency] for the ThreadSanitizer leg.

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <fstream>
#include <latch>
#include <limits>
#include <memory>
#include <mutex>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/limiters.hpp"
#include "support/redis_server.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_server.hpp"
#include "support/worker_process.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

/// A limit whose capacity differs between windows (count) and buckets (burst), so that each
/// model must enforce its own.
const Limit kContended = Limit::perMinute(40).withBurst(27);
constexpr std::int64_t kFrozenUs = 1'726'000'000'123'456;  // one instant for every participant

/// Runs `threads` threads of `attempts` cost-1 requests on `key` once `start` opens; returns
/// the admissions (or throws what a thread caught). No Catch assertion runs off the main thread.
template <class Model>
class Contenders {
public:
    Contenders(RedisLimiter<Model>& limiter, std::string key, int threads, int attempts,
               std::latch& start, std::int64_t limit = capacityOf<Model>(kContended))
        : limiter_(limiter), key_(std::move(key)) {
        for (int i = 0; i < threads; ++i) {
            threads_.emplace_back([this, attempts, limit, &start] {
                try {
                    start.wait();
                    for (int a = 0; a < attempts; ++a) {
                        const Decision d = limiter_.tryAcquire(key_, 1);
                        if (d.degraded || d.limit != limit) {
                            wrong_.fetch_add(1);
                        }
                        if (d.allowed) {
                            admitted_.fetch_add(1);
                        }
                    }
                } catch (...) {
                    const std::lock_guard<std::mutex> lock(mutex_);
                    error_ = std::current_exception();
                }
            });
        }
    }
    Contenders(const Contenders&) = delete;
    Contenders& operator=(const Contenders&) = delete;
    Contenders(Contenders&&) = delete;
    Contenders& operator=(Contenders&&) = delete;
    ~Contenders() { join(); }

    void join() {
        for (std::thread& t : threads_) {
            if (t.joinable()) {
                t.join();
            }
        }
    }

    /// Joins and returns the admissions; rethrows a thread's exception.
    std::int64_t admitted() {
        join();
        if (error_) {
            std::rethrow_exception(error_);
        }
        return admitted_.load();
    }
    [[nodiscard]] std::int64_t wrong() const { return wrong_.load(); }

private:
    RedisLimiter<Model>& limiter_;
    std::string key_;
    std::vector<std::thread> threads_;
    std::atomic<std::int64_t> admitted_{0};
    std::atomic<std::int64_t> wrong_{0};
    std::mutex mutex_;
    std::exception_ptr error_;
};

}  // namespace

TEMPLATE_TEST_CASE("RedisStorage: 8 threads on one key admit exactly the limit",
                   "[redis_storage][redis][concurrency]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-threads"));
    ManualClock clock;  // never advanced: time is frozen for every thread
    clock.set(std::chrono::microseconds{kFrozenUs});
    RedisLimiter<TestType> limiter(kContended, storage, clock, limiterOptions("threads"));
    const std::int64_t lim = capacityOf<TestType>(kContended);

    std::latch start(1);
    Contenders<TestType> contenders(limiter, "one key", 8, 15, start);  // 120 attempts
    start.count_down();
    CHECK(contenders.admitted() == lim);
    CHECK(contenders.wrong() == 0);
    // Nothing is left: the next request is refused and says when it may pass.
    const Decision after = limiter.tryAcquire("one key");
    CHECK_FALSE(after.allowed);
    CHECK(after.remaining == 0);
    CHECK(after.retryAfter > 0ns);
    CHECK_FALSE(after.never());
    CHECK(storage.stats().failures == 0);
}

namespace {

/// Four workers, each trying `attempts` cost-1 requests on `key` with the limiter `name` of
/// `model` (count per period, burst) at `now` (µs, or "system" for its system clock; frozen at
/// kFrozenUs by default), their files under `directory`<i>.
std::vector<std::unique_ptr<WorkerProcess>> startWorkers(
    const RedisServer& server, const std::string& prefix, const std::string& name,
    std::string_view model, const Limit& limit, const std::string& key,
    const std::string& directory, const std::string& now = std::to_string(kFrozenUs),
    const std::string& attempts = "15") {
    const std::int64_t periodUs =
        std::chrono::duration_cast<std::chrono::microseconds>(limit.period).count();
    std::vector<std::unique_ptr<WorkerProcess>> workers;
    workers.reserve(4);
    for (int i = 0; i < 4; ++i) {
        workers.push_back(std::make_unique<WorkerProcess>(
            std::vector<std::string>{kWorker, server.unixSocket(), prefix, name, std::string(model),
                                     std::to_string(limit.count), std::to_string(periodUs),
                                     std::to_string(limit.burst), now, attempts, key},
            server.directory() + "/" + directory + std::to_string(i)));
    }
    return workers;
}

/// Starts the threads and the workers at once; returns the admissions of all of them, each
/// worker having exited cleanly with at most `most`.
template <class Model>
std::int64_t admittedTogether(Contenders<Model>& threads, std::latch& start,
                              const std::vector<std::unique_ptr<WorkerProcess>>& workers,
                              std::int64_t most) {
    for (const auto& w : workers) {
        w->go();
    }
    start.count_down();
    std::int64_t total = threads.admitted();
    CHECK(threads.wrong() == 0);
    for (std::size_t i = 0; i < workers.size(); ++i) {
        const WorkerProcess::Result r = workers[i]->wait();
        INFO("worker " << i << " stderr: " << r.err);
        REQUIRE(WIFEXITED(r.status));
        REQUIRE(WEXITSTATUS(r.status) == 0);
        const std::int64_t n = std::stoll(r.out);
        CHECK(n >= 0);
        CHECK(n <= most);
        total += n;
    }
    return total;
}

}  // namespace

TEMPLATE_TEST_CASE("RedisStorage: 4 processes and 4 threads on one key admit exactly the limit",
                   "[redis_storage][redis][concurrency]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    REQUIRE(std::strlen(kWorker) > 0);  // tests/CMakeLists.txt defines RATELIMIT_REDIS_WORKER
    REQUIRE(::access(kWorker, X_OK) == 0);
    const std::string prefix = "rl-procs";
    const std::string name = "processes";
    const std::string key = "shared key {with} braces";
    const RedisStorage storage(storageOptions(*server, prefix));
    ManualClock clock;  // the workers freeze theirs at the same instant
    clock.set(std::chrono::microseconds{kFrozenUs});
    RedisLimiter<TestType> limiter(kContended, storage, clock, limiterOptions(name));
    const std::int64_t lim = capacityOf<TestType>(kContended);

    const auto workers =
        startWorkers(*server, prefix, name, TestType::kName, kContended, key, "worker");
    std::latch start(1);
    Contenders<TestType> threads(limiter, key, 4, 15, start);  // 4 × 15 + 4 × 15 = 120 attempts
    CHECK(admittedTogether(threads, start, workers, lim) == lim);
    CHECK_FALSE(limiter.peek(key, 1).allowed);
    CHECK(limiter.peek(key, 0).remaining == 0);
}

TEMPLATE_TEST_CASE(
    "RedisStorage: 4 processes passing their system clock's times stay within "
    "the limit by default",
    "[redis_storage][redis][concurrency]", RATELIMIT_TEST_MODELS) {
    // Each worker reads the SystemClock just before each request, as hosts sharing Redis do.
    // Requests from different processes reach the script out of the order of their times: with
    // the default options those are late calls, never clock steps that credit an interval twice.
    const auto server = startServer();
    if (!server) {
        return;
    }
    REQUIRE(::access(kWorker, X_OK) == 0);
    const std::string prefix = "rl-system";
    const std::string name = "system-clock";
    const std::string key = "shared";
    const Limit limit = Limit::per(200, 100ms).withBurst(50);
    const auto workers = startWorkers(*server, prefix, name, TestType::kName, limit, key, "system",
                                      "system", "3000");
    for (auto& w : workers) {
        w->go();
    }
    std::int64_t total = 0;
    std::int64_t firstUs = std::numeric_limits<std::int64_t>::max();
    std::int64_t lastUs = std::numeric_limits<std::int64_t>::min();
    for (std::size_t i = 0; i < workers.size(); ++i) {
        const WorkerProcess::Result r = workers[i]->wait();
        INFO("worker " << i << " stdout: " << r.out << " stderr: " << r.err);
        REQUIRE(WIFEXITED(r.status));
        REQUIRE(WEXITSTATUS(r.status) == 0);
        std::istringstream out(r.out);
        std::int64_t admitted = -1;
        std::int64_t first = 0;
        std::int64_t last = 0;
        REQUIRE(out >> admitted >> first >> last);
        total += admitted;
        firstUs = std::min(firstUs, first);
        lastUs = std::max(lastUs, last);
    }
    const std::int64_t bound = admissionBound<TestType>(limit, firstUs * 1000, lastUs * 1000);
    CAPTURE(total, bound, lastUs - firstUs);
    CHECK(total > 0);
    CHECK(total <= bound);
}

}  // namespace ratelimit_test

namespace ratelimit_test {

TEST_CASE(
    "RedisStorage: a limit set under 4 processes and 8 threads admits exactly its "
    "binding member's limit, and consumes nothing on refusals",
    "[redis_storage][redis][concurrency][limit_set]") {
    using Set = ratelimit::LimitSet<ratelimit::TokenBucketModel, ratelimit::FixedWindowModel>;
    const auto server = startServer();
    if (!server) {
        return;
    }
    REQUIRE(::access(kWorker, X_OK) == 0);
    const std::string prefix = "rl-set-procs";
    const RedisStorage storage(storageOptions(*server, prefix));
    const Limit window = Limit::perMinute(40);
    // The bucket binds (27 of a burst of 27, 40 in the window), then the window (40 of 40,
    // with a burst of 50): the other member keeps what the refusals did not take.
    for (const std::int64_t burst : {std::int64_t{27}, std::int64_t{50}}) {
        const Set::Limits limits{window.withBurst(burst), window};
        const std::int64_t binding = Set::capacity(limits);
        const std::string name = "set" + std::to_string(burst);
        const std::string key = "shared {set} key";
        ManualClock clock;
        clock.set(std::chrono::microseconds{kFrozenUs});
        RedisLimiter<Set> limiter(limits, storage, clock, limiterOptions(name));
        const auto workers =
            startWorkers(*server, prefix, name, Set::kName, limits[0], key, name + "-worker");
        std::latch start(1);
        Contenders<Set> threads(limiter, key, 8, 15, start, binding);  // and 4 processes
        CHECK(admittedTogether(threads, start, workers, binding) == binding);
        Set::Decisions each;
        (void)limiter.peek(key, 0, each);
        CHECK(each[0].remaining == burst - binding);
        CHECK(each[1].remaining == window.count - binding);
    }
}

}  // namespace ratelimit_test
