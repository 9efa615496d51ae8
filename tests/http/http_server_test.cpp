// End to end: starts examples/http_server.cpp (its path comes from CMake as RATELIMIT_HTTP_SERVER)
// on a free loopback port with a rule file of tiny limits and long periods (or its built-in
// rules, whose bursts refill far slower than a test sends), and drives it with a plain HTTP/1.1
// client over a socket. No sleeps: the limits never refill during the test. The dashboard of
// --observe is also read in headless Chromium (Debian: chromium), when found.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

http_example::RuleFile writeRules() {
    return http_example::RuleFile(
        "# tiny limits, long periods: nothing refills while the test runs\n"
        "POST /login  3/h  algorithm=sliding_log\n"
        "GET  /api    2/h  name=api\n"
        "*    /api    5/h  name=api tier=pro\n");
}

bool ciRun() {
    const char* ci = std::getenv("CI");  // NOLINT(concurrency-mt-unsafe): read before threads
    return ci != nullptr && std::string_view(ci) == "true";
}

/// The text after `from` in `text` up to the first of `stops` (empty when `from` is missing).
std::string valueAfter(std::string_view text, std::string_view from,
                       std::string_view stops = ",}]<\"") {
    const std::size_t at = text.find(from);
    if (at == std::string_view::npos) {
        return {};
    }
    const std::string_view rest = text.substr(at + from.size());
    return std::string(rest.substr(0, rest.find_first_of(stops)));
}

/// One policy's object in /dashboard.json's current figures (not its history); empty when
/// absent.
std::string jsonPolicy(std::string_view json, std::string_view policy) {
    const std::size_t current = json.find("]},\"policies\":[");
    if (current == std::string_view::npos) {
        return {};
    }
    const std::string start = R"({"policy":")" + std::string(policy) + "\",";
    const std::size_t at = json.find(start, current);
    if (at == std::string_view::npos) {
        return {};
    }
    return std::string(json.substr(at, json.find("]}", at) - at));
}

/// One number of a policy's object in /dashboard.json.
std::string jsonFigure(std::string_view json, std::string_view policy, std::string_view field) {
    return valueAfter(jsonPolicy(json, policy), "\"" + std::string(field) + "\":");
}

/// The text of the cell `data-field="field"` in the dumped DOM's element whose opening tag is
/// `<tr attribute>` (empty when absent).
std::string domFigure(std::string_view dom, std::string_view attribute, std::string_view field) {
    const std::size_t row = dom.find("<tr " + std::string(attribute) + ">");
    if (row == std::string_view::npos) {
        return {};
    }
    const std::string_view tr = dom.substr(row, dom.find("</tr>", row) - row);
    return valueAfter(tr, "data-field=\"" + std::string(field) + "\">", "<");
}

/// Runs headless Chromium on `url` with `args` (--dump-dom, --screenshot=...) in a fresh
/// profile; its standard output goes to `out`. Returns its exit status.
int chromium(const std::string& url, const std::string& args, const std::string& out) {
    std::string profile = "/tmp/ratelimit-chromium-XXXXXX";
    REQUIRE(::mkdtemp(profile.data()) != nullptr);
    const std::string command =
        "'" + std::string(RATELIMIT_CHROMIUM) +
        "' --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
        " --disable-background-networking --disable-component-update --disable-sync"
        " --user-data-dir=" +
        profile + " --virtual-time-budget=5000 " + args + " '" + url + "' >'" + out + "' 2>'" +
        profile + ".log'";
    // NOLINTNEXTLINE(cert-env33-c,concurrency-mt-unsafe): a fixed program, arguments made here
    const int status = std::system(command.c_str());
    std::error_code ignored;
    std::filesystem::remove_all(profile, ignored);
    std::filesystem::remove(profile + ".log", ignored);
    return status;
}

// Through rdbuf: built from istreambuf_iterators, g++ 12 -O3 warns of a null dereference in
// <streambuf> that cannot happen (-Wnull-dereference, the release leg).
std::string readFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace

TEST_CASE("HTTP server example: limits, headers, 429 with Retry-After, /health and tiers",
          "[http][example][server]") {
    const auto rules = writeRules();
    ServerProcess server({"--port", "0", "--rules", rules.path(), "--api-key", "secret-pro=pro",
                          "--user", "alice=secret"});
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
    const http_example::RuleFile rules("POST /login 1000/h algorithm=sliding_log\n");
    ServerProcess server({"--port", "0", "--rules", rules.path(), "--user", "alice=secret",
                          "--user", "bob=hunter2"});
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
    const auto rules = writeRules();
    ServerProcess server({"--port", "0", "--rules", rules.path()});
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
}

TEST_CASE(
    "HTTP server example: junk a client puts left of its address in X-Forwarded-For does not "
    "move it into the proxy's bucket",
    "[http][example][server]") {
    const auto rules = writeRules();
    // The test client is the trusted proxy: 127.0.0.1 appends nothing, so the client's own
    // address is the rightmost hop of the header it sends.
    ServerProcess server({"--port", "0", "--rules", rules.path(), "--trust-proxy", "127.0.0.1/32",
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
}

TEST_CASE(
    "HTTP server example: --observe shows the decisions in /dashboard.json, /metrics and the "
    "dashboard page, as a browser draws it",
    "[http][example][server][dashboard]") {
    const auto rules = writeRules();
    ServerProcess server({"--port", "0", "--rules", rules.path(), "--observe", "--api-key",
                          "secret-pro=pro", "--user", "alice=secret"});
    const int port = server.port();

    // Two clients: the anonymous address (2 an hour) and the pro key (5 an hour); and logins.
    int refused = 0;
    for (int i = 0; i < 5; ++i) {
        refused += send(port, "GET", "/api/items").status == 429 ? 1 : 0;
    }
    for (int i = 0; i < 7; ++i) {
        const Response r = send(port, "GET", "/api/items", "X-API-Key: secret-pro\r\n");
        refused += r.status == 429 ? 1 : 0;
    }
    for (int i = 0; i < 4; ++i) {
        const Response r = send(port, "POST", "/login", {}, loginForm("alice", "secret"));
        refused += r.status == 429 ? 1 : 0;
    }
    CHECK(refused == 3 + 2 + 1);

    // The observer's pages are never limited, and carry no rate-limit fields.
    Response json;
    for (int i = 0; i < 20; ++i) {
        json = send(port, "GET", "/dashboard.json");
        REQUIRE(json.status == 200);
        CHECK_FALSE(json.header("RateLimit"));
    }
    CHECK(json.header("Content-Type") == "application/json");
    INFO(json.body);
    struct Expected {
        const char* policy;
        const char* allowed;
        const char* refused;
    };
    const std::vector<Expected> expected = {
        {"api", "2", "3"}, {"api.pro", "5", "2"}, {"login", "3", "1"}, {"login-user", "3", "0"}};
    for (const Expected& e : expected) {
        INFO(e.policy);
        CHECK(jsonFigure(json.body, e.policy, "allowed") == e.allowed);
        CHECK(jsonFigure(json.body, e.policy, "refused") == e.refused);
    }
    // The most refused client of each route: the anonymous address, the pro key's principal.
    CHECK(jsonPolicy(json.body, "api")
              .find(R"("topOffenders":[{"key":"ip4:127.0.0.1","truncated":false,"count":3,)") !=
          std::string::npos);
    CHECK(jsonPolicy(json.body, "api.pro")
              .find(R"("topOffenders":[{"key":"user:apikey-1","truncated":false,"count":2,)") !=
          std::string::npos);
    CHECK(json.body.find(R"("store":{"healthy":true,"failingEpisodes":0)") != std::string::npos);

    const Response metrics = send(port, "GET", "/metrics");
#ifdef RATELIMIT_TEST_WITH_PROMETHEUS
    CHECK(metrics.status == 200);
    CHECK(metrics.body.find(R"(ratelimit_decisions_total{policy="api",outcome="refused"} 3)") !=
          std::string::npos);
    CHECK(metrics.body.find(
              R"(ratelimit_top_offender_refusals{policy="api.pro",key="user:apikey-1"} 2)") !=
          std::string::npos);
    CHECK(metrics.body.find("ratelimit_store_healthy 1") != std::string::npos);
#else
    CHECK(metrics.status == 404);  // built without prometheus-cpp: not served
#endif

    const Response page = send(port, "GET", "/dashboard");
    CHECK(page.status == 200);
    CHECK(page.header("Content-Type") == "text/html; charset=utf-8");
    // Self-contained: nothing loaded from anywhere else.
    CHECK(page.body.find("src=") == std::string::npos);
    CHECK(page.body.find("http://") == page.body.find("http://www.w3.org/2000/svg"));
    CHECK(page.body.find("https://") == std::string::npos);
    CHECK(page.header("Content-Security-Policy"));

    if (std::string(RATELIMIT_CHROMIUM).empty()) {
        if (ciRun()) {
            FAIL("chromium not found (Debian: chromium); CI=true requires it");
        }
        WARN("chromium not found (Debian: chromium): the dashboard is not checked in a browser");
        return;
    }
    const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/dashboard";
    const std::filesystem::path artifacts = RATELIMIT_ARTIFACTS_DIR;
    std::filesystem::create_directories(artifacts);
    const std::string domFile = (artifacts / "dashboard.html").string();
    REQUIRE(chromium(url, "--dump-dom", domFile) == 0);
    const std::string dom = readFile(domFile);
    INFO(dom);
    CHECK(valueAfter(dom, "id=\"polls\" data-polls=\"") != "0");
    for (const Expected& e : expected) {
        INFO(e.policy);
        const std::string row = "data-policy=\"" + std::string(e.policy) + "\"";
        CHECK(domFigure(dom, row, "allowed") == e.allowed);
        CHECK(domFigure(dom, row, "refused") == e.refused);
    }
    CHECK(domFigure(dom, "data-policy=\"api\"", "refused-share") == "60.0%");
    CHECK(valueAfter(dom, "id=\"total-allowed\">", "<") == "13");
    CHECK(valueAfter(dom, "id=\"total-refused\">", "<") == "6");
    const std::string offender = R"(data-offender-key="ip4:127.0.0.1" data-policy="api")";
    CHECK(domFigure(dom, offender, "count") == "3");
    CHECK(domFigure(dom, offender, "key") == "ip4:127.0.0.1");
    CHECK(domFigure(dom, R"(data-offender-key="user:apikey-1" data-policy="api.pro")", "count") ==
          "2");
    CHECK(valueAfter(dom, "id=\"store-health\" data-healthy=\"") == "true");
    CHECK(dom.find("id=\"chart\"") != std::string::npos);

    // The screenshot is kept as an artifact of the run.
    const std::string shot = (artifacts / "dashboard.png").string();
    std::filesystem::remove(shot);
    REQUIRE(chromium(url, "--window-size=1280,900 --screenshot='" + shot + "'", "/dev/null") == 0);
    CHECK(std::filesystem::file_size(shot) > 0);
    std::printf("dashboard screenshot: %s\n", shot.c_str());
}

TEST_CASE(
    "HTTP server example: the observer's pages are served only to --observe-allow, and only "
    "with --observe",
    "[http][example][server][dashboard]") {
    {
        ServerProcess server({"--port", "0", "--observe", "--observe-allow", "10.0.0.0/8"});
        for (const char* path : {"/dashboard", "/dashboard.json", "/metrics"}) {
            INFO(path);
            CHECK(send(server.port(), "GET", path).status == 403);
        }
    }
    {
        // Behind a trusted proxy the forwarded client is the one that must be allowed.
        ServerProcess server({"--port", "0", "--observe", "--trust-proxy", "127.0.0.1/32",
                              "--forwarded-header", "xff"});
        CHECK(send(server.port(), "GET", "/dashboard.json").status == 200);
        CHECK(send(server.port(), "GET", "/dashboard.json", "X-Forwarded-For: 198.51.100.77\r\n")
                  .status == 403);
    }
    ServerProcess plain({"--port", "0"});
    for (const char* path : {"/dashboard", "/dashboard.json", "/metrics"}) {
        INFO(path);
        CHECK(send(plain.port(), "GET", path).status == 404);
    }
}

#ifdef RATELIMIT_HTTP_SERVER_WITH_REDIS
TEST_CASE(
    "HTTP server example: --observe reports a Redis that does not answer as a failing store, "
    "and the degraded decisions",
    "[http][example][server][dashboard]") {
    const auto rules = writeRules();
    // Nothing listens on port 1: every check fails and the failure policy answers (whatever it
    // answers, the decision is degraded).
    ServerProcess server(
        {"--port", "0", "--rules", rules.path(), "--observe", "--redis", "127.0.0.1:1"});
    for (int i = 0; i < 3; ++i) {
        (void)send(server.port(), "GET", "/api/items");
    }
    const Response json = send(server.port(), "GET", "/dashboard.json");
    INFO(json.body);
    CHECK(jsonFigure(json.body, "api", "degraded") == "3");
    CHECK(json.body.find(R"("store":{"healthy":false,"failingEpisodes":1,"lastError":")") !=
          std::string::npos);
#    ifdef RATELIMIT_TEST_WITH_PROMETHEUS
    const Response metrics = send(server.port(), "GET", "/metrics");
    CHECK(metrics.body.find("ratelimit_store_healthy 0") != std::string::npos);
    CHECK(metrics.body.find("ratelimit_store_failing_episodes_total 1") != std::string::npos);
    CHECK(metrics.body.find(R"(ratelimit_decisions_total{policy="api",outcome="degraded"} 3)") !=
          std::string::npos);
#    endif
}
#endif
