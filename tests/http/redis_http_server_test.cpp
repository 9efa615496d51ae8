// End to end through Redis: two instances of examples/http_server.cpp started with
// `--redis 127.0.0.1:PORT` and the same rule file share their limits (the rules' and the login
// guard's) through one throw-away redis-server, driven alternately by a plain HTTP client. No
// sleeps: the limits are hours long, or never reached.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>

#include "support/catch.hpp"
#include "support/http_example.hpp"
#include "support/redis_test_server.hpp"

namespace {

namespace rt = ratelimit_test;
using http_example::Response;
using http_example::send;
using http_example::ServerProcess;

http_example::RuleFile writeSharedRules() {
    return http_example::RuleFile(
        "POST /login  4/h  algorithm=sliding_log\n"
        "GET  /api    3/h  name=api algorithm=token_bucket\n");
}

}  // namespace

TEST_CASE("HTTP server example: two servers with --redis share one limit",
          "[http][example][server][redis]") {
    const auto redis = rt::startServer({.tcp = true});
    if (!redis) {
        return;
    }
    const auto rules = writeSharedRules();
    const std::string address = "127.0.0.1:" + std::to_string(redis->port());
    ServerProcess first(
        {"--port", "0", "--rules", rules.path(), "--redis", address, "--user", "alice=secret"});
    ServerProcess second(
        {"--port", "0", "--rules", rules.path(), "--redis", address, "--user", "alice=secret"});
    const std::string alice = "user=alice&password=secret";

    // One client alternating between the servers: the four logins of the hour are spent once,
    // whichever server answers, and `r` counts down across both.
    for (int i = 0; i < 4; ++i) {
        const Response r =
            send(i % 2 == 0 ? first.port() : second.port(), "POST", "/login", {}, alice);
        CHECK(r.status == 200);
        const std::optional<std::string> limit = r.header("RateLimit");
        REQUIRE(limit);
        CHECK(limit->rfind("\"login\";r=" + std::to_string(3 - i) + ";t=", 0) == 0);
    }
    for (const int port : {first.port(), second.port()}) {
        const Response refused = send(port, "POST", "/login", {}, alice);
        CHECK(refused.status == 429);
        CHECK(refused.header("Retry-After"));
    }

    // Another route, another algorithm, the same sharing.
    int admitted = 0;
    for (int i = 0; i < 10; ++i) {
        const int port = i % 2 == 0 ? first.port() : second.port();
        admitted += send(port, "GET", "/api/x").status == 200 ? 1 : 0;
    }
    CHECK(admitted == 3);
}

TEST_CASE("HTTP server example: two servers with --redis share the login guard's block",
          "[http][example][server][redis]") {
    const auto redis = rt::startServer({.tcp = true});
    if (!redis) {
        return;
    }
    // The route's own limit is far away: only the login guard refuses here.
    const http_example::RuleFile rules("POST /login 1000/h\n");
    const std::string address = "127.0.0.1:" + std::to_string(redis->port());
    ServerProcess first({"--port", "0", "--rules", rules.path(), "--redis", address, "--user",
                         "alice=secret", "--user", "bob=hunter2"});
    ServerProcess second({"--port", "0", "--rules", rules.path(), "--redis", address, "--user",
                          "alice=secret", "--user", "bob=hunter2"});

    // Five failed logins spread over both servers block the name on both.
    for (int i = 0; i < 5; ++i) {
        const int port = i % 2 == 0 ? first.port() : second.port();
        CHECK(send(port, "POST", "/login", {}, "user=alice&password=guess").status == 401);
    }
    for (const int port : {first.port(), second.port()}) {
        const Response blocked = send(port, "POST", "/login", {}, "user=alice&password=secret");
        CHECK(blocked.status == 429);
        const std::optional<std::string> retry = blocked.header("Retry-After");
        REQUIRE(retry);
        CHECK(std::stoi(*retry) >= 850);
        CHECK(std::stoi(*retry) <= 900);
        CHECK(blocked.body.find(R"("violated-policies":["login-user"])") != std::string::npos);
    }
    CHECK(send(second.port(), "POST", "/login", {}, "user=bob&password=hunter2").status == 200);
}
