// Compile-time tests of the policy concepts: ClockPolicy (clock.hpp), AlgorithmModel
// (algorithms/model.hpp) and StoragePolicy (storage/storage.hpp), positive and negative cases.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>

#include <ratelimit/algorithms/fixed_window.hpp>
#include <ratelimit/algorithms/leaky_bucket.hpp>
#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/algorithms/sliding_counter.hpp>
#include <ratelimit/algorithms/sliding_log.hpp>
#include <ratelimit/algorithms/token_bucket.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/storage/memory.hpp>
#include <ratelimit/storage/storage.hpp>

#include "support/catch.hpp"

// A named namespace: the probe types are only ever looked at by the concepts, and clang warns
// about unused members of types with internal linkage.
namespace concepts_test {

using ratelimit::AlgorithmModel;
using ratelimit::ClockPolicy;
using ratelimit::StoragePolicy;

// ---- Clocks that are not clocks -------------------------------------------------------------

/// `now()` is not const: a limiter reads its clock through a const reference.
struct NonConstNow {
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<NonConstNow, duration>;
    time_point now() { return time_point{}; }
};

/// `now()` returns a duration, not the clock's time_point.
struct NowReturnsDuration {
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<NowReturnsDuration, duration>;
    [[nodiscard]] duration now() const { return duration{}; }
};

/// `now()` returns another clock's time point.
struct NowReturnsForeignTimePoint {
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<NowReturnsForeignTimePoint, duration>;
    [[nodiscard]] std::chrono::system_clock::time_point now() const { return {}; }
};

/// No `duration` member type.
struct NoDuration {
    using time_point = std::chrono::time_point<std::chrono::system_clock, std::chrono::nanoseconds>;
    [[nodiscard]] time_point now() const { return {}; }
};

/// Not copyable: limiters and their copies hold clock handles.
struct MoveOnlyClock {
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<MoveOnlyClock, duration>;
    std::unique_ptr<int> state;
    [[nodiscard]] time_point now() const { return time_point{}; }
};

/// A minimal valid clock of the user's own.
struct UserClock {
    using duration = std::chrono::microseconds;
    using time_point = std::chrono::time_point<UserClock, duration>;
    [[nodiscard]] time_point now() const { return time_point{}; }
};

// ---- Models that are not models -------------------------------------------------------------

struct EmptyModel {};

// Each probe below lacks exactly one thing a model needs.
using ratelimit::Decision;
using ratelimit::ModelRange;
using ratelimit::Quota;
using ratelimit::Tick;

/// Everything but `kBucket`.
struct NoBucketFlag {
    struct State {};
    static constexpr std::string_view kName = "no_bucket_flag";
    static std::int64_t capacity(const ratelimit::Limit& l) { return l.count; }
    static Decision step(State& /*s*/, const Quota& /*q*/, Tick /*now*/, std::int64_t /*cost*/) {
        return {};
    }
    static bool isFresh(const State& /*s*/, const Quota& /*q*/, Tick /*now*/) { return true; }
    static Tick lastWrite(const State& /*s*/) { return 0; }
    static ModelRange range(const Quota& /*q*/) { return {}; }
};

/// `step` returns bool instead of a Decision.
struct StepReturnsBool {
    struct State {};
    static constexpr std::string_view kName = "step_returns_bool";
    static std::int64_t capacity(const ratelimit::Limit& l) { return l.count; }
    static constexpr bool kBucket = false;
    static bool step(State& /*s*/, const Quota& /*q*/, Tick /*now*/, std::int64_t /*cost*/) {
        return true;
    }
    static bool isFresh(const State& /*s*/, const Quota& /*q*/, Tick /*now*/) { return true; }
    static Tick lastWrite(const State& /*s*/) { return 0; }
    static ModelRange range(const Quota& /*q*/) { return {}; }
};

/// A State that cannot be default-initialised as the fresh key.
struct NoFreshState {
    struct State {
        explicit State(int /*unused*/) {}
    };
    static constexpr std::string_view kName = "no_fresh_state";
    static std::int64_t capacity(const ratelimit::Limit& l) { return l.count; }
    static constexpr bool kBucket = false;
    static Decision step(State& /*s*/, const Quota& /*q*/, Tick /*now*/, std::int64_t /*cost*/) {
        return {};
    }
    static bool isFresh(const State& /*s*/, const Quota& /*q*/, Tick /*now*/) { return true; }
    static Tick lastWrite(const State& /*s*/) { return 0; }
    static ModelRange range(const Quota& /*q*/) { return {}; }
};

/// Everything but `lastWrite`.
struct NoLastWrite {
    struct State {};
    static constexpr std::string_view kName = "no_last_write";
    static std::int64_t capacity(const ratelimit::Limit& l) { return l.count; }
    static constexpr bool kBucket = false;
    static Decision step(State& /*s*/, const Quota& /*q*/, Tick /*now*/, std::int64_t /*cost*/) {
        return {};
    }
    static bool isFresh(const State& /*s*/, const Quota& /*q*/, Tick /*now*/) { return true; }
    static ModelRange range(const Quota& /*q*/) { return {}; }
};

/// Everything but `capacity`.
struct NoCapacity {
    struct State {};
    static constexpr std::string_view kName = "no_capacity";
    static constexpr bool kBucket = false;
    static Decision step(State& /*s*/, const Quota& /*q*/, Tick /*now*/, std::int64_t /*cost*/) {
        return {};
    }
    static bool isFresh(const State& /*s*/, const Quota& /*q*/, Tick /*now*/) { return true; }
    static Tick lastWrite(const State& /*s*/) { return 0; }
    static ModelRange range(const Quota& /*q*/) { return {}; }
};

/// The smallest valid model of the user's own.
struct UserModel {
    struct State {
        std::int64_t used = 0;
    };
    static constexpr std::string_view kName = "user_model";
    static std::int64_t capacity(const ratelimit::Limit& l) { return l.count; }
    static constexpr bool kBucket = false;
    static Decision step(State& /*s*/, const Quota& /*q*/, Tick /*now*/, std::int64_t /*cost*/) {
        return {};
    }
    static bool isFresh(const State& /*s*/, const Quota& /*q*/, Tick /*now*/) { return true; }
    static Tick lastWrite(const State& /*s*/) { return 0; }
    static ModelRange range(const Quota& /*q*/) { return {}; }
};

}  // namespace concepts_test

using namespace concepts_test;  // NOLINT(google-build-using-namespace): test-local probe types

TEST_CASE("Concepts: the shipped clocks are ClockPolicy", "[concepts][clock]") {
    STATIC_REQUIRE(ClockPolicy<ratelimit::ManualClock>);
    STATIC_REQUIRE(ClockPolicy<ratelimit::SteadyClock>);
    STATIC_REQUIRE(ClockPolicy<ratelimit::SystemClock>);
    STATIC_REQUIRE(ClockPolicy<UserClock>);
    STATIC_REQUIRE(ClockPolicy<std::chrono::system_clock>);
    STATIC_REQUIRE(ClockPolicy<std::chrono::steady_clock>);
}

TEST_CASE("Concepts: what is not a ClockPolicy", "[concepts][clock]") {
    STATIC_REQUIRE_FALSE(ClockPolicy<int>);
    STATIC_REQUIRE_FALSE(ClockPolicy<void>);
    STATIC_REQUIRE_FALSE(ClockPolicy<std::chrono::nanoseconds>);
    STATIC_REQUIRE_FALSE(ClockPolicy<NonConstNow>);
    STATIC_REQUIRE_FALSE(ClockPolicy<NowReturnsDuration>);
    STATIC_REQUIRE_FALSE(ClockPolicy<NowReturnsForeignTimePoint>);
    STATIC_REQUIRE_FALSE(ClockPolicy<NoDuration>);
    STATIC_REQUIRE_FALSE(ClockPolicy<MoveOnlyClock>);
}

TEST_CASE("Concepts: the five models are AlgorithmModel", "[concepts][algorithms]") {
    STATIC_REQUIRE(AlgorithmModel<ratelimit::FixedWindowModel>);
    STATIC_REQUIRE(AlgorithmModel<ratelimit::SlidingLogModel>);
    STATIC_REQUIRE(AlgorithmModel<ratelimit::SlidingCounterModel>);
    STATIC_REQUIRE(AlgorithmModel<ratelimit::TokenBucketModel>);
    STATIC_REQUIRE(AlgorithmModel<ratelimit::LeakyBucketModel>);
    STATIC_REQUIRE(AlgorithmModel<ratelimit::GcraModel>);
    STATIC_REQUIRE(AlgorithmModel<UserModel>);
    // The buckets say so; the windows do not.
    STATIC_REQUIRE(ratelimit::TokenBucketModel::kBucket);
    STATIC_REQUIRE(ratelimit::LeakyBucketModel::kBucket);
    STATIC_REQUIRE_FALSE(ratelimit::FixedWindowModel::kBucket);
    STATIC_REQUIRE_FALSE(ratelimit::SlidingLogModel::kBucket);
    STATIC_REQUIRE_FALSE(ratelimit::SlidingCounterModel::kBucket);
}

TEST_CASE("Concepts: what is not an AlgorithmModel", "[concepts][algorithms]") {
    STATIC_REQUIRE_FALSE(AlgorithmModel<int>);
    STATIC_REQUIRE_FALSE(AlgorithmModel<EmptyModel>);
    STATIC_REQUIRE_FALSE(AlgorithmModel<NoBucketFlag>);
    STATIC_REQUIRE_FALSE(AlgorithmModel<StepReturnsBool>);
    STATIC_REQUIRE_FALSE(AlgorithmModel<NoFreshState>);
    STATIC_REQUIRE_FALSE(AlgorithmModel<NoLastWrite>);
    STATIC_REQUIRE_FALSE(AlgorithmModel<NoCapacity>);
}

TEST_CASE("Concepts: MemoryStorage is a StoragePolicy for every model", "[concepts][memory]") {
    STATIC_REQUIRE(StoragePolicy<ratelimit::MemoryStorage, ratelimit::TokenBucketModel>);
    STATIC_REQUIRE(StoragePolicy<ratelimit::MemoryStorage, ratelimit::LeakyBucketModel>);
    STATIC_REQUIRE(StoragePolicy<ratelimit::MemoryStorage, ratelimit::FixedWindowModel>);
    STATIC_REQUIRE(StoragePolicy<ratelimit::MemoryStorage, ratelimit::SlidingLogModel>);
    STATIC_REQUIRE(StoragePolicy<ratelimit::MemoryStorage, ratelimit::SlidingCounterModel>);
    STATIC_REQUIRE(StoragePolicy<ratelimit::MemoryStorage, UserModel>);
    STATIC_REQUIRE(std::is_same_v<ratelimit::MemoryStorage::DefaultClock, ratelimit::SteadyClock>);
    STATIC_REQUIRE_FALSE(ratelimit::MemoryStorage::kSharedAcrossHosts);
}

TEST_CASE("Concepts: what is not a StoragePolicy", "[concepts][memory]") {
    STATIC_REQUIRE_FALSE(StoragePolicy<int, ratelimit::TokenBucketModel>);
    STATIC_REQUIRE_FALSE(StoragePolicy<ratelimit::ManualClock, ratelimit::TokenBucketModel>);
    // A storage is only a storage for models.
    STATIC_REQUIRE_FALSE(StoragePolicy<ratelimit::MemoryStorage, int>);
    STATIC_REQUIRE_FALSE(StoragePolicy<ratelimit::MemoryStorage, EmptyModel>);
}
