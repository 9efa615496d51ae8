#pragma once

// The explorer's text outputs: a table for people and JSON for programs. Both are built in
// memory; the caller prints them only once everything succeeded.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/limit.hpp>

#include "replay.hpp"
#include "traffic.hpp"

namespace explore {

/// The rule in `Limit::parse`'s grammar: `10/min`, `100/s burst 20`, `5/1m30s`.
inline std::string ruleText(const ratelimit::Limit& rule) {
    using namespace std::chrono_literals;
    std::string period;
    if (rule.period == 1s) {
        period = "s";
    } else if (rule.period == 1min) {
        period = "min";
    } else if (rule.period == 1h) {
        period = "h";
    } else if (rule.period == 24h) {
        period = "d";
    } else {
        period = formatDuration(rule.period);
    }
    std::string text = std::to_string(rule.count) + "/" + period;
    if (rule.burst != rule.count) {
        text += " burst " + std::to_string(rule.burst);
    }
    return text;
}

/// A round step of at least `minimum`: 1-2-5 below a second, then 1, 2, 5, 10, 15, 30 s,
/// 1, 2, 5, 10, 15, 30 min, 1, 2, 3, 6, 12 h, then whole days.
inline Nanos niceStep(Nanos minimum) {
    using namespace std::chrono_literals;
    for (Nanos step = 1ns; step < 1s; step *= 10) {
        for (const std::int64_t m : {1, 2, 5}) {
            if (step * m >= minimum) {
                return step * m;
            }
        }
    }
    for (const Nanos step :
         {Nanos{1s}, Nanos{2s}, Nanos{5s}, Nanos{10s}, Nanos{15s}, Nanos{30s}, Nanos{1min},
          Nanos{2min}, Nanos{5min}, Nanos{10min}, Nanos{15min}, Nanos{30min}, Nanos{1h}, Nanos{2h},
          Nanos{3h}, Nanos{6h}, Nanos{12h}}) {
        if (step >= minimum) {
            return step;
        }
    }
    const Nanos day = 24h;
    return day * ((minimum.count() + day.count() - 1) / day.count());
}

/// A round bin width that groups batches spread over `span` into at most `maxBins` bins.
inline Nanos binWidth(Nanos span, std::size_t maxBins) {
    const auto bins = static_cast<std::int64_t>(maxBins);
    Nanos width = niceStep(span / bins);
    while ((span.count() + width.count() - 1) / width.count() > bins) {
        width = niceStep(width + Nanos{1});
    }
    return width;
}

/// Batches summed per bin [k·width, (k+1)·width); each bin's `at` is its start. Empty bins are
/// left out.
inline std::vector<Batch> binBatches(const std::vector<Batch>& batches, Nanos width) {
    std::vector<Batch> bins;
    for (const Batch& b : batches) {
        const Nanos start = b.at / width * width;
        if (bins.empty() || bins.back().at != start) {
            bins.push_back({start, 0, 0});
        }
        bins.back().sent += b.sent;
        bins.back().admitted += b.admitted;
    }
    return bins;
}

/// One row of the table: a batch, or a bin of batches when there are too many to list.
struct TableRow {
    std::string label;
    std::int64_t sent = 0;
    std::vector<std::int64_t> admitted;  ///< per run
};

/// Batches as rows, or grouped into bins of a round width so that at most `maxRows` remain.
inline std::vector<TableRow> tableRows(const Replay& r, std::size_t maxRows, std::string& note) {
    std::vector<TableRow> rows;
    if (r.runs.empty()) {
        return rows;
    }
    const std::vector<Batch>& batches = r.runs.front().batches;
    const std::size_t n = r.runs.size();
    if (batches.size() <= maxRows) {
        for (std::size_t b = 0; b < batches.size(); ++b) {
            TableRow row{formatDuration(batches[b].at), batches[b].sent, {}};
            for (const AlgorithmRun& run : r.runs) {
                row.admitted.push_back(run.batches[b].admitted);
            }
            rows.push_back(std::move(row));
        }
        return rows;
    }
    const Nanos width = binWidth(batches.back().at - batches.front().at + Nanos{1}, maxRows);
    note = std::to_string(batches.size()) + " batches grouped in " + formatDuration(width) +
           " bins [from, to); --json lists every batch";
    for (std::size_t a = 0; a < n; ++a) {
        const std::vector<Batch> bins = binBatches(r.runs[a].batches, width);
        if (a == 0) {
            for (const Batch& bin : bins) {
                rows.push_back({formatDuration(bin.at) + "-" + formatDuration(bin.at + width),
                                bin.sent, std::vector<std::int64_t>(n, 0)});
            }
        }
        for (std::size_t row = 0; row < bins.size(); ++row) {
            rows[row].admitted[a] = bins[row].admitted;
        }
    }
    return rows;
}

namespace detail {

/// The time column is at least as wide as the labels of the total rows, "total" and "units".
inline constexpr std::size_t kTimeColumnWidth = 5;
/// Count columns are at least this wide, so counts up to 999'999 line up under "sent".
inline constexpr std::size_t kCountColumnWidth = 6;

inline std::string padLeft(const std::string& s, std::size_t width) {
    return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}
inline std::string padRight(const std::string& s, std::size_t width) {
    return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}
inline std::string signedNumber(std::int64_t v) {
    // Appended, not `"+" + std::to_string(v)`: g++ 12 -O2 warns -Wrestrict on that (a false
    // positive of its string inlining).
    std::string text = v > 0 ? "+" : "";
    text += std::to_string(v);
    return text;
}

inline bool unitCosts(const Traffic& t) {
    return std::all_of(t.requests.begin(), t.requests.end(),
                       [](const Request& q) { return q.cost == 1; });
}

}  // namespace detail

/// The over-admission of a run in words: the figure, where, and whether the algorithm's design
/// allows it.
inline std::string overAdmissionText(const Replay& r, const AlgorithmRun& run) {
    std::string text;
    if (run.overAdmission <= 0) {
        text = "none (at most " + std::to_string(run.peak) + ")";
    } else {
        text = detail::signedNumber(run.overAdmission) + " in [" + formatDuration(run.peakFrom) +
               ", " + formatDuration(run.peakFrom + r.rule.period) + ")";
        if (r.traffic.keys.size() > 1) {
            text += " for key \"" + r.traffic.keys[run.peakKey] + "\"";
        }
    }
    return text;
}

/// Whether an overshoot is the algorithm's nature: its design bound and the reason for it.
inline std::string boundText(const AlgorithmRun& run) {
    const std::string reason(overAdmissionReason(run.algorithm));
    if (run.overAdmission > run.bound) {
        return "ABOVE its design bound of " + detail::signedNumber(run.bound) + " (" + reason + ")";
    }
    if (run.bound == 0) {
        return "by design never over (" + reason + ")";
    }
    return std::string(run.overAdmission > 0 ? "its nature: " : "by design ") + "up to " +
           detail::signedNumber(run.bound) + " (" + reason + ")";
}

inline std::string waitText(const AlgorithmRun& run) {
    std::string text;
    if (run.waited == 0 && run.stillWaiting == 0) {
        text = "none";
    } else {
        text = (run.waitsComplete ? "" : "at least ") + formatDuration(run.longestWait) + " (" +
               std::to_string(run.waited) + " admitted after a wait";
        if (run.stillWaiting > 0) {
            text += ", " + std::to_string(run.stillWaiting) +
                    " still waiting when the model stopped: the traffic outruns the rule";
        }
        text += ")";
    }
    if (run.never > 0) {
        text += "; never: " + std::to_string(run.never) + " (cost above the limit)";
    }
    return text;
}

/// More batches than this are listed as rows per bin of time.
inline constexpr std::size_t kMaxTableRows = 40;

/// The default output: per batch what each algorithm admitted, the totals, the worst
/// over-admission against each algorithm's design bound, and the longest wait.
inline std::string tableReport(const Replay& r, std::size_t maxRows = kMaxTableRows) {
    std::ostringstream out;
    const auto& t = r.traffic;
    const std::vector<Batch>& batches = r.runs.front().batches;
    out << "rule      " << ruleText(r.rule) << "  (windows start at 0s and every "
        << formatDuration(r.rule.period) << "; the buckets start full with " << r.rule.burst
        << ")\n";
    out << "traffic   " << t.requests.size() << (t.requests.size() == 1 ? " request" : " requests")
        << " in " << batches.size() << (batches.size() == 1 ? " batch" : " batches") << ", "
        << t.keys.size() << (t.keys.size() == 1 ? " key" : " keys") << ", from "
        << formatDuration(batches.front().at) << " to " << formatDuration(batches.back().at)
        << "\n\n";

    std::string note;
    const std::vector<TableRow> rows = tableRows(r, maxRows, note);
    out << "admitted per batch (each request tried once; a refused one is dropped)\n";
    if (!note.empty()) {
        out << "(" << note << ")\n";
    }
    std::size_t timeWidth = detail::kTimeColumnWidth;
    for (const TableRow& row : rows) {
        timeWidth = std::max(timeWidth, row.label.size());
    }
    std::vector<std::size_t> widths;
    out << "  " << detail::padRight("time", timeWidth) << "  "
        << detail::padLeft("sent", detail::kCountColumnWidth);
    for (const AlgorithmRun& run : r.runs) {
        widths.push_back(std::max(nameOf(run.algorithm).size(), detail::kCountColumnWidth));
        out << "  " << detail::padLeft(std::string(nameOf(run.algorithm)), widths.back());
    }
    out << "\n";
    const auto line = [&](const std::string& label, std::int64_t sent,
                          const std::vector<std::int64_t>& admitted) {
        out << "  " << detail::padRight(label, timeWidth) << "  "
            << detail::padLeft(std::to_string(sent), detail::kCountColumnWidth);
        for (std::size_t a = 0; a < admitted.size(); ++a) {
            out << "  " << detail::padLeft(std::to_string(admitted[a]), widths[a]);
        }
        out << "\n";
    };
    for (const TableRow& row : rows) {
        line(row.label, row.sent, row.admitted);
    }
    std::vector<std::int64_t> totals;
    std::vector<std::int64_t> units;
    for (const AlgorithmRun& run : r.runs) {
        totals.push_back(run.admittedRequests);
        units.push_back(run.admittedUnits);
    }
    line("total", r.runs.front().sentRequests, totals);
    if (!detail::unitCosts(t)) {
        line("units", r.runs.front().sentUnits, units);
    }

    std::size_t nameWidth = 0;
    for (const AlgorithmRun& run : r.runs) {
        nameWidth = std::max(nameWidth, nameOf(run.algorithm).size());
    }
    out << "\nworst over-admission: the most admitted on one key in any [t, t + "
        << formatDuration(r.rule.period) << "), minus " << r.rule.count << "\n";
    std::size_t overWidth = 0;
    for (const AlgorithmRun& run : r.runs) {
        overWidth = std::max(overWidth, overAdmissionText(r, run).size());
    }
    for (const AlgorithmRun& run : r.runs) {
        out << "  " << detail::padRight(std::string(nameOf(run.algorithm)), nameWidth) << "  "
            << detail::padRight(overAdmissionText(r, run), overWidth) << "  " << boundText(run)
            << "\n";
    }
    out << "\nlongest wait: refused clients retry at now + retryAfter until admitted\n";
    for (const AlgorithmRun& run : r.runs) {
        out << "  " << detail::padRight(std::string(nameOf(run.algorithm)), nameWidth) << "  "
            << waitText(run) << "\n";
    }
    return out.str();
}

/// A millisecond has 10^6 ns, so its fraction takes six decimals.
inline constexpr std::size_t kMillisecondDecimals = 6;

/// Milliseconds as a JSON number, exact: `59000`, `983.333333`.
inline std::string jsonMilliseconds(Nanos d) {
    const std::int64_t ns = d.count();
    std::string text = std::to_string(ns / 1'000'000);  // the replay's times are never negative
    if (std::int64_t rest = ns % 1'000'000; rest != 0) {
        std::string digits = std::to_string(rest);
        digits = std::string(kMillisecondDecimals - digits.size(), '0') + digits;
        while (digits.back() == '0') {
            digits.pop_back();
        }
        text += "." + digits;
    }
    return text;
}

/// For programs: the rule, then for each algorithm (by its snake_case name) its batches
/// (`t_ms`, `sent`, `admitted`) and totals.
inline std::string jsonReport(const Replay& r) {
    std::ostringstream out;
    out << "{\n  \"rule\": {\"count\": " << r.rule.count
        << ", \"period_ms\": " << jsonMilliseconds(r.rule.period) << ", \"burst\": " << r.rule.burst
        << "},\n  \"requests\": " << r.traffic.requests.size()
        << ",\n  \"keys\": " << r.traffic.keys.size() << ",\n  \"algorithms\": {";
    for (std::size_t a = 0; a < r.runs.size(); ++a) {
        const AlgorithmRun& run = r.runs[a];
        out << (a == 0 ? "\n" : ",\n") << "    \"" << nameOf(run.algorithm)
            << "\": {\n      \"batches\": [";
        for (std::size_t b = 0; b < run.batches.size(); ++b) {
            const Batch& batch = run.batches[b];
            out << (b == 0 ? "\n" : ",\n") << "        {\"t_ms\": " << jsonMilliseconds(batch.at)
                << ", \"sent\": " << batch.sent << ", \"admitted\": " << batch.admitted << "}";
        }
        out << "\n      ],\n      \"totals\": {\"sent\": " << run.sentRequests
            << ", \"admitted\": " << run.admittedRequests
            << ", \"refused\": " << run.sentRequests - run.admittedRequests
            << ", \"sent_units\": " << run.sentUnits
            << ", \"admitted_units\": " << run.admittedUnits
            << ",\n                 \"peak_in_period\": " << run.peak
            << ", \"peak_from_ms\": " << jsonMilliseconds(run.peakFrom)
            << ", \"over_admission\": " << std::max<std::int64_t>(run.overAdmission, 0)
            << ", \"over_admission_bound\": " << run.bound
            << ",\n                 \"longest_wait_ms\": " << jsonMilliseconds(run.longestWait)
            << ", \"waited\": " << run.waited << ", \"still_waiting\": " << run.stillWaiting
            << ", \"never\": " << run.never
            << ", \"waits_complete\": " << (run.waitsComplete ? "true" : "false") << "}\n    }";
    }
    out << "\n  }\n}\n";
    return out.str();
}

}  // namespace explore
