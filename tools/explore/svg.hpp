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
#include <initializer_list>
#include <limits>
#include <optional>
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

// The chart's geometry, in px. Lanes are stacked below the title and the legend; a lane's
// captions stand left of its plot, the time axis below the last lane.
inline constexpr double kChartWidth = 960;
inline constexpr double kPlotLeft = 190;
inline constexpr double kPlotRightMargin = 24;
inline constexpr double kPlotRight = kChartWidth - kPlotRightMargin;
inline constexpr double kPlotWidth = kPlotRight - kPlotLeft;
inline constexpr double kFirstLaneTop = 78;
inline constexpr double kLaneHeight = 96;
inline constexpr double kLaneGap = 16;
inline constexpr double kLanePitch = kLaneHeight + kLaneGap;
/// The tallest value stays this far below the lane's top, leaving room for its label.
inline constexpr double kLaneHeadroom = 1.15;
inline constexpr double kLaneTopPadding = 4;

// A lane's captions, baselines below its top: the name, the admitted count, the over-admission
// and the design bound.
inline constexpr double kNameBaseline = 18;
inline constexpr double kAdmittedBaseline = 38;
inline constexpr double kOverBaseline = 56;
inline constexpr double kDesignBaseline = 74;

// The legend: one row of swatches with their labels (the swatches are 16 by 12 px).
inline constexpr double kLegendLeft = 12;
inline constexpr double kLegendMiddle = 48;
inline constexpr double kSwatchWidth = 16;
inline constexpr double kSwatchHalfHeight = 6;
inline constexpr double kLegendTextOffset = kSwatchWidth + 6;
inline constexpr double kLegendTextDrop = 4;
/// Swatch, gaps and padding of a legend item besides its label.
inline constexpr double kLegendItemSpace = 30;
/// The average width of a 12 px character, to space the legend without measuring text.
inline constexpr double kLegendCharWidth = 6.6;

// Bars: a share of the space between the closest two, within limits that keep them visible
// and apart.
inline constexpr double kBarShare = 0.7;
inline constexpr double kMinBarWidth = 1;
inline constexpr double kMaxBarWidth = 14;

// Labels "admitted/sent" above the bars, in 11 px digits, when the bars are few enough to
// read them. A neighbour closer than a label's width and kLabelRoom pushes the label beside
// its bar; a label that would touch the one before it is left out.
inline constexpr std::size_t kMaxLabelledBars = 24;
inline constexpr double kLabelDigitWidth = 6.5;
inline constexpr double kLabelRoom = 4;
inline constexpr double kLabelOffset = 2;    // from the bar's side, for a label beside it
inline constexpr double kLabelGap = 2;       // the least space between two labels
inline constexpr double kLabelRaise = 3;     // above the bar
inline constexpr double kLabelMinDrop = 11;  // below the lane's top, to stay inside the lane

// The value scale's two labels, the rule's count and 0, left of the plot.
inline constexpr double kValueLabelGap = 4;
inline constexpr double kValueLabelDrop = 4;

/// Steps of the trailing count closer than this are drawn as one.
inline constexpr double kMinStepWidth = 0.5;
/// More window edges than this would hide the bars.
inline constexpr std::int64_t kMaxWindowEdges = 40;
/// The title lists the batches when there are at most this many.
inline constexpr std::size_t kMaxCaptionBatches = 6;

// Below the last lane: the axis line, its ticks, their labels and the axis caption.
inline constexpr double kAxisDrop = 4;
inline constexpr double kTickEndDrop = 9;
inline constexpr double kTickLabelDrop = 22;
inline constexpr double kAxisCaptionDrop = 38;
inline constexpr double kChartBottomDrop = 44;

// Paints shared by the marks and their legend swatches, so the legend always matches.
inline constexpr std::string_view kAdmittedFill = R"(fill="#3182bd")";
inline constexpr std::string_view kRefusedFill = R"(fill="#fdae6b")";
inline constexpr std::string_view kOverFill = R"(fill="#de2d26" fill-opacity="0.3")";
inline constexpr std::string_view kEnvelopeStroke =
    R"(stroke="#222222" stroke-width="1.5" stroke-dasharray="5,3")";
inline constexpr std::string_view kTrailingColour = "#31a354";

/// Appends the pieces: one growing string rather than a temporary per `+`.
inline void append(std::string& out, std::initializer_list<std::string_view> pieces) {
    for (const std::string_view piece : pieces) {
        out += piece;
    }
}

/// Appends one line of SVG: an element, or the start or end of a group.
inline void appendLine(std::string& out, std::initializer_list<std::string_view> pieces) {
    append(out, pieces);
    out += '\n';
}

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
    if (batches.size() <= kMaxCaptionBatches) {
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

/// The time axis: from `start` to `end`, with `pad` before `start` so that a bar there fits.
struct TimeScale {
    Nanos start{0};
    Nanos end{0};
    Nanos pad{0};

    [[nodiscard]] double x(Nanos t) const {
        return kPlotLeft + kPlotWidth * static_cast<double>((t - start + pad).count()) /
                               static_cast<double>((end - start + pad).count());
    }
};

/// From a little before the first batch (0s when it comes within a period) to a period after
/// the last, so the trailing count is seen to fall back.
inline TimeScale timeScaleOf(const Replay& r) {
    const std::vector<Batch>& batches = r.runs.front().batches;
    TimeScale scale;
    scale.end = batches.back().at + r.rule.period + r.rule.period / 10;
    if (batches.front().at > r.rule.period) {
        const Nanos step = niceStep((scale.end - batches.front().at) / 10);
        scale.start = (batches.front().at - r.rule.period / 4) / step * step;
    }
    scale.pad = (scale.end - scale.start) / 60;  // room for the first bar
    return scale;
}

/// What the lanes share: the time scale, the bars' bins and width, the window edges.
struct ChartLayout {
    TimeScale time;
    /// > 0: a bar per bin of batches, at the middle of its bin; 0: a bar per batch.
    Nanos bin{0};
    double barWidth = 0;
    std::int64_t maxSent = 0;
    std::vector<double> windowEdges;
    double lanesBottom = 0;

    [[nodiscard]] std::vector<Batch> barsOf(const AlgorithmRun& run) const {
        return bin > Nanos{0} ? binBatches(run.batches, bin) : run.batches;
    }
    [[nodiscard]] double barCentre(const Batch& b) const { return time.x(b.at + bin / 2); }
};

inline double laneTop(std::size_t lane) {
    return kFirstLaneTop + static_cast<double>(lane) * kLanePitch;
}

/// Bins when there are more batches than a chart can show apart.
inline Nanos barBin(const std::vector<Batch>& batches) {
    return batches.size() > kMaxBars
               ? binWidth(batches.back().at - batches.front().at + Nanos{1}, kMaxBars)
               : Nanos{0};
}

/// Wide enough to see, narrow enough that the closest two bars stay apart.
inline double barWidthOf(const std::vector<Batch>& columns, const TimeScale& time) {
    double closest = kPlotWidth;
    for (std::size_t b = 1; b < columns.size(); ++b) {
        closest = std::min(closest, time.x(columns[b].at) - time.x(columns[b - 1].at));
    }
    return std::clamp(closest * kBarShare, kMinBarWidth, kMaxBarWidth);
}

/// Every period from 0s, where the window algorithms reset; none when they would crowd.
inline std::vector<double> windowEdgesOf(const Replay& r, const TimeScale& time) {
    std::vector<double> edges;
    const Nanos period = r.rule.period;
    if ((time.end - time.start) / period <= kMaxWindowEdges) {
        for (Nanos t = (time.start / period + 1) * period; t < time.end; t += period) {
            edges.push_back(time.x(t));
        }
    }
    return edges;
}

inline ChartLayout layoutOf(const Replay& r) {
    ChartLayout chart;
    chart.time = timeScaleOf(r);
    chart.bin = barBin(r.runs.front().batches);
    const std::vector<Batch> columns = chart.barsOf(r.runs.front());
    chart.barWidth = barWidthOf(columns, chart.time);
    for (const Batch& b : columns) {
        chart.maxSent = std::max(chart.maxSent, b.sent);
    }
    chart.windowEdges = windowEdgesOf(r, chart.time);
    chart.lanesBottom = laneTop(r.runs.size()) - kLaneGap;
    return chart;
}

inline void writeHeader(std::string& out, const ChartLayout& chart, const std::string& heading) {
    const std::string width = px(kChartWidth);
    const std::string height = px(chart.lanesBottom + kChartBottomDrop);
    appendLine(out, {R"(<?xml version="1.0" encoding="UTF-8"?>)"});
    appendLine(out, {R"(<svg xmlns="http://www.w3.org/2000/svg" width=")", width, R"(" height=")",
                     height, R"(" viewBox="0 0 )", width, " ", height,
                     R"(" font-family="Helvetica, Arial, sans-serif" font-size="12">)"});
    appendLine(out, {"<title>", xmlEscape(heading), "</title>"});
    appendLine(out, {R"(<rect width="100%" height="100%" fill="#ffffff"/>)"});
    appendLine(out, {R"(<text x="12" y="24" font-size="16" font-weight="bold">)",
                     xmlEscape(heading), "</text>"});
}

/// A legend swatch for bars and areas.
inline std::string boxSwatch(double x, std::string_view paint) {
    std::string mark;
    append(mark, {R"(<rect x=")", px(x), R"(" y=")", px(kLegendMiddle - kSwatchHalfHeight),
                  R"(" width="16" height="12" )", paint, "/>"});
    return mark;
}

/// A legend swatch for lines.
inline std::string lineSwatch(double x, std::string_view stroke) {
    std::string mark;
    append(mark, {R"(<line x1=")", px(x), R"(" y1=")", px(kLegendMiddle), R"(" x2=")",
                  px(x + kSwatchWidth), R"(" y2=")", px(kLegendMiddle), R"(" )", stroke, "/>"});
    return mark;
}

inline void writeLegend(std::string& out, const Replay& r, const std::string& period) {
    double x = kLegendLeft;
    const auto item = [&](const std::string& mark, std::string_view label) {
        appendLine(out, {R"(<g class="legend">)", mark, R"(<text x=")", px(x + kLegendTextOffset),
                         R"(" y=")", px(kLegendMiddle + kLegendTextDrop), R"(">)", xmlEscape(label),
                         "</text></g>"});
        x += kLegendItemSpace + kLegendCharWidth * static_cast<double>(label.size());
    };
    const std::string trailingStroke =
        std::string(R"(stroke=")").append(kTrailingColour).append(R"(" stroke-width="2")");
    item(boxSwatch(x, kAdmittedFill), "admitted");
    item(boxSwatch(x, kRefusedFill), "refused");
    item(lineSwatch(x, kEnvelopeStroke),
         "the rule: " + std::to_string(r.rule.count) + " in any " + period);
    item(lineSwatch(x, trailingStroke),
         "admitted in the last " + period + (r.traffic.keys.size() > 1 ? " (busiest key)" : ""));
    item(boxSwatch(x, kOverFill), "over the rule");
}

/// A lane's vertical scale: 0 at its bottom, the tallest value a little below its top.
struct LaneScale {
    double top = 0;
    double yMax = 0;

    [[nodiscard]] double y(std::int64_t v) const {
        return top + kLaneHeight - (kLaneHeight - kLaneTopPadding) * static_cast<double>(v) / yMax;
    }
    [[nodiscard]] double base() const { return y(0); }
};

inline LaneScale laneScaleOf(const Replay& r, const ChartLayout& chart, const AlgorithmRun& run,
                             double top) {
    const std::int64_t tallest = std::max({chart.maxSent, run.peak, r.rule.count});
    return {top, static_cast<double>(tallest) * kLaneHeadroom};
}

inline std::string overNote(const AlgorithmRun& run) {
    return run.overAdmission > 0 ? "over the rule: " + signedNumber(run.overAdmission)
                                 : std::string("never over the rule");
}

inline std::string designNote(const AlgorithmRun& run) {
    if (run.overAdmission > run.bound) {
        return "ABOVE its design bound " + signedNumber(run.bound);
    }
    return run.bound == 0 ? std::string("by design never over")
                          : "by design up to " + signedNumber(run.bound);
}

/// The lane's background, and left of it the algorithm, its totals and its over-admission.
inline void writeLaneCaption(std::string& out, const AlgorithmRun& run, double top) {
    appendLine(out, {R"(<rect x=")", px(kPlotLeft), R"(" y=")", px(top), R"(" width=")",
                     px(kPlotWidth), R"(" height=")", px(kLaneHeight), R"(" fill="#f6f6f6"/>)"});
    appendLine(out, {R"(<text x="12" y=")", px(top + kNameBaseline),
                     R"(" font-size="14" font-weight="bold">)", nameOf(run.algorithm), "</text>"});
    appendLine(out, {R"(<text x="12" y=")", px(top + kAdmittedBaseline), R"(">admitted )",
                     std::to_string(run.admittedRequests), " of ", std::to_string(run.sentRequests),
                     "</text>"});
    appendLine(out, {R"(<text x="12" y=")", px(top + kOverBaseline),
                     run.overAdmission > 0 ? R"(" fill="#b2182b">)" : R"(">)",
                     xmlEscape(overNote(run)), "</text>"});
    appendLine(out, {R"(<text x="12" y=")", px(top + kDesignBaseline), R"(" fill="#555555">)",
                     xmlEscape(designNote(run)), "</text>"});
}

inline void writeWindowEdges(std::string& out, const ChartLayout& chart, double top) {
    for (const double x : chart.windowEdges) {
        appendLine(out, {R"(<line class="window-edge" x1=")", px(x), R"(" y1=")", px(top),
                         R"(" x2=")", px(x), R"(" y2=")", px(top + kLaneHeight),
                         R"(" stroke="#bbbbbb" stroke-dasharray="2,3"/>)"});
    }
}

/// Shades where the trailing count exceeds the rule's count.
inline void writeOverRule(std::string& out, const Replay& r, const ChartLayout& chart,
                          const LaneScale& lane,
                          const std::vector<std::pair<Nanos, std::int64_t>>& trailing) {
    for (std::size_t s = 0; s < trailing.size(); ++s) {
        const auto& [from, value] = trailing[s];
        if (value <= r.rule.count) {
            continue;
        }
        const Nanos to = s + 1 < trailing.size() ? trailing[s + 1].first : chart.time.end;
        appendLine(out, {R"(<rect class="over" x=")", px(chart.time.x(from)), R"(" y=")",
                         px(lane.y(value)), R"(" width=")",
                         px(chart.time.x(to) - chart.time.x(from)), R"(" height=")",
                         px(lane.y(r.rule.count) - lane.y(value)), R"(" )", kOverFill, "/>"});
    }
}

/// The trailing count as a step path. Steps closer than `kMinStepWidth` are drawn as one, at
/// the highest of their values, so that peaks stay visible; the group ends at its last value.
inline std::string trailingPath(const ChartLayout& chart, const LaneScale& lane,
                                const std::vector<std::pair<Nanos, std::int64_t>>& trailing) {
    std::string path;
    append(path, {"M", px(kPlotLeft), ",", px(lane.base())});
    for (std::size_t s = 0; s < trailing.size();) {
        const double x = chart.time.x(trailing[s].first);
        std::int64_t value = trailing[s].second;
        std::size_t next = s + 1;
        for (; next < trailing.size() && chart.time.x(trailing[next].first) - x < kMinStepWidth;
             ++next) {
            value = std::max(value, trailing[next].second);
        }
        append(path, {" H", px(x), " V", px(lane.y(value))});
        if (next > s + 1) {
            const auto& [lastAt, lastValue] = trailing[next - 1];
            append(path,
                   {" H", px(chart.time.x(lastAt) + kMinStepWidth), " V", px(lane.y(lastValue))});
        }
        s = next;
    }
    append(path, {" H", px(kPlotRight)});
    return path;
}

/// The trailing count and, over it, the rule's envelope.
inline void writeTrailing(std::string& out, const Replay& r, const ChartLayout& chart,
                          const LaneScale& lane,
                          const std::vector<std::pair<Nanos, std::int64_t>>& trailing) {
    appendLine(out, {R"(<path class="trailing" d=")", trailingPath(chart, lane, trailing),
                     R"(" fill="none" stroke=")", kTrailingColour, R"(" stroke-width="1.5"/>)"});
    const std::string envelope = px(lane.y(r.rule.count));
    appendLine(out,
               {R"(<line class="envelope" x1=")", px(kPlotLeft), R"(" y1=")", envelope, R"(" x2=")",
                px(kPlotRight), R"(" y2=")", envelope, R"(" )", kEnvelopeStroke, "/>"});
}

/// Admitted from the baseline, refused on top.
inline void writeBars(std::string& out, const ChartLayout& chart, const LaneScale& lane,
                      const std::vector<Batch>& bars) {
    const std::string width = px(chart.barWidth);
    for (const Batch& b : bars) {
        const std::string x = px(chart.barCentre(b) - chart.barWidth / 2);
        if (b.admitted > 0) {
            appendLine(out, {R"(<rect class="admitted" data-count=")", std::to_string(b.admitted),
                             R"(" x=")", x, R"(" y=")", px(lane.y(b.admitted)), R"(" width=")",
                             width, R"(" height=")", px(lane.base() - lane.y(b.admitted)), R"(" )",
                             kAdmittedFill, "/>"});
        }
        if (b.sent > b.admitted) {
            appendLine(out, {R"(<rect class="refused" data-count=")",
                             std::to_string(b.sent - b.admitted), R"(" x=")", x, R"(" y=")",
                             px(lane.y(b.sent)), R"(" width=")", width, R"(" height=")",
                             px(lane.y(b.admitted) - lane.y(b.sent)), R"(" )", kRefusedFill, "/>"});
        }
    }
}

/// Where a bar's label goes: from `left` to `left` + its width, written at `x` with `anchor`.
struct LabelPlace {
    double left = 0;
    double x = 0;
    std::string_view anchor;
};

/// Centred above the bar at `x`, or beside it, away from a close neighbour; nowhere when both
/// neighbours are close.
inline std::optional<LabelPlace> placeLabel(double x, double width, double barWidth, bool nearPrev,
                                            bool nearNext) {
    if (nearPrev && nearNext) {
        return std::nullopt;
    }
    if (nearNext) {
        const double end = x - barWidth / 2 - kLabelOffset;
        return LabelPlace{end - width, end, "end"};
    }
    if (nearPrev) {
        const double start = x + barWidth / 2 + kLabelOffset;
        return LabelPlace{start, start, "start"};
    }
    return LabelPlace{x - width / 2, x, "middle"};
}

/// Labels "admitted/sent" above the bars, each where it does not overlap the one before.
inline void writeBarLabels(std::string& out, const ChartLayout& chart, const LaneScale& lane,
                           const std::vector<Batch>& bars) {
    double lastRight = -1;
    for (std::size_t i = 0; i < bars.size(); ++i) {
        const Batch& b = bars[i];
        const std::string label = std::to_string(b.admitted) + "/" + std::to_string(b.sent);
        const double width = kLabelDigitWidth * static_cast<double>(label.size());
        const double x = chart.barCentre(b);
        const bool nearPrev = i > 0 && x - chart.barCentre(bars[i - 1]) < width + kLabelRoom;
        const bool nearNext =
            i + 1 < bars.size() && chart.barCentre(bars[i + 1]) - x < width + kLabelRoom;
        const std::optional<LabelPlace> place =
            placeLabel(x, width, chart.barWidth, nearPrev, nearNext);
        if (!place || place->left < lastRight + kLabelGap) {
            continue;
        }
        lastRight = place->left + width;
        const double y = std::max(lane.y(b.sent) - kLabelRaise, lane.top + kLabelMinDrop);
        appendLine(out, {R"(<text x=")", px(place->x), R"(" y=")", px(y), R"(" text-anchor=")",
                         place->anchor, R"(" font-size="11">)", label, "</text>"});
    }
}

/// The rule's count and 0 on the lane's value scale.
inline void writeValueLabels(std::string& out, const Replay& r, const LaneScale& lane) {
    const std::string x = px(kPlotLeft - kValueLabelGap);
    appendLine(out,
               {R"(<text x=")", x, R"(" y=")", px(lane.y(r.rule.count) + kValueLabelDrop),
                R"(" text-anchor="end" font-size="11">)", std::to_string(r.rule.count), "</text>"});
    appendLine(out, {R"(<text x=")", x, R"(" y=")", px(lane.base()),
                     R"(" text-anchor="end" font-size="11">0</text>)"});
}

/// One algorithm's lane: captions, window edges, the shaded excess, the trailing count, the
/// envelope, the bars and their labels.
inline void writeLane(std::string& out, const Replay& r, const ChartLayout& chart,
                      std::size_t index) {
    const AlgorithmRun& run = r.runs[index];
    const LaneScale lane = laneScaleOf(r, chart, run, laneTop(index));
    appendLine(out, {R"(<g class="lane" data-algorithm=")", nameOf(run.algorithm), R"(">)"});
    writeLaneCaption(out, run, lane.top);
    writeWindowEdges(out, chart, lane.top);
    const std::vector<std::pair<Nanos, std::int64_t>> trailing = trailingCount(r, run, run.peakKey);
    writeOverRule(out, r, chart, lane, trailing);
    writeTrailing(out, r, chart, lane, trailing);
    const std::vector<Batch> bars = chart.barsOf(run);
    writeBars(out, chart, lane, bars);
    if (bars.size() <= kMaxLabelledBars) {
        writeBarLabels(out, chart, lane, bars);
    }
    writeValueLabels(out, r, lane);
    appendLine(out, {"</g>"});
}

inline void writeTimeAxis(std::string& out, const ChartLayout& chart, const std::string& period) {
    const TimeScale& time = chart.time;
    const std::string axisY = px(chart.lanesBottom + kAxisDrop);
    appendLine(out, {R"(<g class="axis">)"});
    appendLine(out, {R"(<line x1=")", px(kPlotLeft), R"(" y1=")", axisY, R"(" x2=")",
                     px(kPlotRight), R"(" y2=")", axisY, R"(" stroke="#222222"/>)"});
    const Nanos step = niceStep((time.end - time.start) / 10);
    for (Nanos t = (time.start + step - Nanos{1}) / step * step; t <= time.end; t += step) {
        const std::string x = px(time.x(t));
        appendLine(out, {R"(<line x1=")", x, R"(" y1=")", axisY, R"(" x2=")", x, R"(" y2=")",
                         px(chart.lanesBottom + kTickEndDrop), R"(" stroke="#222222"/>)"});
        appendLine(out,
                   {R"(<text x=")", x, R"(" y=")", px(chart.lanesBottom + kTickLabelDrop),
                    R"(" text-anchor="middle" font-size="11">)", formatDuration(t), "</text>"});
    }
    appendLine(
        out, {R"(<text x=")", px(kPlotRight), R"(" y=")", px(chart.lanesBottom + kAxisCaptionDrop),
              R"(" text-anchor="end" fill="#555555">time (dotted: window edges every )", period,
              ")</text>"});
    appendLine(out, {"</g>"});
}

}  // namespace detail

/// The chart as SVG text. `title` replaces the generated one when not empty.
inline std::string svgReport(const Replay& r, std::string_view title = {}) {
    const detail::ChartLayout chart = detail::layoutOf(r);
    const std::string period = formatDuration(r.rule.period);
    const std::string heading = title.empty()
                                    ? "Rule " + ruleText(r.rule) + ": " + detail::trafficCaption(r)
                                    : std::string(title);
    std::string out;
    detail::writeHeader(out, chart, heading);
    detail::writeLegend(out, r, period);
    for (std::size_t lane = 0; lane < r.runs.size(); ++lane) {
        detail::writeLane(out, r, chart, lane);
    }
    detail::writeTimeAxis(out, chart, period);
    detail::appendLine(out, {"</svg>"});
    return out;
}

}  // namespace explore
