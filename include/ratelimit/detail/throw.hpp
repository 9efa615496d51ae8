#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Every throw of the library goes through here: one place to change for -fno-exceptions,
/// and the message always starts with "ratelimit: ".
[[noreturn]] inline void throwInvalidArgument(std::string_view message) {
    throw std::invalid_argument(std::string("ratelimit: ").append(message));
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
