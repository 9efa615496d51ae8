// Tests of include/ratelimit/http/cidr.hpp: address parsing (IPv4, IPv6 compressed, zone ids,
// IPv4-mapped, NAT64), canonical text, CIDR edges and allow lists. Nothing here may throw on
// hostile text.

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/http/cidr.hpp>

#include "support/catch.hpp"

namespace {

using ratelimit::http::Cidr;
using ratelimit::http::CidrSet;
using ratelimit::http::IpAddress;

std::string text(std::string_view address) {
    const std::optional<IpAddress> a = IpAddress::parse(address);
    return a ? a->toString() : std::string("<invalid>");
}

}  // namespace

TEST_CASE("IpAddress: IPv4 dotted quads parse strictly", "[http][address]") {
    CHECK(text("192.0.2.1") == "192.0.2.1");
    CHECK(text("0.0.0.0") == "0.0.0.0");
    CHECK(text("255.255.255.255") == "255.255.255.255");
    for (const char* bad :
         {"256.0.0.1", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.4 ", " 1.2.3.4", "1..3.4", "1.2.3.",
          "a.b.c.d", "", "1.2.3.4/8", "0x7f.0.0.1", "1.2.3.1000", "4294967295"}) {
        INFO(bad);
        CHECK(text(bad) == "<invalid>");
    }
    static_assert(IpAddress::parse("10.1.2.3")->isV4());
}

TEST_CASE("IpAddress: IPv6 forms parse and print as RFC 5952", "[http][address]") {
    CHECK(text("::") == "::");
    CHECK(text("::1") == "::1");
    CHECK(text("2001:DB8:0:0:0:0:0:1") == "2001:db8::1");
    CHECK(text("2001:db8::") == "2001:db8::");
    CHECK(text("2001:db8:0:0:1:0:0:1") == "2001:db8::1:0:0:1");     // first longest run
    CHECK(text("2001:db8:0:1:1:1:1:1") == "2001:db8:0:1:1:1:1:1");  // one zero group stays
    CHECK(text("fe80::1%eth0") == "fe80::1");                       // zone id dropped
    CHECK(text("fe80::1%25") == "fe80::1");
    CHECK(text("::ffff:192.0.2.1") == "::ffff:c000:201");
    CHECK(text("1:2:3:4:5:6:7:8") == "1:2:3:4:5:6:7:8");
    CHECK(text("1:2:3:4:5:6:1.2.3.4") == "1:2:3:4:5:6:102:304");
    for (const char* bad : {":::", "1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "1:2:3:4:5:6:7",
                            ":1::", "1:", "1::2:3:4:5:6:7:8", "g::1", "fe80::1%", "::1.2.3",
                            "::1.2.3.4:5", "[::1]", "::ffff:1.2.3.256", "1:2:3:4:5:6:7:1.2.3.4"}) {
        INFO(bad);
        CHECK(text(bad) == "<invalid>");
    }
}

TEST_CASE("IpAddress: IPv4-mapped and NAT64 addresses reduce to IPv4", "[http][address]") {
    CHECK(IpAddress::parse("::ffff:192.0.2.1")->canonical() == IpAddress::v4(192, 0, 2, 1));
    CHECK(IpAddress::parse("::ffff:c000:201")->canonical() == IpAddress::v4(192, 0, 2, 1));
    CHECK(IpAddress::parse("64:ff9b::192.0.2.33")->canonical() == IpAddress::v4(192, 0, 2, 33));
    CHECK_FALSE(IpAddress::parse("64:ff9b:1::c000:221")->canonical().isV4());  // local-use
    CHECK_FALSE(IpAddress::parse("::192.0.2.1")->canonical().isV4());  // deprecated compat form
    CHECK_FALSE(IpAddress::parse("2001:db8::1")->canonical().isV4());
}

TEST_CASE("Cidr: prefixes, edges and host bits", "[http][cidr]") {
    const Cidr net = *Cidr::parse("10.0.0.0/8");
    CHECK(net.contains(*IpAddress::parse("10.0.0.0")));
    CHECK(net.contains(*IpAddress::parse("10.255.255.255")));
    CHECK_FALSE(net.contains(*IpAddress::parse("9.255.255.255")));
    CHECK_FALSE(net.contains(*IpAddress::parse("11.0.0.0")));
    CHECK(net.contains(*IpAddress::parse("::ffff:10.1.2.3")));  // mapped reduces first
    CHECK_FALSE(net.contains(*IpAddress::parse("::a01:203")));  // not mapped

    const Cidr v6 = *Cidr::parse("2001:db8:abcd:1200::/56");
    CHECK(v6.contains(*IpAddress::parse("2001:db8:abcd:1200::")));
    CHECK(v6.contains(*IpAddress::parse("2001:db8:abcd:12ff:ffff:ffff:ffff:ffff")));
    CHECK_FALSE(v6.contains(*IpAddress::parse("2001:db8:abcd:1300::")));
    CHECK_FALSE(v6.contains(*IpAddress::parse("2001:db8:abcd:11ff:ffff:ffff:ffff:ffff")));
    CHECK_FALSE(v6.contains(*IpAddress::parse("10.0.0.1")));

    CHECK(Cidr::parse("0.0.0.0/0")->contains(*IpAddress::parse("255.1.2.3")));
    CHECK_FALSE(Cidr::parse("0.0.0.0/0")->contains(*IpAddress::parse("::1")));
    CHECK(Cidr::parse("::/0")->contains(*IpAddress::parse("ffff::1")));
    CHECK(Cidr::parse("192.0.2.7")->prefix() == 32);
    CHECK(Cidr::parse("192.0.2.7/32")->contains(*IpAddress::parse("192.0.2.7")));
    CHECK_FALSE(Cidr::parse("192.0.2.7/32")->contains(*IpAddress::parse("192.0.2.6")));
    CHECK(*Cidr::parse("::ffff:10.0.0.0/104") == *Cidr::parse("10.0.0.0/8"));
    CHECK(Cidr::parse("::1/128")->contains(*IpAddress::parse("::1%lo")));

    for (const char* bad : {"10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/08",
                            "::/129", "2001:db8::1/32", "/8", "10.0.0.0/8/8", "x/1"}) {
        INFO(bad);
        CHECK_FALSE(Cidr::parse(bad).has_value());
    }
}

TEST_CASE("CidrSet: mixed families; bad entries throw naming the field", "[http][cidr]") {
    const CidrSet set{"127.0.0.0/8", "::1", "10.20.0.0/16", "fd00::/8"};
    CHECK(set.contains("127.0.0.1"));
    CHECK(set.contains("::1"));
    CHECK(set.contains("::ffff:127.0.0.1"));
    CHECK(set.contains("10.20.255.255"));
    CHECK_FALSE(set.contains("10.21.0.0"));
    CHECK(set.contains("fdff:ffff::1"));
    CHECK_FALSE(set.contains("fe00::1"));
    CHECK_FALSE(set.contains("not an address"));
    CHECK_FALSE(set.contains(""));
    CHECK_FALSE(CidrSet{}.contains("127.0.0.1"));
    REQUIRE_THROWS_WITH(
        CidrSet(std::vector<std::string>{"10.0.0.0/8", "10.0.0.1/8"}, "allowList"),
        Catch::Matchers::Contains("allowList") && Catch::Matchers::Contains("10.0.0.1/8"));
}
