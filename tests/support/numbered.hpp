#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rltest {

/// `prefix` followed by `n` in decimal ("k3"), for the keys and names tests make by the
/// hundred. Built by appending: g++ 12 at -O3 reports a false -Wrestrict for
/// `"k" + std::to_string(n)` (GCC bug 105651).
inline std::string numbered(std::string_view prefix, std::int64_t n) {
    return std::string(prefix).append(std::to_string(n));
}

}  // namespace rltest
