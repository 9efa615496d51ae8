// Tests of include/ratelimit/http/client_key.hpp: who the client is behind zero, one or several
// proxies; spoofed headers from untrusted peers; RFC 7239 Forwarded; IPv6 grouping; garbage.

#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/http/client_key.hpp>

#include "support/catch.hpp"

namespace {

using ratelimit::http::ClientIdentity;
using ratelimit::http::ClientIdentityOptions;
using ratelimit::http::ClientKey;
using ratelimit::http::ForwardedHeader;
using ratelimit::http::IpAddress;
using ratelimit::http::parseNodeAddress;

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
    // Garbage a trusted proxy would have written: fall back to the peer.
    const std::vector<std::string_view> garbage{"203.0.113.5, nonsense"};
    const ClientKey k = id.identify("10.0.0.2", std::span<const std::string_view>(garbage));
    CHECK(k.key == "ip4:10.0.0.2");
    CHECK(k.fellBack);
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
    CHECK(keyOf(id, "10.0.0.2", {"junk, 10.1.1.1"}) == "ip4:10.0.0.2");
}

TEST_CASE("ClientIdentity: RFC 7239 Forwarded, quoted IPv6 with ports, obfuscated nodes",
          "[http][client]") {
    const ClientIdentity id = behindProxies(ForwardedHeader::kForwarded);
    CHECK(keyOf(id, "10.0.0.2", {"for=192.0.2.60;proto=http;by=203.0.113.43"}) == "ip4:192.0.2.60");
    CHECK(keyOf(id, "10.0.0.2", {R"(for="[2001:db8:cafe::17]:4711")"}) == "ip6:2001:db8:cafe::/56");
    CHECK(keyOf(id, "10.0.0.2", {"For=192.0.2.43, for=10.3.3.3"}) == "ip4:192.0.2.43");
    CHECK(keyOf(id, "10.0.0.2", {R"(for=1.1.1.1, for="192.0.2.43";by="x,y", for=10.3.3.3)"}) ==
          "ip4:192.0.2.43");
    CHECK(keyOf(id, "10.0.0.2", {"for=unknown"}) == "ip4:10.0.0.2");
    CHECK(keyOf(id, "10.0.0.2", {"for=_hidden, for=10.3.3.3"}) == "ip4:10.0.0.2");
    CHECK(keyOf(id, "10.0.0.2", {"proto=https"}) == "ip4:10.0.0.2");  // no for=
    CHECK(keyOf(id, "10.0.0.2", {"for=1.2.3.4;for=5.6.7.8"}) == "ip4:10.0.0.2");
    CHECK(keyOf(id, "10.0.0.2", {R"(for="1.2.3.4)"}) == "ip4:10.0.0.2");
    CHECK(keyOf(id, "10.0.0.2", {"for=1.2.3.4 5"}) == "ip4:10.0.0.2");
    CHECK(keyOf(id, "198.51.100.1", {"for=192.0.2.60"}) == "ip4:198.51.100.1");
}

TEST_CASE("ClientIdentity: X-Real-IP takes one address from a trusted proxy", "[http][client]") {
    const ClientIdentity id = behindProxies(ForwardedHeader::kXRealIp);
    CHECK(keyOf(id, "10.0.0.2", {"203.0.113.5"}) == "ip4:203.0.113.5");
    CHECK(keyOf(id, "10.0.0.2", {"203.0.113.5, 1.1.1.1"}) == "ip4:10.0.0.2");
    CHECK(keyOf(id, "10.0.0.2", {"203.0.113.5", "1.1.1.1"}) == "ip4:10.0.0.2");
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
