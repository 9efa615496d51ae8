#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/siphash.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// The bytes at `p` as an unsigned `Word`, widened to 64 bits: an unaligned load, in the
/// machine's byte order.
template <class Word>
[[nodiscard]] std::uint64_t loadWord(const char* p) noexcept {
    Word w{};
    std::memcpy(&w, p, sizeof w);
    return w;
}

/// `c` as the byte value 0 … 255.
[[nodiscard]] inline std::uint64_t byteValue(char c) noexcept {
    return static_cast<unsigned char>(c);
}

/// A keyed 128-bit hash for keys of at most 16 bytes, by folded multiplication (the 128-bit
/// product of two 64-bit words, its halves xor-ed): three multiplications where SipHash-2-4
/// needs about 26 ns. It only places keys that are stored whole and compared exactly, so a
/// collision costs a probe, never a shared limit. Against flooding it relies on its secret
/// per-storage seed, as Go's and Rust's hash maps do; keys longer than 16 bytes, whose digest
/// stands in for the key, keep SipHash-2-4.
class ShortKeyHash {
public:
    static constexpr std::size_t kMaxLength = 16;

    constexpr ShortKeyHash(std::uint64_t key0, std::uint64_t key1, std::uint64_t key2,
                           std::uint64_t key3) noexcept
        : k0_(key0), k1_(key1), k2_(key2), k3_(key3) {}

    /// `key.size() <= kMaxLength`. The two words hold every byte given the length (loads
    /// overlap rather than pad), so distinct keys of one length reach the mixer distinct, and
    /// keys of different lengths get different second rounds.
    [[nodiscard]] RATELIMIT_INLINE Digest128 operator()(std::string_view key) const noexcept {
        const std::size_t n = key.size();
        const char* p = key.data();
        std::uint64_t a = 0;
        std::uint64_t b = 0;
        if (n >= sizeof(std::uint64_t)) {
            a = loadWord<std::uint64_t>(p);
            b = loadWord<std::uint64_t>(p + n - sizeof(std::uint64_t));
        } else if (n >= sizeof(std::uint32_t)) {
            a = loadWord<std::uint32_t>(p);
            b = loadWord<std::uint32_t>(p + n - sizeof(std::uint32_t));
        } else if (n > 0) {
            a = byteValue(p[0]) | (byteValue(p[n / 2]) << kByteBits) |
                (byteValue(p[n - 1]) << (2 * kByteBits));
        }
        // The length enters through the multipliers of the second round: mixed into a word it
        // could cancel a content bit of a key one byte longer.
        const std::uint64_t h = fold(a ^ k0_, b ^ k1_);
        const std::uint64_t byLength = kOddMultiplier * (n + 1);
        return Digest128{fold(h ^ k2_, byLength), fold(h ^ k3_, byLength ^ k2_)};
    }

private:
    static constexpr unsigned kByteBits = 8;
    /// An odd constant with well-spread bits (2^64 / φ), so a zero seed word still mixes.
    static constexpr std::uint64_t kOddMultiplier = 0x9e3779b97f4a7c15ULL;

    static std::uint64_t fold(std::uint64_t x, std::uint64_t y) noexcept {
        const UInt128 product = UInt128{x} * y;
        return static_cast<std::uint64_t>(product) ^
               static_cast<std::uint64_t>(product >> (8 * sizeof(std::uint64_t)));
    }

    std::uint64_t k0_;
    std::uint64_t k1_;
    std::uint64_t k2_;
    std::uint64_t k3_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
