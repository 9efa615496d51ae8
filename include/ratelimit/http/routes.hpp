#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/algorithms/algorithm.hpp>
#include <ratelimit/detail/ascii.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/limit.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// The path of a request target: the query and fragment cut off, an absolute-form target
/// reduced to its path.
[[nodiscard]] inline std::string_view targetPath(std::string_view target) {
    if (const std::size_t cut = target.find_first_of("?#"); cut != std::string_view::npos) {
        target = target.substr(0, cut);
    }
    if (const std::size_t scheme = target.find("://");
        scheme != std::string_view::npos && target.find('/') > scheme) {
        const std::size_t path = target.find('/', scheme + 3);
        target = path == std::string_view::npos ? std::string_view{} : target.substr(path);
    }
    return target;
}

/// How a server may read a request path: the three choices on which servers differ. The
/// default is `normalizePath`'s reading.
struct PathReading {
    /// `.` and `..` applied (RFC 3986 section 5.2.4), or kept as names (cpp-httplib and other
    /// routers that match the path as received).
    bool resolveDots = true;
    /// `%2F` separates segments like `/`, or is a character of its segment.
    bool encodedSlashSeparates = true;
    /// `;` and what follows it cut off every segment (servlet containers' path parameters), or
    /// kept.
    bool cutParameters = false;
};

/// Every well-formed `%XX` decoded once (`%2F` only when `decodeSlash`, otherwise written
/// `%2F`); a malformed one kept as it is.
[[nodiscard]] inline std::string percentDecoded(std::string_view path, bool decodeSlash = true) {
    constexpr int kRadix = 16;
    std::string decoded;
    decoded.reserve(path.size());
    for (std::size_t i = 0; i < path.size(); ++i) {
        if (path[i] == '%' && i + 2 < path.size() && ascii::hexValue(path[i + 1]) >= 0 &&
            ascii::hexValue(path[i + 2]) >= 0) {
            const char c = static_cast<char>(ascii::hexValue(path[i + 1]) * kRadix +
                                             ascii::hexValue(path[i + 2]));
            decoded.append(c == '/' && !decodeSlash ? std::string_view("%2F")
                                                    : std::string_view(&c, 1));
            i += 2;
        } else {
            decoded.push_back(path[i]);
        }
    }
    return decoded;
}

/// `path` as a server reading it `reading` would: decoded once, empty segments dropped, joined
/// by `/` after a leading `/`, no trailing slash (`/` when no segment is left; `..` never climbs
/// above the root).
[[nodiscard]] inline std::string readPath(std::string_view path, PathReading reading) {
    const std::string decoded = percentDecoded(path, reading.encodedSlashSeparates);
    std::vector<std::string_view> segments;
    for (std::size_t start = 0; start <= decoded.size();) {
        const std::size_t end = std::min(decoded.find('/', start), decoded.size());
        std::string_view segment = std::string_view(decoded).substr(start, end - start);
        start = end + 1;
        if (reading.cutParameters) {
            segment = segment.substr(0, segment.find(';'));
        }
        if (segment.empty() || (reading.resolveDots && segment == ".")) {
            continue;
        }
        if (reading.resolveDots && segment == "..") {
            if (!segments.empty()) {
                segments.pop_back();
            }
            continue;
        }
        segments.push_back(segment);
    }
    std::string out;
    out.reserve(decoded.size() + 1);
    for (const std::string_view segment : segments) {
        out.push_back('/');
        out.append(segment);
    }
    return out.empty() ? std::string("/") : out;
}

/// Whether every `PathReading` reads `path` alike: only a `%`, a `;` or a segment that starts
/// with `.` can make them differ.
[[nodiscard]] constexpr bool readsAlike(std::string_view path) noexcept {
    return path.find_first_of("%;") == std::string_view::npos && !path.starts_with('.') &&
           path.find("/.") == std::string_view::npos;
}

}  // namespace detail

namespace http {

/// The path of a request target as a rule sees it, so that spellings a server treats alike
/// cannot slip past a rule: the query and fragment cut off, an absolute-form target reduced to
/// its path, every `%XX` decoded once (`%2F` included: a router that decodes it must not see a
/// path the rules did not), empty and `.` segments dropped, `..` applied (never above the
/// root), no trailing slash. `//login`, `/login/`, `/./login`, `/x/../login` and `/%6cogin` are
/// all `/login`. `pathReadings` gives the paths other servers may read. Never throws on
/// hostile input (only `std::bad_alloc`).
[[nodiscard]] inline std::string normalizePath(std::string_view target) {
    return detail::readPath(detail::targetPath(target), {});
}

/// Every path a server may read `target` as: `normalizePath(target)` first, then, without
/// repeats, the paths of servers that keep dot segments as names (cpp-httplib does), keep a
/// `%2F` inside its segment or cut `;` parameters off segments, in every combination. One
/// path when they all agree, as they do for every path without a `%`, a `;` or a segment
/// starting with `.`. Never throws on hostile input (only `std::bad_alloc`).
[[nodiscard]] inline std::vector<std::string> pathReadings(std::string_view target) {
    const std::string_view path = detail::targetPath(target);
    std::vector<std::string> paths{detail::readPath(path, {})};
    if (detail::readsAlike(path)) {
        return paths;
    }
    for (const bool resolveDots : {true, false}) {
        for (const bool encodedSlashSeparates : {true, false}) {
            for (const bool cutParameters : {false, true}) {
                std::string p =
                    detail::readPath(path, {resolveDots, encodedSlashSeparates, cutParameters});
                if (std::find(paths.begin(), paths.end(), p) == paths.end()) {
                    paths.push_back(std::move(p));
                }
            }
        }
    }
    return paths;
}

/// Which identity of a request a rule counts (`RouteRule::counts`, `counts=` in a rule file).
/// Each identity has its own keys (`ip4:`, `ip6:`, `hop:` or `peer:` for an address, `user:` for
/// a principal; see `ClientKey::key`), so an address and a principal spelled alike never share
/// a count, even in one limiter.
enum class Counts {
    /// The client as `ClientIdentity::identify` keys it: the verified principal when there is
    /// one, else the address. The default.
    kClient,
    /// The client's address (its IPv6 network, or its hop's or peer's text when not an
    /// address), even when a principal is verified: a limit per address that logging in does
    /// not lift.
    kAddress,
    /// The verified principal only. A request without one is not counted by the rule, and so
    /// never refused by it (its set's other rules still count it).
    kPrincipal,
};

/// One rule: requests whose method and path match are limited by `limit` under the policy
/// `name`, per client (or per address, or per principal: `counts`). Rules of the same method,
/// path prefix and tier form one set, and a request is checked against every rule of its set.
struct RouteRule {
    /// An HTTP method (`GET`, `POST`, …, compared without case; `GET` also matches `HEAD`,
    /// which servers answer with the GET handler) or `*` for any.
    std::string method = "*";
    /// A path prefix, matched on whole segments after `normalizePath` (`/api` matches `/api`
    /// and `/api/x`, not `/apix`).
    std::string pathPrefix = "/";
    /// The limit, and the algorithm that enforces it.
    Limit limit = Limit::perMinute(60);
    Algorithm algorithm = Algorithm::kTokenBucket;
    /// The policy name (response fields, limiter namespace): 1…64 of `A-Z a-z 0-9 _ - .`.
    /// Rules with the same name and tier share one limiter (and must agree on its limit,
    /// algorithm and mode), across routes too; within one set the names are distinct.
    std::string name = "default";
    /// Empty: any client. Otherwise only requests whose authenticated tier is this one; a
    /// tier's rule wins over the tierless rule of the same prefix.
    std::string tier;
    /// The cost of one request. 0 … limit.
    std::int64_t cost = 1;
    /// Dry-run: the rule's limiter admits every request and reports what it would have
    /// refused (`LimiterOptions::dryRun`), so a new rule can be watched before it is enforced.
    /// In a set it never refuses the request nor makes the others give back what they took.
    bool dryRun = false;
    /// The identity the rule counts. Default `Counts::kClient`.
    Counts counts = Counts::kClient;
};

/// Rules matched by method and path prefix: the longest matching prefix wins, then a rule of
/// the request's tier over a tierless one, then an exact method over `*`. Rules with the same
/// method, path prefix and tier form one set (`setOf`), matched as one: a request is checked
/// against every rule of its set, all or nothing (`RouteLimiter::check`).
///
/// Thread safety: thread-compatible; `match` is const and may be called concurrently.
class RouteTable {
public:
    RouteTable() = default;

    /// Adds a rule (its method upper-cased, its prefix normalised), to the set of the rules
    /// with its method, prefix and tier when there is one. Throws: `std::invalid_argument`
    /// naming the field (`RouteRule.name`, `.method`, `.pathPrefix`, `.tier`, `.cost`, or the
    /// `Limit`'s), prefixed by `where`; also when another rule of its name and tier has another
    /// limit, algorithm or mode (they share one limiter), or when its set already has a rule of
    /// its name.
    void add(RouteRule rule, std::string_view where = "RouteRule") {
        const auto fail = [where](const std::string& what) {
            detail::throwInvalidArgument(std::string(where).append(": ").append(what));
        };
        const auto token = [](std::string_view s, std::size_t max) {
            return !s.empty() && s.size() <= max && std::all_of(s.begin(), s.end(), isTokenChar);
        };
        if (!token(rule.name, kMaxName)) {
            fail("RouteRule.name must be 1..64 of A-Z a-z 0-9 _ - . (got '" + rule.name + "')");
        }
        if (!rule.tier.empty() && !token(rule.tier, kMaxName)) {
            fail("RouteRule.tier must be empty or 1..64 of A-Z a-z 0-9 _ - . (got '" + rule.tier +
                 "')");
        }
        rule.method = detail::ascii::upperCase(rule.method);
        if (rule.method != "*" && !token(rule.method, kMaxMethod)) {
            fail("RouteRule.method must be * or a method name (got '" + rule.method + "')");
        }
        if (rule.pathPrefix.empty() || rule.pathPrefix.front() != '/') {
            fail("RouteRule.pathPrefix must start with '/' (got '" + rule.pathPrefix + "')");
        }
        rule.pathPrefix = normalizePath(rule.pathPrefix);
        rule.limit.validate();
        const std::int64_t most = capacity(rule.algorithm, rule.limit);
        if (rule.cost < 0 || rule.cost > most) {
            fail(detail::formatted("RouteRule.cost must be in 0..{} (got {})", {most, rule.cost}));
        }
        const std::size_t set = setFor(rule);
        if (set < sets_.size()) {
            for (const std::size_t member : sets_[set]) {
                if (rules_[member].name == rule.name) {
                    fail("RouteRule.name '" + rule.name + "' is already a rule of the set " +
                         rule.method + " " + rule.pathPrefix +
                         (rule.tier.empty() ? std::string() : " (tier " + rule.tier + ")") +
                         "; the rules of a set need distinct names");
                }
            }
        }
        if (conflictsWithOthers(rule)) {
            fail("rules named '" + rule.name + "'" +
                 (rule.tier.empty() ? std::string() : " (tier " + rule.tier + ")") +
                 " share one limiter, so they must have the same limit, algorithm and mode");
        }
        // Reserved first, so that a throwing allocation leaves the table as it was.
        rules_.reserve(rules_.size() + 1);
        setOfRule_.reserve(setOfRule_.size() + 1);
        if (set == sets_.size()) {
            sets_.emplace_back();
        }
        sets_[set].push_back(rules_.size());
        setOfRule_.push_back(set);
        rules_.push_back(std::move(rule));
    }

    /// The rule for a request (the first rule of its set), or nullptr. `target` is the raw
    /// request target (normalised here);
    /// `tier` the authenticated tier (empty: none). This reads the target one way only;
    /// `RouteLimiter::check` also refuses a target that other readings take to another route.
    [[nodiscard]] const RouteRule* match(std::string_view method, std::string_view target,
                                         std::string_view tier = {}) const {
        return matchNormalized(method, normalizePath(target), tier);
    }

    /// `match` for a path already passed through `normalizePath`.
    [[nodiscard]] const RouteRule* matchNormalized(std::string_view method, std::string_view path,
                                                   std::string_view tier = {}) const {
        const std::string m = detail::ascii::upperCase(method.substr(0, kMaxMethod));
        const RouteRule* best = nullptr;
        int bestScore = -1;
        for (const RouteRule& r : rules_) {
            const bool methodOk =
                r.method == "*" || r.method == m || (r.method == "GET" && m == "HEAD");
            if (!methodOk || (!r.tier.empty() && r.tier != tier) ||
                !underPrefix(path, r.pathPrefix)) {
                continue;
            }
            const int score = static_cast<int>(r.pathPrefix.size()) * 4 + (r.tier.empty() ? 0 : 2) +
                              (r.method == "*" ? 0 : 1);
            if (score > bestScore) {
                best = &r;
                bestScore = score;
            }
        }
        return best;
    }

    /// The set of `rule`: the indices in `rules()` of the rules with its method, path prefix and
    /// tier (itself among them), in the order they were added.
    /// Preconditions: `rule` is an element of `rules()`. Complexity: constant.
    [[nodiscard]] std::span<const std::size_t> setOf(const RouteRule& rule) const noexcept {
        return sets_[setOfRule_[static_cast<std::size_t>(&rule - rules_.data())]];
    }

    [[nodiscard]] const std::vector<RouteRule>& rules() const noexcept { return rules_; }
    [[nodiscard]] bool empty() const noexcept { return rules_.empty(); }

    /// Reads the rule file format (docs/http.md, "Rule file"): one rule per line,
    ///
    ///     <METHOD|*> <path-prefix> <limit> [name=<policy>] [algorithm=<name>] [burst=<n>]
    ///                                      [tier=<tier>] [cost=<n>] [mode=enforce|dry-run]
    ///                                      [counts=client|address|principal]
    ///
    /// `<limit>` in `Limit::parse` syntax without spaces (`5/min`, `1000/h`, `10/90s`); `#`
    /// starts a comment; blank lines are ignored. `name` defaults to the path prefix's first
    /// segment (`/login` → `login`; `/` → `root`). Lines with the same method, prefix and tier
    /// form one set, whose rules need distinct names.
    /// Throws: `std::invalid_argument` with `source:line:` and what is wrong.
    [[nodiscard]] static RouteTable parse(std::string_view text,
                                          std::string_view source = "rules") {
        RouteTable table;
        std::size_t lineNumber = 0;
        std::size_t pos = 0;
        while (pos < text.size()) {
            std::size_t end = text.find('\n', pos);
            if (end == std::string_view::npos) {
                end = text.size();
            }
            std::string_view line = text.substr(pos, end - pos);
            pos = end + 1;
            ++lineNumber;
            if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
                line = line.substr(0, hash);
            }
            const std::vector<std::string_view> words = splitWords(line);
            if (!words.empty()) {
                const std::string where = std::string(source) + ":" + std::to_string(lineNumber);
                table.add(parseRule(words, where), where);
            }
        }
        return table;
    }

    /// `parse` of the file at `path`. Throws: `std::invalid_argument` when it cannot be read.
    [[nodiscard]] static RouteTable load(const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            detail::throwInvalidArgument("cannot read the rule file '" + path + "'");
        }
        std::ostringstream text;
        text << in.rdbuf();
        return parse(text.str(), path);
    }

private:
    static constexpr std::size_t kMaxName = 64;
    static constexpr std::size_t kMaxMethod = 32;
    static constexpr std::size_t kMaxDigits = 15;
    static constexpr std::int64_t kMaxNumber = 999'999'999'999'999;

    /// Words of a rule line are separated by blanks (a CR of a CRLF file included).
    static bool isSpace(char c) noexcept { return detail::ascii::isBlank(c) || c == '\r'; }

    /// Policy names and tiers: what every response field and key layout can carry as is.
    static bool isTokenChar(char c) noexcept {
        return detail::ascii::isAlnum(c) || c == '_' || c == '-' || c == '.';
    }

    /// The index in `sets_` of the set `rule` (method and prefix already normalised) belongs to;
    /// `sets_.size()` when it starts a new one.
    [[nodiscard]] std::size_t setFor(const RouteRule& rule) const noexcept {
        for (std::size_t i = 0; i < sets_.size(); ++i) {
            const RouteRule& first = rules_[sets_[i].front()];
            if (first.method == rule.method && first.pathPrefix == rule.pathPrefix &&
                first.tier == rule.tier) {
                return i;
            }
        }
        return sets_.size();
    }

    /// Whether another rule of the same name and tier (one limiter) has another limit, algorithm
    /// or mode.
    [[nodiscard]] bool conflictsWithOthers(const RouteRule& rule) const {
        return std::any_of(rules_.begin(), rules_.end(), [&rule](const RouteRule& other) {
            return other.name == rule.name && other.tier == rule.tier &&
                   (other.limit != rule.limit || other.algorithm != rule.algorithm ||
                    other.dryRun != rule.dryRun);
        });
    }

    static std::vector<std::string_view> splitWords(std::string_view line) {
        std::vector<std::string_view> words;
        std::size_t i = 0;
        while (i < line.size()) {
            while (i < line.size() && isSpace(line[i])) {
                ++i;
            }
            const std::size_t startWord = i;
            while (i < line.size() && !isSpace(line[i])) {
                ++i;
            }
            if (i > startWord) {
                words.push_back(line.substr(startWord, i - startWord));
            }
        }
        return words;
    }

    /// One line of the rule file, split into words. Throws: `std::invalid_argument` with
    /// `where` and what is wrong.
    static RouteRule parseRule(const std::vector<std::string_view>& words,
                               const std::string& where) {
        const auto fail = [&where](const std::string& what) {
            detail::throwInvalidArgument(where + ": " + what);
        };
        if (words.size() < 3) {
            fail("expected '<METHOD|*> <path-prefix> <limit> [option=value ...]'");
        }
        RouteRule rule;
        rule.method = std::string(words[0]);
        rule.pathPrefix = std::string(words[1]);
        std::string limitText(words[2]);
        std::optional<std::string> name;
        for (std::size_t w = 3; w < words.size(); ++w) {
            applyOption(words[w], rule, name, limitText, where);
        }
        try {
            rule.limit = Limit::parse(limitText);
        } catch (const std::invalid_argument& e) {
            fail(e.what());
        }
        rule.name = name ? *name : defaultName(rule.pathPrefix);
        return rule;
    }

    /// One `key=value` option of a rule line.
    static void applyOption(std::string_view option, RouteRule& rule,
                            std::optional<std::string>& name, std::string& limitText,
                            const std::string& where) {
        const auto fail = [&where](const std::string& what) {
            detail::throwInvalidArgument(where + ": " + what);
        };
        const std::size_t eq = option.find('=');
        if (eq == std::string_view::npos || eq == 0 || eq + 1 == option.size()) {
            fail(std::string("expected option=value, got '").append(option).append("'"));
        }
        const std::string_view key = option.substr(0, eq);
        const std::string_view value = option.substr(eq + 1);
        if (key == "name") {
            name = std::string(value);
        } else if (key == "tier") {
            rule.tier = std::string(value);
        } else if (key == "algorithm") {
            const std::optional<Algorithm> a = parseAlgorithm(value);
            if (!a) {
                fail(std::string("unknown algorithm '")
                         .append(value)
                         .append("' (fixed_window, sliding_log, sliding_counter, token_bucket, "
                                 "leaky_bucket, gcra)"));
            }
            rule.algorithm = *a;
        } else if (key == "burst") {
            limitText.append(" burst ").append(value);
        } else if (key == "cost") {
            rule.cost = number(value, where + ": cost");
        } else if (key == "mode") {
            if (value != "enforce" && value != "dry-run") {
                fail(std::string("unknown mode '").append(value).append("' (enforce, dry-run)"));
            }
            rule.dryRun = value == "dry-run";
        } else if (key == "counts") {
            if (value == "client") {
                rule.counts = Counts::kClient;
            } else if (value == "address") {
                rule.counts = Counts::kAddress;
            } else if (value == "principal") {
                rule.counts = Counts::kPrincipal;
            } else {
                fail(std::string("unknown counts '")
                         .append(value)
                         .append("' (client, address, principal)"));
            }
        } else {
            fail(std::string("unknown option '")
                     .append(key)
                     .append("' (name, algorithm, burst, tier, cost, mode, counts)"));
        }
    }

    static bool underPrefix(std::string_view path, std::string_view prefix) noexcept {
        if (prefix == "/") {
            return true;
        }
        return path.substr(0, prefix.size()) == prefix &&
               (path.size() == prefix.size() || path[prefix.size()] == '/');
    }

    static std::int64_t number(std::string_view s, const std::string& what) {
        const std::int64_t v = detail::ascii::decimalValue(s, kMaxNumber);
        if (v < 0 || s.size() > kMaxDigits) {
            detail::throwInvalidArgument(what + " must be a whole number (got '" + std::string(s) +
                                         "')");
        }
        return v;
    }

    static std::string defaultName(std::string_view prefix) {
        const std::string path = normalizePath(prefix);
        const std::size_t end = path.find('/', 1);
        std::string first = path.substr(1, end == std::string::npos ? std::string::npos : end - 1);
        for (char& c : first) {
            c = isTokenChar(c) ? c : '_';
        }
        if (first.size() > kMaxName) {
            first.resize(kMaxName);
        }
        return first.empty() ? std::string("root") : first;
    }

    std::vector<RouteRule> rules_;
    /// Each set's rules, as indices into `rules_`, in the order added.
    std::vector<std::vector<std::size_t>> sets_;
    /// The set of each rule of `rules_`, as an index into `sets_`.
    std::vector<std::size_t> setOfRule_;
};

}  // namespace http
}  // namespace v1
}  // namespace ratelimit
