#pragma once

// The Redis scripts' stored state, read and written independently of their `struct` calls.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace ratelimit_test {

/// A state as the scripts store it: each field, in `kStateFields` order (the sliding log: each
/// run's time, then its count), as a little-endian IEEE double. Written out here independently
/// of the scripts' `struct.pack`.
inline std::string packedState(std::initializer_list<std::int64_t> values) {
    std::string out;
    for (const std::int64_t v : values) {
        auto bits = std::bit_cast<std::uint64_t>(static_cast<double>(v));
        for (int byte = 0; byte < 8; ++byte, bits >>= 8U) {
            out.push_back(static_cast<char>(bits & 0xFFU));
        }
    }
    return out;
}

/// The values of a packed state, in order; a trailing partial value is ignored.
inline std::vector<std::int64_t> unpackedState(std::string_view packed) {
    std::vector<std::int64_t> values;
    for (std::size_t at = 0; at + 8 <= packed.size(); at += 8) {
        std::uint64_t bits = 0;
        for (std::size_t byte = 8; byte-- > 0;) {
            bits = (bits << 8U) | static_cast<unsigned char>(packed[at + byte]);
        }
        values.push_back(static_cast<std::int64_t>(std::bit_cast<double>(bits)));
    }
    return values;
}

}  // namespace ratelimit_test
