#pragma once

// The explorer's command line: `run(args, out, err)` is the whole program, so the tests drive
// it the way a user does. Nothing reaches `out` (or the --svg file) unless everything
// succeeded.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/limit.hpp>

#include "replay.hpp"
#include "report.hpp"
#include "svg.hpp"
#include "traffic.hpp"

namespace explore {

inline constexpr std::string_view kHelp =
    R"(ratelimit-explore: replay traffic against the rate-limiting algorithms and compare.

Usage:
  ratelimit-explore --rule RULE TRAFFIC... [--algorithms LIST] [--json] [--svg FILE]
  ratelimit-explore --help
  ratelimit-explore            (no arguments: a demo, --rule 10/min --traffic '0s:10 30s:5 70s:5')

The traffic is replayed with the library's own limiters (in memory, a manual clock set to each
request's time), so the answers are the ones production code gets. Time starts at 0s, where the
window algorithms' windows start (every period from there); the buckets start full.

Rule:
  --rule RULE            as Limit::parse reads it: 10/min, 100/s burst 20, 5/90s, 1000/h

Traffic (at least one; several add up):
  --traffic 'T:N ...'    N requests at time T, items separated by spaces or commas:
                         '0s:10 30s:5 70s:5'. Times: 59s, 1m10s, 1.5s, 250ms, 2h (units ns us
                         ms s m/min h d; no negative times)
  --traffic-file FILE    CSV lines time,key,cost (e.g. 1m10s,alice,1); '#' comments, blank lines
                         and a header line time,key,cost are skipped; a key may be quoted
  --steady RATE          evenly spaced requests from 0s at RATE (10/s, 3/min) ...
  --duration D           ... for D (default: two periods of the rule)
  --burst N@T            N requests at T (repeatable): --burst 50@30s
  --boundary-burst       the rule's count just before the first window edge and the count at it
                         (100 at 59s and 100 at 1m for 100/min)
  Inline and generated requests use the key "client" and cost 1.

Choice and output:
  --algorithms LIST      comma-separated, default all: fixed_window, sliding_log,
                         sliding_counter, token_bucket, leaky_bucket
  --json                 JSON instead of the table: per algorithm its batches (t_ms, sent,
                         admitted) and its totals
  --svg FILE             also draw the replay as an SVG chart: a lane per algorithm, admitted and
                         refused requests per batch, the rule's envelope (count in any period)
                         and the count admitted in the trailing period
  --title TEXT           the chart's title (default: the rule and the traffic)
  --help, -h             this text

What the table reports:
  per batch      the requests admitted when each is tried once and a refusal drops it
  over-admission the most admitted on one key in any half-open [t, t + period), minus count,
                 next to what the algorithm allows by design: fixed window +count (count before
                 a window edge, count after it), sliding log 0, sliding counter +count-1, token
                 and leaky bucket +burst-1 (a full bucket, then the refill)
  longest wait   a second replay where a refused client retries at now + retryAfter until it
                 is admitted; requests that can never pass (cost above the limit) are counted
                 as "never"

Exit status: 0 on success, 1 for bad input (rule, traffic, file), 2 for a bad command line.
)";

/// What the command line asked for.
struct CommandLine {
    bool help = false;
    std::optional<ratelimit::Limit> rule;
    std::vector<std::string> inlineTraffic;
    std::vector<std::string> trafficFiles;
    Generator generator;
    std::optional<Nanos> duration;
    std::vector<Algorithm> algorithms;
    bool json = false;
    std::string svgFile;
    std::string title;
};

/// A command-line mistake (unknown option, missing value): exit status 2.
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// The demo run with no arguments: the first worked scenario (docs/explore.md).
inline std::vector<std::string> demoArguments() {
    return {"--rule", "10/min", "--traffic", "0s:10 30s:5 70s:5"};
}

namespace detail {

/// Walks the arguments as options with their values, `--name value` or `--name=value`.
class OptionCursor {
public:
    explicit OptionCursor(std::span<const std::string> args) : args_(args) {}

    /// Moves to the next option; false after the last.
    bool next() {
        if (next_ >= args_.size()) {
            return false;
        }
        option_ = args_[next_++];
        attached_.reset();
        if (const std::size_t eq = option_.find('=');
            option_.rfind("--", 0) == 0 && eq != std::string::npos) {
            attached_ = option_.substr(eq + 1);
            option_.resize(eq);
        }
        return true;
    }

    [[nodiscard]] const std::string& option() const { return option_; }

    /// The option's value: attached with `=`, or the next argument. Throws: `UsageError`.
    std::string value() {
        if (attached_) {
            return *attached_;
        }
        if (next_ >= args_.size()) {
            throw UsageError(option_ + " needs a value");
        }
        return args_[next_++];
    }

    /// For an option that takes no value. Throws: `UsageError` when one is attached.
    void flag() const {
        if (attached_) {
            throw UsageError(option_ + " takes no value");
        }
    }

private:
    std::span<const std::string> args_;
    std::size_t next_ = 0;
    std::string option_;
    std::optional<std::string> attached_;
};

/// A rule or a rate in `Limit::parse`'s grammar. Throws: `InputError` naming the option.
inline ratelimit::Limit parseLimit(std::string_view option, const std::string& text) {
    try {
        return ratelimit::Limit::parse(text);
    } catch (const std::invalid_argument& e) {
        fail(option, e.what());
    }
}

/// `--steady RATE`: a rate is a rule without a burst. Throws: `InputError`.
inline void setSteady(const std::string& text, Generator& generator) {
    const ratelimit::Limit rate = parseLimit("--steady", text);
    if (rate.burst != rate.count) {
        fail("--steady " + detail::quoted(text), "a rate has no burst");
    }
    generator.steadyCount = rate.count;
    generator.steadyPeriod = rate.period;
}

/// `--algorithms LIST`: adds each named algorithm once, in the order given. Throws:
/// `InputError` for an unknown name.
inline void addAlgorithms(std::string_view list, std::vector<Algorithm>& algorithms) {
    std::size_t pos = 0;
    while (pos <= list.size()) {
        const std::size_t comma = std::min(list.find(',', pos), list.size());
        const std::string_view name = trim(list.substr(pos, comma - pos));
        const std::optional<Algorithm> a = algorithmNamed(name);
        if (!a) {
            fail("--algorithms", "unknown algorithm " + detail::quoted(name) +
                                     " (use fixed_window, sliding_log, sliding_counter, "
                                     "token_bucket, leaky_bucket)");
        }
        if (std::find(algorithms.begin(), algorithms.end(), *a) == algorithms.end()) {
            algorithms.push_back(*a);
        }
        pos = comma + 1;
    }
}

/// Applies the cursor's option to `cl`. Throws: `UsageError`, `InputError`.
inline void applyOption(OptionCursor& args, CommandLine& cl) {
    const std::string& option = args.option();
    if (option == "--help" || option == "-h") {
        args.flag();
        cl.help = true;
    } else if (option == "--rule") {
        cl.rule = parseLimit("--rule", args.value());
    } else if (option == "--traffic") {
        cl.inlineTraffic.push_back(args.value());
    } else if (option == "--traffic-file") {
        cl.trafficFiles.push_back(args.value());
    } else if (option == "--steady") {
        setSteady(args.value(), cl.generator);
    } else if (option == "--duration") {
        cl.duration = parseDuration(args.value(), "--duration");
    } else if (option == "--burst") {
        cl.generator.bursts.push_back(parseBurst(args.value()));
    } else if (option == "--boundary-burst") {
        args.flag();
        cl.generator.boundaryBurst = true;
    } else if (option == "--algorithms") {
        addAlgorithms(args.value(), cl.algorithms);
    } else if (option == "--json") {
        args.flag();
        cl.json = true;
    } else if (option == "--svg") {
        cl.svgFile = args.value();
        if (cl.svgFile.empty()) {
            throw UsageError("--svg needs a file name");
        }
    } else if (option == "--title") {
        cl.title = args.value();
    } else if (option.rfind('-', 0) != 0) {
        throw UsageError("unexpected argument " + detail::quoted(option) +
                         "; quote a value that holds spaces, as in --rule '100/s burst 20'");
    } else {
        throw UsageError("unknown option " + detail::quoted(option));
    }
}

/// Checks that the options make a run and fills in the defaults. Throws: `UsageError`.
inline void completeCommandLine(CommandLine& cl) {
    const bool steady = cl.generator.steadyCount > 0;  // a rate's count is at least 1
    if (!cl.rule) {
        throw UsageError("--rule is required (e.g. --rule 10/min)");
    }
    if (cl.duration && !steady) {
        throw UsageError("--duration only applies to --steady");
    }
    if (steady) {
        cl.generator.duration = cl.duration.value_or(2 * cl.rule->period);
    }
    if (cl.inlineTraffic.empty() && cl.trafficFiles.empty() && !steady &&
        cl.generator.bursts.empty() && !cl.generator.boundaryBurst) {
        throw UsageError(
            "no traffic: give --traffic, --traffic-file, --steady, --burst or --boundary-burst");
    }
    if (cl.algorithms.empty()) {
        cl.algorithms.assign(kAllAlgorithms.begin(), kAllAlgorithms.end());
    }
}

}  // namespace detail

/// Parses the arguments (without the program name). Throws: `UsageError` for an unknown option
/// or a missing value, `InputError` for a bad rule, rate, burst or algorithm name.
inline CommandLine parseCommandLine(const std::vector<std::string>& args) {
    CommandLine cl;
    detail::OptionCursor cursor(args);
    while (cursor.next()) {
        detail::applyOption(cursor, cl);
    }
    if (!cl.help) {
        detail::completeCommandLine(cl);
    }
    return cl;
}

/// Reads every traffic source of the command line. Throws: `InputError`.
inline Traffic buildTraffic(const CommandLine& cl) {
    TrafficBuilder builder;
    for (const std::string& text : cl.inlineTraffic) {
        parseInlineTraffic(text, builder);
    }
    for (const std::string& file : cl.trafficFiles) {
        std::ifstream in(file);
        if (!in) {
            throw InputError(file + ": cannot open");
        }
        readCsv(in, file, builder);
    }
    generate(cl.generator, *cl.rule, builder);
    return std::move(builder).build();
}

/// The whole program: parses `args` (without the program name), replays, writes the table or
/// the JSON to `out` and the chart to the --svg file. On any error it writes one message to
/// `err`, nothing to `out`, no file, and returns non-zero.
inline int run(std::vector<std::string> args, std::ostream& out, std::ostream& err) {
    constexpr std::string_view kProgram = "ratelimit-explore: ";
    bool demo = false;
    if (args.empty()) {
        args = demoArguments();
        demo = true;
    }
    try {
        const CommandLine cl = parseCommandLine(args);
        if (cl.help) {
            out << kHelp;
            return 0;
        }
        Replay replayed = [&] {
            try {
                return replay(*cl.rule, buildTraffic(cl), cl.algorithms);
            } catch (const std::invalid_argument& e) {  // a rule the storage cannot hold
                throw InputError(std::string("--rule: ") + e.what());
            }
        }();
        std::string text = cl.json ? jsonReport(replayed) : tableReport(replayed);
        if (demo) {
            text =
                "(no arguments: a demo, the same as ratelimit-explore --rule 10/min --traffic "
                "'0s:10 30s:5 70s:5'; see --help)\n\n" +
                text;
        }
        if (!cl.svgFile.empty()) {
            const std::string svg = svgReport(replayed, cl.title);
            std::ofstream file(cl.svgFile, std::ios::binary | std::ios::trunc);
            file << svg;
            file.close();
            if (!file) {
                throw InputError(cl.svgFile + ": cannot write the chart");
            }
        }
        out << text;
        out.flush();
        return 0;
    } catch (const UsageError& e) {
        err << kProgram << e.what() << " (see --help)\n";
        return 2;
    } catch (const InputError& e) {
        err << kProgram << e.what() << "\n";
        return 1;
    }
}

}  // namespace explore
