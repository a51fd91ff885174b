"""The "continuous survival" evaluation (ENV_SPEC.md).

Energy is real in every mode (also `proxy`), there is no truncation, densities
are drawn from [64, 256] by a full reset, actions are sampled from the policy.
Agents that starve are reset (agent only) and keep going.

Reported per mode:
  energy/1k   net energy change per 1,000 steps (food*1 - poison*2 - 0.01/step)
  efficiency  food / (food + poison), averaged over agents that ate anything
  survival    mean life length in steps = total steps / (deaths + agents)
              (every agent's last, unfinished life counts as one life)
  deaths/1k, food/1k, poison/1k   per 1,000 agent-steps
"""
import contextlib

import torch
import torch.nn.functional as F

from foraging import ForagingEnv


@torch.no_grad()
def evaluate(model, mode, num_envs=8192, steps=16384, device="cpu", seed=12345,
             autocast=contextlib.nullcontext, fwd=None):
    device = torch.device(device)
    fwd = fwd or model
    env = ForagingEnv(num_envs, mode, device=device, seed=seed, training=False,
                      truncate=False)
    obs = env.reset()
    food = torch.zeros(num_envs, device=device)
    poison = torch.zeros(num_envs, device=device)
    deaths = torch.zeros(num_envs, device=device)
    for _ in range(steps):
        with autocast():
            logits, _ = fwd(obs, env.density)
        probs = F.softmax(logits.float(), dim=-1)
        a = torch.multinomial(probs, 1).squeeze(1)
        obs, _, term, _, ate_f, ate_p = env.step(a)
        food += ate_f
        poison += ate_p
        deaths += term
    total = float(num_envs) * steps
    f, p, d = food.sum().item(), poison.sum().item(), deaths.sum().item()
    eaten = food + poison
    eff_agent = food[eaten > 0] / eaten[eaten > 0]
    eff = eff_agent.mean().item() if eff_agent.numel() else float("nan")
    return {
        "mode": mode,
        "envs": num_envs,
        "steps": steps,
        "energy_per_1k": (f * 1.0 - p * 2.0 - 0.01 * total) / total * 1000.0,
        "efficiency": eff,
        "survival": total / (d + num_envs),
        "deaths_per_1k": d / total * 1000.0,
        "food_per_1k": f / total * 1000.0,
        "poison_per_1k": p / total * 1000.0,
    }


def table_header():
    return ("| mode | energy/1k | efficiency | survival | deaths/1k | food/1k | poison/1k |\n"
            "|---|---|---|---|---|---|---|")


def table_row(r):
    return ("| %s | %+.1f | %.1f%% | %s | %.2f | %.1f | %.1f |" % (
        r["mode"], r["energy_per_1k"], 100.0 * r["efficiency"],
        format(round(r["survival"], 1), ",") if r["survival"] < 1000 else
        format(int(round(r["survival"])), ","),
        r["deaths_per_1k"], r["food_per_1k"], r["poison_per_1k"]))


def main(argv=None):
    """Evaluate a checkpoint written by `train.py --save`."""
    import argparse
    import json
    from model import ActorCritic
    from ppo import make_autocast
    p = argparse.ArgumentParser(description="continuous-survival evaluation")
    p.add_argument("checkpoint")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--mode", default=None, help="default: the mode it was trained in")
    p.add_argument("--eval-envs", type=int, default=8192)
    p.add_argument("--eval-steps", type=int, default=16384)
    p.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cpu":
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    ck = torch.load(a.checkpoint, map_location=device)
    targs = ck["args"]
    mode = a.mode or targs["mode"]
    model = ActorCritic(mode, ck["conv"], targs["hidden"], targs["critic_hidden"]).to(device)
    sd = dict(ck["model"])
    sd.pop("obs_lut", None)  # the lookup table follows the evaluated mode
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert set(missing) <= {"obs_lut"} and not unexpected, (missing, unexpected)
    r = evaluate(model, mode, a.eval_envs, a.eval_steps, device, seed=a.seed,
                 autocast=make_autocast(device, a.precision))
    print(table_header())
    print(table_row(r))
    if a.json:
        print(json.dumps(r))
    return r


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
