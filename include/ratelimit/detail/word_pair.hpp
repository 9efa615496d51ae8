#pragma once

// Two 64-bit words changed as one by a 16-byte compare-and-swap, where the processor has one
// (x86-64's `cmpxchg16b`): how the memory table steps a bucket without taking its lock.

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <cpuid.h>
#endif

#if defined(__SANITIZE_THREAD__)
#    define RATELIMIT_TSAN 1
#elif defined(__has_feature)
#    if __has_feature(thread_sanitizer)
#        define RATELIMIT_TSAN 1
#    endif
#endif

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Two words, 16-byte aligned as `cmpxchg16b` needs them.
struct alignas(16) WordPair {
    std::uint64_t low = 0;
    std::uint64_t high = 0;

    friend bool operator==(const WordPair&, const WordPair&) = default;
};

/// Reads the two words, `high` first with acquire: each word atomically, the pair not (a
/// compare-and-swap that expects a torn pair fails, and returns the pair as it is).
inline WordPair loadWords(WordPair& w) noexcept {
    WordPair seen;
    seen.high = std::atomic_ref<std::uint64_t>(w.high).load(std::memory_order_acquire);
    seen.low = std::atomic_ref<std::uint64_t>(w.low).load(std::memory_order_relaxed);
    return seen;
}

/// Writes the two words, `high` last with release, for a writer no compare-and-swap can race
/// (the memory table's holder of a sealed slot).
inline void storeWords(WordPair& w, WordPair value) noexcept {
    std::atomic_ref<std::uint64_t>(w.low).store(value.low, std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(w.high).store(value.high, std::memory_order_release);
}

// ThreadSanitizer cannot see inside the assembly, so its builds take the tables' locked path.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(RATELIMIT_TSAN)

/// Whether this processor has `cmpxchg16b` (every x86-64 processor since about 2006, but not
/// the first ones, so the memory table asks once per table).
inline bool hasWordPairCas() noexcept {
    unsigned eax = 0;
    unsigned ebx = 0;
    unsigned ecx = 0;
    unsigned edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_CMPXCHG16B) != 0;
}

/// Replaces `target` with `desired` if it equals `expected`, as one atomic step (a full
/// barrier); otherwise loads it into `expected`. Only where `hasWordPairCas()`.
inline bool compareExchangeWords(WordPair& target, WordPair& expected, WordPair desired) noexcept {
    bool swapped = false;
    __asm__ __volatile__("lock cmpxchg16b %1"
                         : "=@ccz"(swapped), "+m"(target), "+a"(expected.low), "+d"(expected.high)
                         : "b"(desired.low), "c"(desired.high)
                         : "memory");
    return swapped;
}

#else

inline bool hasWordPairCas() noexcept { return false; }

inline bool compareExchangeWords(WordPair& /*target*/, WordPair& /*expected*/,
                                 WordPair /*desired*/) noexcept {
    return false;  // never called: hasWordPairCas() is false
}

#endif

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
