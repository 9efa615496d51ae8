// Tests of include/ratelimit/detail/slot_lock.hpp's `SlotMeta`: a table slot's lock, which
// unlocks with a plain store and whose waiters spin, yield, then nap, with no one to wake them.
// Threaded: tagged [concurrency] for the TSan leg, which checks that what a holder wrote is seen
// by the next one.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <ratelimit/detail/slot_lock.hpp>

#include "support/catch.hpp"

namespace {

using ratelimit::detail::SlotMeta;

}  // namespace

TEST_CASE("SlotMeta: more threads than cores count exactly under the slot's lock",
          "[slot_lock][concurrency]") {
    // Twice as many threads as cores: holders are preempted while they hold the lock, so
    // waiters run out of spin and nap; none may be lost or let in early.
    SlotMeta meta;
    std::int64_t count = 0;  // guarded by meta
    const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
    const unsigned threadCount = std::clamp(2 * cores, 4U, 16U);
    constexpr int kRounds = 10'000;
    std::vector<std::thread> threads;
    threads.reserve(threadCount);
    for (unsigned t = 0; t < threadCount; ++t) {
        threads.emplace_back([&meta, &count] {
            for (int i = 0; i < kRounds; ++i) {
                meta.lock();
                const std::int64_t seen = count;
                std::this_thread::yield();  // a holder off its core, now and then
                count = seen + 1;
                meta.unlock();
            }
        });
    }
    for (std::thread& t : threads) {
        t.join();
    }
    CHECK(count == std::int64_t{threadCount} * kRounds);
}

TEST_CASE("SlotMeta: a waiter for one key's length gives up when the slot takes another key",
          "[slot_lock][concurrency]") {
    // Lock operations branch on their results, so that Clang's thread-safety analysis follows
    // them.
    SlotMeta meta;
    meta.lock();
    meta.setLength(5);
    CHECK_FALSE(meta.try_lock());
    CHECK(meta.length() == 5);

    std::atomic<int> outcome{-1};
    std::atomic<bool> waiting{false};
    std::thread waiter([&] {
        waiting.store(true);
        if (meta.lockIfLength(5)) {
            outcome.store(1);
            meta.unlock();
        } else {
            outcome.store(0);
        }
    });
    while (!waiting.load()) {
        std::this_thread::yield();
    }
    for (int i = 0; i < 1000; ++i) {
        std::this_thread::yield();  // hold it a while, so the waiter waits (for coverage only)
    }
    meta.setLength(7);  // the holder gives the slot a key of another length
    meta.unlock();
    waiter.join();
    // Whenever the waiter looked, the slot was held or held a key of length 7: it never takes
    // the slot for its key of length 5.
    CHECK(outcome.load() == 0);
    CHECK(meta.length() == 7);
    CHECK_FALSE(meta.lockIfLength(5));
    if (meta.lockIfLength(7)) {
        meta.unlock();
    } else {
        FAIL("the free slot of a key of length 7 did not lock for that length");
    }
}

TEST_CASE("SlotMeta: a waiter for any key takes the slot once the holder lets go",
          "[slot_lock][concurrency]") {
    SlotMeta meta;
    meta.lock();
    meta.setLength(9);
    std::int64_t written = 0;  // guarded by meta
    std::atomic<bool> waiting{false};
    std::int64_t seen = -1;
    std::thread waiter([&] {
        waiting.store(true);
        meta.lock();
        seen = written;
        meta.unlock();
    });
    while (!waiting.load()) {
        std::this_thread::yield();
    }
    for (int i = 0; i < 1000; ++i) {
        std::this_thread::yield();  // hold it a while: the waiter spins out, yields and naps
    }
    written = 42;
    meta.unlock();
    waiter.join();
    CHECK(seen == 42);
    CHECK(meta.length() == 9);  // unlocking keeps the key's length
    if (meta.try_lock()) {
        meta.unlock();
    } else {
        FAIL("the released slot did not lock");
    }
}
