"""Instructions per request by layer, from callgrind dumps (scripts/perf-floor, CALLGRIND=N).

    callgrind_layers.py N NAME=FILE [NAME=FILE ...]            own instructions per layer
    callgrind_layers.py N --top K NAME=FILE                    the K costliest functions
    callgrind_layers.py N --inclusive NAME=FILE PATTERN ...    under functions (callees too)

Reads the dump files themselves (not callgrind_annotate's output: its function list of
callgrind 3.19 adds callees' costs to Rust functions, and its PROGRAM TOTALS is the dump's
`summary:` line, which on a multi-threaded program under-counts): a function's own
instructions are the cost lines under its `fn=` that do not follow a `calls=` line, and
their sum is the dump's `totals:`. Each function is put in the layer of its crate (the first
path segment of its symbol; for a std/core/alloc generic such as `drop_in_place<T>` or
`Vec<T>::push`, the first other crate named inside it, whose type it works for), or by name
for C symbols. Release builds carry line tables only, so inlined code counts in the function
it was inlined into.
"""

import re
import sys
from collections import Counter, defaultdict

# Crate (first path segment) -> layer. Anything else: "other: <crate>".
CRATES = {
    **dict.fromkeys(["hyper", "hyper_util", "h2", "httparse", "http", "http_body", "http_body_util", "httpdate"], "hyper / http"),
    **dict.fromkeys(["tokio", "mio", "tokio_util", "tokio_stream"], "tokio (runtime, I/O, timers)"),
    **dict.fromkeys(["redis", "combine", "arcstr", "arc_swap"], "Redis client"),
    **dict.fromkeys(["serde_json", "serde", "serde_core"], "serde_json / serde"),
    **dict.fromkeys(
        ["tracing", "tracing_core", "tracing_subscriber", "tracing_opentelemetry", "opentelemetry", "opentelemetry_sdk",
         "sharded_slab", "thread_local"],
        "tracing",
    ),
    "prometheus": "metrics (prometheus)",
    **dict.fromkeys(
        ["axum", "axum_core", "tower", "tower_http", "tower_layer", "tower_service", "matchit"], "axum / tower / tower-http"
    ),
    **dict.fromkeys(["taskgate_gateway", "taskgate_shared", "taskgate_gateway_bin"], "taskgate code"),
    "floor_probe": "probe code",
    **dict.fromkeys(["mimalloc", "libmimalloc_sys", "__rust_alloc", "__rust_dealloc", "__rust_realloc", "__rdl_alloc", "__rustc"],
                    "allocator (mimalloc)"),
    **dict.fromkeys(["futures", "futures_util", "futures_core", "futures_channel", "pin_project_lite", "atomic_waker"], "futures"),
    "bytes": "bytes",
    **dict.fromkeys(["core", "alloc", "std", "hashbrown", "lru", "smallvec", "itoa", "ryu", "memchr", "parking_lot",
                     "parking_lot_core", "lock_api"],
                    "Rust std/core/alloc (fmt, collections, atomics)"),
}
STD = {"core", "alloc", "std"}
STD_LAYER = CRATES["core"]
C_SYMBOLS = [
    ("allocator (mimalloc)", r"^_?mi_|^mi_|^__rust_(alloc|dealloc|realloc|alloc_zeroed)|^__rdl_"),
    ("memcpy / memmove / memset / memcmp", r"mem(cpy|move|set|cmp|chr)|^bcmp|^__memcpy|^__memmove|^__memset"),
    ("libc / kernel entry (syscalls, locks, clock)", r"."),
]
SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?=::)")


def crate_of(symbol):
    m = SEGMENT.search(symbol)
    if not m:
        return None
    crate = m.group(0)
    if crate in STD:
        # A generic of std working for another crate's type counts as that crate.
        for other in SEGMENT.finditer(symbol):
            name = other.group(0)
            if name not in STD and CRATES.get(name, STD_LAYER) != STD_LAYER:
                return name
    return crate


def layer_of(symbol):
    crate = crate_of(symbol)
    if crate is not None:
        return CRATES.get(crate, f"other: {crate}")
    return next(name for name, rx in C_SYMBOLS if re.search(rx, symbol))


def parse(path):
    """(own instructions per function, {(caller, callee): inclusive instructions of calls}, totals)."""
    names = {}
    own, calls = Counter(), Counter()
    fn = callee = None
    after_calls = False
    totals = None

    def name(value):
        m = re.match(r"\((\d+)\)(?:\s(.*))?$", value)
        if not m:
            return value
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), "?")

    with open(path) as f:
        for line in f:
            c = line[:1]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                if after_calls:
                    calls[(fn, callee)] += cost
                    after_calls = False
                else:
                    own[fn] += cost
            elif line.startswith("fn="):
                fn = name(line[3:].rstrip("\n"))
            elif line.startswith("cfn="):
                callee = name(line[4:].rstrip("\n"))
            elif line.startswith("calls="):
                after_calls = True
            elif line.startswith("totals:"):
                totals = int(line.split()[1])
    total = sum(own.values())
    if totals is not None and totals != total:
        sys.exit(f"{path}: own costs add up to {total}, the dump says {totals}")
    return own, calls, total


def main():
    args = sys.argv[1:]
    n = int(args.pop(0))
    if args[0] == "--top":
        k = int(args[1])
        label, path = args[2].split("=", 1)
        own, _, total = parse(path)
        print(f"| {label}: function (own instructions) | layer | per request | share |")
        print("|---|---|---|---|")
        for fn, ir in own.most_common(k):
            print(f"| `{fn[:110]}` | {layer_of(fn)} | {ir / n:,.0f} | {100 * ir / total:.1f} % |")
        return
    if args[0] == "--inclusive":
        label, path = args[1].split("=", 1)
        own, calls, total = parse(path)
        print(f"| {label}: under function (callees included) | per request | share |")
        print("|---|---|---|")
        for pattern in args[2:]:
            best = 0
            for fn in own:
                if pattern in fn:
                    under = own[fn] + sum(ir for (caller, callee), ir in calls.items() if caller == fn and callee != fn)
                    best = max(best, under)
            print(f"| `{pattern}` | {best / n:,.0f} | {100 * best / total:.1f} % |")
        return
    servers = []
    for arg in args:
        label, path = arg.split("=", 1)
        own, _, total = parse(path)
        layers = defaultdict(int)
        for fn, ir in own.items():
            layers[layer_of(fn)] += ir
        servers.append((label, layers, total))
    order = sorted({layer for _, layers, _ in servers for layer in layers},
                   key=lambda layer: -max(layers.get(layer, 0) for _, layers, _ in servers))
    print("| layer (own instructions per request) | " + " | ".join(label for label, _, _ in servers) + " |")
    print("|---" * (len(servers) + 1) + "|")
    rest = [0] * len(servers)
    for layer in order:
        values = [layers.get(layer, 0) / n for _, layers, _ in servers]
        if max(values) < 100:
            rest = [r + v for r, v in zip(rest, values)]
            continue
        print(f"| {layer} | " + " | ".join(f"{v:,.0f}" for v in values) + " |")
    print("| the rest (layers under 100 each) | " + " | ".join(f"{v:,.0f}" for v in rest) + " |")
    print("| **total** | " + " | ".join(f"**{total / n:,.0f}**" for _, _, total in servers) + " |")


main()
