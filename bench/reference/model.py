"""Reference actor / privileged-critic network with a PopArt value head.

Default widths (ENV_SPEC.md): conv 2->32->64->64 (3x3, pad 1, ReLU), flatten
(C,H,W) to 7744, linear -> 512 ReLU = features; actor 512 -> 8; critic on
features ++ density(2) ++ ground-truth view(242) = 756 -> 512 ReLU -> 1.
About 4.03 M parameters.

The network reads the compact uint8 cell codes and expands them itself through
two lookup tables (policy view for the mode, ground-truth view for the critic).

Layout: the expanded view comes out of the table as (B,11,11,2) and is
permuted to (B,2,11,11), i.e. with channels_last strides. `layout` says what
the convolutions get: "nchw" (the default: the view made contiguous first;
measured fastest here, README.md), "channels_last" (the view and the conv
weights in channels_last: call `.to(memory_format=torch.channels_last)` on the
model as train.py does), or "mixed" (the permuted view as it is with NCHW
weights: what this file did before 2026-11-23).
"""
import math

import torch
import torch.nn as nn

from foraging import V, NUM_ACTIONS, obs_lut, gt_lut


LAYOUTS = ("nchw", "channels_last", "mixed")


def _ortho(layer, gain):
    nn.init.orthogonal_(layer.weight, gain=gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    def __init__(self, mode="ground_truth", conv=(32, 64, 64), hidden=512,
                 critic_hidden=512, popart=True, layout="nchw"):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError("layout %r: accepted %s" % (layout, ", ".join(LAYOUTS)))
        self.layout = layout
        g = math.sqrt(2.0)
        layers, cin = [], 2
        for c in conv:
            layers += [_ortho(nn.Conv2d(cin, c, 3, padding=1), g), nn.ReLU()]
            cin = c
        layers += [nn.Flatten(), _ortho(nn.Linear(cin * V * V, hidden), g), nn.ReLU()]
        self.trunk = nn.Sequential(*layers)
        self.actor = _ortho(nn.Linear(hidden, NUM_ACTIONS), 0.01)
        self.critic_hidden = _ortho(nn.Linear(hidden + 2 + 2 * V * V, critic_hidden), g)
        self.critic_out = _ortho(nn.Linear(critic_hidden, 1), 1.0)
        self.register_buffer("obs_lut", obs_lut(mode))
        self.register_buffer("gt_lut", gt_lut())
        # PopArt statistics; with popart=False they stay (0, 1): same code path.
        self.popart = popart
        self.register_buffer("pa_mean", torch.zeros(()))
        self.register_buffer("pa_std", torch.ones(()))
        self.register_buffer("pa_count", torch.zeros((), dtype=torch.long))

    def policy_parameters(self):
        return list(self.trunk.parameters()) + list(self.actor.parameters())

    def value_parameters(self):
        return list(self.critic_hidden.parameters()) + list(self.critic_out.parameters())

    def forward(self, codes, density):
        """codes: (B,11,11) uint8; density: (B,2) f32.

        Returns logits (B,8) and the *normalised* value (B,).
        """
        idx = codes.long()
        x = self.obs_lut[idx].permute(0, 3, 1, 2)              # (B,2,11,11), NHWC strides
        if self.layout == "nchw":
            x = x.contiguous()
        elif self.layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        gt = self.gt_lut[idx].permute(0, 3, 1, 2).flatten(1)   # (B,242) C,H,W
        feat = self.trunk(x)
        logits = self.actor(feat)
        c_in = torch.cat([feat, density.to(feat.dtype), gt.to(feat.dtype)], dim=1)
        raw = self.critic_out(torch.relu(self.critic_hidden(c_in))).squeeze(-1)
        return logits, raw

    def denormalise(self, raw):
        return self.pa_mean + self.pa_std * raw.float()

    def normalise(self, v):
        return (v - self.pa_mean) / self.pa_std

    @torch.no_grad()
    def popart_update(self, returns, optimizer):
        """ENV_SPEC PopArt step, run once before each update.

        Updates (mean, std) from the batch returns and rescales the last critic
        layer and its Adam moments so the denormalised outputs are unchanged.
        Kept on the device (no host sync).
        """
        if not self.popart:
            return
        self.pa_count += 1
        beta = torch.clamp(1.0 / self.pa_count.float(), min=0.001)
        r = returns.float().flatten()
        bmean = r.mean()
        bstd = r.std(unbiased=True).clamp(min=1e-4)
        mean, std = self.pa_mean.clone(), self.pa_std.clone()
        new_mean = (1 - beta) * mean + beta * bmean
        new_var = (1 - beta) * std * std + beta * bstd * bstd
        new_std = new_var.sqrt().clamp(min=1e-4)
        ratio = std / new_std
        w, b = self.critic_out.weight, self.critic_out.bias
        w.mul_(ratio)
        b.copy_((b * std + mean - new_mean) / new_std)
        for p in (w, b):
            st = optimizer.state.get(p, None)
            if st:
                st["exp_avg"].mul_(ratio)
                st["exp_avg_sq"].mul_(ratio * ratio)
        self.pa_mean.copy_(new_mean)
        self.pa_std.copy_(new_std)
