#pragma once

// The memory storage's rare paths (inserting a key, spilling, sweeping, the contended lock) are
// kept out of line and marked cold, so the hot path the compiler inlines stays small: quick to
// run and quick to compile.
#if defined(__GNUC__) || defined(__clang__)
#    define RATELIMIT_COLD [[gnu::cold, gnu::noinline]]
#else
#    define RATELIMIT_COLD
#endif
