"""Capture what real programs send, for the ingest fixtures in this folder (run by hand, on 127.0.0.1).

    python tests/data/ingest/capture.py http PORT OUTDIR   # each POST body -> OUTDIR/post-N.bin (+ .headers)
    python tests/data/ingest/capture.py tcp PORT OUTFILE   # every byte received -> OUTFILE
    python tests/data/ingest/capture.py sanitize IN OUT     # host-specific label values -> neutral ones

collectd's write_http (``Format "JSON"``, the same value-list JSON write_kafka writes) and
Prometheus' remote_write post to the ``http`` listener; collectd's write_graphite writes to the
``tcp`` one. Stops after 60 s. ``sanitize`` replaces the capturing machine's names (host, kernel
release, block and network devices, MAC addresses) in exposition text by :data:`NEUTRAL`.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: label="value" of the capturing machine -> a neutral value
NEUTRAL = {
    'nodename="vm"': 'nodename="node-a"',
    'release="6.18.44-fc-v782"': 'release="6.1.0-generic"',
    'device="vda"': 'device="sda"',
    'device="/dev/vda"': 'device="/dev/sda"',
    'device="zram0"': 'device="sdb"',
    'device="ifb0"': 'device="dummy0"',
    'device="ifb1"': 'device="dummy1"',
    'address="02:fc:00:00:00:01"': 'address="02:00:00:00:00:01"',
    'address="22:da:86:92:0b:b9"': 'address="02:00:00:00:00:02"',
    'address="96:b2:f0:d6:6f:3f"': 'address="02:00:00:00:00:03"',
}


def sanitize(text: str) -> str:
    for old, new in NEUTRAL.items():
        text = text.replace(old, new)
    return text


def http(port: int, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    count = [0]
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                count[0] += 1
                n = count[0]
            (outdir / f"post-{n:03d}.bin").write_bytes(body)
            (outdir / f"post-{n:03d}.headers").write_text(f"{self.path}\n{self.headers}")
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Timer(60, srv.shutdown).start()
    srv.serve_forever()


def tcp(port: int, out: Path) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen()
    srv.settimeout(60)
    end = time.monotonic() + 60
    with out.open("ab") as f:
        while time.monotonic() < end:
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                break
            conn.settimeout(max(0.1, end - time.monotonic()))
            try:
                while data := conn.recv(65536):
                    f.write(data)
                    f.flush()
            except TimeoutError:
                pass
            conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "sanitize":
        Path(sys.argv[3]).write_text(sanitize(Path(sys.argv[2]).read_text()))
    else:
        kind, port, where = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
        (http if kind == "http" else tcp)(port, where)
