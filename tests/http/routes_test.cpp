// Tests of include/ratelimit/http/routes.hpp and route_limiter.hpp: path normalisation (no
// bypass through other spellings), rule matching and tiers, the rule file format, and the
// middleware core end to end over memory storage (limits long enough that time never matters,
// or a ManualClock), rule sets, the identity each rule counts, and dry-run rules in a set.

#include <chrono>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/clock.hpp>
#include <ratelimit/http/route_limiter.hpp>
#include <ratelimit/http/routes.hpp>
#include <ratelimit/storage/memory.hpp>

#include "support/catch.hpp"

using namespace std::chrono_literals;

namespace {

using ratelimit::Algorithm;
using ratelimit::Limit;
using ratelimit::ManualClock;
using ratelimit::MemoryStorage;
using ratelimit::http::Counts;
using ratelimit::http::normalizePath;
using ratelimit::http::pathReadings;
using ratelimit::http::RequestInfo;
using ratelimit::http::RouteLimiter;
using ratelimit::http::RouteLimiterOptions;
using ratelimit::http::RouteRule;
using ratelimit::http::RouteTable;
using ratelimit::http::Verdict;

std::optional<std::string> field(const Verdict& v, std::string_view name) {
    for (const auto& h : v.headers) {
        if (h.name == name) {
            return h.value;
        }
    }
    return std::nullopt;
}

/// The rule of `table` named `name` on `pathPrefix`.
const RouteRule& ruleNamed(const RouteTable& table, std::string_view pathPrefix,
                           std::string_view name) {
    for (const RouteRule& r : table.rules()) {
        if (r.pathPrefix == pathPrefix && r.name == name) {
            return r;
        }
    }
    throw std::logic_error("no such rule");
}

constexpr std::string_view kRules = R"(# test rules
POST /login          5/min   algorithm=sliding_log    # brute force
GET  /api            1000/min name=reads
*    /api            100/min  tier=free   name=api
*    /api            1000/min tier=pro    name=api
*    /api            10000/min tier=enterprise name=api
*    /api/export     2/h      cost=1
)";

}  // namespace

TEST_CASE("normalizePath: other spellings of a path do not bypass its rule", "[http][routes]") {
    for (const char* same :
         {"/login", "//login", "/login/", "/login//", "/%6cogin", "/%6Cogin", "/./login",
          "/x/../login", "/../login", "/login?x=1", "/login#f", "http://example.com/login", "login",
          "/%2e/login", "/%2e%2e/login", "/x%2f..%2flogin"}) {
        INFO(same);
        CHECK(normalizePath(same) == "/login");
    }
    CHECK(normalizePath("") == "/");
    CHECK(normalizePath("/") == "/");
    CHECK(normalizePath("///") == "/");
    CHECK(normalizePath("/a/b/../../..") == "/");
    CHECK(normalizePath("/%zz/%") == "/%zz/%");  // not escapes: kept as they are
    CHECK(normalizePath("/a%00b") == std::string("/a\0b", 4));
    CHECK(normalizePath("http://host") == "/");
    CHECK(normalizePath("/login.php") == "/login.php");
}

TEST_CASE("pathReadings: one path when every server reads it alike, else each reading once",
          "[http][routes]") {
    using Paths = std::vector<std::string>;
    for (const char* alike : {"/api/items?x=/..#..", "//api//items/", "/%61pi/items",
                              "/api/.well-known", "/api/v1.2/x", "http://h/api/items"}) {
        INFO(alike);
        CHECK(pathReadings(alike) == Paths{normalizePath(alike)});
    }
    CHECK(pathReadings("/api/..") == Paths{"/", "/api/.."});
    CHECK(pathReadings("/api/%2E%2e/") == Paths{"/", "/api/.."});
    CHECK(pathReadings("/api/./x") == Paths{"/api/x", "/api/./x"});
    CHECK(pathReadings("/api%2fitems") == Paths{"/api/items", "/api%2Fitems"});
    CHECK(pathReadings("/a%2F..%2Fb") == Paths{"/b", "/a%2F..%2Fb", "/a/../b"});
    CHECK(pathReadings("/api/..;/") == Paths{"/api/..;", "/", "/api/.."});
    CHECK(pathReadings("/api;v=1/x") == Paths{"/api;v=1/x", "/api/x"});
    CHECK(pathReadings("/api/%3b..") == Paths{"/api/;..", "/api"});
}

TEST_CASE("RouteTable: longest prefix on whole segments, tier over tierless, method over *",
          "[http][routes]") {
    const RouteTable table = RouteTable::parse(kRules, "test.rules");
    REQUIRE(table.rules().size() == 6);
    const RouteRule* login = table.match("POST", "//login/");
    REQUIRE(login != nullptr);
    CHECK(login->name == "login");
    CHECK(login->algorithm == Algorithm::kSlidingLog);
    CHECK(login->limit == Limit::perMinute(5));
    CHECK(table.match("post", "/%6cogin") == login);
    CHECK(table.match("GET", "/login") == nullptr);
    CHECK(table.match("POST", "/loginx") == nullptr);

    CHECK(table.match("GET", "/api/things")->name == "reads");
    CHECK(table.match("HEAD", "/api/things")->name == "reads");
    CHECK(table.match("DELETE", "/api/things") == nullptr);  // only tiered rules for others
    CHECK(table.match("DELETE", "/api/things", "free")->limit == Limit::perMinute(100));
    CHECK(table.match("GET", "/api/things", "pro")->limit == Limit::perMinute(1000));
    CHECK(table.match("GET", "/api/things", "pro")->tier == "pro");
    CHECK(table.match("GET", "/api/things", "enterprise")->limit == Limit::perMinute(10000));
    CHECK(table.match("GET", "/api/things", "unknown")->name == "reads");
    CHECK(table.match("GET", "/api/export/x", "pro")->name == "api");  // longest prefix: export
    CHECK(table.match("GET", "/api/export/x", "pro")->limit == Limit::perHour(2));
    CHECK(table.match("GET", "/apix") == nullptr);
}

TEST_CASE("RouteTable::parse: errors name the line and what is wrong", "[http][routes]") {
    using Catch::Matchers::Contains;
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a\n", "f"),
                        Contains("f:1") && Contains("expected"));
    REQUIRE_THROWS_WITH(RouteTable::parse("\n\nGET /a 5/fortnight\n", "f"),
                        Contains("f:3") && Contains("unknown time unit"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min algorithm=magic", "f"),
                        Contains("unknown algorithm 'magic'"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min colour=red", "f"),
                        Contains("unknown option 'colour'"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET a 5/min", "f"), Contains("RouteRule.pathPrefix"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min name=a{b}", "f"),
                        Contains("RouteRule.name"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min cost=6", "f"), Contains("RouteRule.cost"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min cost=x", "f"), Contains("cost"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min\nPOST /b 6/min name=a", "f"),
                        Contains("f:2") && Contains("same limit"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min mode=shadow", "f"),
                        Contains("unknown mode 'shadow'"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min\nPOST /b 5/min name=a mode=dry-run", "f"),
                        Contains("f:2") && Contains("same limit, algorithm and mode"));
    REQUIRE_THROWS_WITH(RouteTable::load("/nonexistent/rules"), Contains("cannot read"));
    const RouteTable ok = RouteTable::parse("get /a/b 5/min burst=10 algorithm=gcra\r\n* / 1/s\n");
    CHECK(ok.rules()[0].limit == Limit::perMinute(5).withBurst(10));
    CHECK(ok.rules()[0].method == "GET");
    CHECK(ok.rules()[0].name == "a");
    CHECK(ok.rules()[1].name == "root");
    CHECK_FALSE(ok.rules()[0].dryRun);
    CHECK(RouteTable::parse("GET /a 5/min mode=dry-run").rules()[0].dryRun);
    CHECK_FALSE(RouteTable::parse("GET /a 5/min mode=enforce").rules()[0].dryRun);
}

TEST_CASE("RouteLimiter: a dry-run rule admits every request and tells the client nothing of it",
          "[http][routes]") {
    // The new /search rule is watched before it is enforced, beside an enforced /login.
    const RouteTable table = RouteTable::parse(
        "GET /search 2/min algorithm=fixed_window mode=dry-run\nPOST /login 2/min\n");
    RouteLimiter limiter{table, ratelimit::MemoryStorage{}, RouteLimiterOptions{}};
    const auto request = [&](std::string_view method, std::string_view target) {
        return limiter.check(RequestInfo{method, target, "203.0.113.9", {}, {}, {}});
    };
    for (int i = 0; i < 5; ++i) {
        const Verdict v = request("GET", "/search");
        CAPTURE(i);
        CHECK(v.allowed);
        CHECK(v.status == 200);
        CHECK_FALSE(field(v, "Retry-After"));
        // Within the limit the fields are the rule's; past it, they are left out.
        CHECK(field(v, "RateLimit").has_value() == (i < 2));
    }
    CHECK(request("POST", "/login").allowed);
    CHECK(request("POST", "/login").allowed);
    CHECK(request("POST", "/login").status == 429);
}

TEST_CASE("RouteLimiter: limits per route and client, tiers, skips and allow lists",
          "[http][routes]") {
    RouteLimiterOptions options;
    options.skipPaths = {"/health"};
    options.allowList = {"192.0.2.0/24", "2001:db8:ffff::/48"};
    options.headers.legacyFields = false;
    const RouteTable table = RouteTable::parse(
        "POST /login 3/min algorithm=fixed_window\n* /api 2/h name=api\n* /api 5/h tier=pro "
        "name=api\n");
    RouteLimiter limiter{table, ratelimit::MemoryStorage{}, options};

    const auto request = [&](std::string_view method, std::string_view target,
                             std::string_view peer, std::optional<std::string_view> principal = {},
                             std::string_view tier = {}) {
        return limiter.check(RequestInfo{method, target, peer, {}, principal, tier});
    };

    // /login: 3 allowed with decreasing r, then 429 with a problem body and Retry-After.
    for (int i = 0; i < 3; ++i) {
        const Verdict v = request("POST", "/login", "203.0.113.1");
        CHECK(v.allowed);
        CHECK(v.limited);
        CHECK(field(v, "RateLimit")->rfind("\"login\";r=" + std::to_string(2 - i) + ";t=", 0) == 0);
        CHECK(field(v, "RateLimit-Policy") == R"("login";q=3;w=60)");
    }
    const Verdict refused = request("POST", "//login/", "203.0.113.1");
    CHECK_FALSE(refused.allowed);
    CHECK(refused.status == 429);
    CHECK(std::string(refused.contentType) == "application/problem+json");
    CHECK(refused.body.find(R"("violated-policies":["login"])") != std::string::npos);
    REQUIRE(field(refused, "Retry-After"));
    CHECK(std::stoi(*field(refused, "Retry-After")) >= 1);
    CHECK(request("POST", "/%6cogin", "203.0.113.1").status == 429);
    CHECK(request("POST", "/login", "203.0.113.2").allowed);  // another client

    // Skipped paths and allow-listed clients are never limited.
    for (int i = 0; i < 10; ++i) {
        const Verdict h = request("GET", "/health/", "203.0.113.1");
        CHECK(h.allowed);
        CHECK_FALSE(h.limited);
        CHECK(h.headers.empty());
        CHECK(request("POST", "/login", "192.0.2.255").allowed);
        CHECK(request("POST", "/login", "::ffff:192.0.2.1").allowed);
        CHECK(request("POST", "/login", "2001:db8:ffff:ffff::1").allowed);
    }
    CHECK(request("POST", "/login", "192.0.3.0").allowed);  // just outside: limited, 1st of 3
    CHECK(request("POST", "/login", "192.0.3.0").limited);

    // Tiers: an authenticated pro key gets 5, a free one the tierless 2; an unverified tier is
    // ignored (tier without principal).
    int pro = 0;
    int anon = 0;
    int claimed = 0;
    for (int i = 0; i < 8; ++i) {
        pro += request("GET", "/api/x", "198.51.100.1", std::string_view("key-1"), "pro").allowed
                   ? 1
                   : 0;
        anon += request("GET", "/api/x", "198.51.100.2").allowed ? 1 : 0;
        claimed += request("GET", "/api/x", "198.51.100.3", std::nullopt, "pro").allowed ? 1 : 0;
    }
    CHECK(pro == 5);
    CHECK(anon == 2);
    CHECK(claimed == 2);

    // No rule: not limited.
    CHECK_FALSE(request("GET", "/static/app.js", "203.0.113.1").limited);
}

TEST_CASE("RouteLimiter: an IPv6 /48 aggregate limit catches clients spread over /56s",
          "[http][routes]") {
    RouteLimiterOptions options;
    options.ipv6AggregateLimit = Limit::perHour(4);
    options.problemDetails = false;
    RouteLimiter limiter{RouteTable::parse("* / 3/h"), ratelimit::MemoryStorage{}, options};
    int admitted = 0;
    for (int i = 0; i < 8; ++i) {
        const std::string peer = "2001:db8:1:" + std::to_string(i) + "00::1";
        const Verdict v = limiter.check(RequestInfo{"GET", "/", peer, {}, {}, {}});
        admitted += v.allowed ? 1 : 0;
        if (!v.allowed) {
            CHECK(std::string(v.contentType) == "text/plain; charset=utf-8");
            CHECK(v.body.find("retry in") != std::string::npos);
            CHECK(field(v, "RateLimit")->find("\"ipv6-aggregate\";r=0") != std::string::npos);
        }
    }
    CHECK(admitted == 4);
    CHECK(limiter.check(RequestInfo{"GET", "/", "2001:db8:2::1", {}, {}, {}}).allowed);

    RouteLimiterOptions bad;
    bad.skipPaths = {"health"};
    REQUIRE_THROWS_WITH(RouteLimiter(RouteTable{}, ratelimit::MemoryStorage{}, bad),
                        Catch::Matchers::Contains("skipPaths"));
    bad = {};
    bad.allowList = {"300.0.0.0/8"};
    REQUIRE_THROWS_WITH(RouteLimiter(RouteTable{}, ratelimit::MemoryStorage{}, bad),
                        Catch::Matchers::Contains("allowList"));
}

TEST_CASE("RouteLimiter: a client's own refusal never spends its /48 aggregate's quota",
          "[http][routes][refund]") {
    // Before, one /56 that hammered past its own limit spent the whole /48's quota, and every
    // other /56 of it was refused.
    RouteLimiterOptions options;
    options.ipv6AggregateLimit = Limit::perHour(6);
    RouteLimiter limiter{RouteTable::parse("* / 2/h"), ratelimit::MemoryStorage{}, options};
    const auto send = [&](const std::string& peer) {
        return limiter.check(RequestInfo{"GET", "/", peer, {}, {}, {}});
    };
    int admitted = 0;
    for (int i = 0; i < 10; ++i) {
        const Verdict v = send("2001:db8:1:100::1");
        admitted += v.allowed ? 1 : 0;
        if (!v.allowed) {
            // Refused by its own limit; the aggregate's 4 left are told as they stand.
            CHECK(field(v, "RateLimit")->find("\"ipv6-aggregate\";r=4") != std::string::npos);
        }
    }
    CHECK(admitted == 2);
    for (int i = 2; i < 6; ++i) {
        CHECK(send("2001:db8:1:" + std::to_string(i) + "00::1").allowed);
    }
    CHECK_FALSE(send("2001:db8:1:700::1").allowed);  // the aggregate's 6 are spent now
}

TEST_CASE(
    "RouteLimiter: a target whose dot segments, encoded slashes or parameters change its route "
    "is refused, never judged by a rule the application does not serve it by",
    "[http][routes]") {
    RouteLimiterOptions options;
    options.skipPaths = {"/health"};
    RouteLimiter limiter{RouteTable::parse("GET /api 2/h name=api\nPOST /login 3/h\n"),
                         ratelimit::MemoryStorage{}, options};
    // A router that does not resolve dot segments (cpp-httplib, most frameworks' prefix
    // routes) serves each of these under /api, one that does serves them as /; one that keeps
    // %2F inside a segment or cuts ;parameters off reads the last ones otherwise still.
    for (const char* target :
         {"/api/..", "/api/x/../..", "/api/%2e%2e/", "/api/%2E%2e", "/api/.%2e/", "//api/..//",
          "/api/..;/", "/api%2F..", "/api/x%2f..%2f..", "/api%2fitems", "/api/../health",
          "/health/../api", "/api/./../login"}) {
        INFO(target);
        int refused = 0;
        for (int i = 0; i < 1100; ++i) {
            const Verdict v = limiter.check(RequestInfo{"GET", target, "203.0.113.1", {}, {}, {}});
            refused += !v.allowed && v.status == 400 && !v.limited && v.headers.empty() ? 1 : 0;
        }
        CHECK(refused == 1100);
    }
    const Verdict problem = limiter.check(RequestInfo{"GET", "/api/..", "203.0.113.1", {}, {}, {}});
    CHECK(problem.status == ratelimit::http::kStatusBadRequest);
    CHECK(problem.rule == nullptr);
    CHECK(std::string(problem.contentType) == "application/problem+json");
    CHECK(problem.body.find(R"("status":400)") != std::string::npos);
    CHECK(problem.body.find("dot segments") != std::string::npos);
    options.problemDetails = false;
    RouteLimiter plain{RouteTable::parse("GET /api 2/h\n"), ratelimit::MemoryStorage{}, options};
    const Verdict text = plain.check(RequestInfo{"GET", "/api/..", "203.0.113.1", {}, {}, {}});
    CHECK(text.status == 400);
    CHECK(std::string(text.contentType) == "text/plain; charset=utf-8");
    CHECK(text.body.find("dot segments") != std::string::npos);
    // Spellings that every reading takes to the same route are judged by it, as before.
    int client = 0;
    for (const char* target : {"/api/x/../y", "//api//items/", "/%61pi/items", "/api/a%2Fb",
                               "/api/x;v=1", "/api/.well-known"}) {
        INFO(target);
        const std::string peer = "198.51.100." + std::to_string(++client);
        int admitted = 0;
        for (int i = 0; i < 5; ++i) {
            const Verdict v = limiter.check(RequestInfo{"GET", target, peer, {}, {}, {}});
            CHECK(v.limited);
            admitted += v.allowed ? 1 : 0;
        }
        CHECK(admitted == 2);
    }
}

TEST_CASE("RouteTable: rules of one method, prefix and tier form one set, in code and in a file",
          "[http][routes][sets]") {
    const RouteTable table = RouteTable::parse(R"(GET /api 10/s name=burst
get /api/ 1000/h name=hourly counts=address
GET /api 100/h name=user counts=principal mode=dry-run
GET /api 50/h name=pro tier=pro
*   /api 5/min name=any
GET /api/export 2/h
)");
    REQUIRE(table.rules().size() == 6);
    const RouteRule* api = table.match("GET", "/api/items");
    REQUIRE(api == table.rules().data());  // the set's first rule
    const std::vector<std::size_t> set(table.setOf(*api).begin(), table.setOf(*api).end());
    CHECK(set == std::vector<std::size_t>{0, 1, 2});
    CHECK(table.setOf(table.rules()[2]).size() == 3);
    CHECK(table.rules()[0].counts == Counts::kClient);
    CHECK(table.rules()[1].counts == Counts::kAddress);
    CHECK(table.rules()[2].counts == Counts::kPrincipal);
    CHECK(table.rules()[2].dryRun);
    // The tier's set, the `*` set and the longer prefix are sets of their own, and matching
    // picks among sets as it picks among rules.
    CHECK(table.match("GET", "/api", "pro") == &table.rules()[3]);
    CHECK(table.setOf(table.rules()[3]).size() == 1);
    CHECK(table.match("POST", "/api") == &table.rules()[4]);
    CHECK(table.match("GET", "/api/export/x")->limit == Limit::perHour(2));

    const auto rule = [](std::string method, std::string prefix, Limit limit, std::string name,
                         std::string tier = {}, Counts counts = Counts::kClient) {
        RouteRule r;
        r.method = std::move(method);
        r.pathPrefix = std::move(prefix);
        r.limit = limit;
        r.name = std::move(name);
        r.tier = std::move(tier);
        r.counts = counts;
        return r;
    };
    RouteTable code;
    code.add(rule("POST", "/login", Limit::perMinute(5), "a"));
    code.add(rule("post", "//login/", Limit::perDay(20), "b", {}, Counts::kAddress));
    code.add(rule("POST", "/login", Limit::perDay(20), "c", "pro"));
    CHECK(code.setOf(code.rules()[1]).size() == 2);
    CHECK(code.setOf(code.rules()[2]).size() == 1);
    REQUIRE_THROWS_WITH(code.add(rule("POST", "/login/", Limit::perMinute(5), "a"), "here"),
                        Catch::Matchers::Contains("here: RouteRule.name 'a'") &&
                            Catch::Matchers::Contains("POST /login") &&
                            Catch::Matchers::Contains("distinct names"));
    CHECK(code.rules().size() == 3);  // a refused rule is not added
}

TEST_CASE("RouteTable::parse: set and counts errors name the line and the field",
          "[http][routes][sets]") {
    using Catch::Matchers::Contains;
    // Two lines of one set with the default name (the prefix's first segment) clash.
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min\n# per hour too\nGET /a/ 100/h\n", "f"),
                        Contains("f:3: RouteRule.name 'a'") && Contains("distinct names"));
    CHECK_NOTHROW(RouteTable::parse("GET /a 5/min\nGET /a 100/h name=a-hourly\nPOST /a 5/min\n"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min\nGET /a 5/min counts=everyone", "f"),
                        Contains("f:2") && Contains("unknown counts 'everyone'") &&
                            Contains("client, address, principal"));
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min counts=", "f"),
                        Contains("f:1") && Contains("expected option=value"));
    // Rules of one name on other routes still share one limiter, whatever each counts.
    REQUIRE_THROWS_WITH(RouteTable::parse("GET /a 5/min name=s\nGET /b 6/min name=s", "f"),
                        Contains("f:2") && Contains("same limit"));
    CHECK_NOTHROW(
        RouteTable::parse("GET /a 5/min name=s counts=address\nGET /b 5/min name=s "
                          "counts=principal"));
}

TEST_CASE("RouteLimiter: a set's refusal by its second rule takes nothing from the first",
          "[http][routes][sets][refund]") {
    ManualClock clock;
    RouteLimiterOptions options;
    options.headers.legacyReset = ratelimit::http::HeaderOptions::Reset::kDeltaSeconds;
    const RouteTable table = RouteTable::parse(
        "GET /api 10/h name=hourly algorithm=fixed_window\n"
        "GET /api 2/min name=minute algorithm=fixed_window\n");
    RouteLimiter limiter{table, MemoryStorage{}, clock, options};
    const RouteRule& hourly = ruleNamed(limiter.table(), "/api", "hourly");
    const RouteRule& minute = ruleNamed(limiter.table(), "/api", "minute");
    const auto send = [&] {
        return limiter.check(RequestInfo{"GET", "/api/x", "203.0.113.5", {}, {}, {}});
    };
    for (int i = 0; i < 2; ++i) {
        const Verdict v = send();
        CHECK(v.allowed);
        // Every member's policy, in the set's order; the binding one has the least left.
        CHECK(field(v, "RateLimit-Policy") == R"("hourly";q=10;w=3600, "minute";q=2;w=60)");
        CHECK(field(v, "RateLimit") == "\"hourly\";r=" + std::to_string(9 - i) +
                                           ";t=3600, \"minute\";r=" + std::to_string(1 - i) +
                                           ";t=60");
        CHECK(field(v, "X-RateLimit-Remaining") == std::to_string(1 - i));
        CHECK(v.binding == &minute);
    }
    clock.advance(20s);
    for (int i = 0; i < 3; ++i) {
        const Verdict v = send();
        CHECK_FALSE(v.allowed);
        CHECK(v.status == 429);
        CHECK(v.binding == &minute);
        CHECK(field(v, "Retry-After") == "40");
        CHECK(v.body.find(R"("violated-policies":["minute"])") != std::string::npos);
        CHECK(v.body.find("retry in 40 seconds") != std::string::npos);
        // The hourly rule gave back what it took: still 8 of 10.
        CHECK(field(v, "RateLimit")->find("\"hourly\";r=8;") != std::string::npos);
        CHECK(limiter.limiterOf(hourly).peek(v.client.key, 0).remaining == 8);
    }
    clock.advance(40s);
    CHECK(send().allowed);
    CHECK(limiter.limiterOf(hourly).peek("ip4:203.0.113.5", 0).remaining == 7);
}

TEST_CASE("RouteLimiter: the member with the longest wait gives Retry-After and the body",
          "[http][routes][sets]") {
    // Both members refuse at 130 s: the minute's wait is 50 s, the hour's 3470 s. In either
    // order the hour binds, though one order makes it the first refusal and one the last.
    for (const bool hourFirst : {false, true}) {
        CAPTURE(hourFirst);
        const std::string minuteRule = "POST /login 1/min name=minute algorithm=fixed_window\n";
        const std::string hourRule = "POST /login 3/h name=hour algorithm=fixed_window\n";
        ManualClock clock;
        RouteLimiter limiter{
            RouteTable::parse(hourFirst ? hourRule + minuteRule : minuteRule + hourRule),
            MemoryStorage{}, clock};
        const RouteRule& hour = ruleNamed(limiter.table(), "/login", "hour");
        const auto send = [&] {
            return limiter.check(RequestInfo{"POST", "/login", "198.51.100.7", {}, {}, {}});
        };
        for (int i = 0; i < 3; ++i) {
            CHECK(send().allowed);
            clock.advance(60s);
        }
        clock.advance(-50s);
        const Verdict v = send();
        CHECK_FALSE(v.allowed);
        INFO(v.body);
        CHECK(v.binding == &hour);
        CHECK(field(v, "Retry-After") == "3470");
        CHECK(v.body.find("retry in 3470 seconds") != std::string::npos);
        CHECK(field(v, "X-RateLimit-Limit") == "3");
        CHECK(v.body.find(hourFirst
                              ? R"("violated-policies":["hour","minute"])"
                              : R"("violated-policies":["minute","hour"])") != std::string::npos);
    }
}

TEST_CASE("RouteLimiter: each rule counts its identity: the client, the address or the principal",
          "[http][routes][sets]") {
    RouteLimiterOptions options;
    options.headers.legacyFields = false;
    const RouteTable table = RouteTable::parse(
        "GET /api 3/h name=per-address counts=address\n"
        "GET /api 2/h name=per-user counts=principal\n"
        "GET /account 1/h counts=principal\n");
    ManualClock clock;
    RouteLimiter limiter{table, MemoryStorage{}, clock, options};
    const auto send = [&](std::string_view target, std::optional<std::string_view> principal) {
        return limiter.check(RequestInfo{"GET", target, "192.0.2.10", {}, principal, {}});
    };
    // Without a principal only the address is counted, and only its policy is told.
    Verdict v = send("/api", std::nullopt);
    CHECK(v.allowed);
    CHECK(v.limited);
    CHECK(field(v, "RateLimit-Policy") == R"("per-address";q=3;w=3600)");
    // Logged in, the address is still counted, beside the user.
    v = send("/api", std::string_view("alice"));
    CHECK(v.allowed);
    CHECK(v.client.key == "user:alice");
    CHECK(field(v, "RateLimit") == R"("per-address";r=1;t=2400, "per-user";r=1;t=1800)");
    CHECK(send("/api", std::string_view("bob")).allowed);
    // The address's 3 are spent: logging in as anyone does not lift its limit.
    v = send("/api", std::string_view("carol"));
    CHECK_FALSE(v.allowed);
    CHECK(v.body.find(R"("violated-policies":["per-address"])") != std::string::npos);
    // ... and the refusal took nothing from carol's own limit.
    const RouteRule& perUser = ruleNamed(limiter.table(), "/api", "per-user");
    CHECK(limiter.limiterOf(perUser).peek("user:carol", 0).remaining == 2);
    // A set none of whose rules counts an anonymous request does not limit it.
    for (int i = 0; i < 3; ++i) {
        v = send("/account", std::nullopt);
        CHECK(v.allowed);
        CHECK_FALSE(v.limited);
        CHECK(v.rule != nullptr);
        CHECK(v.headers.empty());
    }
    CHECK(send("/account", std::string_view("alice")).allowed);
    CHECK_FALSE(send("/account", std::string_view("alice")).allowed);
}

TEST_CASE("RouteLimiter: an address and a principal spelled alike never share a count",
          "[http][routes][sets]") {
    // One limiter (one name) counts addresses on /a and principals on /b.
    const RouteTable table = RouteTable::parse(
        "GET /a 2/h name=shared counts=address\n"
        "GET /b 2/h name=shared counts=principal\n");
    RouteLimiter limiter{table, MemoryStorage{}, RouteLimiterOptions{}};
    const auto send = [&](std::string_view target, std::string_view peer,
                          std::optional<std::string_view> principal) {
        return limiter.check(RequestInfo{"GET", target, peer, {}, principal, {}});
    };
    CHECK(send("/a", "1.2.3.4", std::nullopt).allowed);
    CHECK(send("/a", "1.2.3.4", std::nullopt).allowed);
    CHECK_FALSE(send("/a", "1.2.3.4", std::nullopt).allowed);
    // Principals named like that address, or like its key, have their own counts.
    for (const std::string_view who : {"1.2.3.4", "ip4:1.2.3.4"}) {
        const std::string principal(who);  // Catch2 v2 prints no std::string_view
        CAPTURE(principal);
        CHECK(send("/b", "198.51.100.1", who).allowed);
        CHECK(send("/b", "198.51.100.1", who).allowed);
        CHECK_FALSE(send("/b", "198.51.100.1", who).allowed);
    }
    ratelimit::AnyLimiter& shared = limiter.limiterOf(limiter.table().rules()[0]);
    CHECK(shared.peek("ip4:1.2.3.4", 0).remaining == 0);
    CHECK(shared.peek("user:1.2.3.4", 0).remaining == 0);
    CHECK(shared.peek("user:ip4:1.2.3.4", 0).remaining == 0);
    CHECK(shared.peek("ip4:198.51.100.1", 0).remaining == 2);  // /b never counted the address
}

TEST_CASE("RouteLimiter: a dry-run rule of a set counts what it would refuse and blocks nothing",
          "[http][routes][sets]") {
    // The watched rule comes first in the file; it is still checked after the enforced one.
    const RouteTable table = RouteTable::parse(
        "GET /s 1/h name=watched algorithm=fixed_window mode=dry-run\n"
        "GET /s 3/h name=enforced algorithm=fixed_window\n");
    ManualClock clock;
    RouteLimiter limiter{table, MemoryStorage{}, clock};
    const RouteRule& watched = ruleNamed(limiter.table(), "/s", "watched");
    const RouteRule& enforced = ruleNamed(limiter.table(), "/s", "enforced");
    const auto send = [&] {
        return limiter.check(RequestInfo{"GET", "/s", "203.0.113.77", {}, {}, {}});
    };
    Verdict v = send();
    CHECK(v.allowed);
    CHECK(v.wouldRefuse.empty());
    CHECK(field(v, "RateLimit-Policy") == R"("watched";q=1;w=3600, "enforced";q=3;w=3600)");
    for (int i = 0; i < 2; ++i) {
        v = send();
        // The watched rule would refuse; the request goes on, and the enforced rule keeps what
        // it took (2 left, then 1... then 0).
        CHECK(v.allowed);
        CHECK(v.status == 200);
        CHECK(v.binding == &enforced);
        CHECK(field(v, "RateLimit-Policy") == R"("enforced";q=3;w=3600)");
        CHECK(v.wouldRefuse == std::vector<const RouteRule*>{&watched});
        CHECK(limiter.limiterOf(enforced).peek(v.client.key, 0).remaining == 1 - i);
    }
    CHECK(limiter.limiterOf(watched).dryRunRefusals() == 2);
    // The enforced rule refuses: a 429 by it alone, and the watched rule counts nothing more
    // (the set refused the request, not the watched rule).
    for (int i = 0; i < 3; ++i) {
        v = send();
        CHECK_FALSE(v.allowed);
        CHECK(v.binding == &enforced);
        CHECK(v.body.find(R"("violated-policies":["enforced"])") != std::string::npos);
        CHECK(field(v, "Retry-After") == "3600");
    }
    CHECK(limiter.limiterOf(watched).dryRunRefusals() == 2);
    CHECK(limiter.limiterOf(enforced).dryRunRefusals() == 0);
}
