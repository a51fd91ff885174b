"""Stable-Baselines3's PPO on CartPole-v1 with rl-baselines3-zoo's tuned settings, the peer of `moonrl train cartpole`.

rl-baselines3-zoo's hyperparams/ppo.yml, CartPole-v1 (what configs/experiments/cartpole.lua
copies): 8 environments (make_vec_env: DummyVecEnv of Monitor-wrapped gymnasium.make("CartPole-v1")),
MlpPolicy (SB3's default: separate 64-64 tanh actor and critic), n_steps 32, batch_size 256 (one
minibatch), n_epochs 20, gamma 0.98, gae_lambda 0.8, ent_coef 0, learning_rate and clip_range linear
from 1e-3 and 0.2 to 0 (the zoo's lin_0.001, lin_0.2), everything else SB3's default; on the cpu with
torch's default threads (all cores).

Prints one JSON line per update, as moonrl's metrics.jsonl counts them: the agent-steps so far, the
episodes that ended in the update's rollout and their mean return, and the wall-clock time (epoch
seconds, time.time()) when the update ended; a first line with the versions and the time training
started, a last one when it ended. bench/cartpole_train.lua reads them.

    build/venv-bench/bin/python bench/reference/cartpole_sb3.py --seed 1 --total-steps 100000
"""
import argparse
import json
import platform
import sys
import time

try:
    import gymnasium
    import torch
    import stable_baselines3
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
except ImportError as e:
    sys.stderr.write("bench/reference/cartpole_sb3.py needs Stable-Baselines3, PyTorch and Gymnasium (%s): "
                     "`make bench` installs them into build/venv-bench (requirements-bench.txt)\n" % e)
    sys.exit(2)


def linear(start):
    """The zoo's lin_<start>: start x the progress remaining (1 at the start, 0 at the end)."""
    return lambda progress_remaining: progress_remaining * start


class Updates(BaseCallback):
    """One line per update: the episodes its rollout ended (Monitor's info["episode"]), written when the
    update's training ends (the next rollout's start, or the end of learning)."""

    def __init__(self):
        super().__init__()
        self.returns = []
        self.pending = None
        self.update = 0

    def flush(self):
        if self.pending is not None:
            self.pending["wall_time"] = time.time()
            print(json.dumps(self.pending), flush=True)
            self.pending = None

    def _on_rollout_start(self):
        self.flush()

    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                self.returns.append(float(info["episode"]["r"]))
        return True

    def _on_rollout_end(self):
        self.update += 1
        r = self.returns
        self.pending = {"update": self.update, "agent_steps": int(self.num_timesteps), "episodes": len(r),
                        "episode_return_mean": sum(r) / len(r) if r else None}
        self.returns = []

    def _on_training_end(self):
        self.flush()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=100000, help="agent-steps (the zoo's n_timesteps: 1e5)")
    args = p.parse_args(argv)
    env = make_vec_env("CartPole-v1", n_envs=8, seed=args.seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=args.seed, device="cpu",
                verbose=0)
    print(json.dumps({"event": "start", "impl": "stable-baselines3", "stable_baselines3": stable_baselines3.__version__,
                      "torch": torch.__version__, "gymnasium": gymnasium.__version__,
                      "python": platform.python_version(), "threads": torch.get_num_threads(),
                      "seed": args.seed, "wall_time": time.time()}), flush=True)
    model.learn(total_timesteps=args.total_steps, callback=Updates())
    print(json.dumps({"event": "end", "agent_steps": int(model.num_timesteps), "wall_time": time.time()}), flush=True)


if __name__ == "__main__":
    main()
