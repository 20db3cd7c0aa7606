"""A private redis-server and sandqd for the Python client's tests.

The Python twin of tests/harness.c: a temporary folder, redis-server on a
free loopback port in it (another port if one is taken first), ready when
it answers INFO with its own pid; then $SANDQ_BUILD/sandqd (default build/, from the
repository root) with its own state folder, ready when a job has run end to
end. stop() ends both by their pids and removes the folder, copying any
sanitizer report from the daemons' logs to stderr first (tests/run.sh fails
the run on one).

shared() starts one harness for the whole test process on first use and
stops it at exit, so `python3 -m unittest discover` needs nothing running.
With SANDQ_TEST_URL set, the tests use that Redis (and whatever sandqd
serves it) instead.
"""

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import redis

import sandq

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
READY_TIMEOUT = 60.0


def build_dir():
    """$SANDQ_BUILD (make test sets it), else build/, made absolute."""
    return os.path.abspath(os.path.join(REPO, os.environ.get("SANDQ_BUILD", "build")))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout, what):
    """Polls pred() until it is true; AssertionError naming what after timeout."""
    end = time.monotonic() + timeout
    delay = 0.005
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class Harness:
    def __init__(self):
        self.dir = None
        self.url = None
        self.redis = None           # Popen of redis-server
        self.sandqd = None          # Popen of sandqd
        self.log = None

    def _spawn(self, argv, log):
        with open(log, "ab") as f:
            # Its own process group, as harness.c's setpgid(0, 0).
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def _start_redis(self):
        rlog = os.path.join(self.dir, "redis.log")
        for _ in range(10):
            port = free_port()
            self.redis = self._spawn(
                ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", self.dir], rlog)
            r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)

            # Another run's server may have taken the port first: it would
            # answer too, so the answer must carry our server's pid.
            def answers():
                if self.redis.poll() is not None:
                    return "exited"
                try:
                    return r.info("server").get("process_id") == self.redis.pid and "ok"
                except redis.exceptions.RedisError:
                    return None
            state = wait_for(answers, 10, "redis-server on port %d" % port)
            r.close()
            if state == "ok":
                self.url = "redis://127.0.0.1:%d" % port
                return
            self.redis = None       # lost the port race: try another
        raise AssertionError("could not start redis-server (see %s)" % rlog)

    def _start_sandqd(self, workers):
        exe = os.path.join(build_dir(), "sandqd")
        self.log = os.path.join(self.dir, "sandqd.log")
        self.sandqd = self._spawn([exe, "--redis", self.url, "--state",
                                   os.path.join(self.dir, "state"), "--workers",
                                   str(workers)], self.log)
        # Ready means a job went all the way through; in one-second slices so
        # a sandqd that could not start fails at once.
        c = sandq.Client(self.url)
        jid = c.submit(["true"])
        end = time.monotonic() + READY_TIMEOUT
        try:
            while True:
                if self.sandqd.poll() is not None:
                    raise AssertionError("sandqd (%s) exited with status %s:\n%s"
                                         % (exe, self.sandqd.returncode, self.tail()))
                try:
                    r = c.wait(jid, timeout=1)
                    break
                except sandq.WaitTimeout:
                    if time.monotonic() > end:
                        raise AssertionError("sandqd never answered:\n" + self.tail())
            if r.status != "ok":
                raise AssertionError("first job: %s: %s\n%s"
                                     % (r.status, r.error_message, self.tail()))
        finally:
            c.close()

    def start(self, workers=2):
        self.dir = tempfile.mkdtemp(prefix="sandq-pytest-")
        try:
            self._start_redis()
            self._start_sandqd(workers)
        except BaseException:
            self.stop()
            raise
        return self

    def tail(self, n=20):
        try:
            with open(self.log, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    @staticmethod
    def _end(p, timeout):
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def _scan_logs(self):
        for name in sorted(os.listdir(self.dir)):
            if not name.endswith(".log"):
                continue
            in_report = False
            with open(os.path.join(self.dir, name), "r", errors="replace") as f:
                for line in f:
                    if ("ERROR: AddressSanitizer" in line or
                            "ERROR: LeakSanitizer" in line or "runtime error: " in line):
                        if not in_report:
                            sys.stderr.write("harness: a sanitizer report in %s:\n" % name)
                        in_report = True
                    if in_report:
                        sys.stderr.write(line)

    def stop(self):
        self._end(self.sandqd, 30)
        self.sandqd = None
        self._end(self.redis, 10)
        self.redis = None
        if self.dir and os.path.isdir(self.dir):
            self._scan_logs()
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


_shared = None


def url():
    """The Redis URL of the shared harness (started on first use)."""
    global _shared
    if os.environ.get("SANDQ_TEST_URL"):
        return os.environ["SANDQ_TEST_URL"]
    if _shared is None:
        h = Harness()
        h.start()
        atexit.register(h.stop)
        _shared = h
    return _shared.url


def client(**kw):
    """A client of the shared harness with a 60 s default wait."""
    kw.setdefault("timeout", 60)
    return sandq.Client(url(), **kw)
