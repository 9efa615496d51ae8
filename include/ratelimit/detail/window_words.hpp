#pragma once

// A fixed window's state as a memory table's slot keeps it: 16 bytes instead of the model's 24,
// so that a fixed-window key costs what a bucket's does.

#include <bit>
#include <cstdint>

#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/words_or_heap.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// The bits of a fixed window's packed word that `into` and `used` share; the other 6 give the
/// layout, and all set (a layout no packing has) mark a state on the heap.
inline constexpr unsigned kWindowPayloadBits = 58;

/// A state of three 64-bit fields, `last`, `into` and `used` (`FixedWindowModel::State`), in
/// two words: `last`, then `into` and `used` packed together where their bits fit in 58. They
/// always do for a limit whose period in ticks, less one, and count take at most 58 bits
/// together (`fitsEvery`; at the steady clock's nanosecond tick: 2,047 a day, 4,194,303 a
/// minute, 255 a week). A state that does not fit is held whole on the heap, so every state
/// stays exact; the words then hold its address.
///
/// The packed word: its top 6 bits say how many bits `used` takes (u, at most 58), `used` is in
/// bits 0 to u − 1 and `into` in bits u to 57. Those 6 bits all set (63) mark a state on the
/// heap. Zero words are the model's fresh state.
/// Thread safety: thread-compatible (the table reads and writes it under the slot's lock).
template <class State>
class WindowWords : public WordsOrHeap<State, ~std::uint64_t{0} << kWindowPayloadBits> {
    using Base = WordsOrHeap<State, ~std::uint64_t{0} << kWindowPayloadBits>;

public:
    using Base::packed;

    [[nodiscard]] State get() const noexcept { return packed() ? unpack() : *this->onHeap(); }

    /// The state, where `packed()`.
    [[nodiscard]] State unpack() const noexcept {
        RATELIMIT_ASSUME(packed());
        const unsigned usedBits = layout();
        State s{};
        const std::uint64_t word = this->word();
        s.last = static_cast<std::int64_t>(this->head());
        s.into = static_cast<std::int64_t>((word & lowBits(kPayloadBits)) >> usedBits);
        s.used = static_cast<std::int64_t>(word & lowBits(usedBits));
        return s;
    }

    /// Throws: `std::bad_alloc` when a state that does not fit finds no memory (the words are
    /// then unchanged).
    void set(const State& s) {
        if (packed()) {
            pack(s);
        } else {
            setCold(s);
        }
    }

    /// `set`, where `packed()`. Inlined, and the allocation out of line, so that the usual step
    /// makes no call: a state whose fields fit the bits the words' layout gives them keeps that
    /// layout, and its fields go straight to their places; otherwise the layout is made anew
    /// for it (`used` taking every bit `into` leaves), or the state goes to the heap.
    RATELIMIT_INLINE void pack(const State& s) {
        RATELIMIT_ASSUME(packed());
        const auto into = static_cast<std::uint64_t>(s.into);
        const auto used = static_cast<std::uint64_t>(s.used);
        const unsigned usedBits = layout();
        if ((used >> usedBits) != 0 || (into >> (kPayloadBits - usedBits)) != 0) [[unlikely]] {
            setCold(s);
            return;
        }
        store(s, usedBits);
    }

    /// Whether every state with `into` and `used` at most these (both at least 0) fits the
    /// words.
    static constexpr bool fitsEvery(Int128 largestInto, Int128 largestUsed) noexcept {
        return largestInto >= 0 && largestUsed >= 0 &&
               widthOf(largestInto) + widthOf(largestUsed) <= kPayloadBits;
    }

private:
    static constexpr unsigned kPayloadBits = kWindowPayloadBits;
    static constexpr unsigned kLayoutBits = 64 - kPayloadBits;

    static constexpr unsigned widthOf(Int128 x) noexcept {
        unsigned bits = 0;
        for (; x > 0; x >>= 1) {
            ++bits;
        }
        return bits;
    }
    static unsigned widthOf(std::uint64_t x) noexcept {
        return static_cast<unsigned>(std::bit_width(x));
    }

    static bool fits(const State& s) noexcept {
        return widthOf(static_cast<std::uint64_t>(s.into)) +
                   widthOf(static_cast<std::uint64_t>(s.used)) <=
               kPayloadBits;
    }

    static constexpr std::uint64_t lowBits(unsigned n) noexcept {
        return (std::uint64_t{1} << n) - 1;
    }

    /// The bits `used` takes in the packed word.
    [[nodiscard]] unsigned layout() const noexcept {
        static_assert(kPayloadBits < (1U << kLayoutBits) - 1, "no layout is the heap's mark");
        return static_cast<unsigned>(this->word() >> kPayloadBits);
    }

    /// Packs a state whose `used` fits in `usedBits` bits, and `into` in the rest.
    void store(const State& s, unsigned usedBits) noexcept {
        Base::store(static_cast<std::uint64_t>(s.last),
                    (std::uint64_t{usedBits} << kPayloadBits) |
                        (static_cast<std::uint64_t>(s.into) << usedBits) |
                        static_cast<std::uint64_t>(s.used));
    }

    /// `set` for a state that needs a new layout, or the heap, or was there.
    RATELIMIT_COLD void setCold(const State& s) {
        if (fits(s)) {
            this->release();
            store(s, kPayloadBits - widthOf(static_cast<std::uint64_t>(s.into)));
        } else {
            this->hold(s);
        }
    }
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
