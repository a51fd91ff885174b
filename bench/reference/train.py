#!/usr/bin/env python3
"""PyTorch reference trainer for the foraging workload (ENV_SPEC.md).

Example:
  build/venv-bench/bin/python bench/reference/train.py --device cpu --num-envs 192 \
      --rollout 128 --updates 2 --conv 32,64,64 --hidden 512 \
      --critic-hidden 512 --threads 2 --mode ground_truth --precision fp32 --json

Per-update lines go to stdout; with --json the last stdout line is one JSON
object (see README.md for the keys).
"""
import argparse
import json
import math
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
from model import ActorCritic, LAYOUTS  # noqa: E402
from ppo import PPO  # noqa: E402
from evaluate import evaluate, table_header, table_row  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--num-envs", type=int, default=192)
    p.add_argument("--rollout", type=int, default=128)
    p.add_argument("--updates", type=int, default=2048,
                   help="total updates; the first is a warm-up, not timed")
    p.add_argument("--conv", default="32,64,64", help="conv widths, comma separated")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--critic-hidden", type=int, default=512)
    p.add_argument("--threads", type=int, default=2, help="torch threads on CPU")
    p.add_argument("--layout", default="nchw", choices=LAYOUTS,
                   help="the convolutions' memory layout (model.py); nchw measured fastest on CPU")
    p.add_argument("--allocator", default="auto", choices=launch.CHOICES,
                   help="the malloc the process runs on (launch.py); default: tcmalloc if installed, "
                   "else glibc-tuned")
    p.add_argument("--mode", default="ground_truth", choices=MODES)
    p.add_argument("--precision", default=None, choices=["fp32", "fp16", "bf16"],
                   help="default: fp16 (autocast + GradScaler) on CUDA, fp32 on CPU")
    p.add_argument("--compile", action="store_true", help="torch.compile the network (torch 2.x)")
    p.add_argument("--compile-mode", default="default")
    p.add_argument("--compile-scope", default="loss", choices=["loss", "model"],
                   help="with --compile, what the update compiles: the network and the PPO loss as one graph "
                   "(loss, the default) or the network alone (model); the rollout compiles the network")
    p.add_argument("--no-popart", action="store_true")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.add_argument("--log-every", type=int, default=1)
    p.add_argument("--save", default="", help="write a checkpoint (model state + args) here")
    p.add_argument("--eval-envs", type=int, default=0)
    p.add_argument("--eval-steps", type=int, default=0)
    return p.parse_args(argv)


def _finite(x):
    """NaN/inf -> None so the JSON line is strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but CUDA is not available")
    device = torch.device(args.device)
    precision = args.precision or ("fp16" if device.type == "cuda" else "fp32")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    else:
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(args.seed)
    conv = [int(c) for c in args.conv.split(",") if c]

    env = ForagingEnv(args.num_envs, args.mode, device=device, seed=args.seed)
    model = ActorCritic(args.mode, conv, args.hidden, args.critic_hidden,
                        popart=not args.no_popart, layout=args.layout).to(device)
    if args.layout == "channels_last":
        model = model.to(memory_format=torch.channels_last)
    n_params = sum(p.numel() for p in model.parameters())
    algo = PPO(env, model, device, rollout=args.rollout, epochs=args.epochs,
               minibatches=args.minibatches, precision=precision,
               compile=args.compile, compile_mode=args.compile_mode, compile_scope=args.compile_scope)
    B = algo.B
    print("# pytorch %s device=%s mode=%s envs=%d rollout=%d batch=%d conv=%s hidden=%d "
          "critic_hidden=%d params=%d precision=%s fused_adam=%s compile=%s threads=%d layout=%s malloc=%s"
          % (torch.__version__, device, args.mode, args.num_envs, args.rollout, B, conv,
             args.hidden, args.critic_hidden, n_params, precision, algo.fused,
             algo.compiled, torch.get_num_threads(), args.layout, launch.report()["name"]), flush=True)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sps_all, t_roll, t_gae, t_upd, history = [], [], [], [], []
    ret_mean, eff = float("nan"), float("nan")
    sync()
    for u in range(args.updates):
        progress = u / args.updates
        t0 = time.perf_counter()
        st = algo.collect()
        sync()
        t1 = time.perf_counter()
        algo.gae()
        sync()
        t2 = time.perf_counter()
        info = algo.update(progress)
        sync()
        t3 = time.perf_counter()
        # logging (reads back to host)
        n_ep = st["ep_count"].item()
        if n_ep > 0:
            ret_mean = st["ret_sum"].item() / n_ep
        f, p = st["food"].item(), st["poison"].item()
        eff = f / (f + p) if f + p > 0 else float("nan")
        deaths = st["deaths"].item()
        ent, vl, pl = info["entropy"].item(), info["v_loss"].item(), info["pg_loss"].item()
        t4 = time.perf_counter()
        dt = t4 - t0
        sps = B / dt
        if u > 0:  # first update is the warm-up
            sps_all.append(sps)
            t_roll.append(t1 - t0)
            t_gae.append(t2 - t1)
            t_upd.append(t3 - t2)
        history.append((u + 1, ret_mean, eff))
        if (u + 1) % args.log_every == 0 or u == 0 or u + 1 == args.updates:
            print("update %d/%d sps %.1f ret %.3f eff %.3f episodes %d deaths %d food %d "
                  "poison %d entropy %.3f v_loss %.4f pg_loss %.4f lr %.2e "
                  "t_roll %.3f t_gae %.3f t_upd %.3f%s"
                  % (u + 1, args.updates, sps, ret_mean, eff, n_ep, deaths, f, p, ent, vl,
                     pl, info["lr"], t1 - t0, t2 - t1, t3 - t2,
                     " (warm-up)" if u == 0 else ""), flush=True)

    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    med = (lambda xs: statistics.median(xs) if xs else None)
    result = {
        "impl": "pytorch",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(device) if device.type == "cpu" else
        "cuda:" + torch.cuda.get_device_name(device),
        "mode": args.mode,
        "num_envs": args.num_envs,
        "rollout": args.rollout,
        "batch": B,
        "conv": conv,
        "hidden": args.hidden,
        "critic_hidden": args.critic_hidden,
        "params": n_params,
        "precision": precision,
        "compile": algo.compiled,
        "compile_scope": algo.compile_scope,
        "fused_adam": algo.fused,
        "threads": torch.get_num_threads(),
        "allocator": launch.report(),
        "mkldnn": torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled,
        # on a GPU the convolutions run in cuDNN (benchmark mode, set above), not oneDNN
        "cudnn": ({"version": torch.backends.cudnn.version(), "benchmark": torch.backends.cudnn.benchmark}
                  if device.type == "cuda" else None),
        "layout": args.layout,
        "seed": args.seed,
        "updates": args.updates,
        "timed_updates": len(sps_all),
        "sps_median": med(sps_all),
        "sps_all": sps_all,
        "time_rollout": med(t_roll),
        "time_gae": med(t_gae),
        "time_update": med(t_upd),
        "peak_memory_bytes": peak,
        "final_return_mean": ret_mean,
        "final_efficiency": eff,
        "loadavg_end": list(os.getloadavg()),
    }
    if args.save:
        torch.save({"model": model.state_dict(), "args": vars(args), "conv": conv},
                   args.save)

    if args.eval_envs > 0 and args.eval_steps > 0:
        t0 = time.perf_counter()
        r = evaluate(model, args.mode, args.eval_envs, args.eval_steps, device,
                     seed=args.seed + 1000003, autocast=algo.autocast, fwd=algo.fwd)
        r["seconds"] = time.perf_counter() - t0
        print(table_header())
        print(table_row(r), flush=True)
        result["eval"] = r

    if args.json:
        print(json.dumps(_finite(result), allow_nan=False), flush=True)
    return result


if __name__ == "__main__":
    main()
