#pragma once

// The explorer's picture: one SVG chart, time on x, one lane per algorithm. In each lane a bar
// per batch (admitted below, refused stacked on top), the rule's envelope (`count` in any
// period, dashed) and the count admitted in the trailing period (a step line; the area above
// the envelope shaded). Plain SVG text, no dependency.
//
// Marks a test can count: every lane is `<g class="lane" data-algorithm="...">`, every bar part
// is `<rect class="admitted" data-count="N">` or `<rect class="refused" data-count="N">`.

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "replay.hpp"
#include "report.hpp"
#include "traffic.hpp"

namespace explore {

/// More batches than this are drawn as bars per bin of time.
inline constexpr std::size_t kMaxBars = 400;

namespace detail {

inline std::string xmlEscape(std::string_view s) {
    std::string out;
    for (const char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&apos;";
                break;
            default:
                // Control characters are not allowed in XML 1.0 text; keys may hold any byte.
                if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
                    out += '?';
                } else {
                    out += c;
                }
        }
    }
    return out;
}

/// The longest a double gets with one decimal: a sign, 309 digits, the point and the decimal.
inline constexpr std::size_t kMaxFixedChars =
    static_cast<std::size_t>(std::numeric_limits<double>::max_exponent10) + 4;

/// A coordinate with one decimal, as `%.1f` writes it in the "C" locale whatever the global one.
inline std::string px(double v) {
    std::array<char, kMaxFixedChars> buffer{};
    const std::to_chars_result written =
        std::to_chars(buffer.data(), buffer.data() + buffer.size(), v, std::chars_format::fixed, 1);
    return {buffer.data(), written.ptr};
}

/// The step function "units admitted on `key` in (t − period, t]" as (time, value) changes.
inline std::vector<std::pair<Nanos, std::int64_t>> trailingCount(const Replay& r,
                                                                 const AlgorithmRun& run,
                                                                 std::uint32_t key) {
    std::vector<std::pair<Nanos, std::int64_t>> deltas;
    for (std::size_t i = 0; i < r.traffic.requests.size(); ++i) {
        const Request& q = r.traffic.requests[i];
        if (run.admitted[i] && q.key == key) {
            deltas.emplace_back(q.at, q.cost);
            deltas.emplace_back(q.at + r.rule.period, -q.cost);
        }
    }
    std::stable_sort(deltas.begin(), deltas.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::pair<Nanos, std::int64_t>> steps;
    std::int64_t value = 0;
    for (const auto& [at, delta] : deltas) {
        value += delta;
        if (!steps.empty() && steps.back().first == at) {
            steps.back().second = value;
        } else {
            steps.emplace_back(at, value);
        }
    }
    return steps;
}

/// A short description of the traffic for the title: the batches when there are few.
inline std::string trafficCaption(const Replay& r) {
    const std::vector<Batch>& batches = r.runs.front().batches;
    if (batches.size() <= 6) {
        std::string text;
        for (const Batch& b : batches) {
            text +=
                (text.empty() ? "" : ", ") + std::to_string(b.sent) + " at " + formatDuration(b.at);
        }
        return text;
    }
    return std::to_string(r.traffic.requests.size()) + " requests in " +
           std::to_string(batches.size()) + " batches";
}

}  // namespace detail

/// The chart as SVG text. `title` replaces the generated one when not empty.
inline std::string svgReport(const Replay& r, std::string_view title = {}) {
    using detail::px;
    using detail::xmlEscape;
    constexpr double kWidth = 960;
    constexpr double kPlotLeft = 190;
    constexpr double kPlotRight = kWidth - 24;
    constexpr double kPlotWidth = kPlotRight - kPlotLeft;
    constexpr double kFirstLane = 78;
    constexpr double kLaneHeight = 96;
    constexpr double kLaneGap = 16;
    const double lanesBottom =
        kFirstLane + static_cast<double>(r.runs.size()) * (kLaneHeight + kLaneGap) - kLaneGap;
    const double height = lanesBottom + 44;

    // Time from a little before the first batch (0s when it comes within a period) to a period
    // after the last, so the trailing count is seen to fall back.
    const std::vector<Batch>& batches = r.runs.front().batches;
    const Nanos end = batches.back().at + r.rule.period + r.rule.period / 10;
    Nanos start{0};
    if (batches.front().at > r.rule.period) {
        const Nanos step = niceStep((end - batches.front().at) / 10);
        start = (batches.front().at - r.rule.period / 4) / step * step;
    }
    const Nanos pad = (end - start) / 60;  // room for the first bar
    const auto xOf = [&](Nanos t) {
        return kPlotLeft + kPlotWidth * static_cast<double>((t - start + pad).count()) /
                               static_cast<double>((end - start + pad).count());
    };

    // A bar per batch, or per bin of batches when there are more than a chart can show apart
    // (`bin` > 0: bars stand at the middle of their bin).
    const Nanos bin = batches.size() > kMaxBars
                          ? binWidth(batches.back().at - batches.front().at + Nanos{1}, kMaxBars)
                          : Nanos{0};
    const auto barsOf = [&](const AlgorithmRun& run) {
        return bin > Nanos{0} ? binBatches(run.batches, bin) : run.batches;
    };
    const std::vector<Batch> columns = barsOf(r.runs.front());
    // Bar width from the closest two bars, within 1 … 14 px.
    double closest = kPlotWidth;
    for (std::size_t b = 1; b < columns.size(); ++b) {
        closest = std::min(closest, xOf(columns[b].at) - xOf(columns[b - 1].at));
    }
    const double barWidth = std::clamp(closest * 0.7, 1.0, 14.0);

    std::int64_t maxSent = 0;
    for (const Batch& b : columns) {
        maxSent = std::max(maxSent, b.sent);
    }

    const std::string rule = ruleText(r.rule);
    const std::string period = formatDuration(r.rule.period);
    std::string out;
    out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(kWidth) + "\" height=\"" +
           px(height) + "\" viewBox=\"0 0 " + px(kWidth) + " " + px(height) +
           "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
    const std::string heading =
        title.empty() ? "Rule " + rule + ": " + detail::trafficCaption(r) : std::string(title);
    out += "<title>" + xmlEscape(heading) + "</title>\n";
    out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
    out += "<text x=\"12\" y=\"24\" font-size=\"16\" font-weight=\"bold\">" + xmlEscape(heading) +
           "</text>\n";

    // Legend.
    {
        double x = 12;
        const double y = 48;
        const auto item = [&](const std::string& mark, std::string_view label) {
            out += "<g class=\"legend\">" + mark + "<text x=\"" + px(x + 22) + "\" y=\"" +
                   px(y + 4) + "\">" + xmlEscape(label) + "</text></g>\n";
            x += 30 + 6.6 * static_cast<double>(label.size());
        };
        item("<rect x=\"" + px(x) + "\" y=\"" + px(y - 6) +
                 "\" width=\"16\" height=\"12\" fill=\"#3182bd\"/>",
             "admitted");
        item("<rect x=\"" + px(x) + "\" y=\"" + px(y - 6) +
                 "\" width=\"16\" height=\"12\" fill=\"#fdae6b\"/>",
             "refused");
        item("<line x1=\"" + px(x) + "\" y1=\"" + px(y) + "\" x2=\"" + px(x + 16) + "\" y2=\"" +
                 px(y) + "\" stroke=\"#222222\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>",
             "the rule: " + std::to_string(r.rule.count) + " in any " + period);
        item("<line x1=\"" + px(x) + "\" y1=\"" + px(y) + "\" x2=\"" + px(x + 16) + "\" y2=\"" +
                 px(y) + "\" stroke=\"#31a354\" stroke-width=\"2\"/>",
             std::string("admitted in the last ") + period +
                 (r.traffic.keys.size() > 1 ? " (busiest key)" : ""));
        item("<rect x=\"" + px(x) + "\" y=\"" + px(y - 6) +
                 "\" width=\"16\" height=\"12\" fill=\"#de2d26\" fill-opacity=\"0.3\"/>",
             "over the rule");
    }

    // Window edges every period from 0s (where the window algorithms reset), when not too dense.
    std::vector<double> edges;
    if ((end - start) / r.rule.period <= 40) {
        for (Nanos t = (start / r.rule.period + 1) * r.rule.period; t < end; t += r.rule.period) {
            edges.push_back(xOf(t));
        }
    }

    for (std::size_t a = 0; a < r.runs.size(); ++a) {
        const AlgorithmRun& run = r.runs[a];
        const double top = kFirstLane + static_cast<double>(a) * (kLaneHeight + kLaneGap);
        const std::vector<std::pair<Nanos, std::int64_t>> trailing =
            detail::trailingCount(r, run, run.peakKey);
        const std::int64_t yMaxValue = std::max({maxSent, run.peak, r.rule.count});
        const double yMax = static_cast<double>(yMaxValue) * 1.15;
        const auto yOf = [&](std::int64_t v) {
            return top + kLaneHeight - (kLaneHeight - 4) * static_cast<double>(v) / yMax;
        };
        const double base = yOf(0);

        out += "<g class=\"lane\" data-algorithm=\"" + std::string(nameOf(run.algorithm)) + "\">\n";
        out += "<rect x=\"" + px(kPlotLeft) + "\" y=\"" + px(top) + "\" width=\"" + px(kPlotWidth) +
               "\" height=\"" + px(kLaneHeight) + "\" fill=\"#f6f6f6\"/>\n";
        out += "<text x=\"12\" y=\"" + px(top + 18) + "\" font-size=\"14\" font-weight=\"bold\">" +
               std::string(nameOf(run.algorithm)) + "</text>\n";
        out += "<text x=\"12\" y=\"" + px(top + 38) + "\">admitted " +
               std::to_string(run.admittedRequests) + " of " + std::to_string(run.sentRequests) +
               "</text>\n";
        const std::string over = run.overAdmission > 0
                                     ? "over the rule: " + detail::signedNumber(run.overAdmission)
                                     : std::string("never over the rule");
        out += "<text x=\"12\" y=\"" + px(top + 56) + "\"" +
               (run.overAdmission > 0 ? " fill=\"#b2182b\"" : "") + ">" + xmlEscape(over) +
               "</text>\n";
        const std::string design =
            run.overAdmission > run.bound
                ? "ABOVE its design bound " + detail::signedNumber(run.bound)
                : (run.bound == 0 ? std::string("by design never over")
                                  : "by design up to " + detail::signedNumber(run.bound));
        out += "<text x=\"12\" y=\"" + px(top + 74) + "\" fill=\"#555555\">" + xmlEscape(design) +
               "</text>\n";

        for (const double x : edges) {
            out += "<line class=\"window-edge\" x1=\"" + px(x) + "\" y1=\"" + px(top) + "\" x2=\"" +
                   px(x) + "\" y2=\"" + px(top + kLaneHeight) +
                   "\" stroke=\"#bbbbbb\" stroke-dasharray=\"2,3\"/>\n";
        }

        // Over the rule: where the trailing count exceeds count.
        for (std::size_t s = 0; s < trailing.size(); ++s) {
            if (trailing[s].second > r.rule.count) {
                const Nanos to = s + 1 < trailing.size() ? trailing[s + 1].first : end;
                out += "<rect class=\"over\" x=\"" + px(xOf(trailing[s].first)) + "\" y=\"" +
                       px(yOf(trailing[s].second)) + "\" width=\"" +
                       px(xOf(to) - xOf(trailing[s].first)) + "\" height=\"" +
                       px(yOf(r.rule.count) - yOf(trailing[s].second)) +
                       "\" fill=\"#de2d26\" fill-opacity=\"0.3\"/>\n";
            }
        }

        // The trailing count (a step line) and the rule's envelope. Steps closer than half a
        // pixel are drawn as one, at the highest of their values, so peaks stay visible.
        std::string path = "M" + px(kPlotLeft) + "," + px(base);
        for (std::size_t s = 0; s < trailing.size();) {
            const double x = xOf(trailing[s].first);
            std::int64_t value = trailing[s].second;
            std::size_t next = s + 1;
            for (; next < trailing.size() && xOf(trailing[next].first) - x < 0.5; ++next) {
                value = std::max(value, trailing[next].second);
            }
            if (next > s + 1) {  // end the group at its last value
                path += " H" + px(x) + " V" + px(yOf(value));
                s = next - 1;
                path += " H" + px(xOf(trailing[s].first) + 0.5);
                path += " V" + px(yOf(trailing[s].second));
                s = next;
                continue;
            }
            path += " H" + px(x) + " V" + px(yOf(value));
            s = next;
        }
        path += " H" + px(kPlotRight);
        out += "<path class=\"trailing\" d=\"" + path +
               "\" fill=\"none\" stroke=\"#31a354\" stroke-width=\"1.5\"/>\n";
        out += "<line class=\"envelope\" x1=\"" + px(kPlotLeft) + "\" y1=\"" +
               px(yOf(r.rule.count)) + "\" x2=\"" + px(kPlotRight) + "\" y2=\"" +
               px(yOf(r.rule.count)) +
               "\" stroke=\"#222222\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>\n";
        // Bars: admitted from the baseline, refused on top.
        const std::vector<Batch> bars = barsOf(run);
        for (const Batch& b : bars) {
            const double x = xOf(b.at + bin / 2) - barWidth / 2;
            if (b.admitted > 0) {
                out += "<rect class=\"admitted\" data-count=\"" + std::to_string(b.admitted) +
                       "\" x=\"" + px(x) + "\" y=\"" + px(yOf(b.admitted)) + "\" width=\"" +
                       px(barWidth) + "\" height=\"" + px(base - yOf(b.admitted)) +
                       "\" fill=\"#3182bd\"/>\n";
            }
            if (b.sent > b.admitted) {
                out += "<rect class=\"refused\" data-count=\"" +
                       std::to_string(b.sent - b.admitted) + "\" x=\"" + px(x) + "\" y=\"" +
                       px(yOf(b.sent)) + "\" width=\"" + px(barWidth) + "\" height=\"" +
                       px(yOf(b.admitted) - yOf(b.sent)) + "\" fill=\"#fdae6b\"/>\n";
            }
        }

        // Labels "admitted/sent" above the bars, when there is room for them.
        if (bars.size() <= 24) {
            double lastRight = -1;
            for (std::size_t i = 0; i < bars.size(); ++i) {
                const Batch& b = bars[i];
                const std::string label = std::to_string(b.admitted) + "/" + std::to_string(b.sent);
                const double w = 6.5 * static_cast<double>(label.size());
                const double x = xOf(b.at + bin / 2);
                const bool nearPrev = i > 0 && x - xOf(bars[i - 1].at + bin / 2) < w + 4;
                const bool nearNext =
                    i + 1 < bars.size() && xOf(bars[i + 1].at + bin / 2) - x < w + 4;
                if (nearPrev && nearNext) {
                    continue;
                }
                double left = x - w / 2;
                std::string anchor = "middle";
                if (nearNext) {
                    left = x - barWidth / 2 - 2 - w;
                    anchor = "end";
                } else if (nearPrev) {
                    left = x + barWidth / 2 + 2;
                    anchor = "start";
                }
                if (left < lastRight + 2) {
                    continue;
                }
                lastRight = left + w;
                const double tx = anchor == "end"     ? x - barWidth / 2 - 2
                                  : anchor == "start" ? x + barWidth / 2 + 2
                                                      : x;
                out += "<text x=\"" + px(tx) + "\" y=\"" + px(std::max(yOf(b.sent) - 3, top + 11)) +
                       "\" text-anchor=\"" + anchor + "\" font-size=\"11\">" + label + "</text>\n";
            }
        }

        out += "<text x=\"" + px(kPlotLeft - 4) + "\" y=\"" + px(yOf(r.rule.count) + 4) +
               "\" text-anchor=\"end\" font-size=\"11\">" + std::to_string(r.rule.count) +
               "</text>\n";
        out += "<text x=\"" + px(kPlotLeft - 4) + "\" y=\"" + px(base) +
               "\" text-anchor=\"end\" font-size=\"11\">0</text>\n";
        out += "</g>\n";
    }

    // Time axis.
    const Nanos step = niceStep((end - start) / 10);
    out += "<g class=\"axis\">\n";
    out += "<line x1=\"" + px(kPlotLeft) + "\" y1=\"" + px(lanesBottom + 4) + "\" x2=\"" +
           px(kPlotRight) + "\" y2=\"" + px(lanesBottom + 4) + "\" stroke=\"#222222\"/>\n";
    for (Nanos t = (start + step - Nanos{1}) / step * step; t <= end; t += step) {
        const double x = xOf(t);
        out += "<line x1=\"" + px(x) + "\" y1=\"" + px(lanesBottom + 4) + "\" x2=\"" + px(x) +
               "\" y2=\"" + px(lanesBottom + 9) + "\" stroke=\"#222222\"/>\n";
        out += "<text x=\"" + px(x) + "\" y=\"" + px(lanesBottom + 22) +
               "\" text-anchor=\"middle\" font-size=\"11\">" + formatDuration(t) + "</text>\n";
    }
    out += "<text x=\"" + px(kPlotRight) + "\" y=\"" + px(lanesBottom + 38) +
           "\" text-anchor=\"end\" fill=\"#555555\">time (dotted: window edges every " + period +
           ")</text>\n";
    out += "</g>\n</svg>\n";
    return out;
}

}  // namespace explore
