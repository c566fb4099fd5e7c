"""A real HTTP server on 127.0.0.1 for tests: serves a folder's files with GET (Range: bytes=N- and bytes=A-B) and
HEAD, counts requests, and can cut the connection in the middle of a file (`cut`: name → how many first GETs
send half of what was asked and close)."""

from __future__ import annotations

import http.server
import re
import threading
from collections import Counter
from pathlib import Path


class RangeServer:
    def __init__(self, root: Path, cut: dict[str, int] | None = None, ranges: bool = True):
        self.root, self.cut, self.ranges = Path(root), dict(cut or {}), ranges
        self.requests: list[tuple[str, str, str | None]] = []   # (method, file name, Range header)
        lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _serve(self, body: bool):
                path = server.root / self.path.split("?")[0].lstrip("/")
                with lock:
                    server.requests.append((self.command, path.name, self.headers.get("Range")))
                if not path.is_file():
                    self.send_error(404)
                    return
                data = path.read_bytes()
                start, end, status = 0, len(data), 200
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
                if m and server.ranges and body:
                    start = int(m.group(1))
                    end = min(len(data), int(m.group(2)) + 1) if m.group(2) else len(data)
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                self.send_response(status)
                self.send_header("Content-Length", str(end - start))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                self.end_headers()
                if not body:
                    return
                with lock:
                    cut = server.cut.get(path.name, 0)
                    if cut:
                        server.cut[path.name] = cut - 1
                if cut:   # half of what was asked, then the connection goes
                    self.wfile.write(data[start:start + (end - start) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(data[start:end])

            def do_GET(self):
                self._serve(True)

            def do_HEAD(self):
                self._serve(False)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def gets(self) -> Counter:
        return Counter(name for method, name, _ in self.requests if method == "GET")
