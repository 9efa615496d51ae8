#pragma once

// The arguments of a RESP command, as the library encodes it, for tests and benchmarks that
// send it through hiredis's redisCommandArgv or compare its pieces.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ratelimit_test {

/// The argv of a RESP command (an array of bulk strings). Throws: std::invalid_argument on
/// anything else.
inline std::vector<std::string> argvOf(std::string_view resp) {
    const auto number = [&resp](char marker) {
        const std::size_t end = resp.find("\r\n");
        if (resp.empty() || resp.front() != marker || end == std::string_view::npos) {
            throw std::invalid_argument("not a RESP array of bulk strings");
        }
        const auto value =
            static_cast<std::size_t>(std::stoull(std::string(resp.substr(1, end - 1))));
        resp.remove_prefix(end + 2);
        return value;
    };
    std::vector<std::string> argv(number('*'));
    for (std::string& a : argv) {
        const std::size_t length = number('$');
        if (resp.size() < length + 2) {
            throw std::invalid_argument("a RESP bulk string ends early");
        }
        a = std::string(resp.substr(0, length));
        resp.remove_prefix(length + 2);
    }
    if (!resp.empty()) {
        throw std::invalid_argument("bytes after the RESP array");
    }
    return argv;
}

}  // namespace ratelimit_test
