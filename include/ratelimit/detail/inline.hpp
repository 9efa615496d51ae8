#pragma once

#include <cassert>

// The rare paths (the memory storage's inserting a key, spilling, sweeping and contended lock;
// a limit set's dry-run members) are kept out of line and marked cold, so the hot path the
// compiler inlines stays small: quick to run and quick to compile.
#if defined(__GNUC__) || defined(__clang__)
#    define RATELIMIT_COLD [[gnu::cold, gnu::noinline]]
#else
#    define RATELIMIT_COLD
#endif

// A step the compiler would leave out of line for its size or its several callers (the refund
// path calls the same pieces), on the hot path all the same: the models' steps and the
// late-call rule around them, a limit set's members' steps, and the memory table's entry,
// which reads the clock (`MemoryTable::step`). Left out of line by the compiler, a step's
// 48-byte decision was copied out of a stack slot, a store-forwarding stall. (A limit set's
// binding is the other way round, a call of its own: see `LimitSetModel::stepEnforced`.)
#if defined(__GNUC__) || defined(__clang__)
#    define RATELIMIT_INLINE [[gnu::always_inline]] inline
#else
#    define RATELIMIT_INLINE inline
#endif

// A path kept out of line: one taken too often to be cold (a late call under contention), so
// that the inlined path the compiler builds knows it was not taken; or a hot step kept in a call
// of its own, so that its caller stays small and the step's shape does not move with the
// inlining budget of the code around it.
#if defined(__GNUC__) || defined(__clang__)
#    define RATELIMIT_NOINLINE [[gnu::noinline]]
#else
#    define RATELIMIT_NOINLINE
#endif

// Tells the compiler a condition the caller has already made sure of, so that the code after it
// folds the tests it makes redundant. Undefined if the condition is false: a build without
// NDEBUG checks it. The condition must have no side effects (one build may not evaluate it).
#if !defined(NDEBUG)
#    define RATELIMIT_ASSUME(condition) assert(condition)
#elif defined(__GNUC__) || defined(__clang__)
#    define RATELIMIT_ASSUME(condition) ((condition) ? void(0) : __builtin_unreachable())
#else
#    define RATELIMIT_ASSUME(condition) void(0)
#endif
