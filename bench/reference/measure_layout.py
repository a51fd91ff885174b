#!/usr/bin/env python3
"""Which tensor layout makes the reference's convolutions fastest, and that they run in oneDNN.

Times forward + backward of the network (model.py) on one batch, the way an
update does it, for three layouts, in fp32 and under bf16 autocast:
  as written  the input is (B,11,11,2) codes expanded and permuted to (B,2,11,11), so its
              strides are channels_last already; the weights are contiguous (NCHW)
  nchw        the input made contiguous (NCHW) before the first convolution
  nhwc        the input and the weights in channels_last (model.to(memory_format=...))
and prints the convolution operators the profiler saw (aten::mkldnn_convolution = oneDNN).
Run it under the reference's own setup (the launcher picks the malloc):

  build/venv-bench/bin/python bench/reference/measure_layout.py --net small --batch 4096 --threads 2
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launch  # noqa: E402

if __name__ == "__main__":
    launch.apply()

import torch  # noqa: E402

from model import ActorCritic  # noqa: E402

NETS = {"small": ((16, 32), 128, 128), "ref": ((32, 64, 64), 512, 512)}


class Layout(torch.nn.Module):
    """The network with its input put in a given memory format before the trunk."""

    def __init__(self, m, fmt):
        super().__init__()
        self.m, self.fmt = m, fmt

    def forward(self, codes, dens):
        m = self.m
        idx = codes.long()
        x = m.obs_lut[idx].permute(0, 3, 1, 2)
        if self.fmt == "nchw":
            x = x.contiguous()
        elif self.fmt == "nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
        gt = m.gt_lut[idx].permute(0, 3, 1, 2).flatten(1)
        feat = m.trunk(x)
        c_in = torch.cat([feat, dens.to(feat.dtype), gt.to(feat.dtype)], dim=1)
        return m.actor(feat), m.critic_out(torch.relu(m.critic_hidden(c_in))).squeeze(-1)


def step(net, codes, dens, bf16):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits, v = net(codes, dens)
    (logits.float().logsumexp(-1).mean() + v.float().pow(2).mean()).backward()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", default="small", choices=sorted(NETS))
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--allocator", default="auto", choices=launch.CHOICES)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    conv, hidden, critic = NETS[args.net]
    codes = torch.randint(0, 3, (args.batch, 11, 11), dtype=torch.uint8)
    dens = torch.randn(args.batch, 2)
    print("torch %s, mkldnn available %s enabled %s, %d threads, malloc %s, net %s, batch %d"
          % (torch.__version__, torch.backends.mkldnn.is_available(), torch.backends.mkldnn.enabled,
             torch.get_num_threads(), launch.report()["name"], args.net, args.batch))
    for bf16 in (False, True):
        for fmt in ("as written", "nchw", "nhwc"):
            m = ActorCritic("ground_truth", conv, hidden, critic)
            if fmt == "nhwc":
                m = m.to(memory_format=torch.channels_last)
            net = Layout(m, fmt)
            for _ in range(2):
                step(net, codes, dens, bf16)
            ts = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                step(net, codes, dens, bf16)
                ts.append(time.perf_counter() - t0)
            ts.sort()
            with torch.autograd.profiler.profile() as prof:
                step(net, codes, dens, bf16)
            ops = sorted({e.name for e in prof.function_events if "conv" in e.name})
            print("%-5s %-11s fwd+bwd median %.4f s (min %.4f)  %s"
                  % ("bf16" if bf16 else "fp32", fmt, ts[len(ts) // 2], ts[0], " ".join(ops)))


if __name__ == "__main__":
    main()
