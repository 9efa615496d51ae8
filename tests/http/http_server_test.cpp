// End to end: starts examples/http_server.cpp (its path comes from CMake as RATELIMIT_HTTP_SERVER)
// on a free loopback port with a rule file of tiny limits and long periods (or its built-in
// rules, whose bursts refill far slower than a test sends), and drives it with a plain HTTP/1.1
// client over a socket. No sleeps: the limits never refill during the test.

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "support/catch.hpp"
#include "support/http_example.hpp"

namespace {

using http_example::Response;
using http_example::send;
using http_example::ServerProcess;

// The form body of a login (the example's users are given with --user NAME=PASSWORD).
std::string loginForm(const std::string& user, const std::string& password) {
    return "user=" + user + "&password=" + password;
}

std::string writeRules() {
    return http_example::writeRuleFile(
        "# tiny limits, long periods: nothing refills while the test runs\n"
        "POST /login  3/h  algorithm=sliding_log\n"
        "GET  /api    2/h  name=api\n"
        "*    /api    5/h  name=api tier=pro\n");
}

}  // namespace

TEST_CASE("HTTP server example: limits, headers, 429 with Retry-After, /health and tiers",
          "[http][example][server]") {
    const std::string rules = writeRules();
    ServerProcess server(
        {"--port", "0", "--rules", rules, "--api-key", "secret-pro=pro", "--user", "alice=secret"});
    const int port = server.port();
    const std::string alice = loginForm("alice", "secret");

    // N allowed with decreasing r, then 429 with Retry-After and a problem body.
    for (int i = 0; i < 3; ++i) {
        const Response r = send(port, "POST", "/login", {}, alice);
        CHECK(r.status == 200);
        CHECK(r.header("RateLimit-Policy") == R"("login";q=3;w=3600)");
        const std::optional<std::string> limit = r.header("RateLimit");
        REQUIRE(limit);
        CHECK(limit->rfind("\"login\";r=" + std::to_string(2 - i) + ";t=", 0) == 0);
        CHECK(r.header("X-RateLimit-Remaining") == std::to_string(2 - i));
        CHECK(r.body.find("welcome") != std::string::npos);
    }
    for (const char* spelling : {"/login", "//login/", "/%6cogin"}) {
        INFO(spelling);
        const Response refused = send(port, "POST", spelling, {}, alice);
        CHECK(refused.status == 429);
        const std::optional<std::string> retry = refused.header("Retry-After");
        REQUIRE(retry);
        CHECK(std::stoi(*retry) >= 1);
        CHECK(std::stoi(*retry) <= 3600);
        CHECK(refused.header("Content-Type") == "application/problem+json");
        CHECK(refused.body.find("quota-exceeded") != std::string::npos);
        CHECK(refused.body.find(R"("violated-policies":["login"])") != std::string::npos);
        CHECK(refused.header("RateLimit")->rfind("\"login\";r=0;t=", 0) == 0);
    }

    // /health is never limited and carries no rate-limit fields.
    for (int i = 0; i < 20; ++i) {
        const Response h = send(port, "GET", "/health");
        CHECK(h.status == 200);
        CHECK_FALSE(h.header("RateLimit"));
    }

    // A tier's higher limit: anonymous clients get 2, the pro key 5, an unknown key is anonymous.
    int anonymous = 0;
    int pro = 0;
    for (int i = 0; i < 8; ++i) {
        anonymous += send(port, "GET", "/api/items").status == 200 ? 1 : 0;
        pro += send(port, "GET", "/api/items", "X-API-Key: secret-pro\r\n").status == 200 ? 1 : 0;
    }
    CHECK(anonymous == 2);
    CHECK(pro == 5);
    CHECK(send(port, "GET", "/api/items", "X-API-Key: made-up\r\n").status == 429);
    const Response proRefused = send(port, "GET", "/api/items", "X-API-Key: secret-pro\r\n");
    CHECK(proRefused.status == 429);
    CHECK(proRefused.header("RateLimit-Policy") == R"("api";q=5;w=3600)");
    CHECK(std::remove(rules.c_str()) == 0);
}

TEST_CASE("HTTP server example: --no-limit serves without the limiter or the login guard",
          "[http][example][server]") {
    ServerProcess server({"--port", "0", "--no-limit", "--user", "alice=secret"});
    for (int i = 0; i < 10; ++i) {
        const Response r = send(server.port(), "POST", "/login", {}, loginForm("alice", "secret"));
        CHECK(r.status == 200);
        CHECK_FALSE(r.header("RateLimit"));
    }
    // Failed logins are still refused, and block nothing.
    for (int i = 0; i < 6; ++i) {
        CHECK(send(server.port(), "POST", "/login", {}, loginForm("alice", "guess")).status == 401);
    }
    CHECK(send(server.port(), "POST", "/login", {}, loginForm("alice", "secret")).status == 200);
}

TEST_CASE(
    "HTTP server example: 5 failed logins block the user name for 15 minutes, even with the "
    "right password, and no other name",
    "[http][example][server]") {
    // The route's own limit is far away: only the login guard refuses here.
    const std::string rules =
        http_example::writeRuleFile("POST /login 1000/h algorithm=sliding_log\n");
    ServerProcess server(
        {"--port", "0", "--rules", rules, "--user", "alice=secret", "--user", "bob=hunter2"});
    const int port = server.port();

    for (int i = 0; i < 5; ++i) {
        INFO("failed login " << i + 1);
        const Response r = send(port, "POST", "/login", {}, loginForm("alice", "guess"));
        CHECK(r.status == 401);
        CHECK(r.header("Content-Type") == "application/problem+json");
        CHECK_FALSE(r.header("Retry-After"));
    }
    const Response blocked = send(port, "POST", "/login", {}, loginForm("alice", "secret"));
    CHECK(blocked.status == 429);
    const std::optional<std::string> retry = blocked.header("Retry-After");
    REQUIRE(retry);
    CHECK(std::stoi(*retry) >= 850);
    CHECK(std::stoi(*retry) <= 900);
    CHECK(blocked.header("Content-Type") == "application/problem+json");
    CHECK(blocked.body.find("quota-exceeded") != std::string::npos);
    CHECK(blocked.body.find(R"("violated-policies":["login-user"])") != std::string::npos);
    CHECK(blocked.body.find("welcome") == std::string::npos);

    // Another name, from the same address, still logs in.
    const Response bob = send(port, "POST", "/login", {}, loginForm("bob", "hunter2"));
    CHECK(bob.status == 200);
    CHECK(bob.body.find("welcome") != std::string::npos);
    CHECK(std::remove(rules.c_str()) == 0);
}

TEST_CASE(
    "HTTP server example: the built-in rules give a free API key a burst of 10 and a daily "
    "limit, one set",
    "[http][example][server]") {
    ServerProcess server({"--port", "0", "--api-key", "free-key=free"});
    const int port = server.port();

    // 30 a minute with a burst of 10: a token comes back every 2 s, far longer than the
    // 15 requests take.
    int admitted = 0;
    std::optional<Response> refused;
    for (int i = 0; i < 15; ++i) {
        Response r = send(port, "GET", "/api/items", "X-API-Key: free-key\r\n");
        if (r.status == 200) {
            ++admitted;
        } else {
            CHECK(r.status == 429);
            refused = std::move(r);
        }
    }
    CHECK(admitted == 10);
    REQUIRE(refused);
    CHECK(refused->header("RateLimit-Policy") == R"("api";q=10;w=20, "api-daily";q=1000;w=86400)");
    CHECK(refused->body.find(R"("violated-policies":["api"])") != std::string::npos);
}

TEST_CASE(
    "HTTP server example: a target whose dot segments or encoded slashes change its route is "
    "refused, never served without a limit",
    "[http][example][server]") {
    const std::string rules = writeRules();
    ServerProcess server({"--port", "0", "--rules", rules});
    const int port = server.port();
    // cpp-httplib serves these with the /api handler (it resolves no dot segments), while
    // their dot-resolved path, /, meets no rule.
    for (const char* target :
         {"/api/..", "/api/x/../..", "/api/%2e%2e/", "/api/%2E%2e", "/api/.%2e/", "//api/..//",
          "/api/..;/", "/api%2F..", "/api/x%2f..%2f..", "/api%2fitems"}) {
        INFO(target);
        int refused = 0;
        for (int i = 0; i < 5; ++i) {
            const Response r = send(port, "GET", target);
            CHECK_FALSE(r.header("RateLimit"));
            refused += r.status == 400 ? 1 : 0;
        }
        CHECK(refused == 5);
    }
    // The route itself is still limited, spelled plainly or not.
    CHECK(send(port, "GET", "/api/x/../items").status == 200);
    CHECK(send(port, "GET", "/api/a%2Fb").status == 200);
    const Response limited = send(port, "GET", "/api/items");
    CHECK(limited.status == 429);
    CHECK(limited.header("RateLimit"));
    CHECK(std::remove(rules.c_str()) == 0);
}

TEST_CASE(
    "HTTP server example: junk a client puts left of its address in X-Forwarded-For does not "
    "move it into the proxy's bucket",
    "[http][example][server]") {
    const std::string rules = writeRules();
    // The test client is the trusted proxy: 127.0.0.1 appends nothing, so the client's own
    // address is the rightmost hop of the header it sends.
    ServerProcess server({"--port", "0", "--rules", rules, "--trust-proxy", "127.0.0.1/32",
                          "--forwarded-header", "xff"});
    const int port = server.port();
    for (int i = 0; i < 2; ++i) {
        CHECK(send(port, "GET", "/api/items", "X-Forwarded-For: 198.51.100.77\r\n").status == 200);
    }
    for (int i = 0; i < 5; ++i) {
        const std::string xff = "X-Forwarded-For: \"x" + std::to_string(i) + ", 198.51.100.77\r\n";
        CHECK(send(port, "GET", "/api/items", xff).status == 429);
    }
    // The proxy's own bucket is untouched.
    CHECK(send(port, "GET", "/api/items").status == 200);
    CHECK(std::remove(rules.c_str()) == 0);
}
