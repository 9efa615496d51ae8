#pragma once

// A sliding counter's state as a memory table's slot keeps it: 16 bytes instead of the model's
// 32, so that a sliding-counter key costs what a bucket's does.

#include <cstdint>

#include <ratelimit/algorithms/window.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/words_or_heap.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A state of four 64-bit fields, `last`, `into`, `previous` and `current`
/// (`SlidingCounterModel::State`), in two words: `last`, then the two counts in 32 bits each.
/// `into` is not kept: a step makes it `alignedInto(last, period)` under the period it runs
/// by, unless the clock stepped back (the windows then shift by the step), and it means
/// nothing while both counts are 0. So the words take a state whose `into` is aligned, or
/// whose counts are both 0, and whose counts fit: always, for a limit of at most 2^32 − 2
/// units, until a clock step back. Any other state is held whole on the heap, so
/// every state stays exact; the words then hold its address, and the counts' word all ones,
/// which no state in the words has. Zero words are the model's fresh state.
///
/// Reads and writes take the period the state was made under, as a function of its last write
/// (`periodAt(last)`: a `Divisor`), since a table's limit may change.
/// Thread safety: thread-compatible (the table reads and writes it under the slot's lock).
template <class State>
class CounterWords : public WordsOrHeap<State, ~std::uint64_t{0}> {  // counts no state has
    using Base = WordsOrHeap<State, ~std::uint64_t{0}>;

public:
    using Base::packed;

    template <class PeriodAt>
    [[nodiscard]] State get(PeriodAt&& periodAt) const noexcept {
        return packed() ? unpack(periodAt) : *this->onHeap();
    }

    /// The state, where `packed()`.
    template <class PeriodAt>
    [[nodiscard]] RATELIMIT_INLINE State unpack(PeriodAt&& periodAt) const noexcept {
        RATELIMIT_ASSUME(packed());
        State s{};
        s.last = static_cast<std::int64_t>(this->head());
        s.into = alignedInto(s.last, periodAt(s.last));
        const std::uint64_t counts = this->word();
        s.previous = static_cast<std::int64_t>(counts >> kCountBits);
        s.current = static_cast<std::int64_t>(counts & kCountMask);
        return s;
    }

    /// Throws: `std::bad_alloc` when a state that does not fit finds no memory (the words are
    /// then unchanged).
    template <class PeriodAt>
    void set(const State& s, PeriodAt&& periodAt) {
        const bool fits = countsFit(s) && aligned(s, periodAt);
        if (packed() && fits) {
            store(s);
        } else {
            setCold(s, fits);
        }
    }

    /// `set`, where `packed()` gave a state last written at `lastBefore` (`unpack`), and a step
    /// made `s` of it: inlined, and the allocation out of line, so that the usual step makes no
    /// call. A step at a time no earlier than that write keeps the window aligned
    /// (`SlidingCounterModel`), so only a step back is checked, by a division.
    template <class PeriodAt>
    RATELIMIT_INLINE void pack(const State& s, Tick lastBefore, PeriodAt&& periodAt) {
        RATELIMIT_ASSUME(packed());
        if (!countsFit(s) || (s.last < lastBefore && !aligned(s, periodAt))) [[unlikely]] {
            setCold(s, false);
            return;
        }
        store(s);
    }

private:
    static constexpr unsigned kCountBits = 32;
    static constexpr std::uint64_t kCountMask = (std::uint64_t{1} << kCountBits) - 1;

    static std::uint64_t countsOf(const State& s) noexcept {
        return (static_cast<std::uint64_t>(s.previous) << kCountBits) |
               static_cast<std::uint64_t>(s.current);
    }

    static bool countsFit(const State& s) noexcept {
        const auto either =
            static_cast<std::uint64_t>(s.previous) | static_cast<std::uint64_t>(s.current);
        return (either >> kCountBits) == 0 && countsOf(s) != Base::kOnHeap;
    }

    /// Whether the words give back `s`'s `into`: it is aligned, or no count needs it.
    template <class PeriodAt>
    static bool aligned(const State& s, PeriodAt&& periodAt) noexcept {
        return (s.previous == 0 && s.current == 0) ||
               s.into == alignedInto(s.last, periodAt(s.last));
    }

    /// `last` in the first word; `previous` high and `current` low in the second.
    void store(const State& s) noexcept {
        Base::store(static_cast<std::uint64_t>(s.last), countsOf(s));
    }

    /// `set` for a state that goes to the heap, or comes back from it, or stays there.
    RATELIMIT_COLD void setCold(const State& s, bool fitsWords) {
        if (fitsWords) {
            this->release();
            store(s);
        } else {
            this->hold(s);
        }
    }
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
