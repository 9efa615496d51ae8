#pragma once

// A throw-away Redis Cluster for one test (tests/support/redis_cluster.hpp), or a skipped test
// when the machine has no redis-server (with CI=true a missing redis-server throws instead).

#include <memory>
#include <utility>

#include "support/redis_cluster.hpp"
#include "support/redis_test_server.hpp"

namespace ratelimit_test {

/// The started cluster, or null after marking the running test skipped.
inline std::unique_ptr<RedisCluster> startCluster(RedisCluster::Options options = {}) {
    return startOrSkip<RedisCluster>(std::move(options));
}

}  // namespace ratelimit_test
