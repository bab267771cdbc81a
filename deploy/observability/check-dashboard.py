#!/usr/bin/env python3
"""Check that the taskgate Grafana dashboard only queries metrics that exist.

Usage:
    check-dashboard.py [METRIC_NAMES_FILE] [--dashboard PATH]

Loads the dashboard JSON (by default grafana-dashboard.json next to this script), walks every
panel, including panels nested in collapsed rows, and extracts every metric name
(`taskgate_[a-z0-9_]+`) from every target's `expr` and from the template variables' queries.
Histogram series suffixes (_bucket, _sum, _count) are stripped, so a histogram is named once.

METRIC_NAMES_FILE holds one metric name per line. Blank lines and lines starting with '#' are
skipped, and only a line's leading name is read, so the raw text of a /metrics scrape works too:

    curl -s http://GATEWAY:8080/metrics  >  names.txt
    curl -s http://WORKER:9090/metrics   >> names.txt
    deploy/observability/check-dashboard.py names.txt

Exit status 1 when the JSON is invalid, when a panel (other than a row) has no targets or a
target has no expr, or when a metric the dashboard names is not in the file. Without the file,
only the structure is checked and the names the dashboard uses are printed.

Standard library only.
"""

import argparse
import json
import os
import re
import sys

METRIC_RE = re.compile(r"taskgate_[a-z0-9_]+")
LINE_NAME_RE = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def base_name(name):
    """A histogram's series name without its _bucket/_sum/_count suffix."""
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def walk_panels(panels, path=()):
    """Yields (title path, panel) for every panel, descending into rows' nested panels."""
    for panel in panels or []:
        title = panel.get("title") or "<untitled id={}>".format(panel.get("id"))
        here = path + (title,)
        yield here, panel
        if panel.get("panels"):
            yield from walk_panels(panel["panels"], here)


def template_queries(dashboard):
    """The query text of every query-type template variable."""
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        if isinstance(query, str) and query:
            yield var.get("name", "?"), query
        definition = var.get("definition")
        if isinstance(definition, str) and definition:
            yield var.get("name", "?"), definition


def read_names(path):
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            match = LINE_NAME_RE.match(stripped)
            if match:
                names.add(base_name(match.group(1)))
    return names


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="?", help="file with one metric name per line (or a /metrics scrape)")
    parser.add_argument("--dashboard", default=os.path.join(here, "grafana-dashboard.json"),
                        help="dashboard JSON (default: %(default)s)")
    args = parser.parse_args()

    try:
        with open(args.dashboard, encoding="utf-8") as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as err:
        print("error: cannot load {}: {}".format(args.dashboard, err), file=sys.stderr)
        return 1
    if not isinstance(dashboard, dict) or not isinstance(dashboard.get("panels"), list):
        print("error: {} has no top-level \"panels\" list".format(args.dashboard), file=sys.stderr)
        return 1

    problems = []
    used = {}  # base metric name -> panel titles that use it
    panel_count = 0
    for path, panel in walk_panels(dashboard["panels"]):
        if panel.get("type") == "row":
            continue
        panel_count += 1
        where = " / ".join(path)
        targets = panel.get("targets") or []
        if not targets:
            problems.append("panel {!r} has no targets".format(where))
            continue
        for target in targets:
            expr = target.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                problems.append("panel {!r} target {} has no expr".format(where, target.get("refId", "?")))
                continue
            names = METRIC_RE.findall(expr)
            if not names:
                problems.append("panel {!r} target {} names no taskgate_ metric".format(where, target.get("refId", "?")))
            for name in names:
                used.setdefault(base_name(name), set()).add(where)
    for var_name, query in template_queries(dashboard):
        for name in METRIC_RE.findall(query):
            used.setdefault(base_name(name), set()).add("variable $" + var_name)

    if panel_count == 0:
        problems.append("the dashboard has no panels")

    if args.names:
        try:
            known = read_names(args.names)
        except OSError as err:
            print("error: cannot read {}: {}".format(args.names, err), file=sys.stderr)
            return 1
        for name in sorted(set(used) - known):
            problems.append("metric {} is not in {} (used by: {})".format(
                name, args.names, "; ".join(sorted(used[name]))))
    else:
        for name in sorted(used):
            print(name)

    if problems:
        for problem in problems:
            print("FAIL: " + problem, file=sys.stderr)
        return 1
    print("ok: {} panels, {} metric names{}".format(
        panel_count, len(used), ", all in " + args.names if args.names else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
