#pragma once

#include <array>
#include <string_view>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// `A` followed by `B`, as a constant string: lets a model's Lua start with the pieces it
/// shares with other models.
template <const std::string_view& A, const std::string_view& B>
struct JoinedString {
    static constexpr std::array<char, A.size() + B.size()> kChars = [] {
        std::array<char, A.size() + B.size()> out{};
        A.copy(out.data(), A.size());
        B.copy(out.data() + A.size(), B.size());
        return out;
    }();
    static constexpr std::string_view kValue{kChars.data(), kChars.size()};
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
