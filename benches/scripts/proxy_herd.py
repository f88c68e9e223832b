#!/usr/bin/env python3
"""Issue 34's figures for `worklane proxy`: N clients sharing one key, each sending M requests
one after another, against a provider whose window allows fewer at once. Counted for each N,
sent directly to the provider and through the proxy: the provider's 429s, the calls that
failed for their client, and the client-visible latency of a call (median, 95th percentile,
worst) with the run's wall time.

The provider is a fake on loopback that behaves as Anthropic does: a token bucket per key of
LIMIT requests refilling continuously over WINDOW seconds, its resets written in RFC 3339 cut
to the whole second, `retry-after` in whole seconds on its 429, and LATENCY seconds to answer.
A client behaves as the official SDKs with retries on: a 429 is retried after its
`retry-after` (at most RETRIES times), so direct clients get their calls done too, late.

Run from the workspace (the proxy feature must be built in):

  cargo build --release -p worklane --features proxy
  python3 benches/scripts/proxy_herd.py [WORKLANE] [N,N,...]

Defaults: target/release/worklane, N = 2,8,32; M = 5, LIMIT = 20, WINDOW = 3 s, LATENCY = 0.1 s.
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORKLANE = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "target/release/worklane")
CLIENTS = [int(n) for n in (sys.argv[2] if len(sys.argv) > 2 else "2,8,32").split(",")]
EACH = 5
LIMIT = 20
WINDOW = 3.0
LATENCY = 0.1
RETRIES = 10


class Bucket:
    """Anthropic's requests limit: LIMIT, refilled continuously over WINDOW."""

    def __init__(self):
        self.lock = threading.Lock()
        self.level = float(LIMIT)
        self.at = time.time()
        self.served = 0
        self.refused = 0

    def take(self):
        with self.lock:
            now = time.time()
            self.level = min(LIMIT, self.level + (now - self.at) * LIMIT / WINDOW)
            self.at = now
            if self.level < 1.0:
                self.refused += 1
                wait = (1.0 - self.level) * WINDOW / LIMIT
                return False, self.level, now, wait
            self.level -= 1.0
            self.served += 1
            return True, self.level, now, 0.0


def fake_provider(bucket):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # As the providers' servers: a response's body is not held back for the ACK of its
        # head (with Nagle on, a kept-alive connection would add the peer's 40 ms delayed ACK).
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def do_POST(self):
            length = int(self.headers.get("content-length", "0"))
            self.rfile.read(length)
            ok, level, now, wait = bucket.take()
            full_at = now + (LIMIT - level) * WINDOW / LIMIT
            # Cut to the whole second, as Anthropic writes its resets: before the true instant.
            reset = datetime.fromtimestamp(int(full_at), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            time.sleep(LATENCY)
            if ok:
                body = json.dumps({
                    "id": "msg_fake", "type": "message", "role": "assistant", "model": "fake",
                    "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                }).encode()
                self.send_response(200)
            else:
                body = json.dumps({"type": "error", "error": {
                    "type": "rate_limit_error", "message": "rate limited"}}).encode()
                self.send_response(429)
                self.send_header("retry-after", str(max(1, int(wait + 0.999))))
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.send_header("anthropic-ratelimit-requests-limit", str(LIMIT))
            self.send_header("anthropic-ratelimit-requests-remaining", str(int(level)))
            self.send_header("anthropic-ratelimit-requests-reset", reset)
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def call(base, key):
    """One call as an SDK with retries makes it: its latency, the 429s it met, its status."""
    body = json.dumps({"model": "fake", "max_tokens": 64,
                       "messages": [{"role": "user", "content": "Say hello."}]}).encode()
    started = time.monotonic()
    met = 0
    for _ in range(RETRIES + 1):
        request = urllib.request.Request(base + "/v1/messages", data=body, method="POST", headers={
            "x-api-key": key, "anthropic-version": "2023-06-01",
            "content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
                return time.monotonic() - started, met, 200
        except urllib.error.HTTPError as e:
            e.read()
            if e.code != 429:
                return time.monotonic() - started, met, e.code
            met += 1
            time.sleep(float(e.headers.get("retry-after", "1")))
    return time.monotonic() - started, met, 429


def clients(base, key, n):
    latencies, statuses, met = [], [], [0]
    lock = threading.Lock()

    def one():
        for _ in range(EACH):
            latency, m, status = call(base, key)
            with lock:
                latencies.append(latency)
                statuses.append(status)
                met[0] += m

    started = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, statuses, met[0], time.monotonic() - started


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def through_proxy(upstream, n):
    slots = tempfile.mkdtemp()
    port = free_port()
    env = dict(os.environ, AGENT_SLOTS_DIR=slots, RUST_LOG="warn")
    proxy = subprocess.Popen(
        [WORKLANE, "proxy", "--provider", "anthropic", "--upstream", upstream,
         "--listen", f"127.0.0.1:{port}", "--max-wait", "120s"],
        env=env, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        # A key whose window the ledger knows (a fleet that has run before).
        call(base, "sk-bench")
        time.sleep(WINDOW)
        return clients(base, "sk-bench", n)
    finally:
        proxy.terminate()
        proxy.wait()


def row(name, n, bucket, result):
    latencies, statuses, met, wall = result
    latencies.sort()
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    failed = sum(1 for s in statuses if s != 200)
    print(f"| {n} | {name} | {bucket.refused} | {failed} | "
          f"{statistics.median(latencies):.2f} s | {p95:.2f} s | {latencies[-1]:.2f} s | {wall:.1f} s |",
          flush=True)


print(f"{EACH} calls per client, {LIMIT} requests per {WINDOW:g} s (token bucket, resets to the "
      f"second), {LATENCY * 1000:.0f} ms per answer; clients retry a 429 after its retry-after\n")
print("| clients | path | provider's 429s | failed calls | median | p95 | worst | wall |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
for n in CLIENTS:
    for name in ["direct", "proxy"]:
        bucket = Bucket()
        server = fake_provider(bucket)
        upstream = f"http://127.0.0.1:{server.server_address[1]}"
        if name == "direct":
            result = clients(upstream, "sk-bench", n)
        else:
            result = through_proxy(upstream, n)
            bucket.served -= 1  # the warm-up call
        row(name, n, bucket, result)
        server.shutdown()
        time.sleep(WINDOW)
