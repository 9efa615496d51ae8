#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A growable array of 16-byte plain values in 16 bytes, for the sliding log's runs. A
/// `std::vector` takes 24 bytes in every key's entry, and `<vector>` was the largest standard
/// header left in <ratelimit/limiter.hpp>'s include graph (bench/README.md, "Compile time"). It
/// holds fewer than 2^26 elements (the log holds at most 2^20 + 1).
///
/// One element lives in the 16 bytes themselves: most keys of a log hold one run, and such a
/// key then has no heap chunk (32 bytes with malloc's header) and no second cache line to
/// read. The second element moves them to a room on the heap, which the vector keeps until it
/// is destroyed or moved from: a key whose runs come and go does not allocate on every call.
/// What tells the forms apart is the element's last 8 bytes, read as one unsigned 64-bit word:
/// every element held must have it in [1, 2^63) (a run's count does); 0 is the empty vector and
/// a word with its top bit set is the heap form's.
///
/// On the heap, dropping the first elements moves nothing: they stay in the room as free space
/// before the rest. An append at the room's end moves the elements down to its start when that
/// space is there, and doubles the room only when it is full, so the room is a power of two at
/// most twice the most elements held or reserved at once. A full sliding log drops its oldest
/// run for every new one: in a room of R for its N runs it moves them once every R − N calls
/// (every 64 for the default 64 runs in a room of 128), and on every call where N fills the room
/// (`maxRunsPerKey` + 1 a power of two).
/// Thread safety: thread-compatible.
template <class T>
requires(std::is_trivially_copyable_v<T> && sizeof(T) == 16 &&
         alignof(T) <= 8) class CompactVector {
public:
    CompactVector() noexcept = default;
    CompactVector(const CompactVector& other) {
        reserve(other.size());
        for (const T& value : other) {
            append(value);
        }
    }
    CompactVector(CompactVector&& other) noexcept : bytes_(other.bytes_) { other.bytes_ = {}; }
    CompactVector& operator=(const CompactVector& other) {
        if (this != &other) {
            CompactVector copy(other);
            swap(copy);
        }
        return *this;
    }
    CompactVector& operator=(CompactVector&& other) noexcept {
        CompactVector taken(std::move(other));
        swap(taken);
        return *this;
    }
    ~CompactVector() {
        if (onHeap()) {
            delete[] room();  // NOLINT(cppcoreguidelines-owning-memory): owned here
        }
    }

    [[nodiscard]] bool empty() const noexcept { return size() == 0; }
    [[nodiscard]] std::size_t size() const noexcept {
        const std::uint64_t tail = tailWord();
        return (tail & kHeapBit) != 0 ? static_cast<std::uint32_t>(tail) : std::size_t{tail != 0};
    }
    /// Elements it holds without allocating: 1 in place.
    [[nodiscard]] std::size_t capacity() const noexcept {
        return std::size_t{1} << (onHeap() ? shape() & kLog2Mask : 0);
    }

    T& operator[](std::size_t i) noexcept { return begin()[i]; }
    const T& operator[](std::size_t i) const noexcept { return begin()[i]; }
    [[nodiscard]] T& back() noexcept { return begin()[size() - 1]; }
    [[nodiscard]] const T& back() const noexcept { return begin()[size() - 1]; }
    [[nodiscard]] T* begin() noexcept { return onHeap() ? heapData() : inPlace(); }
    [[nodiscard]] T* end() noexcept { return begin() + size(); }
    [[nodiscard]] const T* begin() const noexcept { return onHeap() ? heapData() : inPlace(); }
    [[nodiscard]] const T* end() const noexcept { return begin() + size(); }

    /// Makes room for `n` elements in all (n < 2^26). Where the room already holds `n` with
    /// free slots before the first element, it stays: an append at its end moves the elements
    /// down instead of allocating.
    void reserve(std::size_t n) {
        if (n <= capacity()) {
            return;
        }
        const std::size_t grown = std::bit_ceil(n);
        T* const moved = new T[grown];  // NOLINT(cppcoreguidelines-owning-memory): owned here
        const std::size_t held = size();
        std::memcpy(moved, begin(), held * sizeof(T));
        if (onHeap()) {
            delete[] room();  // NOLINT(cppcoreguidelines-owning-memory): owned here
        }
        setHeap(moved, held, static_cast<std::uint32_t>(std::countr_zero(grown)));
    }

    /// Appends `value`, whose last 8 bytes as a 64-bit word lie in [1, 2^63).
    void append(const T& value) {
        if (!onHeap()) {
            if (tailWord() == 0) {
                std::memcpy(bytes_.data(), &value, sizeof(T));
                return;
            }
            reserve(2);
        }
        std::size_t held = size();
        if (front() + held == capacity()) {
            makeRoom();
        }
        heapData()[held++] = value;
        setSize(held);
    }

    /// Drops the last element (the vector is not empty).
    void popBack() noexcept {
        if (onHeap()) {
            setSize(size() - 1);
        } else {
            bytes_ = {};
        }
    }

    /// Drops the first `n` elements (n <= size()), keeping the rest in order, in place.
    void eraseFront(std::size_t n) noexcept {
        if (n == 0) {
            return;
        }
        if (!onHeap()) {
            bytes_ = {};  // n == 1: the one element
            return;
        }
        const std::size_t held = size();
        if (n == held) {
            setHeap(room(), 0, shape() & kLog2Mask);  // empty: the whole room is free again
        } else {
            setHeap(heapData() + n, held - n,
                    shape() + (static_cast<std::uint32_t>(n) << kFrontShift));
        }
    }

private:
    /// On the heap, the first 8 bytes point at the first element and the last 8 hold the size
    /// (low 32 bits) and the shape (the next 31) under `kHeapBit`. The shape: the base-2
    /// logarithm of the room in its low bits, above them how many free slots lie before the
    /// first element.
    static constexpr std::uint64_t kHeapBit = std::uint64_t{1} << 63;
    static constexpr unsigned kFrontShift = 5;
    static constexpr std::uint32_t kLog2Mask = (1U << kFrontShift) - 1;

    [[nodiscard]] std::uint64_t tailWord() const noexcept {
        std::uint64_t tail = 0;
        std::memcpy(&tail, bytes_.data() + 8, sizeof tail);
        return tail;
    }
    [[nodiscard]] bool onHeap() const noexcept { return (tailWord() & kHeapBit) != 0; }
    [[nodiscard]] std::uint32_t shape() const noexcept {
        return static_cast<std::uint32_t>((tailWord() & ~kHeapBit) >> 32);
    }
    [[nodiscard]] std::size_t front() const noexcept { return shape() >> kFrontShift; }
    [[nodiscard]] T* heapData() const noexcept {
        T* data = nullptr;
        std::memcpy(&data, bytes_.data(), sizeof data);
        return data;
    }
    [[nodiscard]] T* room() const noexcept { return heapData() - front(); }
    // NOLINTBEGIN(cppcoreguidelines-pro-type-reinterpret-cast): the element held in place is
    // the 16 bytes themselves (a trivially copyable value, written there by memcpy)
    [[nodiscard]] T* inPlace() noexcept {
        return std::launder(reinterpret_cast<T*>(bytes_.data()));
    }
    [[nodiscard]] const T* inPlace() const noexcept {
        return std::launder(reinterpret_cast<const T*>(bytes_.data()));
    }
    // NOLINTEND(cppcoreguidelines-pro-type-reinterpret-cast)

    void setHeap(T* data, std::size_t size, std::uint32_t shape) noexcept {
        const std::uint64_t tail = kHeapBit | std::uint64_t{shape} << 32 | size;
        std::memcpy(bytes_.data(), &data, sizeof data);
        std::memcpy(bytes_.data() + 8, &tail, sizeof tail);
    }
    void setSize(std::size_t size) noexcept { setHeap(heapData(), size, shape()); }

    /// The last slot is taken: the elements move down to the room's start where slots before
    /// them are free (one `memmove`), else the room doubles.
    void makeRoom() {
        if (front() == 0) {
            reserve(2 * capacity());
            return;
        }
        T* const start = room();
        const std::size_t held = size();
        std::memmove(start, heapData(), held * sizeof(T));
        setHeap(start, held, shape() & kLog2Mask);
    }

    void swap(CompactVector& other) noexcept { bytes_.swap(other.bytes_); }

    alignas(8) std::array<std::byte, 16> bytes_{};
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
