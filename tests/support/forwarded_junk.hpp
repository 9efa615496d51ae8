#pragma once

// What a client may put left of its hop in a forwarding header, as the unit tests and the HTTP
// parsers' fuzz target build it: the rule "junk on the left never changes the key" is checked
// by both. Standard library only: the fuzz targets have no Catch2.

#include <string>
#include <string_view>
#include <vector>

namespace ratelimit_test {

/// The field lines of `junk` (split at '\n') followed by `suffix`: on the junk's last line
/// after a comma (a proxy appending to the field), or on a line of its own.
inline std::vector<std::string> withJunkOnTheLeft(std::string_view junk, std::string_view suffix,
                                                  bool ownLine) {
    std::vector<std::string> lines{std::string()};
    for (const char c : junk) {
        if (c == '\n') {
            lines.emplace_back();
        } else {
            lines.back().push_back(c);
        }
    }
    if (ownLine) {
        lines.emplace_back(suffix);
    } else {
        lines.back().append(", ").append(suffix);
    }
    return lines;
}

}  // namespace ratelimit_test
