// ratelimit-explore: replays a traffic pattern against the five algorithms and shows what each
// admitted (a table, JSON or an SVG chart). `--help` documents the command line; with no
// arguments it runs the first worked scenario (10 per minute: 10 at 00:00, 5 at 00:30, 5 at
// 01:10). The logic lives in the headers beside this file, which its tests include too.
#include <cstddef>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "cli.hpp"

int main(int argc, char** argv) {
    const std::span<char*> all(argv, static_cast<std::size_t>(argc));
    const std::span<char*> args = all.subspan(all.empty() ? 0 : 1);  // without the program name
    return explore::run({args.begin(), args.end()}, std::cout, std::cerr);
}
