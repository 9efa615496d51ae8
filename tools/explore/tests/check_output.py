"""Reads the explorer's outputs back with Python's own parsers (ctest explore_output_parses).

Runs the explorer (argv[1]) on the boundary burst with --json and --svg: the JSON must load, the
SVG must be well-formed XML with one lane per algorithm of the JSON, in its order, and as many
admitted marks, counting as many requests, as the JSON's batches. Then bad input must give exit
status 1, a message naming the place, no output and no chart.
"""

import json
import os
import subprocess
import sys
import tempfile
import xml.dom.minidom


def main() -> int:
    explorer = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        chart = os.path.join(tmp, "chart.svg")
        done = subprocess.run(
            [explorer, "--rule", "100/min", "--boundary-burst", "--json", "--svg", chart],
            check=True, capture_output=True, text=True)
        data = json.loads(done.stdout)
        algorithms = data["algorithms"]
        lanes = [g for g in xml.dom.minidom.parse(chart).getElementsByTagName("g")
                 if g.getAttribute("class") == "lane"]
        names = [g.getAttribute("data-algorithm") for g in lanes]
        assert names == list(algorithms), (names, list(algorithms))
        assert len(names) == 5, names
        for lane in lanes:
            run = algorithms[lane.getAttribute("data-algorithm")]
            marks = [r for r in lane.getElementsByTagName("rect")
                     if r.getAttribute("class") == "admitted"]
            assert len(marks) == sum(1 for b in run["batches"] if b["admitted"] > 0), lane
            assert sum(int(m.getAttribute("data-count")) for m in marks) == \
                run["totals"]["admitted"], lane
        assert [b["admitted"] for b in algorithms["fixed_window"]["batches"]] == [100, 100]
        assert [b["admitted"] for b in algorithms["sliding_log"]["batches"]] == [100, 0]
        assert algorithms["fixed_window"]["totals"]["over_admission"] == 100

        bad = os.path.join(tmp, "bad.csv")
        with open(bad, "w", encoding="utf-8") as f:
            f.write("time,key,cost\n0s,a,1\n30s,a\n")
        os.remove(chart)
        refused = subprocess.run(
            [explorer, "--rule", "10/min", "--traffic-file", bad, "--svg", chart],
            check=False, capture_output=True, text=True)
        assert refused.returncode == 1, refused.returncode
        assert refused.stdout == "", refused.stdout
        assert f"{bad}:3: expected 3 fields" in refused.stderr, refused.stderr
        assert not os.path.exists(chart)
    print("explorer outputs parse: 5 lanes, marks match the JSON; bad CSV refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
