"""PPO on CartPole-v1 in the manner of CleanRL's ppo.py, the second peer of `moonrl train cartpole`.

A minimal single-file PPO written after CleanRL's cleanrl/ppo.py (the algorithm as it has it: separate
64-64 tanh actor and critic with orthogonal initialisation, Adam with eps 1e-5, the learning rate
annealed linearly to 0, GAE, advantages normalised per minibatch, the clipped surrogate, the clipped
value loss, the gradient norm clipped; episodes end on termination or truncation, with no
bootstrapping on truncation), its arguments set as configs/experiments/cartpole.lua sets moonrl's
where they map: 8 environments x 32 steps, 1 minibatch, 20 epochs, gamma 0.98, lambda 0.8,
learning rate 1e-3, clip 0.2, entropy coefficient 0, value coefficient 0.5, max gradient norm 0.5.
What does not map: the clip coefficient stays 0.2 (CleanRL has no schedule for it; moonrl and the zoo
anneal it to 0), Adam's eps stays CleanRL's 1e-5 (moonrl's 1e-8). The environments:
gymnasium.vector.SyncVectorEnv of gymnasium.make("CartPole-v1") with same-step autoreset (the
semantics CleanRL's loop was written for); on the cpu with torch's default threads (all cores).

Prints the same JSON lines as cartpole_sb3.py (one per update; bench/cartpole_train.lua reads them).

    build/venv-bench/bin/python bench/reference/cartpole_cleanrl.py --seed 1 --total-steps 100000
"""
import argparse
import json
import platform
import random
import sys
import time

try:
    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn
    from torch.distributions import Categorical
except ImportError as e:
    sys.stderr.write("bench/reference/cartpole_cleanrl.py needs PyTorch, Gymnasium and NumPy (%s): "
                     "`make bench` installs them into build/venv-bench (requirements-bench.txt)\n" % e)
    sys.exit(2)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=100000)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=32, help="steps per environment per rollout")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--gamma", type=float, default=0.98)
    p.add_argument("--gae-lambda", type=float, default=0.8)
    p.add_argument("--num-minibatches", type=int, default=1)
    p.add_argument("--update-epochs", type=int, default=20)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.0)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    return p.parse_args(argv)


def init(layer, gain=2 ** 0.5):
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(n_in, n_out, last_gain):
    return nn.Sequential(init(nn.Linear(n_in, 64)), nn.Tanh(), init(nn.Linear(64, 64)), nn.Tanh(),
                         init(nn.Linear(64, n_out), last_gain))


class ActorCritic(nn.Module):
    def __init__(self, n_obs, n_actions):
        super().__init__()
        self.actor = mlp(n_obs, n_actions, 0.01)
        self.critic = mlp(n_obs, 1, 1.0)

    def value(self, x):
        return self.critic(x).squeeze(-1)

    def act(self, x, action=None):
        dist = Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(x)


def main(argv=None):
    a = parse(argv)
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(a.num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    n_obs, n_act = envs.single_observation_space.shape[0], envs.single_action_space.n
    net = ActorCritic(n_obs, n_act)
    opt = torch.optim.Adam(net.parameters(), lr=a.learning_rate, eps=1e-5)
    T, N = a.num_steps, a.num_envs
    batch = T * N
    mb_size = batch // a.num_minibatches
    iterations = a.total_steps // batch
    obs_buf = torch.zeros((T, N, n_obs))
    act_buf = torch.zeros((T, N), dtype=torch.long)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros((T, N)) for _ in range(4))

    print(json.dumps({"event": "start", "impl": "cleanrl-style", "torch": torch.__version__,
                      "gymnasium": gym.__version__, "python": platform.python_version(),
                      "threads": torch.get_num_threads(), "seed": a.seed, "wall_time": time.time()}), flush=True)
    obs, _ = envs.reset(seed=a.seed)
    obs = torch.as_tensor(obs)
    done = torch.zeros(N)
    ep_ret = np.zeros(N)
    steps = 0
    for it in range(1, iterations + 1):
        for g in opt.param_groups:
            g["lr"] = (1.0 - (it - 1.0) / iterations) * a.learning_rate
        finished = []
        for t in range(T):
            steps += N
            obs_buf[t], done_buf[t] = obs, done
            with torch.no_grad():
                action, logp, _, value = net.act(obs)
            act_buf[t], logp_buf[t], val_buf[t] = action, logp, value
            nobs, reward, term, trunc, _ = envs.step(action.numpy())
            ended = np.logical_or(term, trunc)
            ep_ret += reward
            finished.extend(ep_ret[ended].tolist())
            ep_ret[ended] = 0.0
            rew_buf[t] = torch.as_tensor(reward, dtype=torch.float32)
            obs, done = torch.as_tensor(nobs), torch.as_tensor(ended, dtype=torch.float32)

        # GAE over the rollout, bootstrapped from the value of the observation after it
        with torch.no_grad():
            next_value = net.value(obs)
            adv = torch.zeros((T, N))
            last = torch.zeros(N)
            for t in reversed(range(T)):
                not_done = 1.0 - (done if t == T - 1 else done_buf[t + 1])
                v_next = next_value if t == T - 1 else val_buf[t + 1]
                delta = rew_buf[t] + a.gamma * v_next * not_done - val_buf[t]
                last = delta + a.gamma * a.gae_lambda * not_done * last
                adv[t] = last
            ret = adv + val_buf

        b_obs, b_act, b_logp = obs_buf.reshape(batch, n_obs), act_buf.reshape(batch), logp_buf.reshape(batch)
        b_adv, b_ret, b_val = adv.reshape(batch), ret.reshape(batch), val_buf.reshape(batch)
        for _ in range(a.update_epochs):
            order = torch.randperm(batch)
            for start in range(0, batch, mb_size):
                idx = order[start:start + mb_size]
                _, logp, entropy, value = net.act(b_obs[idx], b_act[idx])
                ratio = (logp - b_logp[idx]).exp()
                mb_adv = b_adv[idx]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(-mb_adv * ratio,
                                    -mb_adv * ratio.clamp(1 - a.clip_coef, 1 + a.clip_coef)).mean()
                v_clipped = b_val[idx] + (value - b_val[idx]).clamp(-a.clip_coef, a.clip_coef)
                v_loss = 0.5 * torch.max((value - b_ret[idx]) ** 2, (v_clipped - b_ret[idx]) ** 2).mean()
                loss = pg_loss - a.ent_coef * entropy.mean() + a.vf_coef * v_loss
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), a.max_grad_norm)
                opt.step()
        print(json.dumps({"update": it, "agent_steps": steps, "episodes": len(finished),
                          "episode_return_mean": sum(finished) / len(finished) if finished else None,
                          "wall_time": time.time()}), flush=True)
    envs.close()
    print(json.dumps({"event": "end", "agent_steps": steps, "wall_time": time.time()}), flush=True)


if __name__ == "__main__":
    main()
