#pragma once

// The memory storage's rare paths (inserting a key, spilling, sweeping, the contended lock) are
// kept out of line and marked cold, so the hot path the compiler inlines stays small: quick to
// run and quick to compile.
#if defined(__GNUC__) || defined(__clang__)
#    define RATELIMIT_COLD [[gnu::cold, gnu::noinline]]
#else
#    define RATELIMIT_COLD
#endif

// A step the compiler would leave out of line for its size alone, on the hot path all the same
// (a limit set's, which inlines its members' steps).
#if defined(__GNUC__) || defined(__clang__)
#    define RATELIMIT_INLINE [[gnu::always_inline]] inline
#else
#    define RATELIMIT_INLINE inline
#endif
