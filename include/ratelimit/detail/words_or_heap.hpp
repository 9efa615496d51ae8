#pragma once

// What the packed states of a memory table's slots share (`WindowWords`, `CounterWords`): two
// words that hold a state packed, or the address of the state held whole on the heap.

#include <cstdint>
#include <utility>

#include <ratelimit/detail/inline.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Two words: a packed `State` (its packing is the derived class's), or, with the second word
/// `kOnHeap` (a value no packing writes), the address of a `State` on the heap in the first,
/// which the words own. Moves take the block; copies are not offered.
/// Thread safety: thread-compatible.
template <class State, std::uint64_t OnHeap>
class WordsOrHeap {
public:
    WordsOrHeap() = default;
    ~WordsOrHeap() {
        if (!packed()) {
            release();
        }
    }
    WordsOrHeap(const WordsOrHeap&) = delete;
    WordsOrHeap& operator=(const WordsOrHeap&) = delete;
    WordsOrHeap(WordsOrHeap&& other) noexcept
        : head_(std::exchange(other.head_, 0)), word_(std::exchange(other.word_, 0)) {}
    WordsOrHeap& operator=(WordsOrHeap&& other) noexcept {
        if (this != &other) {
            release();
            head_ = std::exchange(other.head_, 0);
            word_ = std::exchange(other.word_, 0);
        }
        return *this;
    }

    /// Whether the state is in the words, not on the heap.
    [[nodiscard]] bool packed() const noexcept { return word_ != kOnHeap; }

protected:
    static constexpr std::uint64_t kOnHeap = OnHeap;

    [[nodiscard]] State* onHeap() const noexcept {
        // NOLINTNEXTLINE(*-reinterpret-cast,performance-no-int-to-ptr): the address `hold` stored
        return reinterpret_cast<State*>(static_cast<std::uintptr_t>(head_));
    }

    /// Holds `s` whole on the heap: in the block already there, or a new one. Throws:
    /// `std::bad_alloc` (the words are then unchanged).
    RATELIMIT_COLD void hold(const State& s) {
        if (!packed()) {
            *onHeap() = s;
            return;
        }
        // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): these words own it (`release`)
        const State* const block = new State(s);
        // NOLINTNEXTLINE(*-reinterpret-cast): the words hold the block's address
        head_ = reinterpret_cast<std::uintptr_t>(block);
        word_ = kOnHeap;
    }

    /// Frees a block on the heap, leaving the words zero; packed words are left as they are.
    RATELIMIT_COLD void release() noexcept {
        if (!packed()) {
            delete onHeap();  // NOLINT(cppcoreguidelines-owning-memory): allocated by `hold`
            head_ = 0;
            word_ = 0;
        }
    }

    /// A packed state's `last`; the rest of it (never `kOnHeap`).
    [[nodiscard]] std::uint64_t head() const noexcept { return head_; }
    [[nodiscard]] std::uint64_t word() const noexcept { return word_; }
    /// Packs a state into the words, where they hold no block.
    void store(std::uint64_t head, std::uint64_t word) noexcept {
        head_ = head;
        word_ = word;
    }

private:
    std::uint64_t head_ = 0;  ///< a packed state's `last`, or the address of the state on the heap
    std::uint64_t word_ = 0;  ///< the rest of a packed state, or `kOnHeap`
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
