#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A 128-bit keyed digest.
struct Digest128 {
    std::uint64_t low = 0;
    std::uint64_t high = 0;
    friend constexpr bool operator==(const Digest128&, const Digest128&) = default;
};

/// SipHash-2-4 with 128-bit output (Aumasson and Bernstein): keyed, so an attacker who does not
/// know the per-storage seed cannot aim many keys at one bucket or forge a colliding digest.
// The initial values, finalisation xors, rotations and byte counts below are SipHash-2-4's
// definition (the reference implementation's numbers), not tunables to name.
// NOLINTBEGIN(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)
class SipHash128 {
public:
    constexpr SipHash128(std::uint64_t key0, std::uint64_t key1) noexcept : k0_(key0), k1_(key1) {}

    [[nodiscard]] Digest128 operator()(std::string_view data) const noexcept {
        std::uint64_t v0 = k0_ ^ 0x736f6d6570736575ULL;
        std::uint64_t v1 = k1_ ^ 0x646f72616e646f6dULL ^ 0xeeULL;
        std::uint64_t v2 = k0_ ^ 0x6c7967656e657261ULL;
        std::uint64_t v3 = k1_ ^ 0x7465646279746573ULL;
        const auto compress = [&](std::uint64_t m) {
            v3 ^= m;
            round(v0, v1, v2, v3);
            round(v0, v1, v2, v3);
            v0 ^= m;
        };
        const std::size_t whole = data.size() & ~std::size_t{7};
        for (std::size_t i = 0; i < whole; i += 8) {
            compress(load64(data.data() + i));
        }
        const std::uint64_t length = data.size();
        std::uint64_t last = length << 56;
        for (std::size_t i = whole; i < data.size(); ++i) {
            last |= static_cast<std::uint64_t>(static_cast<unsigned char>(data[i]))
                    << (8 * (i - whole));
        }
        compress(last);
        v2 ^= 0xeeULL;
        for (int i = 0; i < 4; ++i) {
            round(v0, v1, v2, v3);
        }
        Digest128 out;
        out.low = v0 ^ v1 ^ v2 ^ v3;
        v1 ^= 0xddULL;
        for (int i = 0; i < 4; ++i) {
            round(v0, v1, v2, v3);
        }
        out.high = v0 ^ v1 ^ v2 ^ v3;
        return out;
    }

private:
    static constexpr std::uint64_t rotl(std::uint64_t x, int b) noexcept {
        return (x << b) | (x >> (64 - b));
    }

    static constexpr void round(std::uint64_t& v0, std::uint64_t& v1, std::uint64_t& v2,
                                std::uint64_t& v3) noexcept {
        v0 += v1;
        v1 = rotl(v1, 13);
        v1 ^= v0;
        v0 = rotl(v0, 32);
        v2 += v3;
        v3 = rotl(v3, 16);
        v3 ^= v2;
        v0 += v3;
        v3 = rotl(v3, 21);
        v3 ^= v0;
        v2 += v1;
        v1 = rotl(v1, 17);
        v1 ^= v2;
        v2 = rotl(v2, 32);
    }

    static std::uint64_t load64(const char* p) noexcept {
        std::uint64_t v = 0;
        std::memcpy(&v, p, sizeof v);
        if constexpr (std::endian::native == std::endian::big) {
            v = __builtin_bswap64(v);
        }
        return v;
    }

    std::uint64_t k0_;
    std::uint64_t k1_;
};
// NOLINTEND(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
