#pragma once

// std::chrono's durations, time points, clocks and their literals: all the library uses.
//
// In C++20, libstdc++'s <chrono> also holds the calendar, the time zones and their stream I/O
// (<sstream>, and with it <istream>, <ostream> and the locales), which alone cost more to parse
// than a file using <map>, <string> and <mutex> (bench/README.md, "Compile time"). Its
// <bits/chrono.h> is the part the library uses, the one its own <mutex> and <thread> include.
// Any other standard library gets <chrono>. A user who wants the calendar includes <chrono>.
#include <version>

#if defined(__GLIBCXX__) && __has_include(<bits/chrono.h>)
#    include <bits/chrono.h>
#else
#    include <chrono>
#endif
