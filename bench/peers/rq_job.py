"""rq_job.py - the job RQ's workers run in make bench's peer comparison.

One function, the same work as sandq's and BullMQ's bench job: run
/bin/true in a child process and wait for it. bench/peers/rq_bench.py
enqueues it by name ("rq_job.true"); its workers find it through --path.
"""
import subprocess


def true():
    """Runs /bin/true; raises if it fails."""
    subprocess.run(['/bin/true'], check=True)
