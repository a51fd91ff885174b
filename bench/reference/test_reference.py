"""Self-checks of the PyTorch reference against ENV_SPEC.md.

  build/venv-bench/bin/python bench/reference/test_reference.py
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from foraging import ForagingEnv, H, W, FOOD, POISON  # noqa: E402
from model import ActorCritic  # noqa: E402
from ppo import PPO  # noqa: E402


def slow_obs(env):
    g = env.grid.view(env.n, H, W)
    o = torch.zeros(env.n, 11, 11, dtype=torch.uint8)
    for n in range(env.n):
        y, x = int(env.y[n]), int(env.x[n])
        for i in range(11):
            for j in range(11):
                o[n, i, j] = g[n, (y - 5 + i) % H, (x - 5 + j) % W]
    return o


def test_env_ground_truth(steps=1500, n=48):
    env = ForagingEnv(n, "ground_truth", seed=3)
    obs = env.reset()
    assert torch.equal((env.grid == FOOD).sum(1), env.food_count)
    assert torch.equal((env.grid == POISON).sum(1), env.poison_count)
    assert ((env.food_count >= 64) & (env.food_count <= 256)).all()
    assert torch.equal(obs, slow_obs(env))
    g = torch.Generator().manual_seed(0)
    n_term = n_trunc = 0
    for t in range(steps):
        a = torch.randint(0, 8, (n,), generator=g)
        px, py, pe = env.x.clone(), env.y.clone(), env.energy.clone()
        f0, p0 = (env.grid == FOOD).sum(1), (env.grid == POISON).sum(1)
        obs, r, term, trunc, af, ap = env.step(a)
        done = term | trunc
        nd = ~done
        assert torch.equal(env.x[nd], ((px + env.dx[a]) % W)[nd])
        assert torch.equal(env.y[nd], ((py + env.dy[a]) % H)[nd])
        e = pe - 0.01 + af * 1.0 - ap * 2.0
        assert torch.allclose(env.energy[nd], e[nd])
        assert torch.equal(term, e <= 0)
        assert (env.energy[done] == 1).all() and (env.steps[done] == 0).all()
        rr = (af * 1.0 - ap * 2.0 - 0.01 - term * 4.0).clamp(-20, 20)
        assert torch.allclose(r, rr)
        f1, p1 = (env.grid == FOOD).sum(1), (env.grid == POISON).sum(1)
        assert ((f1 == f0) | (af & (f1 == f0 - 1))).all()  # respawned or lost
        assert ((p1 == p0) | (ap & (p1 == p0 - 1))).all()
        under = env.grid.gather(1, (env.y * W + env.x).view(-1, 1)).squeeze(1)
        assert (under == 0).all() and (obs[:, 5, 5] == 0).all()
        n_term += int(term.sum())
        n_trunc += int(trunc.sum())
        if t % 300 == 0:
            assert torch.equal(obs, slow_obs(env))
    assert n_term > 0
    print("ground_truth env ok: %d deaths, %d truncations (random policy)" % (n_term, n_trunc))


def test_env_proxy_frozen():
    env = ForagingEnv(16, "proxy", seed=1)
    env.reset()
    truncs = 0
    for _ in range(1100):
        _, r, term, trunc, af, ap = env.step(torch.randint(0, 8, (16,)))
        assert (env.energy == 1).all() and not term.any()
        assert torch.allclose(r, af * 1.0 + ap * 0.5)
        truncs += int(trunc.sum())
    assert truncs == 32  # every 512 steps
    env = ForagingEnv(16, "proxy", seed=1, training=False, truncate=False)
    env.reset()
    for _ in range(300):
        _, _, term, trunc, _, _ = env.step(torch.randint(0, 8, (16,)))
        assert not trunc.any()
    print("proxy env ok (energy frozen in training, real in evaluation)")


def test_model_and_popart():
    m = ActorCritic("ground_truth")
    n_policy = sum(p.numel() for p in m.policy_parameters())
    assert n_policy == 4025576, n_policy  # "about 4.03 M" (trunk + actor)
    mp = ActorCritic("ground_truth_blinded")
    codes = torch.tensor([0, 1, 2], dtype=torch.uint8).repeat(41)[:121].view(1, 11, 11)
    assert torch.equal(mp.obs_lut[codes.long()][0, 0, :3],
                       torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.5, 0.5]]))
    # PopArt keeps denormalised outputs unchanged and rescales Adam moments
    env = ForagingEnv(8, "ground_truth", seed=0)
    algo = PPO(env, m, torch.device("cpu"), rollout=16)
    algo.collect()
    algo.gae()
    algo.update(0.0)  # creates Adam state
    obs, dens = algo.obs.view(-1, 11, 11)[:64], algo.dens.view(-1, 2)[:64]
    with torch.no_grad():
        v0 = m.denormalise(m(obs, dens)[1])
    st = algo.opt.state[m.critic_out.weight]
    m0, s0 = m.pa_mean.clone(), m.pa_std.clone()
    ea, eq = st["exp_avg"].clone(), st["exp_avg_sq"].clone()
    m.popart_update(algo.returns * 3.0 + 5.0, algo.opt)
    with torch.no_grad():
        v1 = m.denormalise(m(obs, dens)[1])
    assert torch.allclose(v0, v1, atol=1e-4), (v0 - v1).abs().max()
    ratio = s0 / m.pa_std
    assert torch.allclose(st["exp_avg"], ea * ratio)
    assert torch.allclose(st["exp_avg_sq"], eq * ratio * ratio)
    assert int(m.pa_count) == 2 and not torch.equal(m0, m.pa_mean)
    print("model ok: policy params %d, total %d; PopArt invariance ok"
          % (n_policy, sum(p.numel() for p in m.parameters())))


def test_bf16_autocast_fp32_master_weights():
    """--precision bf16 on a CPU: the products run in bf16, the weights and Adam stay fp32."""
    m = ActorCritic("ground_truth", conv=(4,), hidden=16, critic_hidden=16)
    env = ForagingEnv(8, "ground_truth", seed=0)
    algo = PPO(env, m, torch.device("cpu"), rollout=8, precision="bf16")
    with algo.autocast():
        logits, _ = m(env.reset(), env.density)
    assert logits.dtype == torch.bfloat16, logits.dtype
    before = [p.detach().clone() for p in m.parameters()]
    algo.collect()
    algo.gae()
    info = algo.update(0.0)
    assert torch.isfinite(info["v_loss"]) and torch.isfinite(info["pg_loss"])
    assert all(p.dtype == torch.float32 for p in m.parameters())
    assert all(s["exp_avg"].dtype == torch.float32 for s in algo.opt.state.values())
    assert any(not torch.equal(a, p) for a, p in zip(before, m.parameters()))
    print("bf16 autocast ok: bf16 logits, fp32 weights and Adam moments, weights moved")


def test_compiled_matches_eager():
    """torch.compile (torch 2.x; what bench --compare's compiled column runs) trains as eager does."""
    if not hasattr(torch, "compile"):
        print("compile: torch %s has no torch.compile (skipped)" % torch.__version__)
        return
    out = []
    for compiled in (False, True):
        torch.manual_seed(5)
        env = ForagingEnv(8, "ground_truth", seed=5)
        m = ActorCritic("ground_truth", conv=(4,), hidden=16, critic_hidden=16)
        algo = PPO(env, m, torch.device("cpu"), rollout=8, compile=compiled)
        infos = []
        for u in range(2):
            algo.collect()
            algo.gae()
            infos.append(algo.update(u / 2))
        out.append((infos, [p.detach().clone() for p in m.parameters()]))
        assert algo.compiled == compiled and algo.compile_scope == ("loss" if compiled else None)
    (ie, pe), (ic, pc) = out
    for a, b in zip(ie, ic):
        for k in ("pg_loss", "v_loss", "entropy"):
            assert torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-5), (k, a[k], b[k])
    assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-5) for a, b in zip(pe, pc))
    print("compile ok: torch.compile (network + PPO loss) trains as eager (losses and weights after 2 updates)")


def test_launch_allocators():
    """launch.py re-executes the process on the malloc asked for (a real child process each)."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "MALLOC_CONF", "MOONRL_REF_ALLOCATOR") and not k.startswith("MALLOC_")}

    def probe(*args):
        out = subprocess.run([sys.executable, os.path.join(here, "launch.py")] + list(args), env=env,
                             capture_output=True, text=True)
        return out.returncode, out.stdout, out.stderr

    rc, out, _ = probe("--allocator", "system")
    d = json.loads(out)
    assert rc == 0 and d["name"] == "system" and d["env"] == {} and d["loaded"] is None
    assert d["big_block"] == "mmap", d  # glibc's default: a 64 MiB block is mmapped, and unmapped on free
    rc, out, _ = probe("--allocator", "glibc-tuned")
    d = json.loads(out)
    assert rc == 0 and d["env"]["MALLOC_MMAP_MAX_"] == "0" and d["loaded"] is None
    assert d["big_block"] == "[heap]", d  # the variables took: no mmap, the block comes from the heap
    for name, lib in (("tcmalloc", "libtcmalloc_minimal.so.4"), ("jemalloc", "libjemalloc.so.2")):
        rc, out, err = probe("--allocator", name)
        if rc != 0:
            assert "apt-get install" in err and "is not installed" in err, err
            print("launch: %s not installed (skipped)" % name)
            continue
        d = json.loads(out)
        assert d["name"] == name and d["env"]["LD_PRELOAD"] == lib and d["loaded"].startswith(lib), d
    rc, out, _ = probe()  # auto: tcmalloc where installed, glibc-tuned otherwise
    assert json.loads(out)["name"] in ("tcmalloc", "glibc-tuned")
    rc, _, err = probe("--allocator", "mimalloc")
    assert rc != 0 and "accepted auto, tcmalloc, jemalloc, glibc-tuned, system" in err, err
    print("launch ok: system mmaps a 64 MiB block, glibc-tuned takes it from the heap, preloads mapped")


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    test_env_ground_truth()
    test_env_proxy_frozen()
    test_model_and_popart()
    test_bf16_autocast_fp32_master_weights()
    test_compiled_matches_eager()
    test_launch_allocators()
    print("all reference checks passed")
