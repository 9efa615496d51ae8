#pragma once

// Everything that needs nothing beyond the standard library. The specific headers
// (<ratelimit/limiter.hpp>, <ratelimit/algorithms/token_bucket.hpp>, …) compile faster.

#include <ratelimit/algorithms/algorithm.hpp>
#include <ratelimit/algorithms/fixed_window.hpp>
#include <ratelimit/algorithms/leaky_bucket.hpp>
#include <ratelimit/algorithms/limit_set.hpp>
#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/algorithms/penalty.hpp>
#include <ratelimit/algorithms/sliding_counter.hpp>
#include <ratelimit/algorithms/sliding_log.hpp>
#include <ratelimit/algorithms/tiered.hpp>
#include <ratelimit/algorithms/token_bucket.hpp>
#include <ratelimit/any_limiter.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/http/cidr.hpp>
#include <ratelimit/http/client_key.hpp>
#include <ratelimit/http/headers.hpp>
#include <ratelimit/http/problem.hpp>
#include <ratelimit/http/route_limiter.hpp>
#include <ratelimit/http/routes.hpp>
#include <ratelimit/key_checks.hpp>
#include <ratelimit/leasing.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/memory_options.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/quota.hpp>
#include <ratelimit/storage/memory.hpp>
#include <ratelimit/storage/storage.hpp>
#include <ratelimit/store_error.hpp>
#include <ratelimit/tiers.hpp>
#include <ratelimit/version.hpp>
