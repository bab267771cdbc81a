"""Sends exactly N `tasks/get` requests over one keep-alive connection and stops: the fixed
count scripts/perf-floor's CALLGRIND mode divides a server's instructions by.

Usage: tasks-get-repeat.py PORT N (TASK_ID from the environment). The request is the one
scripts/lib/wrk-tasks-get.lua sends (same body and headers). wrk is not used here: its main
thread sleeps for the whole `-d` even after `thread:stop()`, so a fixed count cost the full
duration per call. Every reply must be a 200 with a `result`, or this exits non-zero naming it.
"""

import http.client
import os
import sys

port, count = int(sys.argv[1]), int(sys.argv[2])
task = os.environ["TASK_ID"]
body = (
    '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"' + task + '",'
    '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    '"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}},"elicitation":{}}}}}'
).encode()
headers = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tasks/get",
    "Mcp-Name": task,
    "Content-Length": str(len(body)),
}
# Valgrind slows the server down some fifty times: a generous timeout per reply.
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for i in range(count):
    conn.putrequest("POST", "/mcp", skip_accept_encoding=True)
    for name, value in headers.items():
        conn.putheader(name, value)
    conn.endheaders(body)
    reply = conn.getresponse()
    text = reply.read()
    if reply.status != 200 or b'"result"' not in text:
        sys.exit(f"request {i + 1} of {count}: status {reply.status}: {text[:300]!r}")
conn.close()
