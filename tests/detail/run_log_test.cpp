// Tests of include/ratelimit/detail/run_log.hpp: the sliding log's runs, held in place while
// there is one, on the heap from the second, and the sum of their counts, which must equal the
// runs' after every change.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include <ratelimit/detail/run_log.hpp>

#include "support/catch.hpp"

namespace {

using Runs = ratelimit::detail::RunLog;
using Run = ratelimit::detail::LogRun;

/// The times in order, as a number with one digit each (times 0..9). Checks on the way that
/// the log's total is the sum of its counts.
std::int64_t digits(const Runs& v) {
    std::int64_t out = 0;
    std::int64_t sum = 0;
    for (const Run& r : v) {
        out = out * 10 + r.time;
        sum += r.count;
    }
    CHECK(v.total() == sum);
    CHECK(v.end() - v.begin() == static_cast<std::ptrdiff_t>(v.size()));
    return out;
}

/// Whether `v`'s runs are held in the log's own 16 bytes rather than on the heap.
bool heldInPlace(const Runs& v) {
    const auto* const self = reinterpret_cast<const std::byte*>(&v);  // NOLINT: an address test
    const auto* const first = reinterpret_cast<const std::byte*>(v.begin());  // NOLINT: as above
    return first >= self && first < self + sizeof v;
}

}  // namespace

TEST_CASE("RunLog: grows by doubling and keeps its runs in order", "[run_log]") {
    STATIC_REQUIRE(sizeof(Runs) == 16);
    Runs v;
    CHECK(v.empty());
    CHECK(v.total() == 0);
    CHECK(v.capacity() == 1);  // one in place
    for (std::int64_t i = 1; i <= 9; ++i) {
        v.append(Run{i, i + 1});
        CHECK(v.size() == static_cast<std::size_t>(i));
        CHECK(v.back().count == i + 1);
        CHECK(v.total() == i * (i + 3) / 2);
    }
    CHECK(v.capacity() == 16);  // 1 in place, then 2, 4, 8, 16: never more than twice the size
    CHECK(digits(v) == 123456789);
    v.addToNewest(5);
    CHECK(v.back().count == 15);
    CHECK(v.total() == 59);
}

TEST_CASE("RunLog: eraseFront drops a prefix and keeps the rest", "[run_log]") {
    Runs v;
    for (std::int64_t i = 1; i <= 6; ++i) {
        v.append(Run{i, i});
    }
    v.eraseFront(0);
    CHECK(digits(v) == 123456);
    v.eraseFront(2);
    CHECK(digits(v) == 3456);
    CHECK(v.total() == 18);
    v.eraseFront(1);
    CHECK(digits(v) == 456);
    v.eraseFront(3);
    CHECK(v.empty());
    CHECK(v.total() == 0);
    v.append(Run{7, 2});  // the room stays
    CHECK(digits(v) == 7);
    CHECK(v.total() == 2);
    CHECK(v.capacity() == 8);
}

TEST_CASE("RunLog: eraseFront of nothing, and mergeOldest of a full log", "[run_log]") {
    Runs empty;
    empty.eraseFront(0);
    CHECK(empty.empty());
    CHECK(empty.capacity() == 1);

    // A full sliding log's merge: the oldest run's count joins the next, the total stays.
    Runs v;
    for (std::int64_t i = 0; i < 65; ++i) {
        v.append(Run{i, i + 1});
    }
    const std::int64_t total = v.total();
    CHECK(total == 65 * 66 / 2);
    v.mergeOldest();
    REQUIRE(v.size() == 64);
    CHECK(v.total() == total);
    CHECK(v[0].time == 1);
    CHECK(v[0].count == 3);
    for (std::size_t i = 1; i < v.size(); ++i) {
        const auto expected = static_cast<std::int64_t>(i) + 1;
        CHECK(v[i].time == expected);
        CHECK(v[i].count == expected + 1);
    }
}

TEST_CASE("RunLog: a full log's new runs reuse the room its dropped ones left", "[run_log]") {
    // The sliding log at its cap: every new run merges the oldest into the next. The room stays
    // 128 runs for 65 at most; a drop moves nothing, and the runs move down to the room's start
    // only when an append finds its last slot taken: once every 64 calls here. The total
    // follows every drop and every move.
    Runs v;
    for (std::int64_t i = 0; i < 65; ++i) {
        v.append(Run{i, 1});
    }
    REQUIRE(v.capacity() == 128);
    const Run* const start = v.begin();
    int moves = 0;
    for (std::int64_t next = 65; next < 1000; ++next) {
        const Run* const first = v.begin();
        v.eraseFront(1);
        REQUIRE(v.begin() == first + 1);  // dropped in place
        v.append(Run{next, 1});
        if (v.begin() != first + 1) {
            REQUIRE(v.begin() == start);  // moved down to the room's start
            ++moves;
        }
        REQUIRE(v.size() == 65);
        REQUIRE(v.capacity() == 128);
        REQUIRE(v.total() == 65);
        for (std::size_t i = 0; i < v.size(); ++i) {
            REQUIRE(v[i].time == next - 64 + static_cast<std::int64_t>(i));
        }
        REQUIRE(&v.back() == &v[64]);
    }
    CHECK(moves == (1000 - 65) / 64);
}

TEST_CASE("RunLog: a room full from its first free slot on moves down, not out", "[run_log]") {
    Runs v;
    for (std::int64_t i = 1; i <= 4; ++i) {
        v.append(Run{i, 1});
    }
    REQUIRE(v.capacity() == 4);
    const Run* const start = v.begin();
    v.eraseFront(1);
    v.append(Run{5, 1});  // the last slot was taken: 2 3 4 move down, 5 after them
    CHECK(digits(v) == 2345);
    CHECK(v.capacity() == 4);
    CHECK(v.begin() == start);
    v.append(Run{6, 1});  // full with nothing free before: the room doubles
    CHECK(digits(v) == 23456);
    CHECK(v.capacity() == 8);
    const Run* const grown = v.begin();
    v.takeFromNewest(1);
    v.eraseFront(2);
    CHECK(digits(v) == 45);
    CHECK(v.begin() == grown + 2);
    v.eraseFront(2);  // empty: the whole room is free again, from its start
    CHECK(v.empty());
    CHECK(v.total() == 0);
    v.append(Run{1, 1});
    CHECK(v.begin() == grown);
    for (std::int64_t i = 2; i <= 8; ++i) {
        v.append(Run{i, 1});
    }
    CHECK(digits(v) == 12345678);
    CHECK(v.capacity() == 8);
}

TEST_CASE("RunLog: a refund's takes to empty and a reserve, with free slots before", "[run_log]") {
    Runs v;
    for (std::int64_t i = 1; i <= 7; ++i) {
        v.append(Run{i, 2});
    }
    v.eraseFront(3);
    v.reserve(8);  // the room holds 8: it stays, free slots and all
    CHECK(v.capacity() == 8);
    CHECK(digits(v) == 4567);
    v.reserve(16);  // a new room: the runs alone, at its start
    CHECK(v.capacity() == 16);
    CHECK(digits(v) == 4567);
    v.eraseFront(2);
    const Run* const third = v.begin();
    v.takeFromNewest(1);  // part of a run: it stays
    CHECK(v.size() == 2);
    CHECK(v.back().count == 1);
    CHECK(v.total() == 3);
    v.takeFromNewest(1);
    v.takeFromNewest(2);  // empty by the back, as a refund empties a log
    CHECK(v.empty());
    CHECK(v.total() == 0);
    v.append(Run{9, 1});  // from where the first run was
    CHECK(v.begin() == third);
    CHECK(digits(v) == 9);
    v.eraseFront(1);
    for (std::int64_t i = 1; i <= 9; ++i) {
        v.append(Run{i, 1});
    }
    CHECK(digits(v) == 123456789);
    CHECK(v.capacity() == 16);
}

TEST_CASE("RunLog: copies and moves of a log with free slots before its first", "[run_log]") {
    Runs v;
    for (std::int64_t i = 1; i <= 7; ++i) {
        v.append(Run{i, 1});
    }
    v.eraseFront(3);
    const Run* const first = v.begin();
    const Runs copy = v;  // only the runs: its room fits them
    CHECK(digits(copy) == 4567);
    CHECK(copy.capacity() == 4);
    Runs moved = std::move(v);  // the room and its free slots go along, freed once
    CHECK(moved.begin() == first);
    CHECK(digits(moved) == 4567);
    moved.append(Run{8, 1});
    CHECK(digits(moved) == 45678);
    CHECK(moved.capacity() == 8);
    moved = copy;
    CHECK(digits(moved) == 4567);
}

TEST_CASE("RunLog: copies are deep, moves leave the source empty", "[run_log]") {
    Runs v;
    for (std::int64_t i = 1; i <= 5; ++i) {
        v.append(Run{i, 1});
    }
    Runs copy = v;
    copy.append(Run{6, 1});
    copy.eraseFront(1);
    CHECK(digits(v) == 12345);
    CHECK(digits(copy) == 23456);

    Runs moved = std::move(copy);
    CHECK(digits(moved) == 23456);
    CHECK(copy.empty());  // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move): defined
    CHECK(copy.total() == 0);  // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move)

    Runs assigned;
    assigned = v;
    CHECK(digits(assigned) == 12345);
    assigned = Runs{};
    CHECK(assigned.empty());
}

TEST_CASE("RunLog: one run is held in place, the second moves both to the heap", "[run_log]") {
    Runs v;
    CHECK(heldInPlace(v));
    v.append(Run{1, std::numeric_limits<std::int64_t>::max() - 7});  // near the largest count
    CHECK(heldInPlace(v));
    CHECK(v.size() == 1);
    CHECK(v.capacity() == 1);
    CHECK(v.total() == std::numeric_limits<std::int64_t>::max() - 7);
    v.addToNewest(7);  // the largest count a run may have
    CHECK(v.back().count == std::numeric_limits<std::int64_t>::max());
    CHECK(v.size() == 1);
    v.takeFromNewest(std::numeric_limits<std::int64_t>::max() - 7);
    CHECK(v.back().count == 7);
    v.append(Run{2, 1});
    CHECK_FALSE(heldInPlace(v));
    CHECK(v.capacity() == 2);
    CHECK(digits(v) == 12);
    CHECK(v.total() == 8);
    CHECK(v[0].count == 7);
    v.eraseFront(1);  // the room stays: the key's runs come and go without a new chunk
    CHECK_FALSE(heldInPlace(v));
    CHECK(digits(v) == 2);
    v.takeFromNewest(1);
    CHECK(v.empty());
    CHECK(v.capacity() == 2);
}

TEST_CASE("RunLog: the run in place is dropped by a take or an erase, as a refund does",
          "[run_log]") {
    Runs v;
    v.append(Run{3, 2});
    v.eraseFront(0);
    CHECK(digits(v) == 3);
    v.eraseFront(1);
    CHECK(v.empty());
    CHECK(v.total() == 0);
    v.append(Run{4, 2});
    v.takeFromNewest(1);
    CHECK(v.size() == 1);
    CHECK(v.total() == 1);
    v.takeFromNewest(1);  // a refund takes the run's whole count
    CHECK(v.empty());
    CHECK(v.total() == 0);
    CHECK(heldInPlace(v));
    v.append(Run{5, 1});
    CHECK(digits(v) == 5);
    CHECK(v.size() == 1);
}

TEST_CASE("RunLog: reserve, copies and moves of the run in place", "[run_log]") {
    Runs v;
    v.reserve(1);
    CHECK(heldInPlace(v));
    v.append(Run{6, 3});
    v.reserve(1);
    CHECK(heldInPlace(v));
    Runs copy = v;
    CHECK(heldInPlace(copy));
    CHECK(digits(copy) == 6);
    Runs moved = std::move(v);
    CHECK(heldInPlace(moved));
    CHECK(digits(moved) == 6);
    CHECK(v.empty());  // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move): defined
    moved.reserve(5);  // to the heap, its run and total along
    CHECK_FALSE(heldInPlace(moved));
    CHECK(moved.capacity() == 8);
    CHECK(digits(moved) == 6);
    CHECK(moved.total() == 3);

    Runs heapOfOne;  // a heap room holding one run copies into place
    heapOfOne.append(Run{1, 1});
    heapOfOne.append(Run{2, 1});
    heapOfOne.takeFromNewest(1);
    REQUIRE_FALSE(heldInPlace(heapOfOne));
    const Runs small = heapOfOne;
    CHECK(heldInPlace(small));
    CHECK(digits(small) == 1);
    moved = heapOfOne;  // and assigning one form over the other frees the heap room once
    CHECK(digits(moved) == 1);
    heapOfOne = small;
    CHECK(heldInPlace(heapOfOne));
    CHECK(digits(heapOfOne) == 1);
}

TEST_CASE("RunLog: a capped log's appends and merges, in the step's order, keep the total",
          "[run_log]") {
    // What the sliding log does at its cap: append the new run, then merge the oldest into the
    // next. Over many calls the room fills, its runs move down, and the total must follow.
    for (const std::size_t cap :
         {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{64}}) {
        CAPTURE(cap);
        Runs v;
        std::int64_t appended = 0;
        for (std::int64_t t = 1; t <= 500; ++t) {
            const std::int64_t count = t % 5 + 1;
            v.append(Run{t, count});
            appended += count;
            if (v.size() > cap) {
                v.mergeOldest();
            }
            REQUIRE(v.size() == std::min<std::size_t>(static_cast<std::size_t>(t), cap));
            REQUIRE(v.total() == appended);  // merges move counts, never drop them
            REQUIRE(v.back().time == t);
        }
        std::int64_t sum = 0;
        for (const Run& r : v) {
            sum += r.count;
        }
        CHECK(sum == appended);
        v.eraseFront(v.size() - 1);
        CHECK(v.total() == v.back().count);
        CHECK(v.back().time == 500);
    }
}

TEST_CASE("RunLog: appendMergingOldest is an append and a merge of the oldest, in one pass",
          "[run_log]") {
    // The sliding log's cap, the two ways: each call appends to one log and merges its oldest
    // runs, and does both at once to the other. Drops and takes between calls, as expiry and
    // refunds make, move the first run through the room; the two logs must stay equal, run for
    // run, total and all, through every move down and every doubling.
    for (const std::size_t cap : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7},
                                  std::size_t{63}, std::size_t{64}}) {
        CAPTURE(cap);
        Runs apart;
        Runs fused;
        std::uint64_t seed = 12345;
        const auto next = [&seed](std::uint64_t n) {  // an LCG (Knuth's MMIX constants)
            seed = seed * 6364136223846793005U + 1442695040888963407U;
            return (seed >> 33U) % n;
        };
        for (std::int64_t t = 1; t <= 2000; ++t) {
            // A live limit change halves the cap halfway: the logs then hold more runs than it.
            const std::size_t capNow = t <= 1000 ? cap : std::max<std::size_t>(1, cap / 2);
            const Run run{t, static_cast<std::int64_t>(next(5)) + 1};
            if (fused.size() >= capNow) {
                apart.append(run);
                apart.mergeOldest();
                fused.appendMergingOldest(run);
            } else {
                apart.append(run);
                fused.append(run);
            }
            if (next(16) == 0) {  // an expiry of a few of the oldest
                const std::size_t n = next(fused.size() + 1);
                apart.eraseFront(n);
                fused.eraseFront(n);
            }
            if (next(16) == 0 && !fused.empty()) {  // a refund of part of the newest
                const std::int64_t n = static_cast<std::int64_t>(
                                           next(static_cast<std::uint64_t>(fused.back().count))) +
                                       1;
                apart.takeFromNewest(n);
                fused.takeFromNewest(n);
            }
            REQUIRE(fused.size() == apart.size());
            REQUIRE(fused.size() <= cap);
            std::int64_t sum = 0;
            for (std::size_t i = 0; i < fused.size(); ++i) {
                REQUIRE(fused[i].time == apart[i].time);
                REQUIRE(fused[i].count == apart[i].count);
                sum += fused[i].count;
            }
            REQUIRE(fused.total() == sum);
            REQUIRE(apart.total() == sum);
        }
    }
}

TEST_CASE("RunLog: a log capped at one run merges in place, or in its room", "[run_log]") {
    // `maxRunsPerKey` = 1: the new run takes the one run's count, and nothing is allocated.
    Runs v;
    v.append(Run{1, 2});
    v.appendMergingOldest(Run{5, 3});
    CHECK(heldInPlace(v));
    REQUIRE(v.size() == 1);
    CHECK(v[0].time == 5);
    CHECK(v[0].count == 5);
    CHECK(v.total() == 5);

    // A log that held more runs keeps its room: its one run merges there, moving down to the
    // room's start when it reaches the room's end.
    Runs w;
    w.append(Run{1, 1});
    w.append(Run{2, 2});
    w.eraseFront(1);
    REQUIRE_FALSE(heldInPlace(w));
    REQUIRE(w.size() == 1);
    std::int64_t total = 2;
    for (std::int64_t t = 3; t < 20; ++t) {
        w.appendMergingOldest(Run{t, t});
        total += t;
        REQUIRE(w.size() == 1);
        REQUIRE(w.capacity() == 2);
        CHECK(w[0].time == t);
        CHECK(w[0].count == total);
        CHECK(w.total() == total);
    }
}
