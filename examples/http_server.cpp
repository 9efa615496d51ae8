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
//               [--observe [--observe-allow CIDR]...]
//
// In memory by default; with --redis the same rules and login guard are shared by every server
// using that Redis. --port 0 picks a free port; the first line printed is
// `listening on 127.0.0.1:PORT`.
//
// --observe hands every decision to a DecisionMetrics and serves what it saw, never rate
// limited and only to the clients of --observe-allow (default: loopback): /dashboard, a page
// that draws the figures live, /dashboard.json, the figures it polls, and /metrics, the
// Prometheus scrape (only when built with prometheus-cpp; otherwise not served).
//
// Try it:
//   http_server --port 8080 --user alice=secret --api-key demo-pro-key=pro &
//   for i in 1 2 3 4 5 6; do
//     curl -si -d user=alice -d password=guess localhost:8080/login | head -1
//   done  # 401 five times (alice is now blocked), then 429: 5 logins a minute per address
//   sleep 60; curl -si -d user=alice -d password=secret localhost:8080/login  # 429: login-user
//   curl -si -H 'X-API-Key: demo-pro-key' localhost:8080/api/items
#include <array>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <httplib.h>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <ratelimit/algorithms/fixed_window.hpp>
#include <ratelimit/algorithms/penalty.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/http/cidr.hpp>
#include <ratelimit/http/client_key.hpp>
#include <ratelimit/http/headers.hpp>
#include <ratelimit/http/problem.hpp>
#include <ratelimit/http/route_limiter.hpp>
#include <ratelimit/http/routes.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/memory_options.hpp>
#include <ratelimit/metrics/decision_metrics.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/memory.hpp>
#include <ratelimit/store_error.hpp>
#ifdef RATELIMIT_EXAMPLE_WITH_REDIS
#    include <ratelimit/storage/redis.hpp>
#endif
#ifdef RATELIMIT_EXAMPLE_WITH_PROMETHEUS
#    include <ratelimit/metrics/prometheus.hpp>
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
  --observe             count every decision and serve /dashboard, /dashboard.json and (when
                        built with prometheus-cpp) /metrics, never rate limited
  --observe-allow CIDR  a network whose clients may see those; repeatable (default: 127.0.0.0/8
                        and ::1)
  --help                this text
The first line printed is "listening on 127.0.0.1:PORT".
)";

// The observer's pages (--observe).
constexpr std::array<const char*, 3> kObservePaths = {"/dashboard", "/dashboard.json", "/metrics"};

// The port used without --port, and the largest TCP port.
constexpr int kDefaultPort = 8080;
constexpr int kMaxPort = 65535;

struct Config {
    int port = kDefaultPort;
    std::string rulesFile;
    std::string redis;
    bool limit = true;
    bool observe = false;
    // The networks whose clients may see the observer's pages (default: loopback).
    std::vector<std::string> observeAllow;
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
    } else if (arg == "--observe-allow") {
        c.observeAllow.push_back(value());
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
        } else if (arg == "--observe") {
            c.observe = true;
        } else {
            applyValueOption(c, arg, value);
        }
    }
    if (!c.observeAllow.empty() && !c.observe) {
        usageError("--observe-allow needs --observe");
    }
    if (c.observe) {
        if (!c.limit) {
            usageError("--observe watches the limiter: it cannot go with --no-limit");
        }
        if (c.observeAllow.empty()) {
            c.observeAllow = {"127.0.0.0/8", "::1"};
        }
        // The observer's pages are never limited (whole path segments: /dashboard.json is not
        // under /dashboard); who may see them is the observer's own check.
        for (const char* path : kObservePaths) {
            c.options.skipPaths.emplace_back(path);
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
    StoredLoginGuard(Storage storage, ratelimit::DecisionListener* listener)
        : limiter_(kLoginLimit, std::move(storage), typename Storage::DefaultClock{},
                   options(listener)) {}

    ratelimit::Decision tryAcquire(std::string_view user) override {
        return limiter_.tryAcquire(user);
    }
    void penalize(std::string_view user) override { (void)limiter_.penalize(user); }

private:
    static ratelimit::LimiterOptions options(ratelimit::DecisionListener* listener) {
        ratelimit::LimiterOptions o;
        o.name = std::string(kLoginPolicy);
        o.listener = listener;
        return o;
    }

    ratelimit::Limiter<ratelimit::PenalizedModel<ratelimit::FixedWindowModel>, Storage> limiter_;
};

/// The route limiter and the login guard, over one storage.
struct Limiters {
    std::unique_ptr<http::RouteLimiter> routes;
    std::unique_ptr<LoginGuard> login;
};

/// Both limiters over one storage; every decision goes to `metrics` when given.
template <class Storage>
Limiters limitersOver(http::RouteTable table, const Storage& storage, const Config& c,
                      ratelimit::DecisionMetrics* metrics) {
    http::RouteLimiterOptions options = c.options;
    options.limiterOptions.listener = metrics;
    return {std::make_unique<http::RouteLimiter>(std::move(table), storage, options),
            std::make_unique<StoredLoginGuard<Storage>>(storage, metrics)};
}

Limiters makeLimiters(const Config& c, ratelimit::DecisionMetrics* metrics) {
    http::RouteTable table = c.rulesFile.empty()
                                 ? http::RouteTable::parse(kDefaultRules, "built-in rules")
                                 : http::RouteTable::load(c.rulesFile);
    // The metrics hear the store's health as the limiters' listener: no hook to wire here.
    if (c.redis.empty()) {
        return limitersOver(std::move(table), ratelimit::MemoryStorage{}, c, metrics);
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
    return limitersOver(std::move(table), ratelimit::RedisStorage{redis}, c, metrics);
#else
    usageError("this build has no Redis support (hiredis was not found)");
#endif
}

/// Every value of the header `name` (the trusted forwarding header), in order; none when `name`
/// is empty.
std::vector<std::string> headerValues(const httplib::Request& req, std::string_view name) {
    std::vector<std::string> values;
    if (!name.empty()) {
        const std::string key(name);
        for (std::size_t i = 0; i < req.get_header_value_count(key); ++i) {
            values.push_back(req.get_header_value(key, i));
        }
    }
    return values;
}

/// The middleware: everything framework-specific about rate limiting, in one function.
httplib::Server::HandlerResponse limitRequest(http::RouteLimiter& limiter, const Config& config,
                                              const httplib::Request& req, httplib::Response& res) {
    // The trusted forwarding header's values, in order (none unless configured).
    const std::vector<std::string> values = headerValues(req, limiter.forwardedHeader());
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

// ---------------------------------------------------------------------------------------------
// --observe: what the limits do, as JSON for the dashboard page and as a Prometheus scrape.

// 403: the status of an observer page asked for by a client outside --observe-allow.
constexpr int kStatusForbidden = 403;
// The most refused keys shown per policy.
constexpr std::size_t kTopOffenders = 10;

void appendNumber(std::string& out, std::string_view name, std::uint64_t value) {
    out += '"';
    out += name;
    out += "\":";
    out += std::to_string(value);
    out += ',';
}

/// Each policy's allowed and refused decisions per second over the last `kHistorySeconds`,
/// kept on the server so that the dashboard shows the last minutes as soon as it opens: a
/// thread of its own reads the counts once a second (`DecisionMetrics::report` with no keys),
/// and the differences of successive reads are the rates. Memory: `kHistorySeconds` samples of
/// two counts per policy.
class DecisionHistory {
public:
    static constexpr std::size_t kHistorySeconds = 300;

    explicit DecisionHistory(ratelimit::DecisionMetrics& metrics)
        : metrics_(metrics), sampler_([this](const std::stop_token& stop) { run(stop); }) {}
    DecisionHistory(const DecisionHistory&) = delete;
    DecisionHistory& operator=(const DecisionHistory&) = delete;
    DecisionHistory(DecisionHistory&&) = delete;
    DecisionHistory& operator=(DecisionHistory&&) = delete;
    ~DecisionHistory() {
        sampler_.request_stop();
        wake_.notify_all();
    }

    /// `"history":{...}`: the step in seconds and, per policy, its allowed and refused per step,
    /// oldest first, every array of the same length.
    void appendJson(std::string& out) const {
        const std::lock_guard guard(lock_);
        std::vector<std::string> names;  // in the order the newest sample lists them
        if (!samples_.empty()) {
            for (const auto& [name, counts] : samples_.back()) {
                names.push_back(name);
            }
        }
        out += R"("history":{"step":1,"policies":[)";
        for (std::size_t n = 0; n < names.size(); ++n) {
            out += n == 0 ? "{\"policy\":" : ",{\"policy\":";
            http::appendJsonString(out, names[n]);
            for (const bool refused : {false, true}) {
                out += refused ? ",\"refused\":[" : ",\"allowed\":[";
                for (std::size_t i = 1; i < samples_.size(); ++i) {
                    const std::uint64_t now = countOf(samples_[i], names[n], refused);
                    const std::uint64_t before = countOf(samples_[i - 1], names[n], refused);
                    out += i == 1 ? "" : ",";
                    out += std::to_string(now >= before ? now - before : 0);
                }
                out += ']';
            }
            out += '}';
        }
        out += "]}";
    }

private:
    // A policy's name and its (allowed, refused) counts so far.
    using Sample = std::vector<std::pair<std::string, std::pair<std::uint64_t, std::uint64_t>>>;

    static std::uint64_t countOf(const Sample& sample, const std::string& name, bool refused) {
        for (const auto& [n, counts] : sample) {
            if (n == name) {
                return refused ? counts.second : counts.first;
            }
        }
        return 0;
    }

    void run(const std::stop_token& stop) {
        std::unique_lock sleeping(sleepLock_);
        while (!stop.stop_requested()) {
            Sample sample;
            for (const ratelimit::PolicyReport& r : metrics_.report(0)) {
                sample.emplace_back(r.policy, std::pair{r.counts.allowed, r.counts.refused});
            }
            {
                const std::lock_guard guard(lock_);
                samples_.push_back(std::move(sample));
                if (samples_.size() > kHistorySeconds + 1) {
                    samples_.pop_front();
                }
            }
            wake_.wait_for(sleeping, stop, std::chrono::seconds{1}, [] { return false; });
        }
    }

    ratelimit::DecisionMetrics& metrics_;
    mutable std::mutex lock_;
    std::deque<Sample> samples_;  // guarded by lock_; oldest first, one a second
    std::mutex sleepLock_;
    std::condition_variable_any wake_;
    std::jthread sampler_;  // last: starts once the members it uses exist
};

/// The figures of `metrics` now, as the dashboard reads them: per policy its counts and its most
/// refused keys, the store's health and the last minutes' rates. Keys are client data:
/// `appendJsonString` escapes them and replaces bytes that are not UTF-8.
std::string dashboardJson(ratelimit::DecisionMetrics& metrics, const DecisionHistory& history,
                          bool prometheus) {
    const std::vector<ratelimit::PolicyReport> reports = metrics.report(kTopOffenders);
    const ratelimit::StoreHealthReport health = metrics.storeHealth();
    std::string out = "{\"prometheus\":";
    out += prometheus ? "true," : "false,";
    history.appendJson(out);
    out += ",\"policies\":[";
    for (std::size_t i = 0; i < reports.size(); ++i) {
        const ratelimit::PolicyReport& r = reports[i];
        out += i == 0 ? "{\"policy\":" : ",{\"policy\":";
        http::appendJsonString(out, r.policy);
        out += ',';
        appendNumber(out, "allowed", r.counts.allowed);
        appendNumber(out, "refused", r.counts.refused);
        appendNumber(out, "degraded", r.counts.degraded);
        appendNumber(out, "dryRunRefused", r.counts.dryRunRefused);
        appendNumber(out, "retriedEarly", r.counts.retriedEarly);
        appendNumber(out, "windowRefusals", static_cast<std::uint64_t>(r.topOffenders.refusals));
        appendNumber(out, "maxError", static_cast<std::uint64_t>(r.topOffenders.maxError));
        out += "\"alerting\":[";
        for (std::size_t k = 0; k < r.alerting.size(); ++k) {
            if (k != 0) {
                out += ',';
            }
            http::appendJsonString(out, r.alerting[k]);
        }
        out += "],\"topOffenders\":[";
        for (std::size_t k = 0; k < r.topOffenders.offenders.size(); ++k) {
            const ratelimit::Offender& o = r.topOffenders.offenders[k];
            out += k == 0 ? "{\"key\":" : ",{\"key\":";
            http::appendJsonString(out, o.key);
            out += ",\"truncated\":";
            out += o.truncated ? "true," : "false,";
            appendNumber(out, "count", static_cast<std::uint64_t>(o.count));
            out += "\"guaranteed\":" + std::to_string(o.guaranteed) + '}';
        }
        out += "]}";
    }
    out += R"(],"store":{"healthy":)";
    out += health.healthy ? "true" : "false";
    out += ",\"failingEpisodes\":" + std::to_string(health.failingEpisodes) + ",\"lastError\":";
    http::appendJsonString(out, health.lastError);
    out += ",\"spilling\":[";
    for (std::size_t k = 0; k < health.spilling.size(); ++k) {
        if (k != 0) {
            out += ',';
        }
        http::appendJsonString(out, health.spilling[k]);
    }
    out += "]}}\n";
    return out;
}

// The dashboard: one page, its style and script inline, nothing loaded from elsewhere. It polls
// /dashboard.json every second and draws it whole: the totals, each policy's counts and its
// last minutes (`DecisionHistory`), the top offenders and the store's health. Every figure has
// a stable id or data- attribute. Client keys and policy names are set as text (textContent,
// setAttribute), never parsed as HTML.
constexpr std::string_view kDashboardHtml = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ratelimit dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#1b1f24;background:#f6f7f9}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 6px}
.muted{color:#5b6470}.card{background:#fff;border:1px solid #d9dde3;border-radius:6px;padding:10px 14px}
.tiles{display:flex;gap:12px;flex-wrap:wrap}.tile{min-width:150px}
.tile .v{font-size:24px;font-weight:600}.ok{color:#1a7f37}.bad{color:#cf222e}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:right;padding:4px 8px;border-bottom:1px solid #e4e7eb;white-space:nowrap}
th:first-child,td:first-child{text-align:left}td.key{font-family:monospace;text-align:left;
white-space:pre-wrap;word-break:break-all;max-width:420px}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}
svg{display:block}
</style></head><body>
<h1>ratelimit: what the limits do</h1>
<div class="muted">updated <span id="updated">never</span>, polls: <span id="polls" data-polls="0">0</span>,
history: the last <span id="history-seconds">0</span> s</div>
<h2>Since the server started</h2>
<div class="tiles">
<div class="card tile">allowed<div class="v" id="total-allowed">0</div></div>
<div class="card tile">refused<div class="v" id="total-refused">0</div></div>
<div class="card tile">refused share<div class="v" id="total-refused-share">0.0%</div></div>
<div class="card tile">early retries<div class="v" id="total-retried-early">0</div></div>
<div class="card tile">store<div class="v" id="store-health" data-healthy="true">healthy</div>
<div class="muted">failing episodes: <span id="store-failing-episodes">0</span></div>
<div class="muted">last error: <span id="store-last-error">none</span></div>
<div class="muted">spilling tables: <span id="store-spilling">none</span></div></div>
</div>
<h2>Decisions per second, all routes, the last 5 minutes</h2>
<div class="card"><svg id="chart" width="100%" height="160" role="img"
aria-label="allowed and refused per second"></svg>
<div class="legend muted"><span style="background:#2da44e"></span>allowed
<span style="background:#cf222e"></span>refused</div></div>
<h2>Per route (policy)</h2>
<table><thead><tr><th>policy</th><th>allowed</th><th>refused</th><th>refused share</th>
<th>dry-run refused</th><th>degraded</th><th>early retries</th><th>alerting keys</th>
<th>last minutes</th></tr></thead><tbody id="policies"></tbody></table>
<h2>Top offending clients (refusals over the sliding window)</h2>
<table><thead><tr><th>key</th><th>policy</th><th>refusals (at most)</th>
<th>refusals (certain)</th></tr></thead><tbody id="offenders"></tbody></table>
<p class="muted" id="error"></p>
<script>
"use strict";
const SLOTS = 300, NS = "http://www.w3.org/2000/svg";
let polls = 0;
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);
  return e;
}
function share(refused, all) { return all === 0 ? "0.0%" : (100 * refused / all).toFixed(1) + "%"; }
// Per-step {allowed, refused} of one policy, or of all when name is null, oldest first.
function rates(h, name) {
  const out = [];
  for (const p of h.policies) {
    if (name !== null && p.policy !== name) continue;
    p.allowed.forEach((v, i) => {
      out[i] = out[i] || {allowed: 0, refused: 0};
      out[i].allowed += v / h.step; out[i].refused += p.refused[i] / h.step;
    });
  }
  return out;
}
function draw(svg, series, width, height) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  let max = 1;
  for (const s of series) max = Math.max(max, s.allowed, s.refused);
  const step = width / (SLOTS - 1), x0 = width - step * Math.max(series.length - 1, 0);
  const line = (field, colour) => {
    const pts = series.map((s, i) => (x0 + i * step).toFixed(1) + "," +
                                     (height - 2 - (height - 4) * s[field] / max).toFixed(1));
    const pl = document.createElementNS(NS, "polyline");
    pl.setAttribute("points", pts.join(" ")); pl.setAttribute("fill", "none");
    pl.setAttribute("stroke", colour); pl.setAttribute("stroke-width", "1.5");
    pl.setAttribute("data-series", field);
    svg.appendChild(pl);
  };
  const base = document.createElementNS(NS, "line");
  base.setAttribute("x1", "0"); base.setAttribute("x2", String(width));
  base.setAttribute("y1", String(height - 1)); base.setAttribute("y2", String(height - 1));
  base.setAttribute("stroke", "#d9dde3"); svg.appendChild(base);
  if (series.length > 0) { line("allowed", "#2da44e"); line("refused", "#cf222e"); }
  if (width > 300) {
    const label = (x, anchor, text) => {
      const t = document.createElementNS(NS, "text");
      t.setAttribute("x", String(x)); t.setAttribute("y", "12"); t.setAttribute("font-size", "11");
      t.setAttribute("fill", "#5b6470"); t.setAttribute("text-anchor", anchor);
      t.textContent = text; svg.appendChild(t);
    };
    label(2, "start", "peak " + max.toFixed(1) + "/s"); label(width - 2, "end", "now");
  }
  svg.setAttribute("data-max-rate", max.toFixed(2));
  svg.setAttribute("data-points", String(series.length));
}
function render(d) {
  let allowed = 0, refused = 0, early = 0;
  const rows = document.getElementById("policies");
  rows.replaceChildren();
  for (const r of d.policies) {
    allowed += r.allowed; refused += r.refused; early += r.retriedEarly;
    const tr = el("tr", {"data-policy": r.policy});
    tr.append(el("td", {"data-field": "policy"}, r.policy),
              el("td", {"data-field": "allowed"}, r.allowed),
              el("td", {"data-field": "refused"}, r.refused),
              el("td", {"data-field": "refused-share"}, share(r.refused, r.allowed + r.refused)),
              el("td", {"data-field": "dry-run-refused"}, r.dryRunRefused),
              el("td", {"data-field": "degraded"}, r.degraded),
              el("td", {"data-field": "retried-early"}, r.retriedEarly),
              el("td", {"data-field": "alerting"}, r.alerting.length));
    const cell = el("td", {"data-field": "chart"});
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("width", "240"); svg.setAttribute("height", "36");
    svg.setAttribute("data-chart-policy", r.policy);
    draw(svg, rates(d.history, r.policy), 240, 36);
    cell.append(svg); tr.append(cell); rows.append(tr);
  }
  document.getElementById("total-allowed").textContent = String(allowed);
  document.getElementById("total-refused").textContent = String(refused);
  document.getElementById("total-refused-share").textContent = share(refused, allowed + refused);
  document.getElementById("total-retried-early").textContent = String(early);
  const offenders = [];
  for (const r of d.policies) for (const o of r.topOffenders) offenders.push({policy: r.policy, ...o});
  offenders.sort((a, b) => b.count - a.count);
  const list = document.getElementById("offenders");
  list.replaceChildren();
  for (const o of offenders.slice(0, 20)) {
    const tr = el("tr", {"data-offender-key": o.key, "data-policy": o.policy});
    tr.append(el("td", {"class": "key", "data-field": "key"}, o.key + (o.truncated ? "\u2026" : "")),
              el("td", {"data-field": "policy"}, o.policy),
              el("td", {"data-field": "count"}, o.count),
              el("td", {"data-field": "guaranteed"}, o.guaranteed));
    list.append(tr);
  }
  const h = document.getElementById("store-health");
  h.textContent = d.store.healthy ? "healthy" : "failing";
  h.className = "v " + (d.store.healthy ? "ok" : "bad");
  h.setAttribute("data-healthy", String(d.store.healthy));
  document.getElementById("store-failing-episodes").textContent = String(d.store.failingEpisodes);
  document.getElementById("store-last-error").textContent = d.store.lastError || "none";
  document.getElementById("store-spilling").textContent =
      d.store.spilling.length ? d.store.spilling.join(", ") : "none";
  const all = rates(d.history, null);
  const chart = document.getElementById("chart");
  draw(chart, all, chart.clientWidth || 900, 160);
  document.getElementById("history-seconds").textContent = String(all.length * d.history.step);
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
  const pc = document.getElementById("polls");
  pc.textContent = String(++polls); pc.setAttribute("data-polls", String(polls));
}
async function poll() {
  try {
    const r = await fetch("dashboard.json", {cache: "no-store"});
    if (!r.ok) throw new Error("dashboard.json: HTTP " + r.status);
    render(await r.json());
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = String(e);
  }
}
poll();
setInterval(poll, 1000);
</script></body></html>
)html";

/// The observer's pages, for the clients of --observe-allow only, matched on the client address
/// the route limiter finds (the peer, or the client a trusted proxy forwarded), as its own allow
/// list is: a public client behind a local proxy is not taken for a local one.
void serveObserver(httplib::Server& server, ratelimit::DecisionMetrics& metrics,
                   const DecisionHistory& history, const http::RouteLimiter& routes,
                   const Config& config) {
    auto allow = std::make_shared<http::CidrSet>(config.observeAllow, "--observe-allow");
    const http::ClientIdentity* identity = &routes.identity();
    const auto allowed = [allow, identity](const httplib::Request& req, httplib::Response& res) {
        const std::vector<std::string> values = headerValues(req, identity->headerName());
        const std::vector<std::string_view> views(values.begin(), values.end());
        const std::optional<http::IpAddress> client =
            identity->clientAddress(req.remote_addr, views);
        if (client && allow->contains(*client)) {
            res.set_header("Cache-Control", "no-store");
            return true;
        }
        res.status = kStatusForbidden;
        res.set_content("forbidden: not in --observe-allow\n", "text/plain");
        return false;
    };
#ifdef RATELIMIT_EXAMPLE_WITH_PROMETHEUS
    constexpr bool kPrometheus = true;
    auto collector = std::make_shared<ratelimit::PrometheusCollector>(metrics);
    server.Get("/metrics",
               [allowed, collector](const httplib::Request& req, httplib::Response& res) {
                   if (allowed(req, res)) {
                       res.set_content(ratelimit::serialize(*collector),
                                       std::string(ratelimit::kPrometheusContentType));
                   }
               });
#else
    constexpr bool kPrometheus = false;
#endif
    server.Get("/dashboard.json", [allowed, &metrics, &history](const httplib::Request& req,
                                                                httplib::Response& res) {
        if (allowed(req, res)) {
            res.set_content(dashboardJson(metrics, history, kPrometheus), "application/json");
        }
    });
    server.Get("/dashboard", [allowed](const httplib::Request& req, httplib::Response& res) {
        if (allowed(req, res)) {
            // Nothing but this page's own inline style and script, and its own JSON.
            res.set_header("Content-Security-Policy",
                           "default-src 'none'; style-src 'unsafe-inline'; "
                           "script-src 'unsafe-inline'; connect-src 'self'");
            res.set_header("X-Content-Type-Options", "nosniff");
            res.set_content(std::string(kDashboardHtml), "text/html; charset=utf-8");
        }
    });
}

}  // namespace

int main(int argc, char** argv) {
    const Config config = parseArgs(argc, argv);
    // Declared first: the limiters keep a pointer to it and must go before it.
    std::unique_ptr<ratelimit::DecisionMetrics> metrics;
    std::unique_ptr<DecisionHistory> history;
    if (config.observe) {
        metrics = std::make_unique<ratelimit::DecisionMetrics>();
        history = std::make_unique<DecisionHistory>(*metrics);
    }
    Limiters limiters;
    httplib::Server server;
    try {
        if (config.limit) {
            limiters = makeLimiters(config, metrics.get());
        }
        if (metrics) {
            serveObserver(server, *metrics, *history, *limiters.routes, config);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "http_server: %s\n", e.what());
        return 2;
    }

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
