#pragma once

// A throw-away redis-server for one Redis test, or a skipped test when the machine has none
// (with CI=true a missing redis-server throws instead: tests/support/redis_server.hpp).

#include <memory>
#include <string>
#include <utility>

#include "support/catch.hpp"
#include "support/redis_server.hpp"

namespace ratelimit_test {

/// A started `Fixture` (a `RedisServer`, a `RedisCluster`), or null after marking the running
/// test skipped when the machine has no redis-server.
template <class Fixture>
std::unique_ptr<Fixture> startOrSkip(typename Fixture::Options options) {
    try {
        return std::make_unique<Fixture>(std::move(options));
    } catch (const RedisUnavailable& e) {
#ifdef SKIP
        SKIP(e.what());
#else
        // Catch2 v2 has no SKIP: warn, and count an assertion so --warn NoAssertions passes.
        WARN(std::string("skipped: ") + e.what());
        SUCCEED("skipped");
#endif
        return nullptr;
    }
}

/// The started server, or null after marking the running test skipped.
inline std::unique_ptr<RedisServer> startServer(RedisServer::Options options = {}) {
    return startOrSkip<RedisServer>(std::move(options));
}

}  // namespace ratelimit_test
