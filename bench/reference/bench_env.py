"""Environment-only throughput of the PyTorch reference (foraging.py).

The counterpart of `moonrl bench env`: `num_envs` instances step with
uniformly random actions (drawn before timing, cycled through 16 batches, as
moonrl does), observations written, after 10 warm-up steps. Prints one JSON
line with the median, min and max agent-steps/s over the repetitions.

    build/venv-bench/bin/python bench/reference/bench_env.py --num-envs 4096 --threads 2
"""
import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launch  # noqa: E402

if __name__ == "__main__":
    launch.apply()  # the allocator (--allocator): re-executes once, before torch loads

import torch  # noqa: E402
from foraging import ForagingEnv, MODES  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--steps", type=int, default=100, help="steps per repetition")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch threads on CPU")
    p.add_argument("--mode", default="ground_truth", choices=MODES)
    p.add_argument("--allocator", default="auto", choices=launch.CHOICES,
                   help="the malloc the process runs on (launch.py)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but CUDA is not available")
    dev = torch.device(args.device)
    if dev.type == "cpu":
        torch.set_num_threads(args.threads)
    n = args.num_envs
    env = ForagingEnv(n, args.mode, device=dev, seed=args.seed)
    env.reset()
    g = torch.Generator(device=dev)
    g.manual_seed(args.seed)
    actions = torch.randint(0, 8, (16, n), device=dev, generator=g)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for k in range(10):
        env.step(actions[k % 16])
    sync()
    rates = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        for k in range(args.steps):
            env.step(actions[k % 16])
        sync()
        rates.append(n * args.steps / (time.perf_counter() - t0))
    print(json.dumps({
        "impl": "pytorch", "row": "env", "torch": torch.__version__,
        "python": platform.python_version(), "compile": False, "device": str(dev),
        "num_envs": n, "steps_per_rep": args.steps, "threads": torch.get_num_threads(),
        "allocator": launch.report(),
        "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "sps_median": statistics.median(rates), "sps_min": min(rates), "sps_max": max(rates),
    }), flush=True)


if __name__ == "__main__":
    main()
