// Tests of decision listeners and the ready one (include/ratelimit/listener.hpp,
// include/ratelimit/metrics/decision_metrics.hpp, refusal_summary.hpp): a listener hears every
// consuming call once, with its outcome, and nothing else; the counts equal the decisions made
// by 8 threads, to the unit; early retries count refusals before the previous refusal's
// retryAfter; the top offenders find 10 heavy keys among a million light ones, within the
// stated bound, in fixed memory; alerts fire once per episode; bad options name the field.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ratelimit/http/route_limiter.hpp>
#include <ratelimit/http/routes.hpp>
#include <ratelimit/listener.hpp>
#include <ratelimit/metrics/decision_metrics.hpp>
#include <ratelimit/metrics/refusal_summary.hpp>
#include <ratelimit/ratelimit.hpp>

#include "support/catch.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

using ratelimit::AttackAlert;
using ratelimit::Decision;
using ratelimit::DecisionEvent;
using ratelimit::DecisionListener;
using ratelimit::DecisionMetrics;
using ratelimit::DecisionMetricsOptions;
using ratelimit::DecisionOutcome;
using ratelimit::Limit;
using ratelimit::LimiterOptions;
using ratelimit::ManualClock;
using ratelimit::MemoryStorage;
using ratelimit::PolicyCounts;
using ratelimit::RefusalSummary;
using ratelimit::RefusalSummaryOptions;

namespace {

using Bucket = ratelimit::TokenBucket<MemoryStorage, ManualClock>;

/// Records what it hears, and the names it was attached with.
class Recorder final : public DecisionListener {
public:
    Recorder() = default;
    Recorder(const Recorder&) = delete;
    Recorder& operator=(const Recorder&) = delete;
    Recorder(Recorder&&) = delete;
    Recorder& operator=(Recorder&&) = delete;
    ~Recorder() override = default;

    struct Heard {
        std::string key;
        std::int64_t cost;
        Decision decision;
        DecisionOutcome outcome;
    };

    DecisionListener& attach(std::string_view policy) override {
        attached.emplace_back(policy);
        return *this;
    }
    void onDecision(const DecisionEvent& e) noexcept override {
        heard.push_back(Heard{std::string(e.key), e.cost, e.decision, e.outcome});
    }
    void onMemoryEvent(ratelimit::MemoryEvent event, std::string_view table) noexcept override {
        spills.emplace_back(event, table);
    }

    std::vector<std::string> attached;
    std::vector<Heard> heard;
    std::vector<std::pair<ratelimit::MemoryEvent, std::string>> spills;
};

LimiterOptions withListener(DecisionListener& listener, std::string name = "api") {
    LimiterOptions o;
    o.name = std::move(name);
    o.listener = &listener;
    return o;
}

DecisionMetricsOptions onClock(const ManualClock& clock) {
    DecisionMetricsOptions o;
    o.clock = [clock] { return clock.now().time_since_epoch(); };
    return o;
}

}  // namespace

TEST_CASE("A listener hears each consuming call once, with its decision and outcome",
          "[metrics][listener]") {
    Recorder recorder;
    ManualClock clock;
    Bucket limiter(Limit::perSecond(2), MemoryStorage{}, clock, withListener(recorder, "search"));
    const Bucket copy = limiter;  // copies share the attachment: attached once
    REQUIRE(recorder.attached == std::vector<std::string>{"search"});

    const Decision first = limiter.tryAcquire("k", 1);
    (void)limiter.tryAcquire("k", 1);
    const Decision refused = limiter.tryAcquire("k", 1);
    // Peeks, refunds and resets decide no request: not heard.
    (void)limiter.peek("k", 1);
    (void)limiter.refund("k", 1);
    limiter.reset("other");
    (void)limiter.tryAcquire("k", 3, clock.now());

    REQUIRE(recorder.heard.size() == 4);
    CHECK(recorder.heard[0].key == "k");
    CHECK(recorder.heard[0].decision == first);
    CHECK(recorder.heard[0].outcome == DecisionOutcome::kAllowed);
    CHECK(recorder.heard[2].decision == refused);
    CHECK(recorder.heard[2].outcome == DecisionOutcome::kRefused);
    CHECK(recorder.heard[3].cost == 3);
    CHECK(recorder.heard[3].outcome == DecisionOutcome::kRefused);
}

TEST_CASE("Outcomes: degraded first, then a dry-run's would-be refusal, then allowed/refused",
          "[metrics][listener]") {
    Decision d;
    CHECK(ratelimit::outcomeOf(d) == DecisionOutcome::kRefused);
    d.allowed = true;
    CHECK(ratelimit::outcomeOf(d) == DecisionOutcome::kAllowed);
    d.wouldRefuse = true;
    CHECK(ratelimit::outcomeOf(d) == DecisionOutcome::kDryRunRefused);
    d.degraded = true;
    CHECK(ratelimit::outcomeOf(d) == DecisionOutcome::kDegraded);

    Recorder recorder;
    ManualClock clock;
    LimiterOptions o = withListener(recorder);
    o.dryRun = true;
    Bucket shadow(Limit::perSecond(1), MemoryStorage{}, clock, o);
    CHECK(shadow.tryAcquire("k").allowed);
    CHECK(shadow.tryAcquire("k").allowed);
    REQUIRE(recorder.heard.size() == 2);
    CHECK(recorder.heard[0].outcome == DecisionOutcome::kAllowed);
    CHECK(recorder.heard[1].outcome == DecisionOutcome::kDryRunRefused);
}

TEST_CASE("A limit set's and a tier's calls are heard, with the binding member",
          "[metrics][listener]") {
    Recorder recorder;
    ManualClock clock;
    using Set = ratelimit::LimitSet<ratelimit::TokenBucketModel, ratelimit::FixedWindowModel>;
    ratelimit::Limiter<Set, MemoryStorage, ManualClock> limiter(
        {Limit::perMinute(30).withBurst(10), Limit::perDay(12)}, MemoryStorage{}, clock,
        withListener(recorder, "plan"));
    for (int i = 0; i < 13; ++i) {
        (void)limiter.tryAcquire("k");
    }
    clock.advance(1h);
    for (int i = 0; i < 3; ++i) {
        (void)limiter.tryAcquire("k");
    }
    REQUIRE(recorder.heard.size() == 16);
    CHECK(recorder.heard[10].outcome == DecisionOutcome::kRefused);
    CHECK(recorder.heard[10].decision.policy == 0);  // the burst of 10 binds
    CHECK(recorder.heard[14].outcome == DecisionOutcome::kAllowed);
    CHECK(recorder.heard[15].outcome == DecisionOutcome::kRefused);
    CHECK(recorder.heard[15].decision.policy == 1);  // then the day's 12
}

TEST_CASE("DecisionMetrics counts equal the decisions of 8 threads, to the unit",
          "[metrics][threads]") {
    DecisionMetrics metrics;
    ManualClock clock;
    Bucket limiter(Limit::perSecond(1000), MemoryStorage{}, clock, withListener(metrics));
    // 8 threads, as a service runs them; 24, more than the counters' 16 stripes, so some
    // threads find theirs held and add to the shared one.
    const int kThreads = GENERATE(8, 24);
    constexpr int kCalls = 2000;
    INFO(kThreads << " threads");
    std::atomic<std::uint64_t> allowed{0};
    std::atomic<std::uint64_t> refused{0};
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(kThreads));
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            start.arrive_and_wait();
            for (int i = 0; i < kCalls; ++i) {
                const std::string key = "client-" + std::to_string((t + i) % 3);
                (limiter.tryAcquire(key).allowed ? allowed : refused) += 1;
            }
        });
    }
    for (std::thread& t : threads) {
        t.join();
    }
    const PolicyCounts counts = metrics.counts("api");
    CHECK(counts.allowed == allowed.load());
    CHECK(counts.refused == refused.load());
    CHECK(counts.allowed == 3000);  // time frozen: each of 3 keys admits its burst of 1000
    CHECK(counts.decisions() == static_cast<std::uint64_t>(kThreads) * kCalls);
    CHECK(counts.degraded == 0);
    CHECK(metrics.counts("nobody") == PolicyCounts{});
}

TEST_CASE("Limiters of one name share a policy; each name has its own", "[metrics]") {
    DecisionMetrics metrics;
    ManualClock clock;
    Bucket a(Limit::perSecond(1), MemoryStorage{}, clock, withListener(metrics, "login"));
    Bucket b(Limit::perSecond(1), MemoryStorage{}, clock, withListener(metrics, "login"));
    Bucket c(Limit::perSecond(1), MemoryStorage{}, clock, withListener(metrics, "search"));
    (void)a.tryAcquire("x");
    (void)b.tryAcquire("y");
    (void)c.tryAcquire("x");
    (void)c.tryAcquire("x");
    CHECK(metrics.counts("login").allowed == 2);
    CHECK(metrics.counts("search") == PolicyCounts{1, 1, 0, 0, 0, 0});
    const auto reports = metrics.report();
    REQUIRE(reports.size() == 2);
    CHECK(reports[0].policy == "login");
    CHECK(reports[1].policy == "search");
}

TEST_CASE("A route limiter's rules are policies of their own, by name and tier",
          "[metrics][http]") {
    DecisionMetrics metrics;
    ManualClock clock;
    const auto table = ratelimit::http::RouteTable::parse(
        "GET /search 2/h\n"
        "*   /api    1/h  name=api tier=free\n"
        "*   /api    3/h  name=api-daily tier=free\n",
        "test.rules");
    ratelimit::http::RouteLimiterOptions o;
    o.limiterOptions.listener = &metrics;
    ratelimit::http::RouteLimiter routes(table, MemoryStorage{}, clock, o);
    const auto request = [&](std::string_view target) {
        return routes.check({.method = "GET",
                             .target = target,
                             .peer = "192.0.2.1",
                             .forwarded = {},
                             .principal = "user-1",
                             .tier = "free"});
    };
    for (int i = 0; i < 3; ++i) {
        (void)request("/search");
    }
    CHECK(request("/api").allowed);
    CHECK_FALSE(request("/api").allowed);
    CHECK(metrics.counts("search") == PolicyCounts{2, 1, 0, 0, 0, 0});
    // The set's members, checked in order: the first refused the second call, so the daily
    // one, checked after it, never heard of it.
    CHECK(metrics.counts("api.free") == PolicyCounts{1, 1, 0, 0, 0, 0});
    CHECK(metrics.counts("api-daily.free") == PolicyCounts{1, 0, 0, 0, 0, 0});
}

TEST_CASE("Early retries: a refusal before the previous refusal's retryAfter has passed",
          "[metrics][early-retry]") {
    ManualClock clock;
    DecisionMetrics metrics(onClock(clock));
    Bucket limiter(Limit::perSecond(1), MemoryStorage{}, clock, withListener(metrics));
    CHECK(limiter.tryAcquire("k").allowed);
    const Decision refused = limiter.tryAcquire("k");  // retry after 1 s
    REQUIRE(refused.retryAfter == 1s);
    CHECK(metrics.counts("api").retriedEarly == 0);  // the first refusal retried nothing

    clock.advance(500ms);
    CHECK_FALSE(limiter.tryAcquire("k").allowed);  // half-way: early (retry after 500 ms)
    CHECK(metrics.counts("api").retriedEarly == 1);
    CHECK(limiter.tryAcquire("other").allowed);  // another key is its own
    CHECK(metrics.counts("api").retriedEarly == 1);

    clock.advance(500ms - 1ns);
    CHECK_FALSE(limiter.tryAcquire("k").allowed);  // 1 ns before: still early
    CHECK(metrics.counts("api").retriedEarly == 2);

    clock.advance(1ns);  // exactly at the retry time: admitted, not a retry counted
    CHECK(limiter.tryAcquire("k").allowed);
    clock.advance(2s);
    CHECK(limiter.tryAcquire("k").allowed);
    CHECK_FALSE(limiter.tryAcquire("k").allowed);  // after waiting: a refusal, but not early
    CHECK(metrics.counts("api").retriedEarly == 2);
    CHECK(metrics.counts("api").refused == 4);

    // A cost above the limit can never pass: every retry of it is early.
    CHECK(limiter.tryAcquire("big", 5).never());
    clock.advance(1h);
    CHECK(limiter.tryAcquire("big", 5).never());
    CHECK(metrics.counts("api").retriedEarly == 3);
}

TEST_CASE("Top offenders: 10 heavy keys among a million light ones, within the bound",
          "[metrics][offenders]") {
    RefusalSummaryOptions o;
    o.counters = 1024;
    RefusalSummary summary(o);
    constexpr int kHeavy = 10;
    constexpr int kLight = 1'000'000;
    constexpr int kHeavyEach = 5'000;  // heavy key h is refused kHeavyEach + 100 h times
    std::vector<std::int64_t> heavyTruth(kHeavy, 0);
    std::chrono::nanoseconds now = 1h;
    int light = 0;
    // Interleaved: every 20 light keys, one round of refusals of the heavy ones.
    for (int round = 0; light < kLight; ++round) {
        for (int i = 0; i < 20 && light < kLight; ++i, ++light) {
            summary.add("light-" + std::to_string(light), now);
        }
        for (int h = 0; h < kHeavy; ++h) {
            if (round < kHeavyEach + 100 * h) {
                summary.add("heavy-" + std::to_string(h), now);
                ++heavyTruth[static_cast<std::size_t>(h)];
            }
        }
        now += 1us;  // the whole flood within one span of the window
    }
    const ratelimit::TopOffenders top = summary.top(10, now);
    REQUIRE(top.offenders.size() == 10);
    std::int64_t total = kLight;
    for (const std::int64_t t : heavyTruth) {
        total += t;
    }
    CHECK(top.refusals == total);
    // The stated bound: at most the refusals divided by the counters.
    CHECK(top.maxError <= total / static_cast<std::int64_t>(o.counters));
    std::set<std::string> found;
    for (const ratelimit::Offender& offender : top.offenders) {
        INFO(offender.key);
        REQUIRE(offender.key.rfind("heavy-", 0) == 0);
        const std::int64_t truth = heavyTruth[std::stoul(offender.key.substr(6))];
        CHECK(offender.guaranteed <= truth);
        CHECK(offender.count >= truth);
        CHECK(offender.count <= truth + top.maxError);
        found.insert(offender.key);
    }
    CHECK(found.size() == 10);
    // Heaviest first: heavy-9 was refused most.
    CHECK(top.offenders.front().key == "heavy-9");
    // Fixed memory: a million keys, and the summary holds its counters and no more.
    CHECK(summary.top(kLight, now).offenders.size() <= o.counters);
}

TEST_CASE("Top offenders: every key's count within the bound, on random skewed streams",
          "[metrics][offenders]") {
    // Few counters and many keys: most refusals replace the least counter, so the index of
    // counters by digest is emptied and refilled all the time. Every key, counted or not, must
    // keep guaranteed <= truth <= count <= truth + maxError, and the counts must sum to the
    // refusals (Space-Saving's invariant), or a key was lost or counted twice.
    const std::uint64_t seed = GENERATE(1U, 2U, 3U, 4U);
    std::mt19937_64 random(seed);
    RefusalSummaryOptions o;
    o.counters = 16;
    o.spans = 1;
    RefusalSummary summary(o);
    constexpr int kKeys = 200;
    constexpr int kRefusals = 20'000;
    std::vector<std::int64_t> truth(kKeys, 0);
    for (int i = 0; i < kRefusals; ++i) {
        // Skewed: key k about twice as likely as key 2k.
        const auto k = static_cast<std::size_t>(
            std::min<std::uint64_t>(kKeys - 1, kKeys / (1 + random() % kKeys)));
        summary.add("k" + std::to_string(k), 1s);
        ++truth[k];
    }
    const ratelimit::TopOffenders top = summary.top(kKeys, 1s);
    CHECK(top.refusals == kRefusals);
    CHECK(top.maxError <= kRefusals / 16);
    std::int64_t counted = 0;
    for (const ratelimit::Offender& offender : top.offenders) {
        counted += offender.count;
    }
    CHECK(counted == kRefusals);
    CHECK(top.offenders.size() == 16);
    for (std::size_t k = 0; k < kKeys; ++k) {
        const std::uint64_t id = RefusalSummary::keyId("k" + std::to_string(k));
        const auto [count, guaranteed] = summary.bounds(id, 1s);
        INFO("key " << k << " truth " << truth[k] << " count " << count << " guaranteed "
                    << guaranteed);
        CHECK(guaranteed <= truth[k]);
        CHECK(truth[k] <= count);
        CHECK(count <= truth[k] + top.maxError);
    }
}

TEST_CASE("Top offenders slide with the window, a span at a time", "[metrics][offenders]") {
    RefusalSummaryOptions o;
    o.window = 60s;
    o.spans = 6;  // 10 s each
    RefusalSummary summary(o);
    std::chrono::nanoseconds now = 1000s;  // a span's start
    for (int i = 0; i < 5; ++i) {
        summary.add("early", now);
    }
    now += 30s;
    summary.add("late", now);
    CHECK(summary.top(5, now).offenders.size() == 2);
    CHECK(summary.top(5, now).offenders[0].count == 5);
    CHECK(summary.top(5, now).maxError == 0);  // no span was full
    // 59 s after "early": its span is still the window's oldest.
    CHECK(summary.top(5, 1059s).offenders.size() == 2);
    // 60 s after: the window slid past it.
    const auto later = summary.top(5, 1060s);
    REQUIRE(later.offenders.size() == 1);
    CHECK(later.offenders[0].key == "late");
    CHECK(later.refusals == 1);
    CHECK(summary.top(5, 1100s).offenders.empty());
    // A long key is shown cut, and counted by all of its bytes.
    const std::string longKey(300, 'x');
    summary.add(longKey, 2000s);
    summary.add(longKey + "y", 2000s);
    const auto cut = summary.top(5, 2000s);
    REQUIRE(cut.offenders.size() == 2);
    CHECK(cut.offenders[0].key.size() == o.maxKeyBytes);
    CHECK(cut.offenders[0].truncated);
    CHECK(cut.offenders[0].count == 1);
}

TEST_CASE("Attack alerts fire once when a key crosses the threshold and once when it falls back",
          "[metrics][alerts]") {
    ManualClock clock;
    clock.set(1000s);
    std::vector<std::string> alerts;
    DecisionMetricsOptions o = onClock(clock);
    o.onAlert = [&](const AttackAlert& a) {
        alerts.push_back(std::string(a.policy) + ":" + std::string(a.key) + ":" +
                         (a.started ? "start:" : "end:") + std::to_string(a.refusals));
    };
    DecisionMetrics metrics(o);
    Bucket limiter(Limit::perMinute(10), MemoryStorage{}, clock, withListener(metrics, "login"));
    for (int i = 0; i < 10; ++i) {
        CHECK(limiter.tryAcquire("attacker").allowed);
    }
    for (int i = 0; i < 99; ++i) {
        CHECK_FALSE(limiter.tryAcquire("attacker").allowed);
    }
    CHECK(alerts.empty());  // 99 refusals: below the default 100
    for (int i = 0; i < 500; ++i) {
        (void)limiter.tryAcquire("attacker");
        (void)limiter.tryAcquire("bystander", 11);  // never passes: refused, but rarely
        clock.advance(10ms);
    }
    REQUIRE(alerts.size() == 2);  // the attacker once, and the bystander's 100th refusal
    CHECK(alerts[0] == "login:attacker:start:100");
    CHECK(alerts[1] == "login:bystander:start:100");
    CHECK(metrics.report()[0].alerting.size() == 2);

    // Quiet for a window: both end, once, seen at the next refusal or report.
    clock.advance(61s);
    CHECK(metrics.report()[0].alerting.empty());
    REQUIRE(alerts.size() == 4);
    CHECK(alerts[2].find(":end:0") != std::string::npos);
    CHECK(alerts[3].find(":end:0") != std::string::npos);
    (void)metrics.report();
    CHECK(alerts.size() == 4);

    // A new episode starts a new alert.
    for (int i = 0; i < 120; ++i) {
        (void)limiter.tryAcquire("attacker", 11);
    }
    REQUIRE(alerts.size() == 5);
    CHECK(alerts[4] == "login:attacker:start:100");
}

TEST_CASE("A penalty's start is heard once per block", "[metrics][penalty]") {
    ManualClock clock;
    DecisionMetrics metrics(onClock(clock));
    ratelimit::Limiter<ratelimit::PenalizedModel<ratelimit::FixedWindowModel>, MemoryStorage,
                       ManualClock>
        login({Limit::perMinute(2), ratelimit::Penalty{3, 15min, 15min}}, MemoryStorage{}, clock,
              withListener(metrics, "login"));
    for (int i = 0; i < 20; ++i) {  // 2 admitted, then 3 strikes block it, then refusals
        (void)login.tryAcquire("mallory");
    }
    CHECK(metrics.counts("login").penaltiesStarted == 1);
    CHECK(metrics.counts("login").refused == 18);
    clock.advance(15min);
    for (int i = 0; i < 5; ++i) {
        (void)login.tryAcquire("mallory");
    }
    CHECK(metrics.counts("login").penaltiesStarted == 2);
}

TEST_CASE("Store health follows the store's events", "[metrics]") {
    DecisionMetrics metrics;
    CHECK(metrics.storeHealth().healthy);
    metrics.onStoreEvent({ratelimit::StoreEvent::Health::kFailing,
                          ratelimit::StoreError::kUnreachable, "connection refused"});
    metrics.onStoreEvent(
        {ratelimit::StoreEvent::Health::kFailing, ratelimit::StoreError::kTimeout, "timeout"});
    CHECK_FALSE(metrics.storeHealth().healthy);
    CHECK(metrics.storeHealth().failingEpisodes == 1);
    CHECK(metrics.storeHealth().lastError == "timeout");
    metrics.onStoreEvent({ratelimit::StoreEvent::Health::kHealthy, {}, ""});
    CHECK(metrics.storeHealth().healthy);
    metrics.onMemoryEvent(ratelimit::MemoryEvent::kSpillStarted, "api");
    CHECK(metrics.storeHealth().spilling == std::vector<std::string>{"api"});
    metrics.onMemoryEvent(ratelimit::MemoryEvent::kSpillEnded, "api");
    CHECK(metrics.storeHealth().spilling.empty());
}

TEST_CASE("A listener hears its limiters' memory storage spill, once per change, while they live",
          "[metrics][listener]") {
    // docs/semantics.md, "Listeners": the store's health reaches the listener of every limiter
    // using it, once per change however many of its limiters share the store.
    using ratelimit::MemoryEvent;
    using Window = ratelimit::FixedWindow<MemoryStorage, ManualClock>;
    using Spill = std::pair<MemoryEvent, std::string>;
    Recorder recorder;
    DecisionMetrics metrics;
    ManualClock clock;
    const MemoryStorage storage{{.maxKeys = 4, .seed = 3}};
    const auto fill = [](auto& limiter, int keys) {
        for (int i = 0; i < keys; ++i) {
            (void)limiter.tryAcquire("k" + std::to_string(i));
        }
    };
    {
        Bucket a(Limit::perMinute(1), storage, clock, withListener(recorder, "a"));
        const Bucket twinOfA(Limit::perMinute(1), storage, clock, withListener(recorder, "a"));
        const Bucket copyOfA = a;
        Window b(Limit::perMinute(1), storage, clock, withListener(recorder, "b"));
        Window watched(Limit::perMinute(1), storage, clock, withListener(metrics, "watched"));
        fill(a, 5);  // the fifth key spills
        fill(a, 6);
        fill(b, 5);
        CHECK(recorder.spills == std::vector<Spill>{{MemoryEvent::kSpillStarted, "a"},
                                                    {MemoryEvent::kSpillStarted, "b"}});
        // The ready listener keeps it with no hook wired: every table of the storage its
        // limiter uses (a's and b's too).
        CHECK(metrics.storeHealth().spilling == std::vector<std::string>{"a", "b"});
        fill(watched, 5);
        CHECK(metrics.storeHealth().spilling == std::vector<std::string>{"a", "b", "watched"});
        CHECK(recorder.spills.size() == 3);
    }
    // Its limiters (and their copies) are gone: it hears this storage no more.
    Window c(Limit::perMinute(1), storage, clock, LimiterOptions{.name = "c"});
    fill(c, 5);
    CHECK(recorder.spills.size() == 3);
}

TEST_CASE("Bad metrics options throw naming the field", "[metrics][validation]") {
    const auto fails = [](auto change, const std::string& field) {
        DecisionMetricsOptions o;
        change(o);
        try {
            DecisionMetrics metrics(o);
            FAIL("accepted " + field);
        } catch (const std::invalid_argument& e) {
            INFO(e.what());
            CHECK(std::string(e.what()).find(field) != std::string::npos);
        }
    };
    fails([](DecisionMetricsOptions& o) { o.offenders.window = 0s; },
          "DecisionMetricsOptions.offenders.window");
    fails([](DecisionMetricsOptions& o) { o.offenders.spans = 0; },
          "DecisionMetricsOptions.offenders.spans");
    fails([](DecisionMetricsOptions& o) { o.offenders.counters = 2; },
          "DecisionMetricsOptions.offenders.counters");
    fails([](DecisionMetricsOptions& o) { o.offenders.maxKeyBytes = 0; },
          "DecisionMetricsOptions.offenders.maxKeyBytes");
    fails([](DecisionMetricsOptions& o) { o.earlyRetrySlots = 0; },
          "DecisionMetricsOptions.earlyRetrySlots");
    fails([](DecisionMetricsOptions& o) { o.alertThreshold = -1; },
          "DecisionMetricsOptions.alertThreshold");
    fails([](DecisionMetricsOptions& o) { o.maxAlerting = 0; },
          "DecisionMetricsOptions.maxAlerting");
    CHECK_THROWS_AS(RefusalSummary(RefusalSummaryOptions{.window = 1s, .spans = 61}),
                    std::invalid_argument);
}

}  // namespace ratelimit_test
