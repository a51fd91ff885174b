"""PPO for the foraging workload, exactly per ENV_SPEC.md (PyTorch reference).

Rollout 128 steps x num_envs, GAE(0.99, 0.95) with done = terminated or
truncated, batch-normalised advantages, 4 epochs x 1 full-batch minibatch
(reshuffled each epoch), clipped surrogate + clipped value loss on PopArt-
normalised values, entropy bonus + 0.05 * relu(0.5 - H), linear schedules
(clip 0.2->0.1, lr 3e-4->1e-4, ent 0.1->0.001) evaluated once per update,
Adam(eps 1e-8), grad-norm clip 0.5 separately for policy (trunk + actor) and
value-head parameters, optional fp16 autocast + GradScaler / bf16 autocast.

Nothing in the rollout or the update synchronises with the host; the only
syncs are the per-update logging reads (and the timing barriers).
"""
import contextlib
import inspect

import torch
import torch.nn.functional as F

from foraging import V


# ----------------------------------------------------------- feature detection
def make_autocast(device, precision):
    """Context-manager factory for the requested precision on `device`."""
    if precision == "fp32":
        return contextlib.nullcontext
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    if device.type == "cpu" and precision == "fp16":
        raise SystemExit("--precision fp16 needs CUDA (use bf16 or fp32 on CPU)")
    if hasattr(torch, "autocast"):
        return lambda: torch.autocast(device_type=device.type, dtype=dtype)
    return lambda: torch.cuda.amp.autocast(dtype=dtype)  # very old torch


def make_scaler(device, precision):
    enabled = device.type == "cuda" and precision == "fp16"
    amp_scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if amp_scaler is not None:  # torch >= 2.3
        try:
            return amp_scaler(device.type, enabled=enabled)
        except TypeError:
            pass
    return torch.cuda.amp.GradScaler(enabled=enabled)


def make_adam(params, lr, device):
    kw = dict(lr=lr, eps=1e-8)
    sig = inspect.signature(torch.optim.Adam.__init__).parameters
    fused = False
    if device.type == "cuda" and "fused" in sig:
        kw["fused"] = True
        fused = True
    return torch.optim.Adam(params, **kw), fused


def maybe_compile(model, enabled, mode="default"):
    if not enabled:
        return model, False
    if not hasattr(torch, "compile"):
        raise SystemExit("--compile needs torch >= 2.0 (this is %s)" % torch.__version__)
    # Fixed shapes (rollout N, update batch, eval E): one static graph each.
    kw = {"mode": mode}
    if "dynamic" in inspect.signature(torch.compile).parameters:
        kw["dynamic"] = False
    return torch.compile(model, **kw), True


def linear(start, end, progress):
    return start + (end - start) * progress


# ------------------------------------------------------------------------ PPO
class PPO:
    def __init__(self, env, model, device, rollout=128, epochs=4, minibatches=1,
                 gamma=0.99, lam=0.95, clip=(0.2, 0.1), lr=(3e-4, 1e-4),
                 ent=(0.1, 0.001), vf_coef=0.5, max_grad_norm=0.5,
                 precision="fp32", compile=False, compile_mode="default", compile_scope="loss"):
        self.env, self.model, self.device = env, model, device
        self.T, self.N = rollout, env.n
        self.B = self.T * self.N
        self.epochs, self.minibatches = epochs, minibatches
        self.gamma, self.lam = gamma, lam
        self.clip_s, self.lr_s, self.ent_s = clip, lr, ent
        self.vf_coef, self.max_grad_norm = vf_coef, max_grad_norm
        self.autocast = make_autocast(device, precision)
        self.scaler = make_scaler(device, precision)
        self.opt, self.fused = make_adam(model.parameters(), lr[0], device)
        # torch.compile: the network's forward (the rollout's and evaluation's), and for the update either
        # the network alone (compile_scope "model") or the network with the PPO loss in one graph ("loss")
        self.fwd, self.compiled = maybe_compile(model, compile, compile_mode)
        self.loss_fn = self.loss
        if self.compiled and compile_scope == "loss":
            self.loss_fn = maybe_compile(self.loss, True, compile_mode)[0]
        self.compile_scope = compile_scope if self.compiled else None
        self.policy_params = model.policy_parameters()
        self.value_params = model.value_parameters()

        T, N, d = self.T, self.N, device
        self.obs = torch.zeros(T, N, V, V, dtype=torch.uint8, device=d)
        self.dens = torch.zeros(T, N, 2, dtype=torch.float32, device=d)
        self.actions = torch.zeros(T, N, dtype=torch.long, device=d)
        self.logp = torch.zeros(T, N, dtype=torch.float32, device=d)
        self.values = torch.zeros(T, N, dtype=torch.float32, device=d)
        self.rewards = torch.zeros(T, N, dtype=torch.float32, device=d)
        self.dones = torch.zeros(T, N, dtype=torch.float32, device=d)
        self.adv = torch.zeros(T, N, dtype=torch.float32, device=d)

        self.next_obs = env.reset()
        # running per-env episode accumulators (on device)
        self.ep_ret = torch.zeros(N, device=d)
        self.stats = None

    # ---------------------------------------------------------------- rollout
    @torch.no_grad()
    def act(self, codes, density):
        with self.autocast():
            logits, raw = self.fwd(codes, density)
        logp_all = F.log_softmax(logits.float(), dim=-1)
        a = torch.multinomial(logp_all.exp(), 1).squeeze(1)
        return a, logp_all.gather(1, a.unsqueeze(1)).squeeze(1), self.model.denormalise(raw)

    @torch.no_grad()
    def collect(self):
        d = self.device
        ret_sum = torch.zeros((), device=d)
        ep_count = torch.zeros((), device=d)
        food = torch.zeros((), device=d)
        poison = torch.zeros((), device=d)
        deaths = torch.zeros((), device=d)
        env = self.env
        for t in range(self.T):
            self.obs[t].copy_(self.next_obs)
            self.dens[t].copy_(env.density)
            a, logp, v = self.act(self.obs[t], self.dens[t])
            self.next_obs, r, term, trunc, ate_f, ate_p = env.step(a)
            done = (term | trunc).float()
            self.actions[t] = a
            self.logp[t] = logp
            self.values[t] = v
            self.rewards[t] = r
            self.dones[t] = done
            self.ep_ret += r
            ret_sum += (self.ep_ret * done).sum()
            ep_count += done.sum()
            self.ep_ret *= 1.0 - done
            food += ate_f.sum()
            poison += ate_p.sum()
            deaths += term.sum()
        _, _, self.next_value = self.act(self.next_obs, env.density)
        return dict(ret_sum=ret_sum, ep_count=ep_count, food=food, poison=poison,
                    deaths=deaths)

    # -------------------------------------------------------------------- GAE
    @torch.no_grad()
    def gae(self):
        last = torch.zeros(self.N, device=self.device)
        for t in reversed(range(self.T)):
            nv = self.next_value if t == self.T - 1 else self.values[t + 1]
            nonterm = 1.0 - self.dones[t]
            delta = self.rewards[t] + self.gamma * nv * nonterm - self.values[t]
            last = delta + self.gamma * self.lam * nonterm * last
            self.adv[t] = last
        self.returns = self.adv + self.values

    # ----------------------------------------------------------------- update
    def loss(self, obs, dens, act, old_logp, adv, old_v, ret, clip, ent_coef):
        """The minibatch's losses (pg, v, entropy, total): the network's forward and the PPO loss."""
        with self.autocast():
            logits, raw = (self.fwd if self.compile_scope == "model" else self.model)(obs, dens)
        logp_all = F.log_softmax(logits.float(), dim=-1)
        new_logp = logp_all.gather(1, act.unsqueeze(1)).squeeze(1)
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        ratio = torch.exp(new_logp - old_logp)
        pg_loss = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
        v = raw.float()
        v_clip = old_v + (v - old_v).clamp(-clip, clip)
        v_loss = torch.max(F.mse_loss(v, ret), F.mse_loss(v_clip, ret))
        loss = pg_loss + self.vf_coef * v_loss - ent_coef * entropy + 0.05 * torch.relu(0.5 - entropy)
        return pg_loss, v_loss, entropy, loss

    def update(self, progress):
        clip = linear(*self.clip_s, progress)
        lr = linear(*self.lr_s, progress)
        ent_coef = linear(*self.ent_s, progress)
        for g in self.opt.param_groups:
            g["lr"] = lr
        m = self.model
        B = self.B
        m.popart_update(self.returns, self.opt)

        b_obs = self.obs.view(B, V, V)
        b_dens = self.dens.view(B, 2)
        b_act = self.actions.view(B)
        b_logp = self.logp.view(B)
        adv = self.adv.view(B)
        b_adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        with torch.no_grad():
            b_ret_n = m.normalise(self.returns.view(B))     # targets, new stats
            b_old_n = m.normalise(self.values.view(B))      # old values, new stats

        # the schedules' values as tensors: a compiled loss keeps one graph for every update
        clip_t = torch.tensor(clip, device=self.device)
        ent_t = torch.tensor(ent_coef, device=self.device)
        mb = B // self.minibatches
        for _ in range(self.epochs):
            perm = torch.randperm(B, device=self.device)
            for k in range(self.minibatches):
                idx = perm[k * mb:(k + 1) * mb]
                pg_loss, v_loss, entropy, loss = self.loss_fn(
                    b_obs[idx], b_dens[idx], b_act[idx], b_logp[idx], b_adv[idx], b_old_n[idx], b_ret_n[idx],
                    clip_t, ent_t)
                self.opt.zero_grad(set_to_none=True)
                self.scaler.scale(loss).backward()
                self.scaler.unscale_(self.opt)
                torch.nn.utils.clip_grad_norm_(self.policy_params, self.max_grad_norm)
                torch.nn.utils.clip_grad_norm_(self.value_params, self.max_grad_norm)
                self.scaler.step(self.opt)
                self.scaler.update()
        return dict(pg_loss=pg_loss.detach(), v_loss=v_loss.detach(),
                    entropy=entropy.detach(), lr=lr, clip=clip, ent_coef=ent_coef)
