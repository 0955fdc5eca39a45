#!/usr/bin/env python3
"""A stand-in executor for faults a real one cannot be made to show on cue.

Speaks llama-server's --host/--port, or sd-server's --listen-ip/--listen-port and SD_PORT
(tests/executors/test_profiles.py), ignores its other flags, and answers GET on any path like
/health.
FAKE_MODE chooses the behaviour:
  ok           bind after FAKE_DELAY s, answer 503 until FAKE_READY_AFTER s, then 200
  hang         never bind, never exit
  die          print an error and exit 3 after FAKE_DELAY s
  ignore-term  like ok, but ignore SIGTERM
  flood        like ok, and write FAKE_LINES log lines as fast as possible first
  fork         like ok, with a grandchild in the same process group
  refuse       refuse its first flag as llama-server refuses an unknown one, exit 1
  escape-die   start ``setsid sleep 120`` (a grandchild in its own session, holding the log
               pipe open), print an error and exit 3: a daemonising helper
  escape-hang  the same grandchild, then never bind, never exit
  escape-ok    like ok, with that grandchild started before it binds
  escape-bare  like escape-ok, the grandchild's environment emptied (``env -i``)
  escape-bare-die  like escape-die, the grandchild's environment emptied
FAKE_CHILD_FILE, if set, receives the escaped grandchild's pid.
FAKE_EXIT_AFTER, if set, makes it exit with status 3 that many seconds after /health turned
200 (a server that dies once it has served its readiness).
``--help`` and ``--version`` alone print one line and exit 0 (no flags, no version).
``--list-devices`` alone prints llama.cpp's device list and exits 0: ``(none)``, or the devices
FAKE_DEVICES names (``;``-separated ``Vulkan0: DESC (N MiB, N MiB free)``).
FAKE_ECHO, if set, names variables (comma separated) whose values are printed to stderr at
start, with the argv, as an executor that logs its settings would.
FAKE_READY_FILE, if set, receives the CLOCK_MONOTONIC instant /health turned 200, and
FAKE_EXIT_FILE the instant the process is about to exit after SIGTERM (both comparable with
time.monotonic() in other processes of this machine).
Standard library only, so it runs under whatever python3 is on PATH.
"""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time


def _listen(args: list[str]) -> tuple[str, int]:
    host, port = "127.0.0.1", 8080
    for i, a in enumerate(args[:-1]):
        if a in ("--host", "--listen-ip"):
            host = args[i + 1]
        elif a in ("--port", "--listen-port"):
            port = int(args[i + 1])
    port = int(os.environ.get("SD_PORT", port)) if "--listen-port" not in args else port
    return host, port


def _echo() -> None:
    if names := os.environ.get("FAKE_ECHO"):
        said = " ".join(f"{n}={os.environ.get(n, '')}" for n in names.split(","))
        print(f"fake executor: argv {' '.join(sys.argv[1:])} env {said}", file=sys.stderr)


def _escape(*, bare: bool) -> None:
    # Not a process group leader, so setsid(1) calls setsid() itself and execs sleep: the
    # grandchild's pid is the one Popen gives, in a new session and group of its own.
    argv = ["env", "-i", "/usr/bin/setsid", "sleep", "120"] if bare else ["setsid", "sleep", "120"]
    p = subprocess.Popen(argv)
    if path := os.environ.get("FAKE_CHILD_FILE"):
        with open(path, "w") as f:
            f.write(str(p.pid))


def _escape_first(mode: str) -> None:
    """escape-die and escape-hang: the helper leaves first, then the executor dies or hangs."""
    if mode not in ("escape-die", "escape-hang", "escape-bare-die"):
        return
    _escape(bare=mode == "escape-bare-die")
    if mode in ("escape-die", "escape-bare-die"):
        print("err", file=sys.stderr, flush=True)
        sys.exit(3)
    while True:
        time.sleep(3600)


def _start_helper(mode: str) -> None:
    """fork, escape-ok, escape-bare: a grandchild that outlives nothing but its stop."""
    if mode == "fork":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    if mode in ("escape-ok", "escape-bare"):
        _escape(bare=mode == "escape-bare")


def _refuse(mode: str) -> None:
    if mode == "refuse":
        flag = next((a for a in sys.argv[1:] if a.startswith("--")), "--bogus")
        print(f"error: invalid argument: {flag}", file=sys.stderr, flush=True)
        sys.exit(1)


def main() -> None:
    host, port = _listen(sys.argv[1:])
    mode = os.environ.get("FAKE_MODE", "ok")
    delay = float(os.environ.get("FAKE_DELAY", "0"))
    ready_after = float(os.environ.get("FAKE_READY_AFTER", "0"))
    ready_file = os.environ.get("FAKE_READY_FILE")
    print(f"fake executor: mode {mode}, pid {os.getpid()}", file=sys.stderr, flush=True)
    _echo()
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _escape_first(mode)
    _refuse(mode)
    if mode == "hang":
        while True:
            time.sleep(3600)
    time.sleep(delay)
    if mode == "sigill":
        # What a binary built for instructions this CPU lacks does on its first kernel.
        os.kill(os.getpid(), signal.SIGILL)
    if mode == "die":
        print("error: cannot load model (fake)", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "flood":
        line = "x" * 100 + "\n"
        for _ in range(int(os.environ.get("FAKE_LINES", "100000"))):
            sys.stderr.write(line)
        sys.stderr.flush()
    _start_helper(mode)
    ready_at = time.monotonic() + ready_after
    if ready_file:
        with open(ready_file, "w") as f:
            f.write(repr(ready_at))

    class Handler(http.server.BaseHTTPRequestHandler):
        # HTTP/1.1 keeps connections open, as llama-server does; FAKE_HTTP10 closes each.
        protocol_version = "HTTP/1.0" if os.environ.get("FAKE_HTTP10") else "HTTP/1.1"

        def do_GET(self) -> None:
            ready = time.monotonic() >= ready_at
            body = b'{"status":"ok"}' if ready else b'{"error":"Loading model"}'
            self.send_response(200 if ready else 503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    if (exit_after := os.environ.get("FAKE_EXIT_AFTER")) is not None:
        left = ready_at + float(exit_after) - time.monotonic()
        threading.Timer(max(0.0, left), os._exit, (3,)).start()
    print(f"fake executor: listening on http://{host}:{port}", file=sys.stderr, flush=True)
    exit_file = os.environ.get("FAKE_EXIT_FILE")

    def on_term(*_: object) -> None:
        if exit_file:
            with open(exit_file, "w") as f:
                f.write(repr(time.monotonic()))
        os._exit(0)

    if mode != "ignore-term":
        signal.signal(signal.SIGTERM, on_term)
    server.serve_forever()


def _asked_about_itself() -> bool:
    # Asked for its flags (config --check, plan --explain) or its version (probe): it has none
    # to tell, and must not start serving instead.
    if sys.argv[1:] in (["--help"], ["--version"]):
        print("fake executor: no help", file=sys.stderr)
        return True
    if sys.argv[1:] == ["--list-devices"]:
        devices = [d for d in os.environ.get("FAKE_DEVICES", "").split(";") if d]
        print("Available devices:")
        print("\n".join(f"  {d}" for d in devices) or "  (none)")
        return True
    return False


if __name__ == "__main__" and not _asked_about_itself():
    main()
