#pragma once

// A fixed window's state as a memory table's slot keeps it: 16 bytes instead of the model's 24,
// so that a fixed-window key costs what a bucket's does.

#include <bit>
#include <cstdint>
#include <utility>

#include <ratelimit/detail/checked_math.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A state of three 64-bit fields, `last`, `into` and `used` (`FixedWindowModel::State`), in
/// two words: `last`, then `into` and `used` packed together where their bits fit in 57 (as they
/// do for every key of a limit whose period in ticks and count need 57 bits together: 1000 a
/// day at the steady clock's nanosecond tick, a billion a minute). A state that does not fit
/// is held whole on the heap, so every state stays exact; the words then hold its address.
///
/// The packed word: bit 63 clear, bits 57–62 how many bits `into` takes (n), then `into` in the
/// n bits below bit 57, and `used` in the bits below those. An all-zero pair is the model's
/// fresh state.
/// Thread safety: thread-compatible (the table reads and writes it under the slot's lock).
template <class State>
class WindowWords {
public:
    WindowWords() = default;
    ~WindowWords() { release(); }
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

    [[nodiscard]] State get() const noexcept {
        if (isWide()) [[unlikely]] {
            return *wide();
        }
        const unsigned usedBits = kPayloadBits - static_cast<unsigned>(word_ >> kPayloadBits);
        State s{};
        s.last = static_cast<std::int64_t>(head_);
        s.into = static_cast<std::int64_t>((word_ & lowBits(kPayloadBits)) >> usedBits);
        s.used = static_cast<std::int64_t>(word_ & lowBits(usedBits));
        return s;
    }

    /// Throws: `std::bad_alloc` when a state that does not fit finds no memory (the words are
    /// then unchanged).
    void set(const State& s) {
        const auto into = static_cast<std::uint64_t>(s.into);
        const auto used = static_cast<std::uint64_t>(s.used);
        const auto intoBits = static_cast<unsigned>(std::bit_width(into));
        if (intoBits + static_cast<unsigned>(std::bit_width(used)) <= kPayloadBits) [[likely]] {
            release();
            head_ = static_cast<std::uint64_t>(s.last);
            word_ = (std::uint64_t{intoBits} << kPayloadBits) |
                    (into << (kPayloadBits - intoBits)) | used;
            return;
        }
        if (isWide()) {
            *wide() = s;
            return;
        }
        // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): owned by these words, freed in release()
        const State* const block = new State(s);
        // NOLINTNEXTLINE(*-reinterpret-cast): the words hold the block's address
        head_ = reinterpret_cast<std::uintptr_t>(block);
        word_ = kWide;
    }

    /// Whether every state with `into` and `used` at most these (both at least 0) is packed.
    static constexpr bool fitsEvery(Int128 largestInto, Int128 largestUsed) noexcept {
        return largestInto >= 0 && largestUsed >= 0 &&
               bitWidth(largestInto) + bitWidth(largestUsed) <= kPayloadBits;
    }

    /// Whether the state is held on the heap (a test's window).
    [[nodiscard]] bool isWide() const noexcept { return word_ == kWide; }

private:
    static constexpr unsigned kPayloadBits = 57;
    static constexpr std::uint64_t kWide = std::uint64_t{1} << 63;

    static constexpr unsigned bitWidth(Int128 x) noexcept {
        unsigned bits = 0;
        for (; x > 0; x >>= 1) {
            ++bits;
        }
        return bits;
    }

    static constexpr std::uint64_t lowBits(unsigned n) noexcept {
        return (std::uint64_t{1} << n) - 1;
    }

    [[nodiscard]] State* wide() const noexcept {
        // NOLINTNEXTLINE(*-reinterpret-cast,performance-no-int-to-ptr): the address set() stored
        return reinterpret_cast<State*>(static_cast<std::uintptr_t>(head_));
    }

    void release() noexcept {
        if (isWide()) {
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
