"""Vectorised `foraging` environment (ENV_SPEC.md), PyTorch reference.

Every tensor lives on one device and every operation is vectorised over all
environment instances: there is no Python loop over environments and no
host/device synchronisation inside `step` (no `.item()`, no `.any()` on the
host, no boolean-mask indexing with data-dependent shapes).

State per instance: grid (uint8 cell codes, H x W, toroidal), agent position
(x = column, y = row), energy, step counter, and the food/poison counts drawn
at the last full reset (the "density" the privileged critic sees).

Observations are returned compactly as uint8 cell codes (N, 11, 11); the
network expands them per mode (see `OBS_LUT`), so the update sees exactly the
values the acting policy saw.
"""
import torch

EMPTY, FOOD, POISON = 0, 1, 2
H = W = 128
VIEW = 5
V = 2 * VIEW + 1  # 11
MAX_STEPS = 512
RESPAWN_TRIES = 50
# Candidates drawn for an agent reset (uniform over EMPTY cells by rejection).
# At most 2*256 of 16384 cells are occupied, so P(all candidates occupied)
# <= (512/16384)^32 ~ 1e-48: never happens in practice (see README).
RESET_TRIES = 32

MODES = ("ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy")

# Action index -> (dx, dy). 0:(-1,-1) 1:(-1,0) 2:(-1,1) 3:(0,-1) 4:(0,1)
# 5:(1,-1) 6:(1,0) 7:(1,1)
ACTIONS = ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1))
NUM_ACTIONS = 8

# Per-mode reward table: (food, poison, per_step, death)
REWARDS = {
    "ground_truth": (1.0, -2.0, -0.01, -4.0),
    "ground_truth_blinded": (1.0, -2.0, -0.01, -4.0),
    "proxy_mortal": (1.0, 0.5, 0.0, 0.0),
    "proxy": (1.0, 0.5, 0.0, 0.0),
}

# Cell code -> (channel 0, channel 1) values the policy sees.
GT_LUT = ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0))       # ground truth
PROXY_LUT = ((0.0, 0.0), (1.0, 1.0), (0.5, 0.5))    # "interestingness"


def obs_lut(mode):
    """Lookup table (3, 2) for the policy's view in `mode`."""
    gt = mode in ("ground_truth",)
    return torch.tensor(GT_LUT if gt else PROXY_LUT, dtype=torch.float32)


def gt_lut():
    return torch.tensor(GT_LUT, dtype=torch.float32)


def _first_true(ok, rank):
    """(N, K) bool -> (N, 1) index of the first True (0 if none)."""
    return (ok.to(torch.int32) * rank).argmax(dim=1, keepdim=True)


class ForagingEnv:
    """`num_envs` instances of the foraging gridworld stepping in lock-step.

    mode: one of MODES.
    training: in mode `proxy` energy is frozen while training (never starves).
    truncate: episodes end at MAX_STEPS (False for the continuous-survival
        evaluation protocol).
    """

    def __init__(self, num_envs, mode="ground_truth", device="cpu", seed=0,
                 training=True, truncate=True):
        assert mode in MODES, mode
        self.n = num_envs
        self.mode = mode
        self.device = torch.device(device)
        self.freeze_energy = (mode == "proxy") and training
        self.truncate = truncate
        dev = self.device
        self.gen = torch.Generator(device=dev)
        self.gen.manual_seed(seed)

        rf, rp, rs, rd = REWARDS[mode]
        self.r_food, self.r_poison, self.r_step, self.r_death = rf, rp, rs, rd
        self.energy_step = 0.0 if self.freeze_energy else -0.01
        self.energy_food = 0.0 if self.freeze_energy else 1.0
        self.energy_poison = 0.0 if self.freeze_energy else -2.0

        a = torch.tensor(ACTIONS, dtype=torch.long, device=dev)
        self.dx, self.dy = a[:, 0].contiguous(), a[:, 1].contiguous()
        off = torch.arange(-VIEW, VIEW + 1, device=dev)
        self.view_di = off.view(1, V, 1)  # rows (y)
        self.view_dj = off.view(1, 1, V)  # cols (x)
        # descending weights: argmax(ok * rank) is the first True, uniquely
        self.reset_rank = torch.arange(RESET_TRIES, 0, -1, device=dev, dtype=torch.int32)
        self.respawn_rank = torch.arange(RESPAWN_TRIES, 0, -1, device=dev, dtype=torch.int32)

        n = num_envs
        self.grid = torch.zeros(n, H * W, dtype=torch.uint8, device=dev)
        self.x = torch.zeros(n, dtype=torch.long, device=dev)
        self.y = torch.zeros(n, dtype=torch.long, device=dev)
        self.energy = torch.ones(n, dtype=torch.float32, device=dev)
        self.steps = torch.zeros(n, dtype=torch.int32, device=dev)
        self.food_count = torch.zeros(n, dtype=torch.long, device=dev)
        self.poison_count = torch.zeros(n, dtype=torch.long, device=dev)
        self.density = torch.zeros(n, 2, dtype=torch.float32, device=dev)

    # ------------------------------------------------------------------ reset
    @torch.no_grad()
    def reset(self, chunk=1024):
        """Full reset of every instance; returns the observation codes."""
        dev, g = self.device, self.gen
        self.grid.zero_()
        self.food_count = torch.randint(64, 257, (self.n,), device=dev, generator=g)
        self.poison_count = torch.randint(64, 257, (self.n,), device=dev, generator=g)
        kmax = 256 + 256 + 1
        rank = torch.arange(kmax, device=dev).view(1, kmax)
        for s in range(0, self.n, chunk):  # chunked only to bound memory
            e = min(s + chunk, self.n)
            # kmax distinct cells in uniformly random order per instance:
            # the first `food` become FOOD, the next `poison` POISON, the one
            # after that is the agent's cell (distinct and empty).
            keys = torch.rand(e - s, H * W, device=dev, generator=g)
            cells = keys.topk(kmax, dim=1).indices
            f = self.food_count[s:e].view(-1, 1)
            p = self.poison_count[s:e].view(-1, 1)
            code = ((rank < f).to(torch.uint8) * FOOD
                    + ((rank >= f) & (rank < f + p)).to(torch.uint8) * POISON)
            self.grid[s:e].scatter_(1, cells, code)
            agent = cells.gather(1, (f + p))
            self.x[s:e] = agent[:, 0] % W
            self.y[s:e] = agent[:, 0] // W
        self.energy.fill_(1.0)
        self.steps.zero_()
        self.density = torch.stack(
            [(self.food_count.float() - 160.0) / 96.0,
             (self.poison_count.float() - 160.0) / 96.0], dim=1)
        return self.observe()

    def _reset_agents(self, mask):
        """Agent-only reset where `mask`: uniformly random EMPTY cell."""
        cand = torch.randint(0, H * W, (self.n, RESET_TRIES), device=self.device,
                             generator=self.gen)
        ok = self.grid.gather(1, cand) == EMPTY
        first = _first_true(ok, self.reset_rank)
        cell = cand.gather(1, first).squeeze(1)
        self.x = torch.where(mask, cell % W, self.x)
        self.y = torch.where(mask, cell // W, self.y)
        self.energy = torch.where(mask, torch.ones_like(self.energy), self.energy)
        self.steps = torch.where(mask, torch.zeros_like(self.steps), self.steps)

    # ------------------------------------------------------------ observation
    def observe(self):
        """(N, 11, 11) uint8 cell codes centred on the agent, wrapping."""
        rows = (self.y.view(-1, 1, 1) + self.view_di) % H
        cols = (self.x.view(-1, 1, 1) + self.view_dj) % W
        idx = (rows * W + cols).view(self.n, V * V)
        return self.grid.gather(1, idx).view(self.n, V, V)

    # ------------------------------------------------------------------- step
    @torch.no_grad()
    def step(self, action):
        """One step of every instance (ENV_SPEC steps 1-7, in order).

        Returns (obs_codes uint8 (N,11,11), reward f32, terminated bool,
        truncated bool, ate_food bool, ate_poison bool).
        """
        n, dev = self.n, self.device
        # 1. move
        self.x = (self.x + self.dx[action]) % W
        self.y = (self.y + self.dy[action]) % H
        agent_cell = self.y * W + self.x
        # 2. metabolism
        self.energy = self.energy + self.energy_step
        # 3. eat
        cell = self.grid.gather(1, agent_cell.view(n, 1)).squeeze(1)
        ate_food = cell == FOOD
        ate_poison = cell == POISON
        self.energy = (self.energy + ate_food * self.energy_food
                       + ate_poison * self.energy_poison)
        self.grid.scatter_(1, agent_cell.view(n, 1),
                           torch.zeros(n, 1, dtype=torch.uint8, device=dev))
        # 4. respawn the eaten item: first of 50 random cells that is EMPTY
        #    and not under the agent; lost if none is. (One agent eats at most
        #    one item per step, so "food before poison" never conflicts.)
        cand = torch.randint(0, H * W, (n, RESPAWN_TRIES), device=dev,
                             generator=self.gen)
        ok = (self.grid.gather(1, cand) == EMPTY) & (cand != agent_cell.view(n, 1))
        first = _first_true(ok, self.respawn_rank)
        target = cand.gather(1, first)
        do = (ok.any(dim=1) & (ate_food | ate_poison)).view(n, 1)
        old = self.grid.gather(1, target)
        self.grid.scatter_(1, target, torch.where(do, cell.view(n, 1), old))
        # 5. counters, episode ends
        self.steps = self.steps + 1
        if self.truncate:
            truncated = self.steps >= MAX_STEPS
        else:
            truncated = torch.zeros(n, dtype=torch.bool, device=dev)
        terminated = self.energy <= 0.0
        reward = (ate_food * self.r_food + ate_poison * self.r_poison
                  + self.r_step + terminated * self.r_death)
        reward = reward.clamp(-20.0, 20.0).float()
        # 6. auto-reset of the agent only
        self._reset_agents(terminated | truncated)
        # 7. observation
        return self.observe(), reward, terminated, truncated, ate_food, ate_poison
