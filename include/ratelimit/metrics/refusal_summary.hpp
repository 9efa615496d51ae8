#pragma once

// The keys refused most over a sliding window, in fixed memory: Space-Saving (Metwally,
// Agrawal and El Abbadi, "Efficient Computation of Frequent and Top-k Elements in Data
// Streams", 2005) per span of the window (docs/semantics.md, "Top offenders").

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/siphash.hpp>
#include <ratelimit/detail/throw.hpp>

namespace ratelimit {
inline namespace v1 {

/// The shape of a `RefusalSummary`. Fields only ever get added at the end.
struct RefusalSummaryOptions {
    /// The sliding window the counts cover: its last `spans` spans, the current one included.
    std::chrono::nanoseconds window = std::chrono::minutes{1};
    /// Spans the window is cut into (1 … 60): the window slides a span at a time, so the counts
    /// cover between `window − window / spans` and `window` of the latest refusals.
    int spans = kDefaultSpans;
    /// Counters per span (16 … 2^20): the error bound is the refusals a span counted divided
    /// by this, summed over the window.
    std::size_t counters = 1024;
    /// Bytes of a key kept for the answer (8 … 4096): a longer key is shown cut, and still
    /// counted by all of its bytes.
    std::size_t maxKeyBytes = 128;

    /// Throws: `std::invalid_argument` naming the field.
    void validate(std::string_view owner = "RefusalSummaryOptions") const {
        const std::string prefix(owner);
        if (window.count() <= 0) {
            detail::throwInvalidArgument(prefix + ".window must be > 0 (got {}ns)",
                                         {window.count()});
        }
        if (spans < 1 || spans > kMaxSpans || window.count() / spans == 0) {
            detail::throwInvalidArgument(prefix +
                                             ".spans must be in 1..60 and at most the window "
                                             "in ns (got {})",
                                         {spans});
        }
        if (counters < kMinCounters || counters > kMaxCounters) {
            detail::throwInvalidArgument(prefix + ".counters must be in 16..2^20 (got {})",
                                         {static_cast<std::int64_t>(counters)});
        }
        if (maxKeyBytes < kMinKeyBytes || maxKeyBytes > kMaxKeyBytes) {
            detail::throwInvalidArgument(prefix + ".maxKeyBytes must be in 8..4096 (got {})",
                                         {static_cast<std::int64_t>(maxKeyBytes)});
        }
    }

    static constexpr int kDefaultSpans = 6;
    static constexpr int kMaxSpans = 60;
    static constexpr std::size_t kMinCounters = 16;
    static constexpr std::size_t kMaxCounters = std::size_t{1} << 20;
    static constexpr std::size_t kMinKeyBytes = 8;
    static constexpr std::size_t kMaxKeyBytes = 4096;
};

/// A key among the most refused, with the bounds of its count over the window.
struct Offender {
    std::string key;         ///< its first `maxKeyBytes` bytes
    bool truncated = false;  ///< the key was longer than that
    /// Refusals counted: never below the true count, above it by at most the answer's
    /// `maxError`.
    std::int64_t count = 0;
    /// Refusals certainly made: never above the true count.
    std::int64_t guaranteed = 0;
};

/// The most refused keys and the bound of their counts' error.
struct TopOffenders {
    std::vector<Offender> offenders;  ///< by `count`, highest first
    /// Each `count` exceeds its key's true count by at most this (0 while no span has had more
    /// distinct keys than counters). A key refused more than this many times is never missed.
    std::int64_t maxError = 0;
    std::int64_t refusals = 0;  ///< every refusal the window counted
};

/// Counts refusals per key over a sliding window in fixed memory: `spans` Space-Saving
/// summaries of `counters` counters each, one per span of the window. Within a span a counted
/// key's count is exact until the span has more distinct keys than counters; then a new key
/// takes the least counter's place and its count, which becomes its possible error. So every
/// count is at least the truth and at most the truth plus the least counter of each span where
/// it was not counted, at most `refusals / counters` of that span: the answer's `maxError`.
/// Memory: about `spans × counters × (maxKeyBytes + 100)` bytes at most, whatever the keys;
/// a new key that takes the least counter allocates nothing.
/// A clock step back starts the spans it lands in afresh.
/// Thread safety: thread-compatible (`DecisionMetrics` holds it under its policy's lock).
class RefusalSummary {
public:
    explicit RefusalSummary(RefusalSummaryOptions options = {})
        : options_(validated(options)),
          span_(options_.window.count() / options_.spans),
          spans_(static_cast<std::size_t>(options_.spans)) {
        for (Span& s : spans_) {
            s.counters.reserve(options_.counters);
            s.heap.reserve(options_.counters);
            s.index = IdIndex(options_.counters);
        }
    }

    /// The digest a key is counted by (all of its bytes), fixed within this process.
    [[nodiscard]] static std::uint64_t keyId(std::string_view key) noexcept {
        constexpr std::uint64_t kKey0 = 0x726566757365642dULL;  // "refused-"
        constexpr std::uint64_t kKey1 = 0x73756d6d61727921ULL;  // "summary!"
        return detail::SipHash128(kKey0, kKey1)(key).low;
    }

    /// Counts one refusal of `key` (whose `keyId` is `id`) at `now` (nanoseconds of the
    /// caller's clock). Returns whether the window slid a span since the last call, so counts
    /// may have fallen.
    bool add(std::string_view key, std::uint64_t id, std::chrono::nanoseconds now) {
        const std::int64_t at = spanOf(now);
        const bool slid = at > latest_;
        latest_ = std::max(latest_, at);
        Span& s = spanAt(at);
        s.refusals += 1;
        if (const std::uint32_t found = s.index.find(id); found != IdIndex::kNone) {
            Counter& c = s.counters[found];
            c.count += 1;
            siftDown(s, c.heapAt);
        } else if (s.counters.size() < options_.counters) {
            const auto slot = static_cast<std::uint32_t>(s.counters.size());
            s.counters.push_back(Counter{id, 1, 0, shown(key), key.size() > options_.maxKeyBytes,
                                         static_cast<std::uint32_t>(s.heap.size())});
            s.heap.push_back(slot);
            s.index.insert(id, slot);
            siftUp(s, s.heap.size() - 1);
        } else {
            // The least counter is the new key's now, its count the new key's possible error.
            const std::uint32_t slot = s.heap.front();
            Counter& least = s.counters[slot];
            s.index.erase(least.id);
            least.id = id;
            least.error = least.count;
            least.count += 1;
            least.key.assign(key.substr(0, options_.maxKeyBytes));  // in its own capacity
            least.truncated = key.size() > options_.maxKeyBytes;
            s.index.insert(id, slot);
            siftDown(s, 0);
        }
        return slid;
    }

    /// The `n` keys with the highest counts over the window ending at `now`.
    [[nodiscard]] TopOffenders top(std::size_t n, std::chrono::nanoseconds now) const {
        TopOffenders answer;
        std::unordered_map<std::uint64_t, Offender> merged;
        const std::int64_t at = spanOf(now);
        forLiveSpans(at, [&](const Span& s) {
            answer.refusals += s.refusals;
            answer.maxError += unseenBound(s);
            for (const Counter& c : s.counters) {
                auto [it, fresh] = merged.try_emplace(c.id);
                if (fresh) {
                    it->second.key = c.key;
                    it->second.truncated = c.truncated;
                }
            }
        });
        for (auto& [id, offender] : merged) {
            const Bounds b = boundsOf(id, at);
            offender.count = b.count;
            offender.guaranteed = b.guaranteed;
        }
        answer.offenders.reserve(merged.size());
        for (auto& entry : merged) {
            answer.offenders.push_back(std::move(entry.second));
        }
        const auto higher = [](const Offender& a, const Offender& b) {
            if (a.count != b.count) {
                return a.count > b.count;
            }
            return a.guaranteed != b.guaranteed ? a.guaranteed > b.guaranteed : a.key < b.key;
        };
        const std::size_t kept = std::min(n, answer.offenders.size());
        std::partial_sort(answer.offenders.begin(),
                          answer.offenders.begin() + static_cast<std::ptrdiff_t>(kept),
                          answer.offenders.end(), higher);
        answer.offenders.resize(kept);
        return answer;
    }

    /// `add(key, keyId(key), now)`.
    bool add(std::string_view key, std::chrono::nanoseconds now) {
        return add(key, keyId(key), now);
    }

    /// The bounds of the count of the key whose `keyId` is `id`, over the window ending at
    /// `now`: `count` and `guaranteed` as in `Offender`.
    [[nodiscard]] std::pair<std::int64_t, std::int64_t> bounds(std::uint64_t id,
                                                               std::chrono::nanoseconds now) const {
        const Bounds b = boundsOf(id, spanOf(now));
        return {b.count, b.guaranteed};
    }

    [[nodiscard]] const RefusalSummaryOptions& options() const noexcept { return options_; }

private:
    static RefusalSummaryOptions validated(const RefusalSummaryOptions& options) {
        options.validate();
        return options;
    }

    struct Counter {
        std::uint64_t id = 0;  ///< the key's digest: keys are told apart by all their bytes
        std::int64_t count = 0;
        std::int64_t error = 0;  ///< what the counter held when this key took it
        std::string key;
        bool truncated = false;
        std::uint32_t heapAt = 0;  ///< where the heap holds it
    };

    /// Where each counted key's counter is, by its digest: open addressing in flat arrays of
    /// twice the counters (a power of two), linear probing, and deletion by shifting the
    /// probe sequence back, so that replacing the least counter under a flood of new keys
    /// allocates nothing and touches a few adjacent entries.
    class IdIndex {
    public:
        static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

        IdIndex() = default;
        explicit IdIndex(std::size_t counters)
            : mask_(std::bit_ceil(2 * counters) - 1), ids_(mask_ + 1), slots_(mask_ + 1, kNone) {}

        [[nodiscard]] std::uint32_t find(std::uint64_t id) const noexcept {
            for (std::size_t i = home(id);; i = (i + 1) & mask_) {
                if (slots_[i] == kNone || ids_[i] == id) {
                    return slots_[i];
                }
            }
        }

        /// Adds `id`, which it does not hold.
        void insert(std::uint64_t id, std::uint32_t slot) noexcept {
            std::size_t i = home(id);
            while (slots_[i] != kNone) {
                i = (i + 1) & mask_;
            }
            ids_[i] = id;
            slots_[i] = slot;
        }

        /// Removes `id`; each entry after it in the run moves back into the hole when its home
        /// allows, so that every lookup still stops at the first empty entry.
        void erase(std::uint64_t id) noexcept {
            std::size_t hole = home(id);
            while (slots_[hole] != kNone && ids_[hole] != id) {
                hole = (hole + 1) & mask_;
            }
            if (slots_[hole] == kNone) {
                return;
            }
            for (std::size_t i = (hole + 1) & mask_; slots_[i] != kNone; i = (i + 1) & mask_) {
                // Movable when its home is not within (hole, i]: cyclically, the distance from
                // its home to i is at least the distance from the hole to i.
                if (((i - home(ids_[i])) & mask_) >= ((i - hole) & mask_)) {
                    ids_[hole] = ids_[i];
                    slots_[hole] = slots_[i];
                    hole = i;
                }
            }
            slots_[hole] = kNone;
        }

        void clear() noexcept { std::fill(slots_.begin(), slots_.end(), kNone); }

    private:
        [[nodiscard]] std::size_t home(std::uint64_t id) const noexcept {
            return id & mask_;  // a SipHash digest: every bit mixed
        }

        std::size_t mask_ = 0;
        std::vector<std::uint64_t> ids_;
        std::vector<std::uint32_t> slots_;  ///< a counter's place in `Span::counters`, or kNone
    };

    /// One span's Space-Saving summary: its counters, which stay where they were placed, a
    /// min-heap of their places by count, so the least is at the front, and where each key's
    /// counter is.
    struct Span {
        std::int64_t at = detail::kInt64Min;  ///< the span it counts (time / span length)
        std::int64_t refusals = 0;
        std::vector<Counter> counters;
        std::vector<std::uint32_t> heap;
        IdIndex index;
    };

    struct Bounds {
        std::int64_t count = 0;
        std::int64_t guaranteed = 0;
    };

    [[nodiscard]] std::int64_t spanOf(std::chrono::nanoseconds now) const noexcept {
        return detail::floorDiv(now.count(), span_);
    }

    Span& spanAt(std::int64_t at) {
        Span& s = spans_[static_cast<std::size_t>(detail::floorMod(at, options_.spans))];
        if (s.at != at) {
            s.at = at;
            s.refusals = 0;
            s.counters.clear();
            s.heap.clear();
            s.index.clear();
        }
        return s;
    }

    /// Calls `f` with each span inside the window ending in span `at`.
    template <class F>
    void forLiveSpans(std::int64_t at, F f) const {
        for (const Span& s : spans_) {
            if (s.at <= at && s.at > at - options_.spans) {
                f(s);
            }
        }
    }

    /// The most a key a full span does not count may have been refused in it: its least
    /// counter (Space-Saving); none while it has room.
    [[nodiscard]] std::int64_t unseenBound(const Span& s) const noexcept {
        return s.counters.size() < options_.counters || s.counters.empty()
                   ? 0
                   : s.counters[s.heap.front()].count;
    }

    [[nodiscard]] Bounds boundsOf(std::uint64_t id, std::int64_t at) const {
        Bounds b;
        forLiveSpans(at, [&](const Span& s) {
            if (const std::uint32_t found = s.index.find(id); found != IdIndex::kNone) {
                const Counter& c = s.counters[found];
                b.count += c.count;
                b.guaranteed += c.count - c.error;
            } else {
                b.count += unseenBound(s);
            }
        });
        return b;
    }

    [[nodiscard]] std::string shown(std::string_view key) const {
        return std::string(key.substr(0, options_.maxKeyBytes));
    }

    [[nodiscard]] static std::int64_t countAt(const Span& s, std::size_t i) noexcept {
        return s.counters[s.heap[i]].count;
    }

    static void swapAt(Span& s, std::size_t a, std::size_t b) noexcept {
        std::swap(s.heap[a], s.heap[b]);
        s.counters[s.heap[a]].heapAt = static_cast<std::uint32_t>(a);
        s.counters[s.heap[b]].heapAt = static_cast<std::uint32_t>(b);
    }

    static void siftUp(Span& s, std::size_t i) noexcept {
        while (i > 0) {
            const std::size_t parent = (i - 1) / 2;
            if (countAt(s, parent) <= countAt(s, i)) {
                return;
            }
            swapAt(s, parent, i);
            i = parent;
        }
    }

    static void siftDown(Span& s, std::size_t i) noexcept {
        const std::size_t size = s.heap.size();
        for (;;) {
            const std::size_t left = 2 * i + 1;
            if (left >= size) {
                return;
            }
            const std::size_t right = left + 1;
            const std::size_t least =
                right < size && countAt(s, right) < countAt(s, left) ? right : left;
            if (countAt(s, i) <= countAt(s, least)) {
                return;
            }
            swapAt(s, i, least);
            i = least;
        }
    }

    RefusalSummaryOptions options_;
    std::int64_t span_;  ///< ns
    std::vector<Span> spans_;
    std::int64_t latest_ = detail::kInt64Min;
};

}  // namespace v1
}  // namespace ratelimit
