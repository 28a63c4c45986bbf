"""Test double for one node's `python -m sglang.launch_server` of an engine spanning nodes: SGLang cannot run on
this CPU machine (CUDA), nor across nodes on the one lent GPU. It does what SGLang's per-node processes do at the
boundary rlrun drives, and nothing more:

- prints the argv it was given (`ARGV <json>`, in the server's log) so that a test reads what each node got;
- --node-rank 0 listens on --dist-init-addr's port (where SGLang's TCP store listens, PortArgs deriving the
  rest from it) until the other --nnodes - 1 nodes have connected, then serves SGLang's HTTP API (rlrun's hf
  engine on --model-path) at --host/--port; it exits when a peer's connection drops (a TP peer lost: SGLang's
  scheduler dies with it);
- --node-rank i > 0 connects to --dist-init-addr (retrying, as torch's TCP store client does), sends its rank,
  then serves only /health and /health_generate with 200, as SGLang's launch_dummy_health_check_server does on
  non-zero ranks; it exits when node 0's connection drops.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _exit_when_closed(sock: socket.socket, what: str) -> None:
    def watch():
        while sock.recv(1):
            pass
        print(f"{what} is gone: exiting", flush=True)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path in ("/health", "/health_generate") else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    for flag in ("--model-path", "--host", "--dist-init-addr"):
        p.add_argument(flag)
    for flag in ("--port", "--nnodes", "--node-rank", "--tp-size", "--base-gpu-id"):
        p.add_argument(flag, type=int)
    a, _ = p.parse_known_args()
    print("ARGV " + json.dumps(sys.argv[1:]), flush=True)
    host, port = a.dist_init_addr.rsplit(":", 1)
    if a.node_rank == 0:
        server = socket.create_server((host, int(port)))
        server.settimeout(300)
        peers = {}
        while len(peers) < a.nnodes - 1:
            conn, _ = server.accept()
            rank = int(conn.recv(16).decode())
            peers[rank] = conn
            print(f"node rank {rank} joined", flush=True)
        for rank, conn in peers.items():
            _exit_when_closed(conn, f"node rank {rank}")
        from rlrun.rollout.hf_engine import main as serve

        serve(["--model-dir", a.model_path, "--host", a.host, "--port", str(a.port)])
        return
    deadline = time.monotonic() + 300
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    conn.sendall(str(a.node_rank).encode())
    conn.settimeout(None)
    _exit_when_closed(conn, "node rank 0")
    ThreadingHTTPServer((a.host, a.port), _Health).serve_forever()


if __name__ == "__main__":
    main()
