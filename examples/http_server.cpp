// An HTTP service limited per route with ratelimit's HTTP helpers and cpp-httplib: a
// middleware applies the rule table to every request, writes the rate-limit fields on every
// response, answers 429 with a problem-details body and Retry-After, answers 400 to a target
// that reads as different routes (cpp-httplib serves /api/.. with the /api handler, while its
// resolved path is /), and skips /health. POST /login also guards each user name it is sent:
// 10 attempts a minute, and 5 failed logins within 15 minutes block that name for 15 minutes
// (a PenalizedModel over the rules' storage), whatever address the attempts come from.
//
//   http_server [--port N] [--rules FILE] [--redis HOST:PORT] [--api-key KEY=TIER]...
//               [--user NAME=PASSWORD]...
//               [--trust-proxy CIDR --forwarded-header xff|forwarded|x-real-ip] [--no-limit]
//
// In memory by default; with --redis the same rules and login guard are shared by every server
// using that Redis. --port 0 picks a free port; the first line printed is
// `listening on 127.0.0.1:PORT`.
//
// Try it:
//   http_server --port 8080 --user alice=secret --api-key demo-pro-key=pro &
//   for i in 1 2 3 4 5 6; do
//     curl -si -d user=alice -d password=guess localhost:8080/login | head -1
//   done  # 401 five times (alice is now blocked), then 429: 5 logins a minute per address
//   sleep 60; curl -si -d user=alice -d password=secret localhost:8080/login  # 429: login-user
//   curl -si -H 'X-API-Key: demo-pro-key' localhost:8080/api/items
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <httplib.h>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <ratelimit/algorithms/fixed_window.hpp>
#include <ratelimit/algorithms/penalty.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/http/headers.hpp>
#include <ratelimit/http/problem.hpp>
#include <ratelimit/http/route_limiter.hpp>
#include <ratelimit/http/routes.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/memory.hpp>
#ifdef RATELIMIT_EXAMPLE_WITH_REDIS
#    include <ratelimit/storage/redis.hpp>
#endif

namespace {

namespace http = ratelimit::http;

// The rules used without --rules: the example table of docs/http.md. Each tier's two lines
// form one set, checked all or nothing: a minute with a burst and a calendar day.
constexpr std::string_view kDefaultRules = R"(# method  path-prefix  limit  options
POST  /login   5/min     algorithm=sliding_log
GET   /search  30/min    mode=dry-run
GET   /api     1000/min  name=reads
*     /api     30/min    name=api        algorithm=token_bucket burst=10  tier=free
*     /api     1000/d    name=api-daily  algorithm=fixed_window           tier=free
*     /api     300/min   name=api        algorithm=token_bucket burst=50  tier=pro
*     /api     50000/d   name=api-daily  algorithm=fixed_window           tier=pro
*     /api     3000/min  name=api        algorithm=token_bucket burst=200 tier=enterprise
*     /api     500000/d  name=api-daily  algorithm=fixed_window           tier=enterprise
)";

constexpr std::string_view kUsage = R"(usage: http_server [options]
  --port N              listen on 127.0.0.1:N (default 8080; 0 picks a free port)
  --rules FILE          route rules, one per line: <METHOD|*> <path-prefix> <limit> [name=..]
                        [algorithm=..] [burst=..] [tier=..] [cost=..] [mode=..] [counts=..]
                        (lines of one method, path and tier form a set; default: a built-in table)
  --redis HOST:PORT     share the limits through Redis (default: in memory)
  --api-key KEY=TIER    a known API key (sent as X-API-Key) and its tier; repeatable
  --user NAME=PASSWORD  a user who may log in (POST /login with the form fields user and
                        password); repeatable
  --trust-proxy CIDR    a trusted proxy network; repeatable (needs --forwarded-header)
  --forwarded-header H  xff, forwarded or x-real-ip: the one header the proxies write
  --no-limit            serve without the limiter or the login guard (for load comparisons)
  --help                this text
The first line printed is "listening on 127.0.0.1:PORT".
)";

// The port used without --port, and the largest TCP port.
constexpr int kDefaultPort = 8080;
constexpr int kMaxPort = 65535;

struct Config {
    int port = kDefaultPort;
    std::string rulesFile;
    std::string redis;
    bool limit = true;
    // API key -> (principal id, tier). The id, not the key, becomes the limiter key.
    std::map<std::string, std::pair<std::string, std::string>, std::less<>> apiKeys;
    // User name -> password, for POST /login.
    std::map<std::string, std::string, std::less<>> users;
    http::RouteLimiterOptions options;
};

[[noreturn]] void usageError(const std::string& message) {
    std::fprintf(stderr, "http_server: %s\n%.*s", message.c_str(), static_cast<int>(kUsage.size()),
                 kUsage.data());
    std::exit(2);
}

[[noreturn]] void printUsage() {
    std::printf("%.*s", static_cast<int>(kUsage.size()), kUsage.data());
    std::exit(0);
}

/// `text` as a TCP port number, 0 … 65535: decimal digits only, nothing around them.
std::optional<int> parsePort(std::string_view text) {
    int port = 0;
    const char* const last = text.data() + text.size();
    const std::from_chars_result r = std::from_chars(text.data(), last, port);
    if (text.empty() || r.ec != std::errc{} || r.ptr != last || port < 0 || port > kMaxPort) {
        return std::nullopt;
    }
    return port;
}

int portOption(const std::string& v) {
    const std::optional<int> port = parsePort(v);
    if (!port) {
        usageError("--port must be 0..65535");
    }
    return *port;
}

void addApiKey(Config& c, const std::string& v) {
    const std::size_t eq = v.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == v.size()) {
        usageError("--api-key takes KEY=TIER");
    }
    const std::string id = "apikey-" + std::to_string(c.apiKeys.size() + 1);
    c.apiKeys[v.substr(0, eq)] = {id, v.substr(eq + 1)};
}

void addUser(Config& c, const std::string& v) {
    const std::size_t eq = v.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == v.size()) {
        usageError("--user takes NAME=PASSWORD");
    }
    c.users[v.substr(0, eq)] = v.substr(eq + 1);
}

http::ForwardedHeader forwardedHeaderOption(const std::string& v) {
    if (v == "xff") {
        return http::ForwardedHeader::kXForwardedFor;
    }
    if (v == "forwarded") {
        return http::ForwardedHeader::kForwarded;
    }
    if (v == "x-real-ip") {
        return http::ForwardedHeader::kXRealIp;
    }
    usageError("--forwarded-header is xff, forwarded or x-real-ip");
}

/// Applies one option that takes a value; `value()` reads it (and exits when it is missing).
template <class Value>
void applyValueOption(Config& c, std::string_view arg, const Value& value) {
    if (arg == "--port") {
        c.port = portOption(value());
    } else if (arg == "--rules") {
        c.rulesFile = value();
    } else if (arg == "--redis") {
        c.redis = value();
    } else if (arg == "--api-key") {
        addApiKey(c, value());
    } else if (arg == "--user") {
        addUser(c, value());
    } else if (arg == "--trust-proxy") {
        c.options.identity.trustedProxies.push_back(value());
    } else if (arg == "--forwarded-header") {
        c.options.identity.forwardedHeader = forwardedHeaderOption(value());
    } else {
        usageError("unknown argument '" + std::string(arg) + "'");
    }
}

Config parseArgs(int argc, char** argv) {
    Config c;
    c.options.skipPaths = {"/health"};
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        const auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                usageError(std::string(arg) + " needs a value");
            }
            return argv[++i];
        };
        if (arg == "--help" || arg == "-h") {
            printUsage();
        } else if (arg == "--no-limit") {
            c.limit = false;
        } else {
            applyValueOption(c, arg, value);
        }
    }
    return c;
}

/// The login guard: `kLoginLimit` on each user name, whatever address its attempts come from.
/// An interface, so that the storage is chosen at run time in one place (`makeLimiters`).
class LoginGuard {
public:
    LoginGuard() = default;
    LoginGuard(const LoginGuard&) = delete;
    LoginGuard& operator=(const LoginGuard&) = delete;
    LoginGuard(LoginGuard&&) = delete;
    LoginGuard& operator=(LoginGuard&&) = delete;
    virtual ~LoginGuard() = default;

    /// One login attempt for `user`: refused while the name is over its rate or blocked.
    virtual ratelimit::Decision tryAcquire(std::string_view user) = 0;
    /// A failed login for `user`: one strike toward the block.
    virtual void penalize(std::string_view user) = 0;
};

// The login guard's policy name (its limiter's name in the storage and in the 429 body).
constexpr std::string_view kLoginPolicy = "login-user";
// Per user name: 10 attempts a minute; 5 failed logins within 15 minutes, then 15 minutes out.
constexpr ratelimit::PenalizedLimit<ratelimit::Limit> kLoginLimit{
    ratelimit::Limit::perMinute(10),
    ratelimit::Penalty{5, std::chrono::minutes{15}, std::chrono::minutes{15}}};

/// `LoginGuard` over one storage, shared with the route limiter.
template <class Storage>
class StoredLoginGuard final : public LoginGuard {
public:
    explicit StoredLoginGuard(Storage storage)
        : limiter_(kLoginLimit, std::move(storage), typename Storage::DefaultClock{}, options()) {}

    ratelimit::Decision tryAcquire(std::string_view user) override {
        return limiter_.tryAcquire(user);
    }
    void penalize(std::string_view user) override { (void)limiter_.penalize(user); }

private:
    static ratelimit::LimiterOptions options() {
        ratelimit::LimiterOptions o;
        o.name = std::string(kLoginPolicy);
        return o;
    }

    ratelimit::Limiter<ratelimit::PenalizedModel<ratelimit::FixedWindowModel>, Storage> limiter_;
};

/// The route limiter and the login guard, over one storage.
struct Limiters {
    std::unique_ptr<http::RouteLimiter> routes;
    std::unique_ptr<LoginGuard> login;
};

template <class Storage>
Limiters limitersOver(http::RouteTable table, const Storage& storage, const Config& c) {
    return {std::make_unique<http::RouteLimiter>(std::move(table), storage, c.options),
            std::make_unique<StoredLoginGuard<Storage>>(storage)};
}

Limiters makeLimiters(const Config& c) {
    http::RouteTable table = c.rulesFile.empty()
                                 ? http::RouteTable::parse(kDefaultRules, "built-in rules")
                                 : http::RouteTable::load(c.rulesFile);
    if (c.redis.empty()) {
        return limitersOver(std::move(table), ratelimit::MemoryStorage{}, c);
    }
#ifdef RATELIMIT_EXAMPLE_WITH_REDIS
    const std::size_t colon = c.redis.rfind(':');
    if (colon == std::string::npos || colon == 0) {
        usageError("--redis takes HOST:PORT");
    }
    ratelimit::RedisStorage::Options redis;
    redis.host = c.redis.substr(0, colon);
    const std::optional<int> port = parsePort(std::string_view(c.redis).substr(colon + 1));
    if (!port) {
        usageError("--redis takes HOST:PORT (PORT 0..65535)");
    }
    redis.port = *port;
    return limitersOver(std::move(table), ratelimit::RedisStorage{redis}, c);
#else
    usageError("this build has no Redis support (hiredis was not found)");
#endif
}

/// The middleware: everything framework-specific about rate limiting, in one function.
httplib::Server::HandlerResponse limitRequest(http::RouteLimiter& limiter, const Config& config,
                                              const httplib::Request& req, httplib::Response& res) {
    // The trusted forwarding header's values, in order (none unless configured).
    std::vector<std::string> values;
    if (const std::string_view name = limiter.forwardedHeader(); !name.empty()) {
        const std::string key(name);
        for (std::size_t i = 0; i < req.get_header_value_count(key); ++i) {
            values.push_back(req.get_header_value(key, i));
        }
    }
    const std::vector<std::string_view> views(values.begin(), values.end());

    // Authenticated only when the key is one we know: an unknown key gets no bucket of its own.
    std::optional<std::string_view> principal;
    std::string_view tier;
    if (const auto it = config.apiKeys.find(req.get_header_value("X-API-Key"));
        it != config.apiKeys.end()) {
        principal = it->second.first;
        tier = it->second.second;
    }

    const http::Verdict verdict =
        limiter.check({req.method, req.target, req.remote_addr, views, principal, tier});
    for (const http::Header& h : verdict.headers) {
        res.set_header(h.name, h.value);
    }
    if (verdict.allowed) {
        return httplib::Server::HandlerResponse::Unhandled;  // on to the route's handler
    }
    res.status = verdict.status;
    res.set_content(verdict.body, std::string(verdict.contentType));
    return httplib::Server::HandlerResponse::Handled;
}

// 401: the status of a login with an unknown user name or a wrong password.
constexpr int kStatusUnauthorized = 401;

/// POST /login: `user` and `password` come as form fields (cpp-httplib puts the fields of an
/// `application/x-www-form-urlencoded` body into `req.params`). With a guard, the user name's
/// attempt is checked first (after the route's rules, in the middleware), and a failed login
/// is a strike against that name, whether it exists or not.
void login(LoginGuard* guard, const Config& config, const httplib::Request& req,
           httplib::Response& res) {
    const std::string user = req.get_param_value("user");
    const std::string password = req.get_param_value("password");
    // A request without a user name has no name to guard; the route's rules still count it.
    if (guard != nullptr && !user.empty()) {
        if (const ratelimit::Decision d = guard->tryAcquire(user); !d) {
            if (const std::optional<std::int64_t> wait = http::retryAfterSeconds(d)) {
                res.set_header("Retry-After", std::to_string(*wait));
            }
            res.status = http::kStatusTooManyRequests;
            res.set_content(http::problemJson(kLoginPolicy, d),
                            std::string(http::kProblemContentType));
            return;
        }
    }
    const auto known = config.users.find(user);
    if (user.empty() || known == config.users.end() || known->second != password) {
        if (guard != nullptr && !user.empty()) {
            guard->penalize(user);
        }
        res.status = kStatusUnauthorized;
        res.set_content(R"({"type":"about:blank","title":"Unauthorized","status":401,)"
                        R"("detail":"Unknown user name or wrong password."})",
                        std::string(http::kProblemContentType));
        return;
    }
    res.set_content("{\"welcome\":true}\n", "application/json");
}

}  // namespace

int main(int argc, char** argv) {
    const Config config = parseArgs(argc, argv);
    Limiters limiters;
    try {
        if (config.limit) {
            limiters = makeLimiters(config);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "http_server: %s\n", e.what());
        return 2;
    }

    httplib::Server server;
    // Small responses are written in several pieces; without TCP_NODELAY each keep-alive
    // request would wait for the client's delayed ACK (~40 ms).
    server.set_tcp_nodelay(true);
    server.set_keep_alive_max_count(1000);
    if (limiters.routes) {
        server.set_pre_routing_handler(
            [&limiters, &config](const httplib::Request& req, httplib::Response& res) {
                return limitRequest(*limiters.routes, config, req, res);
            });
    }
    server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
        res.set_content("ok\n", "text/plain");
    });
    server.Post("/login",
                [&limiters, &config](const httplib::Request& req, httplib::Response& res) {
                    login(limiters.login.get(), config, req, res);
                });
    server.Get(R"(/api(/.*)?)", [](const httplib::Request& req, httplib::Response& res) {
        res.set_content(R"({"path":")" + req.path + "\"}\n", "application/json");
    });

    int port = config.port;
    if (port == 0) {
        port = server.bind_to_any_port("127.0.0.1");
    } else if (!server.bind_to_port("127.0.0.1", port)) {
        port = -1;
    }
    if (port < 0) {
        std::fprintf(stderr, "http_server: cannot listen on 127.0.0.1:%d\n", config.port);
        return 1;
    }
    std::printf("listening on 127.0.0.1:%d\n", port);
    std::fflush(stdout);
    return server.listen_after_bind() ? 0 : 1;
}
