"""Round trip of a tiny job through ``pynox pool`` against a fresh interpreter, in one run.

    .venv/bin/python bench/pool_roundtrip.py [--runs 200] [--jobs 1000]

Prints medians side by side and their ratio, then pool throughput with two
workers.  Machines here are shared and noisy: read medians and ratios from
the same run, never absolute thresholds.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from pynox.client import Pool

CODE = "import json; print(json.dumps({'ok': True}))"


def fresh_interpreter(runs, *flags):
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, *flags, "-c", CODE], check=True, stdout=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return samples


def pool_round_trips(pool, runs):
    samples = []
    for i in range(runs):
        start = time.perf_counter()
        result = pool.run(CODE, id=f"rt-{i}")
        samples.append(time.perf_counter() - start)
        assert result["exit"] == 0, result
    return samples


def pool_throughput(pool, jobs, window):
    start = time.perf_counter()
    sent = done = 0
    while done < jobs:
        while sent < jobs and sent - done < window:
            pool.send({"id": f"tp-{sent}", "code": CODE})
            sent += 1
        result = pool.read()
        assert result["exit"] == 0, result
        done += 1
    return jobs / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cwd, Pool("--workers", "2", cwd=cwd) as pool:
        pool_round_trips(pool, 20)  # warm caches on both sides
        fresh = fresh_interpreter(args.runs)
        # The same binary without site: an editable install's import hook (or
        # any .pth file) slows every start, and the pool does not pay it.
        bare = fresh_interpreter(args.runs, "-S")
        pooled = pool_round_trips(pool, args.runs)
        throughput = pool_throughput(pool, args.jobs, window=4)
        pool.close()
    fresh_ms, bare_ms, pool_ms = (statistics.median(x) * 1000 for x in (fresh, bare, pooled))
    print(f"tiny job, median of {args.runs} ({sys.executable}):")
    print(f"  fresh interpreter, -c:          {fresh_ms:8.2f} ms")
    print(f"  fresh interpreter, -S -c:       {bare_ms:8.2f} ms")
    print(f"  pynox pool round trip:          {pool_ms:8.2f} ms")
    print(f"  ratio pool / fresh -c:          {pool_ms / fresh_ms:8.1%}")
    print(f"  ratio pool / fresh -S -c:       {pool_ms / bare_ms:8.1%}")
    print(f"throughput, 2 workers, {args.jobs} jobs: {throughput:8.0f} jobs/s")


if __name__ == "__main__":
    main()
