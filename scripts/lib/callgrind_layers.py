"""Groups a callgrind profile by layer, for scripts/perf-floor (CALLGRIND=N).

Reads `callgrind_annotate --threshold=100 [--inclusive=yes]` output on stdin: with
`exclusive`, sums each function's own instructions into the layer its symbol belongs to (the
crate, or the allocator, libc, ...); with `inclusive`, prints the instructions under chosen
gateway functions (a layer's whole cost, its callees included). Both per request (argv[2]).
"""

import re
import sys

LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(?:\S+:)?(.*?)(?:\s+\[(.*)\])?$")

# First match wins: a symbol's crate or the library it comes from.
LAYERS = [
    ("allocator (mimalloc, malloc/free)", r"^(_?mi_|mi_|malloc|free|realloc|calloc|__libc_malloc|_int_malloc|_int_free|cfree)"),
    ("memcpy/memmove/memset", r"^(__)?mem(cpy|move|set|cmp)|__memcpy|__memmove|__memset"),
    ("hyper / hyper-util / h2 / httparse / http", r"^(<)?(hyper|hyper_util|h2|httparse|http|http_body|http_body_util)::|^<(hyper|hyper_util|h2|http)::"),
    ("tokio runtime and I/O", r"^<?(tokio|mio|tokio_util)::|^<tokio"),
    ("Redis client", r"^<?(redis|combine)::|^<redis"),
    ("serde_json / serde", r"^<?(serde_json|serde|serde_core)::|^<serde"),
    ("tracing / tracing-subscriber / opentelemetry", r"^<?(tracing|tracing_core|tracing_subscriber|tracing_opentelemetry|opentelemetry\w*)::|^<tracing"),
    ("metrics (prometheus)", r"^<?prometheus::|^<prometheus"),
    ("axum / tower / tower-http", r"^<?(axum|axum_core|tower|tower_http|tower_layer|tower_service|matchit)::|^<(axum|tower)"),
    ("taskgate gateway", r"taskgate_gateway::"),
    ("taskgate shared", r"taskgate_shared::"),
    ("futures", r"^<?futures\w*::|^<futures"),
    ("Rust std/core/alloc (fmt, collections, strings)", r"^<?(core|alloc|std|hashbrown)::|^<(core|alloc|std|&)"),
    ("libc / ld.so (syscall wrappers, locks)", r"libc|ld-linux|^__|^_dl|pthread|^epoll|^send|^recv|^write|^read|syscall"),
]


def rows(text):
    for line in text.splitlines():
        m = LINE.match(line)
        if m and m.group(2) and not line.strip().startswith("Ir"):
            yield int(m.group(1).replace(",", "")), m.group(2).strip(), m.group(3) or ""


def main():
    mode, n = sys.argv[1], int(sys.argv[2])
    text = sys.stdin.read()
    total = 0
    for line in text.splitlines():
        m = re.match(r"^\s*([\d,]+).*PROGRAM TOTALS", line)
        if m:
            total = int(m.group(1).replace(",", ""))
    if mode == "exclusive":
        sums = {}
        for ir, fn, obj in rows(text):
            layer = next((name for name, rx in LAYERS if re.search(rx, fn)), None)
            if layer is None:
                layer = "other: " + (obj.rsplit("/", 1)[-1] or "?")
            sums[layer] = sums.get(layer, 0) + ir
        print(f"| layer (own instructions) | per request | share |")
        print("|---|---|---|")
        for layer, ir in sorted(sums.items(), key=lambda kv: -kv[1]):
            if ir / n >= 50:
                print(f"| {layer} | {ir / n:,.0f} | {100 * ir / total:.1f} % |")
        print(f"| **total** | **{total / n:,.0f}** | 100 % |")
    else:
        # Functions named on the command line (substrings of the symbol), inclusive.
        for pattern in sys.argv[3:]:
            best = max((ir for ir, fn, _ in rows(text) if pattern in fn), default=0)
            print(f"| `{pattern}` | {best / n:,.0f} | {100 * best / total:.1f} % |")


main()
