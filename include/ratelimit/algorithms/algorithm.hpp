#pragma once

// The five algorithms as one list: the enumeration that configuration files and `AnyLimiter`
// name them by, and everything derived from it (names, parsing, each one's capacity, dispatch
// to its model).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ratelimit/algorithms/fixed_window.hpp>
#include <ratelimit/algorithms/leaky_bucket.hpp>
#include <ratelimit/algorithms/sliding_counter.hpp>
#include <ratelimit/algorithms/sliding_log.hpp>
#include <ratelimit/algorithms/token_bucket.hpp>
#include <ratelimit/limit.hpp>

namespace ratelimit {
inline namespace v1 {

/// The library's algorithm models, in the order of `Algorithm`'s values: a type list to run
/// code over every algorithm (the tests build their limiter lists from it).
using AlgorithmModels = std::tuple<FixedWindowModel, SlidingLogModel, SlidingCounterModel,
                                   TokenBucketModel, LeakyBucketModel>;

/// The five algorithms, for choosing one at run time (configuration files, `AnyLimiter::make`).
/// Each value is the index of its model in `AlgorithmModels`.
enum class Algorithm {
    kFixedWindow,
    kSlidingLog,
    kSlidingCounter,
    kTokenBucket,
    kLeakyBucket,
};

inline constexpr std::size_t kAlgorithmCount = std::tuple_size_v<AlgorithmModels>;
static_assert(static_cast<std::size_t>(Algorithm::kLeakyBucket) + 1 == kAlgorithmCount,
              "one Algorithm value per model of AlgorithmModels");

namespace detail {

template <class Model, std::size_t I = 0>
constexpr std::size_t modelIndex() noexcept {
    if constexpr (I < kAlgorithmCount) {
        if constexpr (!std::is_same_v<Model, std::tuple_element_t<I, AlgorithmModels>>) {
            return modelIndex<Model, I + 1>();
        }
    }
    return I;
}

template <std::size_t I, class F>
constexpr decltype(auto) visitModel(std::size_t index, F& f) {
    if constexpr (I + 1 < kAlgorithmCount) {
        if (index != I) {
            return visitModel<I + 1>(index, f);
        }
    }
    return f.template operator()<std::tuple_element_t<I, AlgorithmModels>>();
}

}  // namespace detail

/// Whether `Model` is one of `AlgorithmModels`.
template <class Model>
inline constexpr bool kIsAlgorithmModel = detail::modelIndex<Model>() < kAlgorithmCount;

/// The `Algorithm` of `Model`, one of `AlgorithmModels`.
template <class Model>
requires kIsAlgorithmModel<Model>
inline constexpr Algorithm kAlgorithmOf = static_cast<Algorithm>(detail::modelIndex<Model>());

/// Calls `f.template operator()<Model>()` with the model of `algorithm` and returns what it
/// returns. Precondition: `algorithm` is one of the enumerators (any other value runs the last
/// model).
template <class F>
constexpr decltype(auto) visitAlgorithm(Algorithm algorithm, F&& f) {
    return detail::visitModel<0>(static_cast<std::size_t>(algorithm), f);
}

/// The algorithm's configuration name: `fixed_window`, `sliding_log`, `sliding_counter`,
/// `token_bucket`, `leaky_bucket` (its model's `kName`); "unknown" for a value outside the
/// enumeration.
[[nodiscard]] constexpr std::string_view toString(Algorithm algorithm) noexcept {
    if (static_cast<std::size_t>(algorithm) >= kAlgorithmCount) {
        return "unknown";
    }
    return visitAlgorithm(algorithm, []<class Model>() { return Model::kName; });
}

/// The algorithm named `name`: a `toString` name, or a model's other name (`gcra` for the leaky
/// bucket); `-` may stand for `_`. Returns nullopt for anything else (never throws).
[[nodiscard]] constexpr std::optional<Algorithm> parseAlgorithm(std::string_view name) noexcept {
    const auto same = [name](std::string_view expected) {
        return std::equal(
            name.begin(), name.end(), expected.begin(), expected.end(),
            [](char given, char wanted) { return (given == '-' ? '_' : given) == wanted; });
    };
    std::optional<Algorithm> found;
    for (std::size_t i = 0; i < kAlgorithmCount && !found; ++i) {
        const auto algorithm = static_cast<Algorithm>(i);
        visitAlgorithm(algorithm, [&]<class Model>() {
            bool alias = false;
            if constexpr (requires { Model::kAlias; }) {
                alias = same(Model::kAlias);
            }
            if (same(Model::kName) || alias) {
                found = algorithm;
            }
        });
    }
    return found;
}

/// The limit a client sees under `algorithm` (`Decision::limit`, the most one call may cost):
/// its model's `capacity`.
[[nodiscard]] constexpr std::int64_t capacity(Algorithm algorithm, const Limit& limit) noexcept {
    return visitAlgorithm(algorithm, [&]<class Model>() { return Model::capacity(limit); });
}

}  // namespace v1
}  // namespace ratelimit
