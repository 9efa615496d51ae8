#pragma once

// Inlining hints for the memory storage's hot path: its few small functions must collapse into
// one (a call chain there copies the 48-byte Decision through the stack several times), while
// the rare paths (inserting a key, spilling) stay out of line so the hot one stays small.
#if defined(__GNUC__) || defined(__clang__)
#    define RATELIMIT_ALWAYS_INLINE [[gnu::always_inline]] inline
#    define RATELIMIT_COLD [[gnu::cold, gnu::noinline]]
#else
#    define RATELIMIT_ALWAYS_INLINE inline
#    define RATELIMIT_COLD
#endif
