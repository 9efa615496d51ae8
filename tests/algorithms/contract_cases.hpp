#pragma once

// The contract suite's test cases, one per rule of docs/semantics.md, written once for every
// storage: a test file defines
//   RATELIMIT_TEST_CONTRACT_LIMITERS  a std::tuple of the five limiter types over its storage
//   RATELIMIT_TEST_CONTRACT_FIXTURE   a fixture template for them (see contract.hpp)
//   RATELIMIT_TEST_CONTRACT_STORAGE   its storage tag, "[memory]" or "[redis]"
// and then includes this file (tests/algorithms/contract_test.cpp for memory,
// tests/algorithms/redis_contract_test.cpp for Redis). Catch2 names each instance by its index
// in the list: 0 fixed window, 1 sliding log, 2 sliding counter, 3 token bucket, 4 leaky bucket.

#include "algorithms/contract.hpp"
#include "support/catch.hpp"

TEMPLATE_LIST_TEST_CASE("Contract: a refusal consumes nothing",
                        "[contract]" RATELIMIT_TEST_CONTRACT_STORAGE,
                        RATELIMIT_TEST_CONTRACT_LIMITERS) {
    ratelimit_test::runContract<RATELIMIT_TEST_CONTRACT_FIXTURE, TestType>(
        [](auto& f) { ratelimit_test::checkRefusalsConsumeNothing(f); });
}

TEMPLATE_LIST_TEST_CASE("Contract: a cost of zero is a peek",
                        "[contract]" RATELIMIT_TEST_CONTRACT_STORAGE,
                        RATELIMIT_TEST_CONTRACT_LIMITERS) {
    ratelimit_test::runContract<RATELIMIT_TEST_CONTRACT_FIXTURE, TestType>(
        [](auto& f) { ratelimit_test::checkCostZeroIsAPeek(f); });
}

TEMPLATE_LIST_TEST_CASE("Contract: a cost above the capacity is never allowed and consumes nothing",
                        "[contract]" RATELIMIT_TEST_CONTRACT_STORAGE,
                        RATELIMIT_TEST_CONTRACT_LIMITERS) {
    ratelimit_test::runContract<RATELIMIT_TEST_CONTRACT_FIXTURE, TestType>(
        [](auto& f) { ratelimit_test::checkImpossibleCosts(f); });
}

TEMPLATE_LIST_TEST_CASE("Contract: a negative cost throws std::invalid_argument",
                        "[contract]" RATELIMIT_TEST_CONTRACT_STORAGE,
                        RATELIMIT_TEST_CONTRACT_LIMITERS) {
    ratelimit_test::runContract<RATELIMIT_TEST_CONTRACT_FIXTURE, TestType>(
        [](auto& f) { ratelimit_test::checkNegativeCostThrows(f); });
}

TEMPLATE_LIST_TEST_CASE(
    "Contract: the decision's limit is the capacity (count for windows, burst for buckets)",
    "[contract]" RATELIMIT_TEST_CONTRACT_STORAGE, RATELIMIT_TEST_CONTRACT_LIMITERS) {
    ratelimit_test::runContract<RATELIMIT_TEST_CONTRACT_FIXTURE, TestType>(
        [](auto& f) { ratelimit_test::checkLimitField(f); });
}

TEMPLATE_LIST_TEST_CASE("Contract: any byte string is a key of its own",
                        "[contract]" RATELIMIT_TEST_CONTRACT_STORAGE,
                        RATELIMIT_TEST_CONTRACT_LIMITERS) {
    ratelimit_test::runContract<RATELIMIT_TEST_CONTRACT_FIXTURE, TestType>(
        [](auto& f) { ratelimit_test::checkKeysAreBytes(f); });
}

TEMPLATE_LIST_TEST_CASE("Contract: reset forgets one key",
                        "[contract]" RATELIMIT_TEST_CONTRACT_STORAGE,
                        RATELIMIT_TEST_CONTRACT_LIMITERS) {
    ratelimit_test::runContract<RATELIMIT_TEST_CONTRACT_FIXTURE, TestType>(
        [](auto& f) { ratelimit_test::checkReset(f); });
}

TEMPLATE_LIST_TEST_CASE("Contract: random traffic keeps every rule of a decision",
                        "[contract]" RATELIMIT_TEST_CONTRACT_STORAGE,
                        RATELIMIT_TEST_CONTRACT_LIMITERS) {
    ratelimit_test::runContract<RATELIMIT_TEST_CONTRACT_FIXTURE, TestType>(
        [](auto& f) { ratelimit_test::checkRandomTraffic(f); });
}

TEMPLATE_LIST_TEST_CASE("Contract: a clock stepping back admits nothing extra and keeps the wait",
                        "[contract]" RATELIMIT_TEST_CONTRACT_STORAGE,
                        RATELIMIT_TEST_CONTRACT_LIMITERS) {
    ratelimit_test::runContract<RATELIMIT_TEST_CONTRACT_FIXTURE, TestType>(
        [](auto& f) { ratelimit_test::checkStepBack(f); });
}

TEMPLATE_LIST_TEST_CASE("Contract: the worked scenarios admit what each algorithm promises",
                        "[contract]" RATELIMIT_TEST_CONTRACT_STORAGE,
                        RATELIMIT_TEST_CONTRACT_LIMITERS) {
    ratelimit_test::runContract<RATELIMIT_TEST_CONTRACT_FIXTURE, TestType>(
        [](auto& f) { ratelimit_test::checkWorkedScenarios(f); });
}
