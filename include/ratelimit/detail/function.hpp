#pragma once

// std::function, for the storages' hooks.
//
// In C++20, libstdc++'s <functional> also holds the searchers, std::bind and the hash tables
// they use (<unordered_map>); its <bits/std_function.h> is std::function alone. Like
// detail/chrono.hpp, this keeps the parse of <ratelimit/limiter.hpp> near that of a file using
// <map>, <string> and <mutex> (bench/README.md, "Compile time"). Any other standard library
// gets <functional>.
#include <version>

#if defined(__GLIBCXX__) && __has_include(<bits/std_function.h>)
#    include <bits/std_function.h>
#else
#    include <functional>
#endif
