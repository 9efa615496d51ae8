// Tests of include/ratelimit/http/client_key.hpp: who the client is behind zero, one or several
// proxies; spoofed headers from untrusted peers; RFC 7239 Forwarded; IPv6 grouping; garbage.

#include <array>
#include <cstddef>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/http/client_key.hpp>

#include "support/catch.hpp"
#include "support/forwarded_junk.hpp"

namespace {

using ratelimit::http::ClientIdentity;
using ratelimit::http::ClientIdentityOptions;
using ratelimit::http::ClientKey;
using ratelimit::http::ForwardedHeader;
using ratelimit::http::IpAddress;
using ratelimit::http::parseNodeAddress;
using ratelimit_test::withJunkOnTheLeft;

ClientIdentity behindProxies(ForwardedHeader header) {
    ClientIdentityOptions o;
    o.forwardedHeader = header;
    o.trustedProxies = {"10.0.0.0/8", "fd00::/8"};
    return ClientIdentity{o};
}

std::string keyOf(const ClientIdentity& id, std::string_view peer,
                  std::vector<std::string_view> values) {
    return id.identify(peer, std::span<const std::string_view>(values)).key;
}

}  // namespace

TEST_CASE(
    "parseNodeAddress: ports, brackets, spaces; obfuscated and unknown nodes are not "
    "addresses",
    "[http][address]") {
    CHECK(parseNodeAddress("192.0.2.60") == IpAddress::v4(192, 0, 2, 60));
    CHECK(parseNodeAddress(" 192.0.2.60:8080\t") == IpAddress::v4(192, 0, 2, 60));
    CHECK(parseNodeAddress("[2001:db8:cafe::17]:4711") == IpAddress::parse("2001:db8:cafe::17"));
    CHECK(parseNodeAddress("[2001:db8:cafe::17]") == IpAddress::parse("2001:db8:cafe::17"));
    CHECK(parseNodeAddress("2001:db8:cafe::17") == IpAddress::parse("2001:db8:cafe::17"));
    for (const char* bad : {"unknown", "_hidden", "[1.2.3.4]", "1.2.3.4:", "1.2.3.4:123456", "[::1",
                            "[::1]x", "[::1]:", "", "   ", "1.2.3.4:80:80"}) {
        INFO(bad);
        CHECK_FALSE(parseNodeAddress(bad).has_value());
    }
}

TEST_CASE(
    "ClientIdentity: without a trusted header the peer is the client, whatever the "
    "request says",
    "[http][client]") {
    const ClientIdentity id;
    CHECK(keyOf(id, "203.0.113.9", {"1.1.1.1"}) == "ip4:203.0.113.9");
    CHECK(keyOf(id, "::ffff:203.0.113.9", {}) == "ip4:203.0.113.9");
    CHECK(keyOf(id, "64:ff9b::203.0.113.9", {}) == "ip4:203.0.113.9");
    CHECK(keyOf(id, "garbage", {}) == "peer:garbage");
    CHECK(id.headerName().empty());
}

TEST_CASE("ClientIdentity: X-Forwarded-For from an untrusted peer is ignored (spoofing)",
          "[http][client]") {
    const ClientIdentity id = behindProxies(ForwardedHeader::kXForwardedFor);
    CHECK(std::string(id.headerName()) == "X-Forwarded-For");
    CHECK(keyOf(id, "198.51.100.7", {"1.2.3.4"}) == "ip4:198.51.100.7");
    CHECK(keyOf(id, "198.51.100.7", {"10.0.0.1"}) == "ip4:198.51.100.7");
}

TEST_CASE("ClientIdentity: X-Forwarded-For through trusted proxies is walked right to left",
          "[http][client]") {
    const ClientIdentity id = behindProxies(ForwardedHeader::kXForwardedFor);
    // One proxy: the rightmost entry is the client.
    CHECK(keyOf(id, "10.0.0.2", {"203.0.113.5"}) == "ip4:203.0.113.5");
    // The client prepended a fake entry; the proxy appended the real peer.
    CHECK(keyOf(id, "10.0.0.2", {"1.1.1.1, 203.0.113.5"}) == "ip4:203.0.113.5");
    // A chain of trusted proxies, split over two field lines.
    CHECK(keyOf(id, "10.0.0.2", {"6.6.6.6, 203.0.113.5", "10.9.9.9,fd00::7"}) == "ip4:203.0.113.5");
    // Every hop trusted: the leftmost is as far as we can see.
    CHECK(keyOf(id, "10.0.0.2", {"10.1.1.1, 10.2.2.2"}) == "ip4:10.1.1.1");
    // Garbage left of the client is the client's own doing, never read.
    CHECK(keyOf(id, "10.0.0.2", {"<script>, 203.0.113.5"}) == "ip4:203.0.113.5");
    // Garbage where the client's hop should be is keyed as itself, not as the proxy.
    CHECK(keyOf(id, "10.0.0.2", {"203.0.113.5, nonsense"}) == "hop:nonsense");
    CHECK(keyOf(id, "10.0.0.2", {""}) == "ip4:10.0.0.2");
    CHECK(keyOf(id, "10.0.0.2", {",,,"}) == "ip4:10.0.0.2");
    CHECK(keyOf(id, "10.0.0.2", {"203.0.113.5:5555"}) == "ip4:203.0.113.5");
    CHECK(keyOf(id, "10.0.0.2", {"[2001:db8::1]:443"}) == "ip6:2001:db8::/56");
}

TEST_CASE("ClientIdentity: a hop count trusts that many proxies and no more", "[http][client]") {
    ClientIdentityOptions o;
    o.forwardedHeader = ForwardedHeader::kXForwardedFor;
    o.trustedHops = 2;
    const ClientIdentity id{o};
    CHECK(keyOf(id, "10.0.0.2", {"6.6.6.6, 203.0.113.5, 10.1.1.1"}) == "ip4:203.0.113.5");
    CHECK(keyOf(id, "10.0.0.2", {"203.0.113.5"}) == "ip4:203.0.113.5");  // short chain
    CHECK(keyOf(id, "10.0.0.2", {"junk, 10.1.1.1"}) == "hop:junk");
}

TEST_CASE("ClientIdentity: RFC 7239 Forwarded, quoted IPv6 with ports, obfuscated nodes",
          "[http][client]") {
    const ClientIdentity id = behindProxies(ForwardedHeader::kForwarded);
    CHECK(keyOf(id, "10.0.0.2", {"for=192.0.2.60;proto=http;by=203.0.113.43"}) == "ip4:192.0.2.60");
    CHECK(keyOf(id, "10.0.0.2", {R"(for="[2001:db8:cafe::17]:4711")"}) == "ip6:2001:db8:cafe::/56");
    CHECK(keyOf(id, "10.0.0.2", {"For=192.0.2.43, for=10.3.3.3"}) == "ip4:192.0.2.43");
    CHECK(keyOf(id, "10.0.0.2", {R"(for=1.1.1.1, for="192.0.2.43";by="x,y", for=10.3.3.3)"}) ==
          "ip4:192.0.2.43");
    // Obfuscated and unknown nodes, and malformed elements, are keyed as themselves.
    CHECK(keyOf(id, "10.0.0.2", {"for=unknown"}) == "hop:unknown");
    CHECK(keyOf(id, "10.0.0.2", {R"(for="_hidden", for=10.3.3.3)"}) == "hop:_hidden");
    CHECK(keyOf(id, "10.0.0.2", {"proto=https"}) == "hop:proto=https");  // no for=
    CHECK(keyOf(id, "10.0.0.2", {"for=1.2.3.4;for=5.6.7.8"}) == "hop:for=1.2.3.4;for=5.6.7.8");
    CHECK(keyOf(id, "10.0.0.2", {"for=1.2.3.4 5"}) == "hop:for=1.2.3.4 5");
    // A bare address is no element: it is not taken for a trusted proxy and walked past.
    CHECK(keyOf(id, "10.0.0.2", {"for=1.1.1.1, 10.3.3.3"}) == "hop:10.3.3.3");
    CHECK(keyOf(id, "198.51.100.1", {"for=192.0.2.60"}) == "ip4:198.51.100.1");
}

TEST_CASE("ClientIdentity: X-Real-IP takes one address from a trusted proxy", "[http][client]") {
    const ClientIdentity id = behindProxies(ForwardedHeader::kXRealIp);
    CHECK(keyOf(id, "10.0.0.2", {"203.0.113.5"}) == "ip4:203.0.113.5");
    // A client's own X-Real-IP, which the proxy added to instead of replacing, is never read.
    CHECK(keyOf(id, "10.0.0.2", {"203.0.113.5, 1.1.1.1"}) == "ip4:1.1.1.1");
    CHECK(keyOf(id, "10.0.0.2", {"203.0.113.5", "1.1.1.1"}) == "ip4:1.1.1.1");
    CHECK(keyOf(id, "8.8.8.8", {"203.0.113.5"}) == "ip4:8.8.8.8");
}

TEST_CASE("ClientIdentity: IPv6 clients are grouped by /56 with a /48 aggregate",
          "[http][client]") {
    const ClientIdentity id;
    const ClientKey a = id.identify("2001:db8:1:2ff:aaaa::1");
    const ClientKey b = id.identify("2001:db8:1:200::2%eth0");
    const ClientKey c = id.identify("2001:db8:1:300::1");
    CHECK(a.key == "ip6:2001:db8:1:200::/56");
    CHECK(a.key == b.key);
    CHECK(a.key != c.key);
    CHECK(a.aggregateKey == "ip6:2001:db8:1::/48");
    CHECK(a.aggregateKey == c.aggregateKey);
    CHECK(id.identify("192.0.2.1").aggregateKey.empty());

    ClientIdentityOptions o;
    o.ipv6Prefix = 64;
    o.ipv6AggregatePrefix = 0;
    const ClientKey d = ClientIdentity{o}.identify("2001:db8:1:2ff:aaaa::1");
    CHECK(d.key == "ip6:2001:db8:1:2ff::/64");
    CHECK(d.aggregateKey.empty());
}

TEST_CASE("ClientIdentity: an authenticated id replaces the address only when given",
          "[http][client]") {
    const ClientIdentity id;
    const ClientKey k = id.identify("192.0.2.1", std::string_view{}, std::string_view("u-42"));
    CHECK(k.key == "user:u-42");
    CHECK(k.authenticated);
    CHECK(k.address == IpAddress::v4(192, 0, 2, 1));
    CHECK_FALSE(id.identify("192.0.2.1").authenticated);
}

TEST_CASE("ClientIdentity: bad options throw naming the field", "[http][client]") {
    const auto make = [](auto change) {
        ClientIdentityOptions o;
        change(o);
        return ClientIdentity{o};
    };
    using Catch::Matchers::Contains;
    REQUIRE_THROWS_WITH(make([](auto& o) { o.ipv6Prefix = 0; }), Contains("ipv6Prefix"));
    REQUIRE_THROWS_WITH(make([](auto& o) { o.ipv6Prefix = 129; }), Contains("ipv6Prefix"));
    REQUIRE_THROWS_WITH(make([](auto& o) { o.ipv6AggregatePrefix = 60; }),
                        Contains("ipv6AggregatePrefix"));
    REQUIRE_THROWS_WITH(make([](auto& o) { o.trustedHops = -1; }), Contains("trustedHops"));
    REQUIRE_THROWS_WITH(make([](auto& o) { o.forwardedHeader = ForwardedHeader::kXRealIp; }),
                        Contains("forwardedHeader"));
    REQUIRE_THROWS_WITH(make([](auto& o) { o.trustedProxies = {"10.0.0.0/8"}; }),
                        Contains("forwardedHeader"));
    REQUIRE_THROWS_WITH(make([](auto& o) {
                            o.forwardedHeader = ForwardedHeader::kXForwardedFor;
                            o.trustedProxies = {"10.0.0.0/8"};
                            o.trustedHops = 1;
                        }),
                        Contains("both"));
    REQUIRE_THROWS_WITH(make([](auto& o) {
                            o.forwardedHeader = ForwardedHeader::kXForwardedFor;
                            o.trustedProxies = {"10.0.0.300"};
                        }),
                        Contains("trustedProxies") && Contains("10.0.0.300"));
}

TEST_CASE(
    "ClientIdentity: a stray quote left of the client's hop keeps it out of the proxy's bucket",
    "[http][client]") {
    const ClientIdentity xff = behindProxies(ForwardedHeader::kXForwardedFor);
    const ClientIdentity fwd = behindProxies(ForwardedHeader::kForwarded);
    for (const std::string x : {"", "x", "abc\"", "\\", "\"\""}) {
        INFO(x);
        const std::string xffValue = "\"" + x + ", 198.51.100.77";
        const std::string fwdValue = "for=\"" + x + ", for=198.51.100.77";
        CHECK(keyOf(xff, "10.0.0.2", {xffValue}) == "ip4:198.51.100.77");
        CHECK(keyOf(fwd, "10.0.0.2", {fwdValue}) == "ip4:198.51.100.77");
        CHECK(keyOf(xff, "10.0.0.2", {xffValue + ", 10.9.9.9"}) == "ip4:198.51.100.77");
        CHECK(keyOf(fwd, "10.0.0.2", {fwdValue + ";proto=https", "for=\"[fd00::1]:80\""}) ==
              "ip4:198.51.100.77");
    }
}

TEST_CASE(
    "ClientIdentity: a malformed hop where the client should be is keyed as itself, never as "
    "a trusted proxy; only an absent or empty header falls back to the peer",
    "[http][client]") {
    const ClientIdentity xff = behindProxies(ForwardedHeader::kXForwardedFor);
    const ClientIdentity fwd = behindProxies(ForwardedHeader::kForwarded);
    const ClientIdentity realIp = behindProxies(ForwardedHeader::kXRealIp);
    const std::vector<std::string_view> values{"203.0.113.5, nonsense"};
    const ClientKey k = xff.identify("10.0.0.2", std::span<const std::string_view>(values));
    CHECK(k.key == "hop:nonsense");
    CHECK_FALSE(k.address);
    CHECK_FALSE(k.fellBack);
    CHECK(keyOf(xff, "10.0.0.2", {"junk, 10.1.1.1"}) == "hop:junk");
    CHECK(keyOf(xff, "10.0.0.2", {"\"x"}) == "hop:\"x");
    CHECK(keyOf(fwd, "10.0.0.2", {"for=unknown, for=10.3.3.3"}) == "hop:unknown");
    CHECK(keyOf(fwd, "10.0.0.2", {"for=_hidden;proto=https"}) == "hop:_hidden");
    CHECK(keyOf(fwd, "10.0.0.2", {"proto=https"}) == "hop:proto=https");
    CHECK(keyOf(fwd, "10.0.0.2", {R"(for="1.2.3.4)"}) == R"(hop:for="1.2.3.4)");
    CHECK(keyOf(realIp, "10.0.0.2", {"not-an-address"}) == "hop:not-an-address");
    for (const ClientIdentity* id : {&xff, &fwd, &realIp}) {
        for (const std::vector<std::string_view>& unusable :
             {std::vector<std::string_view>{""}, {",,,"}, {" , ", "\t"}}) {
            const ClientKey peer =
                id->identify("10.0.0.2", std::span<const std::string_view>(unusable));
            CHECK(peer.key == "ip4:10.0.0.2");
            CHECK(peer.fellBack);
        }
        CHECK_FALSE(id->identify("10.0.0.2").fellBack);
    }
}

namespace {

/// Random text rich in what forwarding-header parsers trip on: quotes, escapes, commas,
/// semicolons, brackets, `for=`, addresses, blanks and line breaks (field lines), other bytes.
std::string randomJunk(std::mt19937_64& random) {
    static constexpr std::array<std::string_view, 16> kPieces{
        "\"", "\\", ",",  ";",  "=",        "for=",    "for=\"",  "[",
        "]:", " ",  "\t", "\n", "10.0.0.9", "fd00::1", "unknown", "x"};
    std::string junk;
    const std::size_t pieces = random() % 12;
    for (std::size_t i = 0; i < pieces; ++i) {
        const std::size_t pick = random() % (kPieces.size() + 2);
        if (pick < kPieces.size()) {
            junk.append(kPieces[pick]);
        } else {
            junk.push_back(static_cast<char>(1 + random() % 255));
        }
    }
    return junk;
}

std::string keyOfLines(const ClientIdentity& id, const std::vector<std::string>& lines) {
    const std::vector<std::string_view> views(lines.begin(), lines.end());
    return id.identify("10.0.0.1", std::span<const std::string_view>(views)).key;
}

}  // namespace

TEST_CASE(
    "ClientIdentity: junk a client puts left of the first untrusted hop never changes the key "
    "(random prefixes, fixed seed)",
    "[http][client]") {
    struct Case {
        ForwardedHeader header;
        std::string suffix;  ///< what the trusted proxies wrote: the client's hop, then theirs
        int proxies;         ///< trusted hops right of the client's
        std::string key;
    };
    const std::vector<Case> cases{
        {ForwardedHeader::kXForwardedFor, "198.51.100.77", 0, "ip4:198.51.100.77"},
        {ForwardedHeader::kXForwardedFor, "198.51.100.77:4711 , 10.0.0.3", 1, "ip4:198.51.100.77"},
        {ForwardedHeader::kXForwardedFor, "[2001:db8::1]:443,10.1.1.1, fd00::9", 2,
         "ip6:2001:db8::/56"},
        {ForwardedHeader::kXForwardedFor, "nonsense, 10.0.0.3", 1, "hop:nonsense"},
        {ForwardedHeader::kXForwardedFor, "\"quoted\", 10.0.0.3", 1, "hop:\"quoted\""},
        {ForwardedHeader::kForwarded, "for=198.51.100.77", 0, "ip4:198.51.100.77"},
        {ForwardedHeader::kForwarded, "for=198.51.100.77;proto=https, for=10.0.0.3", 1,
         "ip4:198.51.100.77"},
        {ForwardedHeader::kForwarded, R"(for="[2001:db8::1]:443";by="a,b", For="10.1.1.1")", 1,
         "ip6:2001:db8::/56"},
        {ForwardedHeader::kForwarded, R"(for="a\"b,c")", 0, R"(hop:a"b,c)"},
        {ForwardedHeader::kForwarded, "for=_hidden, for=10.0.0.3", 1, "hop:_hidden"},
        {ForwardedHeader::kForwarded, "by=10.0.0.3", 0, "hop:by=10.0.0.3"},
        {ForwardedHeader::kXRealIp, "198.51.100.77", 0, "ip4:198.51.100.77"},
    };
    std::mt19937_64 random(20240613);  // a fixed seed: every run checks the same prefixes
    for (const Case& c : cases) {
        INFO(c.suffix);
        ClientIdentityOptions byHops;
        byHops.forwardedHeader = c.header;
        byHops.trustedHops = c.proxies + 1;
        for (const ClientIdentity& id : {behindProxies(c.header), ClientIdentity{byHops}}) {
            REQUIRE(keyOfLines(id, {c.suffix}) == c.key);
            for (int i = 0; i < 2000; ++i) {
                const std::string junk = randomJunk(random);
                INFO(junk);
                // X-Real-IP holds one address: only whole lines can stand left of it.
                const bool ownLine = c.header == ForwardedHeader::kXRealIp || i % 2 == 0;
                CHECK(keyOfLines(id, withJunkOnTheLeft(junk, c.suffix, ownLine)) == c.key);
            }
        }
    }
}
