"""rq_bench.py - RQ, a queue with no isolation, measured the way bench.c
measures sandq: make bench prints its figures beside sandq's.

    python3 rq_bench.py URL DB [--latency-jobs N] [--throughput-jobs N]
                               [--producers N] [--workers N]

Starts N workers (`rq worker -w rq.worker.SimpleWorker`: each job run in
the worker process itself, no fork per job; the job is rq_job.true,
subprocess.run(['/bin/true'])), waits until all of them registered, then
measures:
  latency     N sequential jobs: enqueue to the job's result, p50 and p99
  throughput  M jobs from P producer threads (one connection each), each
              enqueueing its share one job at a time, then waiting for its
              results; jobs/s from the first enqueue to the last result
and stops every worker by its PID (SIGTERM, then waits). A result is
awaited by XREAD BLOCK on the job's result stream (rq:results:<id>, RQ's
own Result store; later RQ releases wait the same way in
job.latest_result(timeout=)), so no polling interval inflates RQ's figures.
RQ's keys live in Redis database DB, apart from sandq's (database 0), which
is flushed at the end. Last line: "PEER rq P50 P99 JOBS_PER_S" for
bench/peers/run.sh's ratios. Numbers, never assertions.
"""
import math
import os
import shutil
import subprocess
import sys
import threading
import time

import redis
from rq import Queue, Worker

QUEUE = 'sandq-bench-peer'
HERE = os.path.dirname(os.path.abspath(__file__))


def pct(ms, p):
    """The p-th percentile of the sorted list ms (nearest rank)."""
    i = min(len(ms) - 1, max(0, math.ceil(p / 100 * len(ms)) - 1))
    return ms[i]


def wait_result(conn, job_id):
    """Blocks until job_id's result is in its result stream."""
    key = 'rq:results:%s' % job_id
    while not conn.xread({key: '0-0'}, count=1, block=10000):
        pass


def run_jobs(url, n, out, i):
    """A producer: enqueues n jobs on its own connection, waits for each."""
    conn = redis.Redis.from_url(url)
    q = Queue(QUEUE, connection=conn)
    ids = [q.enqueue('rq_job.true').id for _ in range(n)]
    for job_id in ids:
        wait_result(conn, job_id)
    out[i] = True
    conn.close()


def main():
    """Parses the arguments, starts the workers, measures, stops them."""
    if len(sys.argv) < 3:
        print('usage: rq_bench.py URL DB [--latency-jobs N] '
              '[--throughput-jobs N] [--producers N] [--workers N]',
              file=sys.stderr)
        return 2
    url = '%s/%d' % (sys.argv[1].rstrip('/'), int(sys.argv[2]))
    opts = {'--latency-jobs': 500, '--throughput-jobs': 2000,
            '--producers': 4, '--workers': 2}
    rest = sys.argv[3:]
    for k, v in zip(rest[::2], rest[1::2]):
        if k in opts:
            opts[k] = int(v)
    conn = redis.Redis.from_url(url)
    conn.flushdb()
    rq = shutil.which('rq') or '/usr/bin/rq'
    workers = []
    rc = 0
    try:
        for _ in range(opts['--workers']):
            workers.append(subprocess.Popen(
                [sys.executable, rq, 'worker', '-w', 'rq.worker.SimpleWorker',
                 '--url', url, '--path', HERE, '--quiet', QUEUE],
                stdout=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        while len(Worker.all(connection=conn)) < len(workers):
            if time.monotonic() > deadline or any(w.poll() is not None
                                                  for w in workers):
                raise RuntimeError('rq workers did not start')
            time.sleep(0.05)

        q = Queue(QUEUE, connection=conn)
        for _ in range(20):
            wait_result(conn, q.enqueue('rq_job.true').id)
        ms = []
        for _ in range(opts['--latency-jobs']):
            t0 = time.perf_counter()
            wait_result(conn, q.enqueue('rq_job.true').id)
            ms.append((time.perf_counter() - t0) * 1000)
        ms.sort()
        p50, p99 = pct(ms, 50), pct(ms, 99)
        print('%-34s n=%-5d p50 %7.3f ms   p99 %7.3f ms'
              % ('rq: enqueue -> result, /bin/true', len(ms), p50, p99))

        n, p = opts['--throughput-jobs'], opts['--producers']
        out = [False] * p
        threads = [threading.Thread(target=run_jobs,
                                    args=(url, n // p + (i < n % p), out, i))
                   for i in range(p)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        s = time.perf_counter() - t0
        if not all(out):
            raise RuntimeError('a producer failed')
        rate = n / s
        print('%-34s %d jobs, %d producers: %.0f jobs/s (%.2f s)'
              % ('rq: throughput, /bin/true', n, p, rate, s))
        print('PEER rq %.3f %.3f %.1f' % (p50, p99, rate))
    except (RuntimeError, redis.RedisError) as e:
        print('rq bench: %s' % e, file=sys.stderr)
        rc = 1
    finally:
        for w in workers:
            if w.poll() is None:
                os.kill(w.pid, 15)
        for w in workers:
            try:
                w.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(w.pid, 9)
                w.wait()
        conn.flushdb()
        conn.close()
    return rc


if __name__ == '__main__':
    sys.exit(main())
