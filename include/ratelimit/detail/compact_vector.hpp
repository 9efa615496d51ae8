#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A growable array of plain values in 16 bytes (a pointer and two 32-bit words), for the
/// sliding log's runs. A `std::vector` takes 24 bytes in every key's entry, and `<vector>` was
/// the largest standard header left in <ratelimit/limiter.hpp>'s include graph (bench/README.md,
/// "Compile time"). It holds fewer than 2^26 elements (the log holds at most 2^20 + 1).
///
/// Dropping the first elements moves nothing: they stay in the room as free space before the
/// rest. An append at the room's end moves the elements down to its start when that space is
/// there, and doubles the room only when it is full, so the room is a power of two at most
/// twice the most elements held or reserved at once. A full sliding log drops its oldest run for
/// every new one: in a room of R for its N runs it moves them once every R − N calls (every 64
/// for the default 64 runs in a room of 128), and on every call where N fills the room
/// (`maxRunsPerKey` + 1 a power of two), as it did before the room was reused.
/// Thread safety: thread-compatible.
template <class T>
requires std::is_trivially_copyable_v<T>
class CompactVector {
public:
    CompactVector() noexcept = default;
    CompactVector(const CompactVector& other) {
        reserve(other.size_);
        for (const T& value : other) {
            data_[size_++] = value;
        }
    }
    CompactVector(CompactVector&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)),
          size_(std::exchange(other.size_, 0)),
          shape_(std::exchange(other.shape_, 0)) {}
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
        delete[] room();  // NOLINT(cppcoreguidelines-owning-memory): owned here
    }

    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// Elements it holds room for without allocating.
    [[nodiscard]] std::size_t capacity() const noexcept {
        return data_ == nullptr ? 0 : std::size_t{1} << (shape_ & kLog2Mask);
    }

    T& operator[](std::size_t i) noexcept { return data_[i]; }
    const T& operator[](std::size_t i) const noexcept { return data_[i]; }
    [[nodiscard]] T& back() noexcept { return data_[size_ - 1]; }
    [[nodiscard]] const T& back() const noexcept { return data_[size_ - 1]; }
    [[nodiscard]] T* begin() noexcept { return data_; }
    [[nodiscard]] T* end() noexcept { return data_ + size_; }
    [[nodiscard]] const T* begin() const noexcept { return data_; }
    [[nodiscard]] const T* end() const noexcept { return data_ + size_; }

    /// Makes room for `n` elements in all (n < 2^26). Where the room already holds `n` with
    /// free slots before the first element, it stays: an append at its end moves the elements
    /// down instead of allocating.
    void reserve(std::size_t n) {
        if (n <= capacity()) {
            return;
        }
        const std::size_t grown = std::bit_ceil(n);
        T* const moved = new T[grown];  // NOLINT(cppcoreguidelines-owning-memory): owned here
        for (std::uint32_t i = 0; i < size_; ++i) {
            moved[i] = data_[i];
        }
        delete[] room();  // NOLINT(cppcoreguidelines-owning-memory): owned here
        data_ = moved;
        shape_ = static_cast<std::uint32_t>(std::countr_zero(grown));  // at the room's start
    }

    /// Appends `value` (room for one at first: most keys of a log hold one run).
    void append(const T& value) {
        if (front() + size_ == capacity()) {
            makeRoom();
        }
        data_[size_++] = value;
    }

    /// Drops the last element (the vector is not empty).
    void popBack() noexcept { --size_; }

    /// Drops the first `n` elements (n <= size()), keeping the rest in order, in place.
    void eraseFront(std::size_t n) noexcept {
        if (n == size_) {
            data_ = room();  // empty: the whole room is free again
            shape_ &= kLog2Mask;
        } else {
            data_ += n;
            shape_ += static_cast<std::uint32_t>(n) << kFrontShift;
        }
        size_ -= static_cast<std::uint32_t>(n);
    }

private:
    /// `shape_`: the base-2 logarithm of the room in its low bits, above them how many free
    /// slots lie before the first element.
    static constexpr unsigned kFrontShift = 5;
    static constexpr std::uint32_t kLog2Mask = (1U << kFrontShift) - 1;

    [[nodiscard]] std::size_t front() const noexcept { return shape_ >> kFrontShift; }
    [[nodiscard]] T* room() const noexcept { return data_ - front(); }

    /// The last slot is taken: the elements move down to the room's start where slots before
    /// them are free (one `memmove`), else the room doubles.
    void makeRoom() {
        if (front() == 0) {
            reserve(capacity() == 0 ? 1 : 2 * capacity());
            return;
        }
        T* const start = room();
        std::memmove(start, data_, std::size_t{size_} * sizeof(T));
        data_ = start;
        shape_ &= kLog2Mask;
    }

    void swap(CompactVector& other) noexcept {
        std::swap(data_, other.data_);
        std::swap(size_, other.size_);
        std::swap(shape_, other.shape_);
    }

    T* data_ = nullptr;  ///< the first element, `front()` slots into the room
    std::uint32_t size_ = 0;
    std::uint32_t shape_ = 0;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
