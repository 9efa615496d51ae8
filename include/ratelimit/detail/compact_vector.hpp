#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A growable array of plain values in 16 bytes (a pointer and two 32-bit counts), for the
/// sliding log's runs. A `std::vector` takes 24 bytes in every key's entry, and `<vector>` was
/// the largest standard header left in <ratelimit/limiter.hpp>'s include graph (bench/README.md,
/// "Compile time"). It holds fewer than 2^32 elements (the log holds at most 2^20 + 1).
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
          capacity_(std::exchange(other.capacity_, 0)) {}
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
        delete[] data_;  // NOLINT(cppcoreguidelines-owning-memory): owned here
    }

    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// Elements it holds room for without allocating.
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

    T& operator[](std::size_t i) noexcept { return data_[i]; }
    const T& operator[](std::size_t i) const noexcept { return data_[i]; }
    [[nodiscard]] T& back() noexcept { return data_[size_ - 1]; }
    [[nodiscard]] const T& back() const noexcept { return data_[size_ - 1]; }
    [[nodiscard]] T* begin() noexcept { return data_; }
    [[nodiscard]] T* end() noexcept { return data_ + size_; }
    [[nodiscard]] const T* begin() const noexcept { return data_; }
    [[nodiscard]] const T* end() const noexcept { return data_ + size_; }

    /// Makes room for `n` elements in all.
    void reserve(std::size_t n) {
        if (n <= capacity_) {
            return;
        }
        T* const grown = new T[n];  // NOLINT(cppcoreguidelines-owning-memory): owned here
        for (std::uint32_t i = 0; i < size_; ++i) {
            grown[i] = data_[i];
        }
        delete[] data_;  // NOLINT(cppcoreguidelines-owning-memory): owned here
        data_ = grown;
        capacity_ = static_cast<std::uint32_t>(n);
    }

    /// Appends `value`, doubling the room when full (room for one at first: most keys of a log
    /// hold one run), so it never holds room for more than twice its elements.
    void append(const T& value) {
        if (size_ == capacity_) {
            reserve(capacity_ == 0 ? 1 : 2 * std::size_t{capacity_});
        }
        data_[size_++] = value;
    }

    /// Drops the last element (the vector is not empty).
    void popBack() noexcept { --size_; }

    /// Drops the first `n` elements (n <= size()), keeping the rest in order. One `memmove`:
    /// a full sliding log moves all its runs down on every new one, and the C library's copy,
    /// chosen for the CPU it runs on, moves wider words than a loop built for any x86-64.
    void eraseFront(std::size_t n) noexcept {
        if (n != 0) {
            std::memmove(data_, data_ + n, (size_ - n) * sizeof(T));
            size_ -= static_cast<std::uint32_t>(n);
        }
    }

private:
    void swap(CompactVector& other) noexcept {
        std::swap(data_, other.data_);
        std::swap(size_, other.size_);
        std::swap(capacity_, other.capacity_);
    }

    T* data_ = nullptr;
    std::uint32_t size_ = 0;
    std::uint32_t capacity_ = 0;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
