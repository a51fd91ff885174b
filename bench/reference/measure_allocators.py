#!/usr/bin/env python3
"""The allocator candidates for the reference, measured side by side.

Runs train.py once per candidate per round, the candidates alternating in
fresh processes (round 1: A B C ..., round 2: A B C ...), and prints the
median whole-update rate, the median learning-phase ("update") time, the
rollout time and the peak RSS of each, with the load average seen. This is
what chose launch.py's default; rerun it on another machine:

  build/venv-bench/bin/python bench/reference/measure_allocators.py --rounds 3          # small net, ~5 min
  build/venv-bench/bin/python bench/reference/measure_allocators.py --only system,tcmalloc --net ref --rounds 1
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import launch

HERE = os.path.dirname(os.path.abspath(__file__))
# name -> (--allocator, extra environment): the named setups plus each glibc variable alone
CANDIDATES = [
    ("system", "system", {}),
    ("glibc: MALLOC_MMAP_MAX_=0", "system", {"MALLOC_MMAP_MAX_": "0"}),
    ("glibc: MALLOC_TRIM_THRESHOLD_", "system", {"MALLOC_TRIM_THRESHOLD_": launch.GLIBC_TUNED["MALLOC_TRIM_THRESHOLD_"]}),
    ("glibc-tuned", "glibc-tuned", {}),
    ("jemalloc", "jemalloc", {}),
    ("jemalloc, no decay", "jemalloc", {"MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"}),
    ("tcmalloc (minimal)", "tcmalloc", {}),
    ("tcmalloc (full)", "system", {"LD_PRELOAD": "libtcmalloc.so.4"}),
]
NETS = {
    "small": ["--num-envs", "64", "--rollout", "64", "--conv", "16,32", "--hidden", "128", "--critic-hidden", "128"],
    "ref": ["--num-envs", "192", "--rollout", "128", "--conv", "32,64,64", "--hidden", "512", "--critic-hidden", "512"],
}


def run(alloc, extra, args):
    env = {k: v for k, v in os.environ.items() if k != launch.MARK}
    env.update(extra)
    cmd = [sys.executable, os.path.join(HERE, "train.py"), "--device", "cpu", "--json", "--threads",
           str(args.threads), "--updates", str(args.updates), "--allocator", alloc,
           "--precision", args.precision] + NETS[args.net]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", default="small", choices=sorted(NETS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--updates", type=int, default=4, help="per process; the first is a warm-up")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--only", default="", help="comma-separated candidate names (prefixes)")
    args = p.parse_args()
    cands = [c for c in CANDIDATES if not args.only or any(c[0].startswith(o) for o in args.only.split(","))]
    res = {c[0]: [] for c in cands}
    for r in range(args.rounds):
        for name, alloc, extra in cands:
            d = run(alloc, extra, args)
            res[name].append(d)
            sys.stderr.write("round %d %-32s %7.0f agent-steps/s, update %.3f s, load %.2f\n"
                             % (r + 1, name, d["sps_median"], d["time_update"], d["loadavg_end"][0]))
    base = statistics.median(d["time_update"] for d in res[cands[0][0]])
    print("net %s, %s, %d threads, %d rounds alternating, %d timed updates per process (medians)"
          % (args.net, args.precision, args.threads, args.rounds, args.updates - 1))
    print("%-32s %14s %10s %10s %9s %10s %s" % ("allocator", "agent-steps/s", "update s", "rollout s",
                                               "update x", "peak RSS", "load (1 min) seen"))
    for name, _, _ in cands:
        ds = res[name]
        upd = statistics.median(d["time_update"] for d in ds)
        print("%-32s %14.0f %10.3f %10.3f %8.2fx %7.0f MiB %s" % (
            name, statistics.median(d["sps_median"] for d in ds), upd,
            statistics.median(d["time_rollout"] for d in ds), base / upd,
            max(d["peak_memory_bytes"] for d in ds) / 2 ** 20,
            " ".join("%.1f" % d["loadavg_end"][0] for d in ds)))
    print("(update x: the first row's update time / this row's; higher is faster)")


if __name__ == "__main__":
    main()
