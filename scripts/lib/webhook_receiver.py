"""An HTTPS webhook receiver for scripts/perf-webhooks.

Answers every POST with 200 (echoing a verification challenge), and for each event records the
lag from its `timestamp` (the task change, Redis's clock on this machine) to its arrival, once
per `eventId`; a second arrival of an id counts as a duplicate. GET /stats answers the counts
and the lag percentiles in ms as JSON. Usage: webhook_receiver.py PORT CERT KEY
"""

import datetime
import http.server
import json
import ssl
import sys
import threading
import time

lock = threading.Lock()
lags = []
seen = set()
duplicates = 0


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        global duplicates
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        arrived = time.time()
        try:
            doc = json.loads(body)
        except ValueError:
            doc = {}
        if doc.get("type") == "verification":
            self.reply(json.dumps({"challenge": doc.get("challenge")}).encode())
            return
        event_id, stamp = doc.get("eventId"), doc.get("timestamp")
        if event_id and stamp:
            changed = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            with lock:
                if event_id in seen:
                    duplicates += 1
                else:
                    seen.add(event_id)
                    lags.append((arrived - changed) * 1000.0)
        self.reply(b"")

    def do_GET(self):
        with lock:
            stats = {
                "events": len(lags),
                "duplicates": duplicates,
                "p50_ms": percentile(lags, 0.50),
                "p99_ms": percentile(lags, 0.99),
                "max_ms": max(lags) if lags else None,
            }
        self.reply(json.dumps(stats).encode())


def main():
    port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
