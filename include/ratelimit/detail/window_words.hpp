#pragma once

// A fixed window's state as a memory table's slot keeps it: 16 bytes instead of the model's 24,
// so that a fixed-window key costs what a bucket's does.

#include <bit>
#include <cstdint>
#include <utility>

#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A state of three 64-bit fields, `last`, `into` and `used` (`FixedWindowModel::State`), in
/// two words: `last`, then `into` and `used` packed together where their bits fit in 57, as they
/// do for every key of a limit whose period in ticks, less one, and count need 57 bits together
/// (at the steady clock's nanosecond tick: a thousand a day, a million a minute). A state that
/// does not fit is held whole on the heap, so every state stays exact; the words then hold its
/// address.
///
/// The packed word: bits 57–62 say how many bits `used` takes (u), `used` is in bits 0 to u − 1
/// and `into` in bits u to 56; bit 63 is clear. Zero words are the model's fresh state.
/// Thread safety: thread-compatible (the table reads and writes it under the slot's lock).
template <class State>
class WindowWords {
public:
    WindowWords() = default;
    ~WindowWords() {
        if (!packed()) {
            release();
        }
    }
    WindowWords(const WindowWords&) = delete;
    WindowWords& operator=(const WindowWords&) = delete;
    WindowWords(WindowWords&& other) noexcept
        : head_(std::exchange(other.head_, 0)), word_(std::exchange(other.word_, 0)) {}
    WindowWords& operator=(WindowWords&& other) noexcept {
        if (this != &other) {
            release();
            head_ = std::exchange(other.head_, 0);
            word_ = std::exchange(other.word_, 0);
        }
        return *this;
    }

    /// Whether the state is in the words, not on the heap.
    [[nodiscard]] bool packed() const noexcept { return word_ != kWide; }

    [[nodiscard]] State get() const noexcept { return packed() ? unpack() : *wide(); }

    /// The state, where `packed()`.
    [[nodiscard]] State unpack() const noexcept {
        const unsigned usedBits = layout();
        State s{};
        s.last = static_cast<std::int64_t>(head_);
        s.into = static_cast<std::int64_t>((word_ & lowBits(kPayloadBits)) >> usedBits);
        s.used = static_cast<std::int64_t>(word_ & lowBits(usedBits));
        return s;
    }

    /// Throws: `std::bad_alloc` when a state that does not fit finds no memory (the words are
    /// then unchanged).
    void set(const State& s) {
        if (packed()) {
            pack(s);
        } else {
            setWhole(s);
        }
    }

    /// `set`, where `packed()`. Inlined: the step that packs makes no call. A state that fits
    /// the words' layout keeps it, so its fields go straight to their places (the usual step,
    /// where `into` grows by less than a power of two and `used` by a few); otherwise the
    /// layout is made anew for it, `used` taking every bit `into` leaves.
    RATELIMIT_INLINE void pack(const State& s) {
        const auto into = static_cast<std::uint64_t>(s.into);
        const auto used = static_cast<std::uint64_t>(s.used);
        unsigned usedBits = layout();
        if ((used >> usedBits) != 0 || (into >> (kPayloadBits - usedBits)) != 0) [[unlikely]] {
            if (!fits(s)) [[unlikely]] {
                setWhole(s);
                return;
            }
            usedBits = kPayloadBits - widthOf(into);
        }
        store(s, usedBits);
    }

    /// Whether every state with `into` and `used` at most these (both at least 0) is packed.
    static constexpr bool fitsEvery(Int128 largestInto, Int128 largestUsed) noexcept {
        return largestInto >= 0 && largestUsed >= 0 &&
               widthOf(largestInto) + widthOf(largestUsed) <= kPayloadBits;
    }

    /// Whether the state is held on the heap (a test's window).
    [[nodiscard]] bool isWide() const noexcept { return !packed(); }

private:
    static constexpr unsigned kPayloadBits = 57;
    static constexpr std::uint64_t kWide = std::uint64_t{1} << 63;

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

    /// The bits `used` takes in the packed word.
    [[nodiscard]] unsigned layout() const noexcept {
        return static_cast<unsigned>(word_ >> kPayloadBits);
    }

    /// Packs a state whose `used` fits in `usedBits` bits, and `into` in the rest.
    void store(const State& s, unsigned usedBits) noexcept {
        head_ = static_cast<std::uint64_t>(s.last);
        word_ = (std::uint64_t{usedBits} << kPayloadBits) |
                (static_cast<std::uint64_t>(s.into) << usedBits) |
                static_cast<std::uint64_t>(s.used);
    }

    static constexpr std::uint64_t lowBits(unsigned n) noexcept {
        return (std::uint64_t{1} << n) - 1;
    }

    [[nodiscard]] State* wide() const noexcept {
        // NOLINTNEXTLINE(*-reinterpret-cast,performance-no-int-to-ptr): the address set() stored
        return reinterpret_cast<State*>(static_cast<std::uintptr_t>(head_));
    }

    /// Out of line, so that the step that packs makes no call.
    RATELIMIT_COLD void setWhole(const State& s) {
        if (fits(s)) {
            release();
            store(s, kPayloadBits - widthOf(static_cast<std::uint64_t>(s.into)));
        } else if (!packed()) {
            *wide() = s;
        } else {
            // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): these words own it (`release`)
            const State* const block = new State(s);
            // NOLINTNEXTLINE(*-reinterpret-cast): the words hold the block's address
            head_ = reinterpret_cast<std::uintptr_t>(block);
            word_ = kWide;
        }
    }

    RATELIMIT_COLD void release() noexcept {
        if (!packed()) {
            delete wide();  // NOLINT(cppcoreguidelines-owning-memory): allocated by set()
            head_ = 0;
            word_ = 0;
        }
    }

    std::uint64_t head_ = 0;  ///< `last`, or the address of the state on the heap
    std::uint64_t word_ = 0;  ///< `into` and `used` packed, or `kWide`
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
