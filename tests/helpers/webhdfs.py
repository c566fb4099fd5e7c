"""A WebHDFS-speaking server on 127.0.0.1 for tests: HDFS's REST API (`/webhdfs/v1/<path>?op=...`) over a local
folder, the operations fsspec's WebHDFS client sends, as a NameNode and DataNode answer them:

  GET    GETFILESTATUS, LISTSTATUS, OPEN (307 to the "DataNode" URL, which sends the bytes of offset/length)
  PUT    CREATE (307 to the DataNode URL, whose PUT writes the file, parents made), MKDIRS, RENAME (false when the
         destination exists, as HDFS)
  POST   APPEND (307, then the DataNode's POST appends)
  DELETE DELETE (recursive=true|false; a non-empty folder without recursive is refused)

Errors are HDFS's JSON `RemoteException`s (FileNotFoundException 404, PathIsNotEmptyDirectoryException 403).
Every request is recorded as (method, op, path)."""
from __future__ import annotations

import http.server
import json
import shutil
import threading
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

PREFIX = "/webhdfs/v1"


class WebHDFSServer:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.requests: list[tuple[str, str, str]] = []
        lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _parse(self):
                parts = urlsplit(self.path)
                q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                hdfs = unquote(parts.path[len(PREFIX):]) or "/"
                with lock:
                    server.requests.append((self.command, q.get("op", ""), hdfs))
                return hdfs, q, server.root / hdfs.lstrip("/")

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _send(self, status: int, body: bytes = b"", ctype: str = "application/json", headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, obj, status=200):
                self._send(status, json.dumps(obj).encode())

            def _error(self, status: int, exception: str, message: str):
                self._json({"RemoteException": {"exception": exception, "javaClassName": f"java.io.{exception}",
                                                "message": message}}, status)

            def _redirect(self, hdfs: str, q: dict):
                where = f"http://127.0.0.1:{server.port}{PREFIX}{quote(hdfs)}?" + "&".join(
                    f"{k}={quote(str(v))}" for k, v in {**q, "datanode": "true"}.items())
                self._send(307, headers=[("Location", where)])

            def do_GET(self):
                hdfs, q, p = self._parse()
                op = q.get("op", "")
                if not p.exists():
                    return self._error(404, "FileNotFoundException", f"File does not exist: {hdfs}")
                if op == "GETFILESTATUS":
                    return self._json({"FileStatus": status(p, "")})
                if op == "LISTSTATUS":
                    entries = [status(c, c.name) for c in sorted(p.iterdir())] if p.is_dir() else [status(p, "")]
                    return self._json({"FileStatuses": {"FileStatus": entries}})
                if op == "OPEN":
                    if q.get("datanode") != "true":
                        return self._redirect(hdfs, q)
                    data = p.read_bytes()
                    start = int(q.get("offset", 0))
                    end = len(data) if "length" not in q else min(len(data), start + int(q["length"]))
                    return self._send(200, data[start:end], "application/octet-stream")
                self._error(400, "IllegalArgumentException", f"Invalid value for webhdfs parameter op: {op}")

            def do_PUT(self):
                hdfs, q, p = self._parse()
                op = q.get("op", "")
                data = self._body()
                if op == "CREATE":
                    if q.get("datanode") != "true":
                        return self._redirect(hdfs, q)
                    if p.exists() and q.get("overwrite") != "true":
                        return self._error(403, "FileAlreadyExistsException", f"{hdfs} already exists")
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(data)
                    return self._send(201, headers=[("Location", f"hdfs://127.0.0.1{hdfs}")])
                if op == "MKDIRS":
                    p.mkdir(parents=True, exist_ok=True)
                    return self._json({"boolean": True})
                if op == "RENAME":
                    dest = server.root / unquote(q["destination"]).lstrip("/")
                    if not p.exists() or dest.exists():
                        return self._json({"boolean": False})
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    p.rename(dest)
                    return self._json({"boolean": True})
                self._error(400, "IllegalArgumentException", f"Invalid value for webhdfs parameter op: {op}")

            def do_POST(self):
                hdfs, q, p = self._parse()
                data = self._body()
                if q.get("op") != "APPEND":
                    return self._error(400, "IllegalArgumentException", "Invalid value for webhdfs parameter op")
                if not p.is_file():
                    return self._error(404, "FileNotFoundException", f"File does not exist: {hdfs}")
                if q.get("datanode") != "true":
                    return self._redirect(hdfs, q)
                with open(p, "ab") as f:
                    f.write(data)
                self._send(200)

            def do_DELETE(self):
                hdfs, q, p = self._parse()
                if not p.exists():
                    return self._json({"boolean": False})
                if p.is_dir():
                    if any(p.iterdir()) and q.get("recursive") != "true":
                        return self._error(403, "PathIsNotEmptyDirectoryException", f"{hdfs} is non empty")
                    shutil.rmtree(p)
                else:
                    p.unlink()
                self._json({"boolean": True})

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str = "") -> str:
        return f"webhdfs://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def __enter__(self) -> "WebHDFSServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def status(p: Path, suffix: str) -> dict:
    st = p.stat()
    d = p.is_dir()
    return {"accessTime": 0, "blockSize": 0 if d else 134217728, "childrenNum": len(list(p.iterdir())) if d else 0,
            "fileId": st.st_ino, "group": "supergroup", "length": 0 if d else st.st_size,
            "modificationTime": st.st_mtime_ns // 1_000_000, "owner": "gpupipe", "pathSuffix": suffix,
            "permission": "755" if d else "644", "replication": 0 if d else 1, "storagePolicy": 0,
            "type": "DIRECTORY" if d else "FILE"}
