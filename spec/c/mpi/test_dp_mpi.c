/*
 * test_dp_mpi.c - data-parallel training on Open MPI, run by ctest as a real
 * `mpirun -n 2` (CMakeLists.txt). Each rank is a trainer of E environments
 * whose instances carry global indices rank x E .. (the config's
 * env.index0), whose gradient is replaced by the ranks' average
 * (MPI_Allreduce, then / size) before every optimizer step, and whose
 * PopArt statistics are every rank's returns' (mr_trainer_set_reducer).
 *
 * Checked: (1) the ranks' environments are the slices of one process of
 * size x E environments: after creation the same grids, positions and
 * observations, and through the first rollout (the same starting weights)
 * the same actions, rewards and observations, every random draw being keyed
 * by the global index; (2) after several updates every rank holds the same
 * parameters bit for bit (a hash compared across ranks), and they moved from
 * the start (PopArt's rescale of the value head included: with each rank's
 * own return statistics they drift apart); (3) without the reducer they
 * would not: the ranks' own gradients differ (so (2) is a check of the
 * averaging, not of the data).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "errors.h"
#include "trainer.h"
#include "registry.h"   /* the environments' own state (mr_forage_of) */

enum { E = 8, T = 8 };

static mr_status sum(void *ctx, double *v, int n, mr_error *err) {
    (void)ctx;
    if (MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
        return mr_fail(err, MR_ERR_BACKEND, "MPI_Allreduce of the statistics failed");
    return MR_OK;
}

static mr_status average(void *ctx, float *g, uint64_t n, void *stream, mr_error *err) {
    (void)stream;
    const int size = *(const int *)ctx;
    if (MPI_Allreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
        return mr_fail(err, MR_ERR_BACKEND, "MPI_Allreduce of the gradient failed");
    const float inv = 1.0f / (float)size;
    for (uint64_t i = 0; i < n; i++) g[i] *= inv;
    return MR_OK;
}

static mr_config config(int envs, int index0) {
    mr_config c;
    mr_config_default(&c);
    c.device = MR_DEVICE_CPU;
    c.threads = 1;
    c.seed = 7;
    c.env.num_envs = envs;
    c.env.index0 = index0;
    c.env.grid_size = 16;
    c.env.density_min = 4;
    c.env.density_max = 8;
    c.env.max_episode_steps = 16;
    c.policy.num_conv = 1;
    c.policy.conv_channels[0] = 4;
    c.policy.hidden = 16;
    c.policy.critic_hidden = 16;
    c.ppo.rollout_steps = T;
    c.ppo.minibatches = 2;
    c.ppo.epochs = 2;
    c.total_steps = (uint64_t)envs * T * 100;
    return c;
}

static mr_trainer *make(const mr_config *c) {
    mr_trainer *t = NULL;
    mr_error err;
    if (mr_trainer_create(c, &t, &err) != MR_OK) {
        fprintf(stderr, "mr_trainer_create: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return t;
}

static uint64_t hash_params(mr_trainer *t, float *buf, uint64_t n) {
    mr_error err;
    if (mr_trainer_read_params(t, buf, n, &err) != MR_OK) MPI_Abort(MPI_COMM_WORLD, 1);
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)buf;
    for (uint64_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK_MSG(size >= 2, "run under mpirun -n 2 or more (got %d rank)", size);
    mr_error err;
    mr_metrics m;

    /* (1) this rank's environments against the same instances in one process of size x E */
    mr_config cr = config(E, rank * E), cb = config(size * E, 0);
    mr_trainer *t = make(&cr), *big = make(&cb);
    CHECK(mr_trainer_pull(t, MR_SYNC_ALL, &err) == MR_OK && mr_trainer_pull(big, MR_SYNC_ALL, &err) == MR_OK);
    const size_t cells = 16 * 16, VV = (size_t)t->VV;
    CHECK(memcmp(mr_forage_of(&t->env)->grid, mr_forage_of(&big->env)->grid + (size_t)rank * E * cells, E * cells) == 0);
    CHECK(memcmp(mr_forage_of(&t->env)->x, mr_forage_of(&big->env)->x + rank * E, E * sizeof(int32_t)) == 0);
    CHECK(memcmp(t->env.obs, big->env.obs + (size_t)rank * E * VV, E * VV) == 0);
    CHECK(mr_trainer_update(t, &m, &err) == MR_OK && mr_trainer_update(big, &m, &err) == MR_OK);
    const size_t B = (size_t)T * E, BB = (size_t)T * size * E;
    mr_rollout_view a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.obs = malloc(B * VV); a.act = malloc(B); a.done = malloc(B); a.extra = malloc(B * 8); a.logp = malloc(B * 4);
    a.val = malloc(B * 4); a.rew = malloc(B * 4); a.adv = malloc(B * 4); a.ret = malloc(B * 4);
    a.last_value = malloc(E * 4);
    b.obs = malloc(BB * VV); b.act = malloc(BB); b.done = malloc(BB); b.extra = malloc(BB * 8); b.logp = malloc(BB * 4);
    b.val = malloc(BB * 4); b.rew = malloc(BB * 4); b.adv = malloc(BB * 4); b.ret = malloc(BB * 4);
    b.last_value = malloc((size_t)size * E * 4);
    CHECK(mr_trainer_read_rollout(t, &a, &err) == MR_OK && mr_trainer_read_rollout(big, &b, &err) == MR_OK);
    int same = 1;
    for (int s = 0; s < T; s++) {
        const size_t ra = (size_t)s * E, rb = (size_t)s * size * E + (size_t)rank * E;
        same &= memcmp(a.act + ra, b.act + rb, E) == 0;
        same &= memcmp(a.rew + ra, b.rew + rb, E * sizeof(float)) == 0;
        same &= memcmp(a.obs + ra * VV, b.obs + rb * VV, E * VV) == 0;
        same &= memcmp(a.logp + ra, b.logp + rb, E * sizeof(float)) == 0;
    }
    CHECK_MSG(same, "rank %d: the first rollout is not the slice of one process's", rank);

    /* (4) a data-parallel checkpoint: rank 0 saves with every rank's
     * environments; it loads as one process of size x E (the environments of
     * `big`, which stepped the same instances), as each rank's slice, and on
     * another count of instances with fresh environments */
    const uint64_t per = mr_trainer_env_state_bytes(t);
    unsigned char *mine = malloc(per), *states = rank == 0 ? malloc(per * (size_t)size) : NULL;
    CHECK(mr_trainer_read_env_state(t, mine, per, &err) == MR_OK);
    MPI_Gather(mine, (int)per, MPI_BYTE, states, (int)per, MPI_BYTE, 0, MPI_COMM_WORLD);
    const char *ck = "test_dp_mpi.mrck";
    if (rank == 0) {
        const mr_ranks_info info = {size, 1, 12345};
        CHECK_MSG(mr_trainer_save_ranks(t, ck, &info, states, &err) == MR_OK, "%s", err.msg);
        static mr_checkpoint_info got;
        CHECK(mr_checkpoint_read_info(ck, &got, &err) == MR_OK && got.ranks.has && got.ranks.ranks == size &&
              got.ranks.agent_steps == 12345);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int carried = -1;
    mr_trainer *one = make(&cb);   /* one process of size x E */
    CHECK_MSG(mr_trainer_load_rank(one, ck, 1, 0, &carried, &err) == MR_OK && carried == 1, "%s", err.msg);
    CHECK(mr_trainer_pull(big, MR_SYNC_ALL, &err) == MR_OK && mr_trainer_pull(one, MR_SYNC_ALL, &err) == MR_OK);
    CHECK(memcmp(mr_forage_of(&one->env)->grid, mr_forage_of(&big->env)->grid, (size_t)size * E * cells) == 0);
    CHECK(memcmp(one->env.obs, big->env.obs, (size_t)size * E * VV) == 0);
    CHECK(memcmp(one->env.tick, big->env.tick, (size_t)size * E * sizeof(uint32_t)) == 0);
    mr_trainer_free(one);
    mr_trainer *slice = make(&cr);  /* this rank again */
    CHECK_MSG(mr_trainer_load_rank(slice, ck, size, rank, &carried, &err) == MR_OK && carried == 1, "%s", err.msg);
    CHECK(mr_trainer_pull(slice, MR_SYNC_ALL, &err) == MR_OK);
    CHECK(memcmp(mr_forage_of(&slice->env)->grid, mr_forage_of(&t->env)->grid, E * cells) == 0);
    CHECK(memcmp(slice->env.ep_return, t->env.ep_return, E * sizeof(float)) == 0);
    mr_trainer_free(slice);
    mr_trainer *other = make(&cr), *fresh = make(&cr);   /* E instances as 1 rank: not the file's count */
    CHECK_MSG(mr_trainer_load_rank(other, ck, 1, 0, &carried, &err) == MR_OK && carried == 0, "%s", err.msg);
    CHECK(mr_trainer_pull(other, MR_SYNC_ALL, &err) == MR_OK && mr_trainer_pull(fresh, MR_SYNC_ALL, &err) == MR_OK);
    CHECK(memcmp(mr_forage_of(&other->env)->grid, mr_forage_of(&fresh->env)->grid, E * cells) == 0);
    if (rank == 0)   /* the weights are rank 0's (without a reducer here, the ranks' differ) */
        CHECK(memcmp(other->pol.params, t->pol.params, (size_t)t->net.n_params * sizeof(float)) == 0);
    /* a plain load (evaluation, export) takes it too, the environments fresh */
    CHECK_MSG(mr_trainer_load(other, ck, &err) == MR_OK, "%s", err.msg);
    mr_trainer_free(other);
    mr_trainer_free(fresh);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) remove(ck);
    free(mine);
    free(states);
    mr_trainer_free(big);
    mr_trainer_free(t);

    /* (2) with the reducer, every rank's parameters stay identical and move */
    t = make(&cr);
    const uint64_t n = (uint64_t)t->net.n_params;
    float *buf = malloc(n * sizeof(float));
    const uint64_t h0 = hash_params(t, buf, n);
    const mr_reducer red = {average, sum, &size};
    mr_trainer_set_reducer(t, &red);
    for (int u = 0; u < 4; u++) CHECK(mr_trainer_update(t, &m, &err) == MR_OK);
    const uint64_t h = hash_params(t, buf, n);
    uint64_t *all = malloc((size_t)size * sizeof *all);
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    int equal = 1;
    for (int r = 1; r < size; r++) equal &= all[r] == all[0];
    CHECK_MSG(equal, "rank %d: the ranks' parameters differ after 4 averaged updates", rank);
    CHECK(h != h0);
    mr_trainer_free(t);

    /* (3) without it they differ: each rank learns from its own environments */
    t = make(&cr);
    for (int u = 0; u < 2; u++) CHECK(mr_trainer_update(t, &m, &err) == MR_OK);
    const uint64_t hs = hash_params(t, buf, n);
    MPI_Allgather(&hs, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    CHECK_MSG(all[0] != all[1], "the ranks' own updates are identical: the data-parallel check above tests nothing");
    mr_trainer_free(t);

    free(buf);
    free(all);
    int failed = check_failed, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    char name[32];
    snprintf(name, sizeof name, "test_dp_mpi rank %d", rank);
    const int rc = check_report(name);
    MPI_Finalize();
    return any ? 1 : rc;
}
