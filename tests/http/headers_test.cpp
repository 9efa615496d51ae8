// Tests of include/ratelimit/http/headers.hpp and problem.hpp: the draft's own examples
// (draft-ietf-httpapi-ratelimit-headers-11, sections 3.2 and 4.2), RFC 9651 escaping of odd
// policy names, Retry-After rounding, degraded decisions, the legacy fields, pk and jitter.

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/any_limiter.hpp>
#include <ratelimit/http/headers.hpp>
#include <ratelimit/http/problem.hpp>
#include <ratelimit/limiter.hpp>

#include "support/catch.hpp"

using namespace std::chrono_literals;

namespace {

using ratelimit::Algorithm;
using ratelimit::Decision;
using ratelimit::Limit;
using ratelimit::http::Header;
using ratelimit::http::HeaderOptions;
using ratelimit::http::PolicyDecision;
using ratelimit::http::QuotaPolicy;
using ratelimit::http::RateLimitHeaders;
using ratelimit::http::ResponseContext;

Decision allowed(std::int64_t limit, std::int64_t remaining, std::chrono::nanoseconds reset) {
    Decision d;
    d.allowed = true;
    d.limit = limit;
    d.remaining = remaining;
    d.resetAfter = reset;
    return d;
}

Decision refused(std::int64_t limit, std::chrono::nanoseconds wait,
                 std::chrono::nanoseconds reset) {
    Decision d;
    d.allowed = false;
    d.limit = limit;
    d.remaining = 0;
    d.retryAfter = wait;
    d.resetAfter = reset;
    return d;
}

std::optional<std::string> field(const std::vector<Header>& headers, std::string_view name) {
    for (const Header& h : headers) {
        if (h.name == name) {
            return h.value;
        }
    }
    return std::nullopt;
}

const ResponseContext kAt{std::chrono::system_clock::time_point{1'700'000'000s}, "ip4:192.0.2.1"};

}  // namespace

TEST_CASE("RateLimit headers: the draft's single-policy examples", "[http][headers]") {
    const RateLimitHeaders write;
    // 3.2: RateLimit-Policy: "default";q=100;w=10      4.2: RateLimit: "default";r=50;t=30
    const QuotaPolicy policy{"default", 100, 10s};
    const std::vector<Header> h = write(policy, allowed(100, 50, 30s), kAt);
    CHECK(field(h, "RateLimit-Policy") == R"("default";q=100;w=10)");
    CHECK(field(h, "RateLimit") == R"("default";r=50;t=30)");
    CHECK(field(h, "X-RateLimit-Limit") == "100");
    CHECK(field(h, "X-RateLimit-Remaining") == "50");
    CHECK(field(h, "X-RateLimit-Reset") == "1700000030");  // epoch seconds by default
    CHECK_FALSE(field(h, "Retry-After"));
    // 7: RateLimit: "default";r=1;t=7
    CHECK(field(write(policy, allowed(100, 1, 6'000'000'001ns), kAt), "RateLimit") ==
          R"("default";r=1;t=7)");
}

TEST_CASE("RateLimit headers: several policies in one field, as the draft's examples",
          "[http][headers]") {
    // 3.2: RateLimit-Policy: "permin";q=50;w=60,"perhr";q=1000;w=3600 (RFC 9651 serialises list
    // members separated by ", "; parsers accept both).
    const QuotaPolicy perMin =
        QuotaPolicy::forLimit("permin", Limit::perMinute(50), Algorithm::kFixedWindow);
    const QuotaPolicy perHr =
        QuotaPolicy::forLimit("perhr", Limit::perHour(1000), Algorithm::kFixedWindow);
    const std::array<PolicyDecision, 2> checks{
        {{&perMin, allowed(50, 49, 60s)}, {&perHr, allowed(1000, 3, 3600s)}}};
    const std::vector<Header> h = RateLimitHeaders{}(checks, kAt);
    CHECK(field(h, "RateLimit-Policy") == R"("permin";q=50;w=60, "perhr";q=1000;w=3600)");
    CHECK(field(h, "RateLimit") == R"("permin";r=49;t=60, "perhr";r=3;t=3600)");
    // The legacy fields follow the policy closest to refusing.
    CHECK(field(h, "X-RateLimit-Limit") == "1000");
    CHECK(field(h, "X-RateLimit-Remaining") == "3");

    // 3.2: "burst";q=100;w=60,"daily";q=1000;w=86400, the daily one refusing.
    const QuotaPolicy burst{"burst", 100, 60s};
    const QuotaPolicy daily =
        QuotaPolicy::forLimit("daily", Limit::perDay(1000), Algorithm::kFixedWindow);
    const std::array<PolicyDecision, 2> both{
        {{&burst, allowed(100, 99, 60s)}, {&daily, refused(1000, 3599s, 86400s)}}};
    const std::vector<Header> r = RateLimitHeaders{}(both, kAt);
    CHECK(field(r, "RateLimit-Policy") == R"("burst";q=100;w=60, "daily";q=1000;w=86400)");
    CHECK(field(r, "RateLimit") == R"("burst";r=99;t=60, "daily";r=0;t=3599)");
    CHECK(field(r, "X-RateLimit-Limit") == "1000");
    CHECK(field(r, "X-RateLimit-Remaining") == "0");
    CHECK(field(r, "Retry-After") == "3599");
}

TEST_CASE("RateLimit headers: odd policy names are quoted and escaped, unsendable ones refused",
          "[http][headers]") {
    const QuotaPolicy odd{R"(we"ird\name, with;=chars)", 5, 60s};
    const std::vector<Header> h = RateLimitHeaders{}(odd, allowed(5, 4, 60s), kAt);
    CHECK(field(h, "RateLimit-Policy") == R"("we\"ird\\name, with;=chars";q=5;w=60)");
    CHECK(field(h, "RateLimit") == R"("we\"ird\\name, with;=chars";r=4;t=60)");
    CHECK(field(RateLimitHeaders{}(QuotaPolicy{"", 1, 1s}, allowed(1, 1, 0s), kAt), "RateLimit") ==
          R"("";r=1;t=0)");
    // Hand-made, unchecked names still give a valid field.
    CHECK(field(RateLimitHeaders{}(QuotaPolicy{"a\nb\xc3\xa9", 1, 1s}, allowed(1, 1, 0s), kAt),
                "RateLimit") == R"("a?b??";r=1;t=0)");
    using Catch::Matchers::Contains;
    REQUIRE_THROWS_WITH(
        QuotaPolicy::forLimit("caf\xc3\xa9", Limit::perSecond(1), Algorithm::kFixedWindow),
        Contains("QuotaPolicy.name"));
    REQUIRE_THROWS_WITH(
        QuotaPolicy::forLimit("tab\there", Limit::perSecond(1), Algorithm::kFixedWindow),
        Contains("QuotaPolicy.name"));
    REQUIRE_THROWS_WITH(
        QuotaPolicy::forLimit(std::string(257, 'a'), Limit::perSecond(1), Algorithm::kFixedWindow),
        Contains("QuotaPolicy.name"));
}

TEST_CASE("RateLimit headers: w only for whole seconds", "[http][headers]") {
    const QuotaPolicy subSecond =
        QuotaPolicy::forLimit("fast", Limit::per(3, 1500ms), Algorithm::kFixedWindow);
    CHECK(field(RateLimitHeaders{}(subSecond, allowed(3, 2, 1500ms), kAt), "RateLimit-Policy") ==
          R"("fast";q=3)");
    CHECK(field(RateLimitHeaders{}(subSecond, allowed(3, 2, 1500ms), kAt), "RateLimit") ==
          R"("fast";r=2;t=2)");
}

TEST_CASE("RateLimit headers: a bucket's policy is its burst per the time the burst refills",
          "[http][headers]") {
    // 100/min with a burst of 20: a client may spend 20 at once, and 20 more every 12 s, the
    // sustained 100/min. "q=20;w=60" would claim 20 a minute, "q=100;w=60" beside a limit of
    // 20 and a remaining of 19 would disagree with the other fields.
    for (const Algorithm algorithm : {Algorithm::kTokenBucket, Algorithm::kLeakyBucket}) {
        const QuotaPolicy bucket =
            QuotaPolicy::forLimit("api", Limit::perMinute(100).withBurst(20), algorithm);
        CHECK(bucket.quota == 20);
        CHECK(bucket.window == 12s);
        const std::vector<Header> h = RateLimitHeaders{}(bucket, allowed(20, 19, 3s), kAt);
        CHECK(field(h, "RateLimit-Policy") == R"("api";q=20;w=12)");
        CHECK(field(h, "RateLimit") == R"("api";r=19;t=3)");
        CHECK(field(h, "X-RateLimit-Limit") == "20");
        CHECK(field(h, "X-RateLimit-Remaining") == "19");
    }
    CHECK(QuotaPolicy::forLimit("api", Limit::per(10, 90s).withBurst(20), Algorithm::kTokenBucket)
              .window == 180s);
    // A burst below the rate refills within the period; one above it, over several.
    CHECK(QuotaPolicy::forLimit("b", Limit::perSecond(10), Algorithm::kTokenBucket).window == 1s);
    CHECK(QuotaPolicy::forLimit("b", Limit::perSecond(5).withBurst(1), Algorithm::kTokenBucket)
              .window == 200ms);  // not whole seconds: no w in the field
    CHECK(field(RateLimitHeaders{}(QuotaPolicy::forLimit("b", Limit::perSecond(5).withBurst(1),
                                                         Algorithm::kTokenBucket),
                                   allowed(1, 0, 200ms), kAt),
                "RateLimit-Policy") == R"("b";q=1)");
    // 3 per 7/min refill in 25.71… s: not a whole number of nanoseconds either.
    CHECK(QuotaPolicy::forLimit("b", Limit::perMinute(7).withBurst(3), Algorithm::kTokenBucket)
              .window == 0s);
    // The largest limits do not overflow: 2^48 tokens at 1 per 292 years.
    const Limit huge = Limit::per(1, std::chrono::nanoseconds{ratelimit::detail::kInt64Max})
                           .withBurst(Limit::kMaxCount);
    CHECK(QuotaPolicy::forLimit("b", huge, Algorithm::kTokenBucket).window == 0s);
    // The windows' policies are their count per period, as before.
    for (const Algorithm algorithm :
         {Algorithm::kFixedWindow, Algorithm::kSlidingLog, Algorithm::kSlidingCounter}) {
        const QuotaPolicy window =
            QuotaPolicy::forLimit("w", Limit::perMinute(100).withBurst(20), algorithm);
        CHECK(window.quota == 100);
        CHECK(window.window == 60s);
    }
}

TEST_CASE("RateLimit headers: a policy built from the limiter is the one its decisions follow",
          "[http][headers]") {
    const Limit limit = Limit::perMinute(100).withBurst(20);
    const ratelimit::TokenBucket<> bucket{limit};
    const ratelimit::FixedWindow<> window{limit};
    const QuotaPolicy fromBucket = QuotaPolicy::forLimiter("api", bucket);
    CHECK(fromBucket.quota == 20);
    CHECK(fromBucket.window == 12s);
    CHECK(QuotaPolicy::forLimiter("api", window).quota == 100);
    const auto any =
        ratelimit::AnyLimiter::make(Algorithm::kLeakyBucket, limit, ratelimit::MemoryStorage{});
    CHECK(QuotaPolicy::forLimiter("api", any).window == 12s);
    // The limit field is the decision's limit, and the remaining never exceeds it.
    ratelimit::TokenBucket<> fresh{limit};
    const Decision d = fresh.tryAcquire("k");
    CHECK(d.limit == fromBucket.quota);
    CHECK(field(RateLimitHeaders{}(fromBucket, d, kAt), "X-RateLimit-Limit") == "20");
    CHECK_THROWS_WITH(QuotaPolicy::forLimiter("caf\xc3\xa9", bucket),
                      Catch::Matchers::Contains("QuotaPolicy.name"));
}

TEST_CASE("RateLimit headers: the near-limit warning is off by default and fires below its share",
          "[http][headers]") {
    const QuotaPolicy p{"api", 100, 60s};
    CHECK_FALSE(field(RateLimitHeaders{}(p, allowed(100, 0, 60s), kAt), "X-RateLimit-Warning"));
    const RateLimitHeaders warn{HeaderOptions{.nearLimitPercent = 10}};
    CHECK_FALSE(
        field(warn(p, allowed(100, 10, 60s), kAt), "X-RateLimit-Warning"));  // 10 %: not below
    CHECK(field(warn(p, allowed(100, 9, 60s), kAt), "X-RateLimit-Warning") == R"("api";r=9;q=100)");
    CHECK(field(warn(p, allowed(100, 0, 60s), kAt), "X-RateLimit-Warning") == R"("api";r=0;q=100)");
    // A refusal says more than a warning could; a degraded decision's numbers are invented.
    CHECK_FALSE(field(warn(p, refused(100, 1s, 1s), kAt), "X-RateLimit-Warning"));
    Decision degraded = allowed(100, 0, 0s);
    degraded.degraded = true;
    CHECK_FALSE(field(warn(p, degraded, kAt), "X-RateLimit-Warning"));
    // Several policies: the binding one, the one with the least left.
    const QuotaPolicy daily{"daily", 1000, 86400s};
    const std::array<PolicyDecision, 2> both{
        {{&p, allowed(100, 50, 60s)}, {&daily, allowed(1000, 20, 86400s)}}};
    CHECK(field(warn(both, kAt), "X-RateLimit-Warning") == R"("daily";r=20;q=1000)");
    CHECK(field(RateLimitHeaders{HeaderOptions{.nearLimitPercent = 100}}(p, allowed(100, 99, 60s),
                                                                         kAt),
                "X-RateLimit-Warning") == R"("api";r=99;q=100)");
    using Catch::Matchers::Contains;
    CHECK_THROWS_WITH(RateLimitHeaders{HeaderOptions{.nearLimitPercent = 101}},
                      Contains("HeaderOptions.nearLimitPercent"));
    CHECK_THROWS_WITH(RateLimitHeaders{HeaderOptions{.nearLimitPercent = -1}},
                      Contains("HeaderOptions.nearLimitPercent"));
}

TEST_CASE("Retry-After: whole seconds rounded up, never 0, none for a request that never passes",
          "[http][headers]") {
    const QuotaPolicy p{"p", 5, 60s};
    const RateLimitHeaders write;
    CHECK(field(write(p, refused(5, 1ns, 1s), kAt), "Retry-After") == "1");
    CHECK(field(write(p, refused(5, 1s, 1s), kAt), "Retry-After") == "1");
    CHECK(field(write(p, refused(5, 1001ms, 2s), kAt), "Retry-After") == "2");
    CHECK(field(write(p, refused(5, 59s, 60s), kAt), "RateLimit") == R"("p";r=0;t=59)");
    Decision never = refused(5, Decision::kNever, 0s);
    CHECK_FALSE(field(write(p, never, kAt), "Retry-After"));
    CHECK(field(write(p, never, kAt), "RateLimit") == R"("p";r=0;t=0)");
    CHECK_FALSE(ratelimit::http::retryAfterSeconds(allowed(5, 4, 1s)));
    CHECK(ratelimit::http::retryAfterSeconds(refused(5, 2500ms, 3s)) == 3);
    // Two refusals: the longer wait; one of them a never: no Retry-After at all.
    const QuotaPolicy q{"q", 5, 60s};
    const std::array<PolicyDecision, 2> two{{{&p, refused(5, 3s, 3s)}, {&q, refused(5, 7s, 7s)}}};
    CHECK(field(write(two, kAt), "Retry-After") == "7");
    const std::array<PolicyDecision, 2> withNever{{{&p, refused(5, 3s, 3s)}, {&q, never}}};
    CHECK_FALSE(field(write(withNever, kAt), "Retry-After"));
}

TEST_CASE("RateLimit headers: a dry-run's refusal of an admitted request omits its fields",
          "[http][headers]") {
    const QuotaPolicy p{"p", 5, 60s};
    const QuotaPolicy shadow{"new", 2, 60s};
    Decision wouldRefuse = refused(2, 30s, 60s);
    wouldRefuse.allowed = true;
    wouldRefuse.wouldRefuse = true;
    const std::array<PolicyDecision, 2> checks{{{&p, allowed(5, 4, 60s)}, {&shadow, wouldRefuse}}};
    const std::vector<Header> h = RateLimitHeaders{}(checks, kAt);
    CHECK(field(h, "RateLimit-Policy") == R"("p";q=5;w=60)");
    CHECK(field(h, "X-RateLimit-Remaining") == "4");
    CHECK_FALSE(field(h, "Retry-After"));
}

TEST_CASE("RateLimit headers: a degraded decision omits the RateLimit fields", "[http][headers]") {
    const QuotaPolicy p{"p", 5, 60s};
    Decision open = allowed(5, 4, 0s);
    open.degraded = true;
    const std::vector<Header> h = RateLimitHeaders{}(p, open, kAt);
    CHECK(h.empty());
    Decision closed = refused(5, 100ms, 0s);
    closed.degraded = true;
    const std::vector<Header> c = RateLimitHeaders{}(p, closed, kAt);
    REQUIRE(c.size() == 1);
    CHECK(c[0] == Header{"Retry-After", "1"});
    // One degraded policy among healthy ones: only the healthy ones are advertised.
    const QuotaPolicy q{"q", 9, 1s};
    const std::array<PolicyDecision, 2> mixed{{{&p, open}, {&q, allowed(9, 8, 1s)}}};
    const std::vector<Header> m = RateLimitHeaders{}(mixed, kAt);
    CHECK(field(m, "RateLimit") == R"("q";r=8;t=1)");
    CHECK(field(m, "X-RateLimit-Limit") == "9");
}

TEST_CASE("RateLimit headers: the user picks the styles", "[http][headers]") {
    const QuotaPolicy p{"p", 5, 60s};
    HeaderOptions o;
    o.draftFields = false;
    o.legacyReset = HeaderOptions::Reset::kDeltaSeconds;
    const std::vector<Header> legacy = RateLimitHeaders{o}(p, refused(5, 12s, 60s), kAt);
    CHECK_FALSE(field(legacy, "RateLimit"));
    CHECK_FALSE(field(legacy, "RateLimit-Policy"));
    CHECK(field(legacy, "X-RateLimit-Reset") == "12");
    CHECK(field(legacy, "Retry-After") == "12");
    o = {};
    o.legacyFields = false;
    o.retryAfter = false;
    const std::vector<Header> draft = RateLimitHeaders{o}(p, refused(5, 12s, 60s), kAt);
    CHECK(draft.size() == 2);
    CHECK_FALSE(field(draft, "Retry-After"));
}

TEST_CASE("RateLimit headers: jitter only ever adds, within its bound", "[http][headers]") {
    HeaderOptions o;
    o.retryAfterJitter = 5s;
    const RateLimitHeaders write{o};
    const QuotaPolicy p{"p", 5, 60s};
    std::set<std::string> seen;
    for (int i = 0; i < 200; ++i) {
        const std::string key = "ip4:10.0.0." + std::to_string(i);
        const std::string v =
            *field(write(p, refused(5, 10s, 10s), ResponseContext{kAt.now, key}), "Retry-After");
        const int s = std::stoi(v);
        CHECK(s >= 10);
        CHECK(s <= 15);
        seen.insert(v);
        // The same client gets the same answer (no hidden random state).
        CHECK(*field(write(p, refused(5, 10s, 10s), ResponseContext{kAt.now, key}),
                     "Retry-After") == v);
    }
    CHECK(seen.size() == 6);
    o.retryAfterJitter = -1s;
    REQUIRE_THROWS_WITH(RateLimitHeaders{o}, Catch::Matchers::Contains("retryAfterJitter"));
}

TEST_CASE("RateLimit headers: pk is a keyed hash as an RFC 9651 byte sequence", "[http][headers]") {
    // 4.2's byte sequences: "trial121323" and "App-999".
    std::string out;
    ratelimit::detail::http_fields::appendSfByteSequence(out, "trial121323");
    CHECK(out == ":dHJpYWwxMjEzMjM=:");
    out.clear();
    ratelimit::detail::http_fields::appendSfByteSequence(out, "App-999");
    CHECK(out == ":QXBwLTk5OQ==:");
    out.clear();
    ratelimit::detail::http_fields::appendSfByteSequence(out, "");
    CHECK(out == "::");

    HeaderOptions o;
    o.partitionKey = true;
    REQUIRE_THROWS_WITH(RateLimitHeaders{o}, Catch::Matchers::Contains("partitionKeySecret"));
    o.partitionKeySecret = {1, 2};
    const QuotaPolicy p{"peruser", 100, 60s};
    const std::vector<Header> h = RateLimitHeaders{o}(p, allowed(100, 22, 30s), kAt);
    const std::string limit = *field(h, "RateLimit");
    REQUIRE(limit.rfind(R"("peruser";r=22;t=30;pk=:)", 0) == 0);
    const std::string pk = limit.substr(limit.find("pk=") + 3);
    CHECK(pk.size() == 26);  // ':' + base64 of 16 bytes (24) + ':'
    CHECK(pk.find("192.0.2.1") == std::string::npos);
    CHECK(field(h, "RateLimit-Policy")->find(pk) != std::string::npos);
    o.partitionKeySecret = {3, 4};
    CHECK(*field(RateLimitHeaders{o}(p, allowed(100, 22, 30s), kAt), "RateLimit") != limit);
}

TEST_CASE("Problem details: quota-exceeded JSON and a plain body", "[http][problem]") {
    const std::array<std::string_view, 2> names{"daily", "bandwidth"};
    CHECK(ratelimit::http::problemJson(names, 30) ==
          R"({"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",)"
          R"("title":"Request cannot be satisfied as assigned quota has been exceeded",)"
          R"("status":429,"detail":"Too many requests; retry in 30 seconds.",)"
          R"("violated-policies":["daily","bandwidth"]})");
    const std::string odd =
        ratelimit::http::problemJson("a\"b\\c\x01\xff caf\xc3\xa9", refused(5, 1500ms, 2s));
    CHECK(odd.find(R"(["a\"b\\c\u0001\ufffd caf)"
                   "\xc3\xa9"
                   R"("])") != std::string::npos);
    CHECK(odd.find("retry in 2 seconds") != std::string::npos);
    CHECK(ratelimit::http::plainBody(refused(5, 1500ms, 2s)) ==
          "Too many requests; retry in 2 seconds.\n");
    CHECK(ratelimit::http::plainBody(refused(5, Decision::kNever, 0s)).find("exceeds") !=
          std::string::npos);
    CHECK(std::string(ratelimit::http::kProblemContentType) == "application/problem+json");
}

TEST_CASE("appendJsonString: any key's bytes make a valid JSON string", "[http][problem]") {
    std::string out = "[";
    ratelimit::http::appendJsonString(
        out, std::string_view("q\"\\\n\0\x80\xed\xa0\x80\xf0\x9f\x98\x80", 13));
    out.push_back(']');
    // Escaped quote, backslash and controls; a stray continuation byte and a surrogate's
    // encoding each replaced byte by byte; a well-formed 4-byte sequence kept.
    CHECK(out == R"(["q\"\\\u000a\u0000\ufffd\ufffd\ufffd\ufffd)"
                 "\xf0\x9f\x98\x80"
                 R"("])");
}
