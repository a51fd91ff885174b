#!/usr/bin/env python3
"""gym_reference.py - src/engine/envs/cartpole.h and pendulum.h against
Gymnasium's own CartPole-v1 and Pendulum-v1 (requirements.txt pins it).

Usage: gym_reference.py PATH/TO/gym_replay   (ctest's test_env_gymnasium)

Runs episodes in Gymnasium from start states set by hand (env.unwrapped.state
after reset: Gymnasium's own draws and wider ones), with the actions of
several policies (random; for CartPole a push toward the pole's lean, which
reaches the 500-step limit, with and without random actions mixed in; for
Pendulum torques inside and outside [-2, 2]), replays the same start states
and actions through gym_replay (spec/c/gym_replay.c) and requires every
observation component and reward within 1e-5 (absolute) of Gymnasium's and
the same termination step; also the declared sizes against Gymnasium's spaces.
Exit 0 when all agree, 1 with the first difference, 77 (skipped) without
gymnasium.
"""
import subprocess
import sys

try:
    import numpy as np
    import gymnasium as gym
except ImportError:
    print("skipped: gymnasium is not installed (requirements.txt; make test installs it)")
    sys.exit(77)

TOL = 1e-5
SEEDS = (0, 1, 2, 3)
EPISODES_PER_SEED = 8          # per environment: 32 each


def cartpole_policy(kind, rng):
    """kind 0: random; 1: push toward the lean; 2, 3: the same with 10% / 25% random actions."""
    eps = (1.0, 0.0, 0.1, 0.25)[kind]
    def act(o):
        if rng.random() < eps:
            return int(rng.integers(2))
        return int(o[2] + 0.5 * o[3] > 0)
    return act


def pendulum_policy(kind, rng):
    """kind 0: uniform in [-3, 3]; 1: in [-2, 2] with exact +-2 and 0 mixed in;
    2: large torques (+-50) and 0; 3: swing-up pumping, +-2.5 in the direction of motion."""
    def act(o):
        if kind == 0:
            u = rng.uniform(-3.0, 3.0)
        elif kind == 1:
            u = rng.choice((-2.0, 0.0, 2.0)) if rng.random() < 0.2 else rng.uniform(-2.0, 2.0)
        elif kind == 2:
            u = rng.choice((-50.0, 0.0, 50.0)) if rng.random() < 0.5 else rng.uniform(-5.0, 5.0)
        else:
            u = 2.5 if o[2] * o[0] >= 0 else -2.5
        return np.array([u], dtype=np.float32)
    return act


def run_gym(name, seed, k, rng):
    env = gym.make(name)
    env.reset(seed=1000 * seed + k)
    state = np.array(env.unwrapped.state, dtype=np.float64)
    if k % 2:                                   # a wider start than Gymnasium's reset draws
        if name == "CartPole-v1":
            state = rng.uniform([-1.0, -1.0, -0.15, -1.0], [1.0, 1.0, 0.15, 1.0])
        else:
            state = rng.uniform([-10.0, -8.0], [10.0, 8.0])
    env.unwrapped.state = state.copy()
    policy = (cartpole_policy if name == "CartPole-v1" else pendulum_policy)(k % 4, rng)
    obs = np.array(state, dtype=np.float32) if name == "CartPole-v1" else \
        np.array([np.cos(state[0]), np.sin(state[0]), state[1]], dtype=np.float32)
    ep = {"state": [float(v) for v in state], "actions": [], "steps": []}
    while True:
        a = policy(obs)
        obs, r, term, trunc, _ = env.step(a)
        ep["actions"].append(a)
        ep["steps"].append(([float(v) for v in obs], float(r), bool(term)))
        if term or trunc:
            ep["truncated"] = bool(trunc) and not term
            ep["final"] = [float(v) for v in env.unwrapped.state]
            return ep


def replay_text(env, ep):
    if env == "cartpole":
        acts = " ".join(str(int(a)) for a in ep["actions"])
    else:
        acts = " ".join(repr(float(a[0])) for a in ep["actions"])
    state = " ".join(repr(v) for v in ep["state"])
    return f"{env} {state} {len(ep['actions'])} {acts}\n"


def check_spaces(replay):
    out = subprocess.run([replay, "--spaces"], capture_output=True, text=True, check=True).stdout.split("\n")
    c = out[0].split()
    p = out[1].split()
    cp, pe = gym.make("CartPole-v1"), gym.make("Pendulum-v1")
    want_c = [str(cp.observation_space.shape[0]), str(cp.action_space.n), str(cp.spec.max_episode_steps)]
    want_p = [str(pe.observation_space.shape[0]), str(pe.action_space.shape[0]),
              float(pe.action_space.low[0]), float(pe.action_space.high[0]), str(pe.spec.max_episode_steps)]
    got_c = [c[2], c[4], c[6]]
    got_p = [p[2], p[4], float(p[6]), float(p[8]), p[10]]
    errors = []
    if got_c != want_c:
        errors.append(f"cartpole sizes (obs, actions, max_steps) {got_c}, Gymnasium's {want_c}")
    if got_p != want_p:
        errors.append(f"pendulum sizes (obs, act_dim, low, high, max_steps) {got_p}, Gymnasium's {want_p}")
    return errors


def main():
    if len(sys.argv) != 2:
        print("usage: gym_reference.py PATH/TO/gym_replay", file=sys.stderr)
        return 2
    replay = sys.argv[1]
    errors = check_spaces(replay)
    for name, env in (("CartPole-v1", "cartpole"), ("Pendulum-v1", "pendulum")):
        episodes = []
        for seed in SEEDS:
            rng = np.random.default_rng(seed)
            for k in range(EPISODES_PER_SEED):
                episodes.append(run_gym(name, seed, k, rng))
        text = "".join(replay_text(env, ep) for ep in episodes)
        res = subprocess.run([replay], input=text, capture_output=True, text=True)
        if res.returncode != 0:
            print(f"FAIL: gym_replay exited {res.returncode}: {res.stderr.strip()}")
            return 1
        lines = res.stdout.splitlines()
        i = 0
        worst_obs = worst_rew = 0.0
        worst_at = None
        steps = limit = x_out = th_out = 0
        for e, ep in enumerate(episodes):
            for t, (obs, rew, term) in enumerate(ep["steps"]):
                if i >= len(lines):
                    errors.append(f"{env}: gym_replay printed {len(lines)} lines, fewer than the steps")
                    break
                f = lines[i].split()
                i += 1
                c_obs, c_rew, c_term = [float(v) for v in f[:-2]], float(f[-2]), f[-1] == "1"
                d_obs = max(abs(a - b) for a, b in zip(c_obs, obs))
                d_rew = abs(c_rew - rew)
                if d_obs > worst_obs:
                    worst_obs, worst_at = d_obs, (e, t + 1)
                worst_rew = max(worst_rew, d_rew)
                if not (d_obs <= TOL and d_rew <= TOL and c_term == term):
                    errors.append(f"{env} episode {e} (start {ep['state']}) step {t + 1}: "
                                  f"C obs {c_obs} reward {c_rew} terminated {c_term}; "
                                  f"Gymnasium's obs {obs} reward {rew} terminated {term}")
            steps += len(ep["steps"])
            limit += ep["truncated"]
            if ep["steps"][-1][2]:
                x_out += abs(ep["final"][0]) > 2.4
                th_out += abs(ep["final"][2]) > 12 * 2 * np.pi / 360
        ends = f", terminated by x {x_out}, by theta {th_out}" if env == "cartpole" else ""
        at = f" (episode {worst_at[0]}, step {worst_at[1]})" if worst_at else ""
        print(f"{env}: {len(episodes)} episodes, {steps} steps, {limit} ran to the step limit{ends}; "
              f"largest difference: observation {worst_obs:.3g}{at}, reward {worst_rew:.3g}")
    if errors:
        print(f"FAIL: {len(errors)} difference(s) beyond {TOL} or in termination; the first:\n  {errors[0]}")
        return 1
    print(f"ok: every observation and reward within {TOL} of Gymnasium's, the same termination steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
