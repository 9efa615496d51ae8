#pragma once

// Clang's -Wthread-safety annotations; empty elsewhere.
#if defined(__clang__)
#    define RATELIMIT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#    define RATELIMIT_THREAD_ANNOTATION(x)
#endif

#define RATELIMIT_CAPABILITY(x) RATELIMIT_THREAD_ANNOTATION(capability(x))
#define RATELIMIT_ACQUIRE(...) RATELIMIT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RATELIMIT_RELEASE(...) RATELIMIT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RATELIMIT_TRY_ACQUIRE(...) RATELIMIT_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define RATELIMIT_GUARDED_BY(x) RATELIMIT_THREAD_ANNOTATION(guarded_by(x))
#define RATELIMIT_REQUIRES(...) RATELIMIT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define RATELIMIT_EXCLUDES(...) RATELIMIT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define RATELIMIT_SCOPED_CAPABILITY RATELIMIT_THREAD_ANNOTATION(scoped_lockable)
#define RATELIMIT_NO_THREAD_SAFETY_ANALYSIS RATELIMIT_THREAD_ANNOTATION(no_thread_safety_analysis)
