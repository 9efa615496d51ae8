// Tests of include/ratelimit/detail/short_key_hash.hpp, the keyed hash that places keys of up
// to 16 bytes in the memory storage: keyed (seeds change everything), sensitive to every byte
// and to the length, and spread evenly enough that two candidate groups per key stay apart.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ratelimit/detail/short_key_hash.hpp>

#include "support/catch.hpp"

namespace {

using ratelimit::detail::Digest128;
using ratelimit::detail::ShortKeyHash;

// Seeds as a storage draws them: random words (these from a fixed PRNG run).
constexpr ShortKeyHash kHash(0x51c9bc701e7ea419ULL, 0xf38b2ffc80a4df5aULL, 0xa5aec7978306d03bULL,
                             0xf3f49249dc28ff90ULL);

std::size_t bucketOf(std::uint64_t h, std::size_t buckets) {
    return static_cast<std::size_t>((ratelimit::detail::UInt128{h} * buckets) >> 64U);
}

}  // namespace

TEST_CASE("ShortKeyHash: every byte and the length change the digest", "[short_key_hash]") {
    std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
    std::size_t keys = 0;
    for (std::size_t length = 0; length <= ShortKeyHash::kMaxLength; ++length) {
        const std::string base(length, '\0');  // zero bytes: padding must not alias them
        const Digest128 d = kHash(base);
        seen.insert({d.low, d.high});
        ++keys;
        for (std::size_t at = 0; at < length; ++at) {
            for (const int value : {1, 0x80, 0xff}) {
                std::string key = base;
                key[at] = static_cast<char>(value);
                const Digest128 changed = kHash(key);
                seen.insert({changed.low, changed.high});
                ++keys;
            }
        }
    }
    REQUIRE(seen.size() == keys);
}

TEST_CASE("ShortKeyHash: the seed changes every digest", "[short_key_hash]") {
    const ShortKeyHash other(0x51c9bc701e7ea419ULL, 0xf38b2ffc80a4df5aULL, 0xa5aec7978306d03bULL,
                             0xf3f49249dc28ff91ULL);  // one bit apart
    for (const char* key : {"", "a", "user:1", "203.0.113.7", "0123456789abcdef"}) {
        INFO(key);
        REQUIRE(kHash(key) == kHash(key));
        REQUIRE(kHash(key).high != other(key).high);
    }
}

TEST_CASE("ShortKeyHash: sequential keys spread evenly over groups", "[short_key_hash]") {
    // 2^16 keys like a service's ("user:0" ... "user:65535", "10.0.x.y") over 1024 groups:
    // 64 expected per group; a hash that kept the keys' structure would pile them up.
    constexpr std::size_t kGroups = 1024;
    constexpr std::size_t kKeys = 65536;
    for (const bool addresses : {false, true}) {
        std::vector<std::size_t> low(kGroups);
        std::vector<std::size_t> high(kGroups);
        std::size_t sameGroup = 0;
        for (std::size_t i = 0; i < kKeys; ++i) {
            const std::string key =
                addresses ? "10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256)
                          : "user:" + std::to_string(i);
            const Digest128 d = kHash(key);
            ++low[bucketOf(d.low, kGroups)];
            ++high[bucketOf(d.high, kGroups)];
            sameGroup += bucketOf(d.low, kGroups) == bucketOf(d.high, kGroups) ? 1U : 0U;
        }
        INFO((addresses ? "addresses" : "user ids"));
        for (const auto* counts : {&low, &high}) {
            double chiSquare = 0;
            for (const std::size_t c : *counts) {
                const double diff = static_cast<double>(c) - 64.0;
                chiSquare += diff * diff / 64.0;
            }
            // 1023 degrees of freedom: mean 1023, standard deviation about 45.
            CHECK(chiSquare < 1300.0);
            CHECK(*std::max_element(counts->begin(), counts->end()) < 120);
        }
        // The two candidate groups are independent: they coincide about once per 1024 keys.
        CHECK(sameGroup < 4 * kKeys / kGroups);
    }
}
