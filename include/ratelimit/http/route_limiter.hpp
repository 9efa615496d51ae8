#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/any_limiter.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/http/cidr.hpp>
#include <ratelimit/http/client_key.hpp>
#include <ratelimit/http/headers.hpp>
#include <ratelimit/http/problem.hpp>
#include <ratelimit/http/routes.hpp>
#include <ratelimit/key_checks.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/options.hpp>

namespace ratelimit {
inline namespace v1 {
namespace http {

/// Everything a `RouteLimiter` needs besides its rules and storage. Fields only ever get added
/// at the end.
struct RouteLimiterOptions {
    /// How clients are told apart (peer, one trusted forwarding header, IPv6 prefix).
    ClientIdentityOptions identity;
    /// Networks whose clients are never limited (trusted callers, monitoring): CIDRs, IPv4 and
    /// IPv6. Matched against the client address `identity` finds.
    std::vector<std::string> allowList;
    /// Path prefixes never limited (health checks), matched on whole segments after
    /// `normalizePath`, any method. A target only some of whose `pathReadings` are skipped is
    /// refused (see `RouteLimiter::check`).
    std::vector<std::string> skipPaths;
    /// Which response fields to write.
    HeaderOptions headers;
    /// A second limit on every unauthenticated IPv6 client's aggregate network
    /// (`identity.ipv6AggregatePrefix`, /48 by default), checked before the route's own rules,
    /// all or nothing with them, at the cost of the set's first rule; none by default. Its
    /// policy is named `ipv6-aggregate`.
    std::optional<Limit> ipv6AggregateLimit;
    /// 429 bodies as RFC 9457 problem details (default) or plain text.
    bool problemDetails = true;
    /// Options of every limiter (failure policy, …); `name` is replaced by the rule's name and
    /// tier, and `limiterOptions.name` is kept as their prefix when not `default`.
    LimiterOptions limiterOptions;
};

/// What a framework hands over about one request.
struct RequestInfo {
    std::string_view method;
    /// The raw request target (path and query, as received).
    std::string_view target;
    /// The connection's peer address.
    std::string_view peer;
    /// Every value of the trusted forwarding header (`RouteLimiter::forwardedHeader()`), in order.
    std::span<const std::string_view> forwarded;
    /// The principal's id, only once the application has verified it (see
    /// `ClientIdentity::identify`); it then replaces the address as the key of the rules that
    /// count the client (`Counts::kClient`), and is the key of those that count the principal.
    std::optional<std::string_view> principal;
    /// The verified principal's tier (`free`, `pro`, …): selects the tier's rules.
    std::string_view tier;
};

/// The HTTP status codes of a `Verdict`: 200 OK (RFC 9110 section 15.3.1) when the request may
/// go on, 429 Too Many Requests (RFC 6585 section 4) when refused, 400 Bad Request (RFC 9110
/// section 15.5.1) when its target reads as different routes (see `RouteLimiter::check`).
inline constexpr int kStatusOk = 200;
inline constexpr int kStatusTooManyRequests = 429;
inline constexpr int kStatusBadRequest = 400;

/// The `detail` of a 400 `Verdict`'s body.
inline constexpr std::string_view kAmbiguousPathDetail =
    "The request path leads to different routes depending on whether its dot segments are "
    "resolved, its %2F taken as a separator or its ;parameters cut off.";

/// The answer for one request: whether to go on, and what to add to the response.
struct Verdict {
    /// A rule counted the request (false: skipped path, allow-listed client, no matching rule,
    /// no rule of the matched set that counts it (`Counts::kPrincipal` without a principal), or
    /// a target refused with 400).
    bool limited = false;
    /// Go on with the request; otherwise answer `status` with `body`.
    bool allowed = true;
    /// 429 when refused by a rule, 400 when the target reads as different routes.
    int status = kStatusOk;
    /// Fields for the response, whatever its status.
    std::vector<Header> headers;
    /// The 429 or 400 body and its content type (empty when allowed).
    std::string body;
    std::string_view contentType;
    /// The rule that matched (the first of its set: `RouteTable::setOf` gives them all), or
    /// nullptr.
    const RouteRule* rule = nullptr;
    /// Who the client was taken to be.
    ClientKey client;
    /// The rule of the set whose decision binds (`detail::bindsTighter`: the refusal with the
    /// longest wait, else the least remaining; a dry-run's would-be refusal left out), which
    /// gave `Retry-After` and the body; nullptr when no rule counted the request or the IPv6
    /// aggregate binds.
    const RouteRule* binding = nullptr;
    /// The dry-run rules of the set that would have refused the request
    /// (`Decision::wouldRefuse`), to log what enforcing them would do; usually empty.
    std::vector<const RouteRule*> wouldRefuse;
};

/// The framework-free core of a rate-limiting middleware: per-route rules, tiers, allow lists,
/// skipped paths, client identity, response fields and 429 bodies. Call `check` at the start of
/// a request; copy `Verdict::headers` onto the response; when `!allowed`, answer
/// `status`/`body`/`contentType` instead of running the handler.
///
/// Each distinct rule name (and tier) gets one limiter of its algorithm over the given storage
/// (`AnyLimiter`), so the same table runs in memory or shared through Redis.
/// Thread safety: thread-safe; `check` may be called from every request thread.
class RouteLimiter {
public:
    /// Throws: `std::invalid_argument` naming the field of a bad option (identity, allow list,
    /// skip path, header options) or a limit the storage cannot hold. Does no I/O.
    template <class Storage>
    RouteLimiter(RouteTable table, Storage storage, RouteLimiterOptions options = {})
        : RouteLimiter(std::move(table), std::move(storage), typename Storage::DefaultClock{},
                       std::move(options)) {}

    /// The same, with every limiter reading the time of `clock` (a `ManualClock` in tests and
    /// simulations, `SystemClock` for hosts with synchronised clocks).
    template <class Storage, ClockPolicy Clock>
    RouteLimiter(RouteTable table, Storage storage, Clock clock, RouteLimiterOptions options = {})
        : table_(std::move(table)),
          identity_(options.identity),
          allow_(options.allowList, "RouteLimiterOptions.allowList"),
          headers_(options.headers),
          problemDetails_(options.problemDetails) {
        for (const std::string& skip : options.skipPaths) {
            if (skip.empty() || skip.front() != '/') {
                detail::throwInvalidArgument(
                    "RouteLimiterOptions.skipPaths entries must start with '/' (got '" + skip +
                    "')");
            }
            skip_.push_back(normalizePath(skip));
        }
        const std::string prefix = options.limiterOptions.name == "default"
                                       ? std::string()
                                       : options.limiterOptions.name + ".";
        for (const RouteRule& rule : table_.rules()) {
            const std::string name =
                prefix + rule.name + (rule.tier.empty() ? "" : "." + rule.tier);
            std::size_t index = limiters_.size();
            for (std::size_t i = 0; i < names_.size(); ++i) {
                if (names_[i] == name) {
                    index = i;
                }
            }
            if (index == limiters_.size()) {
                LimiterOptions o = options.limiterOptions;
                o.name = name;
                o.dryRun = rule.dryRun;
                limiters_.push_back(
                    AnyLimiter::make(rule.algorithm, rule.limit, storage, clock, o));
                policies_.push_back(QuotaPolicy::forLimiter(rule.name, limiters_.back()));
                names_.push_back(name);
            }
            limiterOfRule_.push_back(index);
        }
        if (options.ipv6AggregateLimit) {
            if (options.identity.ipv6AggregatePrefix == 0) {
                detail::throwInvalidArgument(
                    "RouteLimiterOptions.ipv6AggregateLimit needs identity.ipv6AggregatePrefix "
                    "above 0");
            }
            LimiterOptions o = options.limiterOptions;
            o.name = prefix + "ipv6-aggregate";
            aggregate_.emplace(AnyLimiter::make(Algorithm::kTokenBucket,
                                                *options.ipv6AggregateLimit, storage, clock, o));
            aggregatePolicy_ = QuotaPolicy::forLimiter("ipv6-aggregate", *aggregate_);
        }
    }

    /// Decides one request. A target that `pathReadings` reads as paths of different routes
    /// (another rule, no rule, or a skipped path) is refused with 400 whoever sends it: the
    /// limiter cannot know which one the application serves, and judging it by the wrong one
    /// would let a request past its route's limit. Never throws on hostile input (only
    /// `std::bad_alloc`, or `StoreException` under `FailurePolicy::kThrow`).
    [[nodiscard]] Verdict check(const RequestInfo& request) {
        const std::string_view tier = request.principal ? request.tier : std::string_view{};
        const std::vector<std::string> paths = pathReadings(request.target);
        const Route route = routeOf(request.method, paths.front(), tier);
        for (std::size_t i = 1; i < paths.size(); ++i) {
            if (routeOf(request.method, paths[i], tier) != route) {
                return ambiguousPath();
            }
        }
        Verdict v;
        if (route.skipped) {
            return v;
        }
        v.client = identity_.identify(request.peer, request.forwarded, request.principal);
        if ((v.client.address && allow_.contains(*v.client.address)) || route.rule == nullptr) {
            return v;
        }
        v.rule = route.rule;
        // The address's key where a verified principal replaced it in `v.client`: made once,
        // when a rule counts the address, and never changed after (the checks view it).
        std::string addressKey;
        std::vector<Counted> counted;  // the rules of the set that count this request
        for (const std::size_t index : table_.setOf(*route.rule)) {
            const RouteRule& rule = table_.rules()[index];
            if (rule.counts == Counts::kPrincipal && !v.client.authenticated) {
                continue;
            }
            std::string_view key = v.client.key;
            if (rule.counts == Counts::kAddress && v.client.authenticated) {
                if (addressKey.empty()) {
                    addressKey = identity_.identify(request.peer, request.forwarded).key;
                }
                key = addressKey;
            }
            counted.push_back({&rule, limiterOfRule_[index], key});
        }
        if (!counted.empty()) {
            v.limited = true;
            decide(v, counted);
        }
        return v;
    }

    /// The limiter of `rule`, shared by the rules of its name and tier: to peek at a client's
    /// key (`Verdict::client.key`, or its address's key for `Counts::kAddress`), reset one, or
    /// read `dryRunRefusals()`. Preconditions: `rule` is an element of `table().rules()`.
    [[nodiscard]] AnyLimiter& limiterOf(const RouteRule& rule) noexcept {
        return limiters_[limiterOfRule_[static_cast<std::size_t>(&rule - table_.rules().data())]];
    }

    /// The forwarding header whose values `RequestInfo::forwarded` must carry (empty: none).
    [[nodiscard]] std::string_view forwardedHeader() const noexcept {
        return identity_.headerName();
    }
    [[nodiscard]] const RouteTable& table() const noexcept { return table_; }
    [[nodiscard]] const ClientIdentity& identity() const noexcept { return identity_; }

private:
    /// A rule of the matched set that counts the request: its limiter and the key it counts.
    struct Counted {
        const RouteRule* rule = nullptr;
        std::size_t limiter = 0;
        std::string_view key;
    };

    /// Checks the counted rules (and the IPv6 aggregate) all or nothing, and writes the verdict
    /// (`counted` may view `v.client.key`).
    void decide(Verdict& v, const std::vector<Counted>& counted) {
        // The aggregate first, then the enforcing rules, then the dry-run ones: a dry-run rule
        // admits, so it never makes the others give back, and checked last it takes (and counts
        // as a would-be refusal) only what the enforcing rules admitted.
        const std::size_t first = aggregate_ && !v.client.aggregateKey.empty() ? 1 : 0;
        std::vector<KeyCheck<AnyLimiter>> checks;
        std::vector<std::size_t> rank;  // the index in `counted` of each check after the first
        checks.reserve(first + counted.size());
        if (first == 1) {
            checks.push_back({*aggregate_, v.client.aggregateKey, v.rule->cost});
        }
        for (const bool dryRuns : {false, true}) {
            for (std::size_t i = 0; i < counted.size(); ++i) {
                AnyLimiter& limiter = limiters_[counted[i].limiter];
                if (limiter.options().dryRun == dryRuns) {
                    checks.push_back({limiter, counted[i].key, counted[i].rule->cost});
                    rank.push_back(i);
                }
            }
        }
        std::vector<Decision> decisions(checks.size());
        tryAcquireAll<AnyLimiter>(checks, decisions);

        // Reported in the set's order, the aggregate first (docs/semantics.md, "Several keys").
        std::vector<PolicyDecision> reported(checks.size());
        if (first == 1 && !reported.empty()) {  // (never empty then: g++ -O3 cannot tell)
            reported[0] = {&aggregatePolicy_, decisions[0]};
        }
        for (std::size_t c = first; c < checks.size(); ++c) {
            const std::size_t i = rank[c - first];
            reported[first + i] = {&policies_[counted[i].limiter], decisions[c]};
        }
        const ResponseContext context{{}, v.client.key};
        v.headers = headers_(reported, context);
        judge(v, reported, first, counted);
    }

    /// The verdict of the reported decisions (`first` of them the aggregate's): the rules that
    /// would have refused, the binding rule, and a refusal's status and body.
    void judge(Verdict& v, const std::vector<PolicyDecision>& reported, std::size_t first,
               const std::vector<Counted>& counted) const {
        std::vector<std::string_view> violated;
        const PolicyDecision* binding = nullptr;
        for (const PolicyDecision& c : reported) {
            if (!c.decision.allowed) {
                violated.push_back(c.policy->name);
            }
            const auto at = static_cast<std::size_t>(&c - reported.data());
            if (c.decision.wouldRefuse && at >= first) {
                v.wouldRefuse.push_back(counted[at - first].rule);
            }
            if (!c.decision.wouldRefuse &&
                (binding == nullptr || detail::bindsTighter(c.decision, binding->decision))) {
                binding = &c;
            }
        }
        if (binding != nullptr && binding - reported.data() >= static_cast<std::ptrdiff_t>(first)) {
            v.binding = counted[static_cast<std::size_t>(binding - reported.data()) - first].rule;
        }
        if (violated.empty() || binding == nullptr) {
            return;
        }
        // A refusal binds over every admission, so `binding` is the longest-waiting refusal.
        const Decision& refusal = binding->decision;
        v.allowed = false;
        v.status = kStatusTooManyRequests;
        if (problemDetails_) {
            v.body = problemJson(violated, retryAfterSeconds(refusal));
            v.contentType = kProblemContentType;
        } else {
            v.body = plainBody(refusal);
            v.contentType = "text/plain; charset=utf-8";
        }
    }

    /// What a path means to the limiter: skipped, or judged by `rule` (nullptr: by none).
    struct Route {
        bool skipped = false;
        const RouteRule* rule = nullptr;
        friend bool operator==(const Route&, const Route&) = default;
    };

    [[nodiscard]] Route routeOf(std::string_view method, std::string_view path,
                                std::string_view tier) const {
        for (const std::string& skip : skip_) {
            if (skip == "/" || path == skip ||
                (path.size() > skip.size() && path.substr(0, skip.size()) == skip &&
                 path[skip.size()] == '/')) {
                return {true, nullptr};
            }
        }
        return {false, table_.matchNormalized(method, path, tier)};
    }

    [[nodiscard]] Verdict ambiguousPath() const {
        Verdict v;
        v.allowed = false;
        v.status = kStatusBadRequest;
        if (problemDetails_) {
            v.body = badRequestProblemJson(kAmbiguousPathDetail);
            v.contentType = kProblemContentType;
        } else {
            v.body = std::string(kAmbiguousPathDetail).append("\n");
            v.contentType = "text/plain; charset=utf-8";
        }
        return v;
    }

    RouteTable table_;
    ClientIdentity identity_;
    CidrSet allow_;
    RateLimitHeaders headers_;
    bool problemDetails_ = true;
    std::vector<std::string> skip_;
    std::vector<AnyLimiter> limiters_;
    std::vector<QuotaPolicy> policies_;
    std::vector<std::string> names_;
    std::vector<std::size_t> limiterOfRule_;
    std::optional<AnyLimiter> aggregate_;
    QuotaPolicy aggregatePolicy_;
};

}  // namespace http
}  // namespace v1
}  // namespace ratelimit
