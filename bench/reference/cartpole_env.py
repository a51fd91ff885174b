"""Environment-only throughput of Gymnasium's CartPole-v1, the peer of moonrl's cartpole.

The counterpart of moonrl's cartpole alone (`moonrl run bench/env_alone.lua --env cartpole`):
`num_envs` instances step with uniformly random actions (drawn before timing,
cycled through 16 batches, as moonrl does), after 10 warm-up steps; each
repetition times `steps` steps. Prints one JSON line with the median, min and
max agent-steps/s over the repetitions.

    --impl vector  gymnasium.envs.classic_control.cartpole.CartPoleVectorEnv:
                   the dynamics vectorised in NumPy (one thread: NumPy's
                   elementwise operations run on one)
    --impl sync    gymnasium.vector.SyncVectorEnv of gymnasium.make("CartPole-v1"),
                   the usual wrappers (TimeLimit 500, OrderEnforcing,
                   PassiveEnvChecker), one instance after another in Python

Both truncate at 500 steps and reset the next step (Gymnasium's next-step
autoreset), as moonrl's cartpole does.

    build/venv-bench/bin/python bench/reference/cartpole_env.py --impl vector --num-envs 4096
"""
import argparse
import json
import platform
import resource
import statistics
import sys
import time

try:
    import numpy as np
    import gymnasium
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
except ImportError as e:
    sys.stderr.write("bench/reference/cartpole_env.py needs Gymnasium and NumPy (%s): `make bench` installs "
                     "them into build/venv-bench (requirements-bench.txt)\n" % e)
    sys.exit(2)


def make(impl, n, seed):
    if impl == "vector":
        env = CartPoleVectorEnv(num_envs=n, max_episode_steps=500)
    else:
        env = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1") for _ in range(n)])
    env.reset(seed=seed)
    return env


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impl", default="vector", choices=["vector", "sync"])
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--steps", type=int, default=100, help="steps per repetition")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    n = args.num_envs
    env = make(args.impl, n, args.seed)
    rng = np.random.default_rng(args.seed)
    actions = rng.integers(0, 2, size=(16, n), dtype=np.int64)
    for k in range(10):
        env.step(actions[k % 16])
    rates = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        for k in range(args.steps):
            env.step(actions[k % 16])
        rates.append(n * args.steps / (time.perf_counter() - t0))
    env.close()
    print(json.dumps({
        "impl": "gymnasium-" + args.impl, "row": "cartpole",
        "class": "CartPoleVectorEnv" if args.impl == "vector" else "SyncVectorEnv(CartPole-v1)",
        "gymnasium": gymnasium.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "num_envs": n, "steps_per_rep": args.steps, "threads": 1,
        "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "sps_median": statistics.median(rates), "sps_min": min(rates), "sps_max": max(rates),
    }), flush=True)


if __name__ == "__main__":
    main()
