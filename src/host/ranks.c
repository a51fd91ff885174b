/*
 * ranks.c - one run over several processes (ranks) on Open MPI
 * (docs/data-parallel.md).
 *
 * Started by mpirun/mpiexec or srun with more than one task, every process
 * finds its rank here, before anything else. Rank 0 is the moonrl the user
 * sees: it runs the Lua program, the loop, the run directory, the control
 * socket and the trainer thread. Ranks 1.. run no Lua program (only a Lua
 * environment's per-thread states, lua_env.c): each is a follower that
 * repeats, on its own trainer, every engine call rank 0's thread makes, as
 * rank 0 broadcasts them:
 *
 *   START      the config (env.index0 = rank x env.num_envs), warm-up and
 *              resume settings, a new run's given weights, a Lua
 *              environment's text (the follower makes its own program from
 *              it, as rank 0 made its: host_env_program): the follower
 *              creates its trainer, sets the reducer and loads its slice of
 *              the checkpoint; every rank's success or error comes back
 *   UPDATE     the hot parameters rank 0 applies (the schedules already
 *              evaluated, live changes included): set, then one update;
 *              the ranks' metrics come back to rank 0 (combined: steps/s
 *              summed, episodes pooled) with, every HOST_RANKS_CHECK updates,
 *              a checksum of the parameters compared across ranks
 *   SAVE       the ranks' environment states to rank 0, which writes the
 *              checkpoint (one file, every rank's environments)
 *   SNAPSHOT, RESTORE, KEEP, RESTORE_KEPT, POISON   the same call
 *   END        the run is over; EXIT: rank 0's program is (MPI_Finalize)
 *
 * A change made on rank 0 at update k (ctl set, a tweak file, a hook) is in
 * the UPDATE of k + 1 on every rank, because rank 0 sends the hot set it has
 * just applied. Pause, checkpoint and stop are rank 0's thread's boundary;
 * the followers meanwhile wait for the next call, polling (MPI_Ibcast and a
 * sleep), so a paused run costs no CPU.
 *
 * Gradients are averaged with MPI_Allreduce (sum, then / ranks) and the
 * statistics summed likewise (mr_reducer). A follower whose engine call
 * fails prints why, naming its rank, and aborts the job (MPI_Abort): its
 * peers may be inside a collective that will not complete. So does rank 0
 * when its trainer fails inside an update (host_ranks_finish). A rank
 * killed outright is mpirun's (or srun --kill-on-bad-exit's) to end: the
 * whole job stops, and the newest checkpoint, written atomically, is
 * intact.
 *
 * Built without Open MPI, a launch of several tasks is refused at start.
 */
#include "host.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_size = 1, g_rank = 0, g_active = 0, g_broken = 0;

int host_ranks_size(void) { return g_size; }
int host_ranks_rank(void) { return g_rank; }
void host_ranks_broken(void) { g_broken = 1; }

/* The launcher's count of tasks, from its variables: Open MPI's mpirun,
 * MPICH/Hydra and Slurm's srun (PMI or PMIx). 1 when none says more. */
static int launched_size(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1) return atoi(v);
    }
    /* srun --mpi=pmix: a step of several tasks (not sbatch's batch step) */
    const char *st = getenv("SLURM_STEP_NUM_TASKS"), *pr = getenv("PMIX_RANK");
    if (st && pr && atoi(st) > 1) return atoi(st);
    return 1;
}

/* Each rank's share of the cores when the config says all (threads = 0):
 * the ranks on this machine split them. */
static int local_size(void) {
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!v) v = getenv("MPI_LOCALNRANKS");
    if (!v) v = getenv("SLURM_NTASKS_PER_NODE");
    int n = v ? atoi(v) : 0;
    return n > 0 ? n : g_size;
}

#ifdef MOONRL_HAVE_NCCL
/* This rank's place among the ranks on its machine. */
static int local_rank(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v) return atoi(v);
    }
    return g_rank;
}
#endif

void host_ranks_threads(mr_config *c) {
    if (g_size <= 1) return;
    if (c->threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long per = cores / local_size();
        c->threads = per >= 1 ? (int)per : 1;
    }
#ifdef MOONRL_HAVE_NCCL
    /* one GPU per rank: the ranks of a machine take its devices in turn */
    int devices = mr_cuda_device_count();
    if (c->device != MR_DEVICE_CPU && c->cuda.device_index == 0 && devices > 1)
        c->cuda.device_index = local_rank() % devices;
#endif
}

/* The engine calls without arguments that every rank makes alike. */
static mr_status plain_call(mr_trainer *t, int op, mr_error *err) {
    switch (op) {
    case HOST_OP_SNAPSHOT: return mr_trainer_snapshot(t, err);
    case HOST_OP_RESTORE: return mr_trainer_restore(t, err);
    case HOST_OP_KEEP: return mr_trainer_keep(t, err);
    case HOST_OP_RESTORE_KEPT: return mr_trainer_restore_kept(t, err);
    case HOST_OP_POISON: return mr_trainer_debug_poison(t, err);
    default: return MR_OK;
    }
}

#ifndef MOONRL_HAVE_MPI

int host_ranks_init(int *argc, char ***argv, char *err, size_t n) {
    (void)argc; (void)argv;
    int size = launched_size();
    if (size <= 1) return 0;
    snprintf(err, n, "started as one of %d tasks (mpirun or srun), but this moonrl was built without Open MPI: "
             "install libopenmpi-dev and rebuild (make does), or start one process", size);
    return -1;
}
int host_ranks_follow(void) { return 0; }
void host_ranks_finish(int code) { (void)code; }
int host_ranks_begin(host_run *r, mr_trainer *t, char *msg, size_t n) { (void)r; (void)t; (void)msg; (void)n; return 0; }
mr_status host_ranks_call(int op, mr_trainer *t, mr_error *err) { return plain_call(t, op, err); }
int host_ranks_update(const mr_hot_params *h, int warm, uint64_t update, mr_trainer *t, mr_metrics *m,
                      mr_status *st, char *msg, size_t n) {
    (void)h; (void)warm; (void)update; (void)t; (void)m; (void)st; (void)msg; (void)n;
    return 0;
}
int host_ranks_gather_envs(mr_trainer *t, void **states, char *msg, size_t n) {
    (void)t; (void)msg; (void)n;
    *states = NULL;
    return 0;
}
void host_ranks_end(char *line, size_t n) { (void)n; line[0] = 0; }
const char *host_ranks_describe(void) { return ""; }

#else

#include <mpi.h>

/* What rank 0 broadcasts before each call. */
typedef struct rank_op {
    int32_t op, warm;
    uint64_t update;             /* UPDATE: the update it makes (the check's schedule) */
    mr_hot_params hot;           /* UPDATE: the set in force */
} rank_op;

/* What every rank sends back after START and UPDATE. */
typedef struct rank_reply {
    int32_t status;              /* mr_status of the call */
    int32_t has_hash;
    uint64_t hash;               /* the parameters' checksum, every HOST_RANKS_CHECK updates */
    mr_metrics m;
    char msg[512];
} rank_reply;

typedef struct rank_start {
    mr_config cfg;               /* rank 0's; each rank sets its env.index0 and threads */
    int32_t has_resume;
    uint64_t init_n;             /* floats of given weights that follow (policy.init) */
    char resume_path[HOST_PATH];
    /* a Lua environment (env.lua; cfg.env.program is rank 0's pointer): the
     * bytes of its text that follow the weights, and how rank 0 made it */
    uint64_t env_text_n;
    int32_t env_checks;
    uint64_t env_memory_kib;
    char env_label[256];
} rank_start;

static char g_describe[160];

static mr_status fail_mpi(mr_error *err, const char *what) {
    err->status = MR_ERR_BACKEND;
    snprintf(err->msg, sizeof err->msg, "%s", what);
    return MR_ERR_BACKEND;
}

static uint64_t param_count(const mr_trainer *t) {
    mr_tensor x;
    mr_error err;
    int k = mr_trainer_tensor_count(t);
    if (k <= 0 || mr_trainer_tensor(t, k - 1, &x, &err) != MR_OK) return 0;
    return x.offset + x.count;
}

int host_ranks_init(int *argc, char ***argv, char *err, size_t n) {
    int size = launched_size();
    if (size <= 1) return 0;
    int provided = 0;
    /* The trainer thread makes the calls, one at a time: SERIALIZED. */
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        snprintf(err, n, "MPI_Init_thread failed (started as one of %d tasks)", size);
        return -1;
    }
    g_active = 1;
    if (provided < MPI_THREAD_SERIALIZED) {
        snprintf(err, n, "this MPI offers thread level %d; moonrl needs MPI_THREAD_SERIALIZED (%d)", provided,
                 MPI_THREAD_SERIALIZED);
        return -1;
    }
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    /* Errors end the job with a message rather than return (the default
     * too; said here because the design relies on it). */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    int len = 0;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = 0;
    snprintf(g_describe, sizeof g_describe, "%d ranks (%.80s), gradients averaged by MPI_Allreduce", g_size, lib);
    return 0;
}

const char *host_ranks_describe(void) { return g_size > 1 ? g_describe : ""; }

/* A broadcast from rank 0 that waits without spinning: a paused run, or
 * rank 0 still reading its config, costs the followers no CPU. */
static void bcast_quiet(void *buf, int bytes) {
    MPI_Request req;
    MPI_Ibcast(buf, bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    int done = 0;
    long ns = 1000;   /* 1 us, doubling to 20 ms */
    for (;;) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 20000000) ns *= 2;
    }
}

static uint64_t params_hash(mr_trainer *t, char *msg, size_t n, int *ok) {
    static float *buf;
    static uint64_t cap;
    mr_error err = {0};
    const uint64_t p = param_count(t);
    if (p > cap) {
        free(buf);
        buf = malloc(p * sizeof(float));
        cap = buf ? p : 0;
    }
    *ok = 0;
    if (!buf) { snprintf(msg, n, "out of memory for the parameters' checksum"); return 0; }
    if (mr_trainer_read_params(t, buf, p, &err) != MR_OK) { snprintf(msg, n, "reading the parameters: %.400s", err.msg); return 0; }
    uint64_t h = 1469598103934665603ull;   /* FNV-1a over the bytes */
    const unsigned char *b = (const unsigned char *)buf;
    for (uint64_t i = 0; i < p * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
    *ok = 1;
    return h;
}

/* ------------------------------------------------------------ the reducer */

/* Seconds rank 0 spent in the gradient's allreduce and in updates, told at
 * the run's end (host_ranks_end): the share of communication. */
static double g_reduce_s, g_update_s;
static uint64_t g_reduces;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static mr_status reduce_average(void *ctx, float *g, uint64_t n, void *stream, mr_error *err) {
    (void)ctx; (void)stream;
    const double t0 = now_s();
    for (uint64_t off = 0; off < n;) {   /* MPI counts are int */
        int c = n - off > (uint64_t)1 << 30 ? 1 << 30 : (int)(n - off);
        if (MPI_Allreduce(MPI_IN_PLACE, g + off, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            return fail_mpi(err, "MPI_Allreduce of the gradient failed");
        off += (uint64_t)c;
    }
    const float inv = 1.0f / (float)g_size;
    for (uint64_t i = 0; i < n; i++) g[i] *= inv;
    g_reduce_s += now_s() - t0;
    g_reduces++;
    return MR_OK;
}

static mr_status reduce_sum(void *ctx, double *v, int n, mr_error *err) {
    (void)ctx;
    if (MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Allreduce of the statistics failed");
    return MR_OK;
}

static const mr_reducer g_reducer = {reduce_average, reduce_sum, NULL};

/* The reducer of a run whose trainers are where `t`'s is, after every rank
 * has said where (a collective: NCCL's communicator is made by all or none).
 * 0, or -1 with msg. */
static int use_reducer(mr_trainer *t, char *msg, size_t n) {
    int cuda = t && mr_trainer_config(t)->device == MR_DEVICE_CUDA, any = 0;
    MPI_Allreduce(&cuda, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any) {
        if (t) mr_trainer_set_reducer(t, &g_reducer);
        return 0;
    }
#ifdef MOONRL_HAVE_NCCL
    if (host_nccl_open(g_rank, g_size, msg, n) != 0) return -1;
    static const mr_reducer nccl = {host_nccl_average, reduce_sum, NULL};
    if (t) mr_trainer_set_reducer(t, &nccl);
    return 0;
#else
    snprintf(msg, n, "the ranks train on GPUs, but this moonrl was built without NCCL (the CUDA toolkit's "
             "nccl.h and libnccl): rebuild where it is installed");
    return -1;
#endif
}

static void drop_reducer(void) {
#ifdef MOONRL_HAVE_NCCL
    host_nccl_close();
#endif
}

/* --------------------------------------------------------- both sides */

/* One rank's trainer as START describes it; 0 or -1 with msg. */
static int setup(const rank_start *st, const float *init, mr_trainer **out, char *msg, size_t n) {
    mr_config c = st->cfg;
    c.env.index0 = g_rank * c.env.num_envs;
    mr_error err = {0};
    mr_trainer *t = NULL;
    if (mr_trainer_create(&c, &t, &err) != MR_OK) {
        snprintf(msg, n, "creating the trainer failed (%s): %.400s", mr_status_name(err.status), err.msg);
        return -1;
    }
    if (st->has_resume && mr_trainer_load_rank(t, st->resume_path, g_size, g_rank, NULL, &err) != MR_OK) {
        snprintf(msg, n, "resuming from %.200s failed (%s): %.200s", st->resume_path, mr_status_name(err.status), err.msg);
        mr_trainer_free(t);
        return -1;
    }
    if (init && mr_trainer_write_params(t, init, st->init_n, &err) != MR_OK) {
        snprintf(msg, n, "starting from the given weights (policy.init) failed: %.400s", err.msg);
        mr_trainer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

static const char *op_name(int op) {
    static const char *names[] = {"exit", "start", "update", "checkpoint", "snapshot", "restore",
                                  "keeping the good state", "restoring the good state", "poison", "end"};
    return op >= 0 && op <= HOST_OP_END ? names[op] : "?";
}

/* One UPDATE on this rank: reply filled. */
static void run_update(mr_trainer *t, const rank_op *o, rank_reply *rep) {
    mr_error err = {0};
    memset(rep, 0, sizeof *rep);
    mr_status s = mr_trainer_set_hot(t, &o->hot, &err);
    if (s == MR_OK) s = mr_trainer_update(t, &rep->m, &err);
    rep->status = (int32_t)s;
    if (s != MR_OK) snprintf(rep->msg, sizeof rep->msg, "%s", err.msg);
    if ((s == MR_OK || s == MR_ERR_NUMERIC) && !o->warm && o->update % HOST_RANKS_CHECK == 0) {
        int ok = 0;
        rep->hash = params_hash(t, rep->msg, sizeof rep->msg, &ok);
        rep->has_hash = ok;
    }
}

/* ------------------------------------------------------------ followers */

static void follower_die(const char *what, const char *why) {
    fprintf(stderr, "moonrl: rank %d of %d: %s: %s; ending the job\n", g_rank, g_size, what, why);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

int host_ranks_follow(void) {
    /* A stop is rank 0's to make (a final checkpoint needs every rank):
     * mpirun and srun pass SIGTERM/SIGINT to every task, and the followers
     * go on until rank 0 says END and EXIT, or the launcher kills them. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    mr_trainer *t = NULL;
    uint64_t per = 0;
    void *env = NULL;
    for (;;) {
        rank_op o;
        bcast_quiet(&o, sizeof o);
        if (o.op == HOST_OP_EXIT) break;
        mr_error err = {0};
        if (o.op == HOST_OP_START) {
            rank_start st;
            MPI_Bcast(&st, sizeof st, MPI_BYTE, 0, MPI_COMM_WORLD);
            float *init = NULL;
            if (st.init_n) {
                init = malloc(st.init_n * sizeof(float));
                if (!init) follower_die("start", "out of memory for the given weights");
                MPI_Bcast(init, (int)st.init_n, MPI_FLOAT, 0, MPI_COMM_WORLD);
            }
            char *env_text = NULL;
            if (st.env_text_n) {   /* rank 0's Lua environment: made here from the same text */
                env_text = malloc(st.env_text_n);
                if (!env_text) follower_die("start", "out of memory for the Lua environment's text");
                MPI_Bcast(env_text, (int)st.env_text_n, MPI_BYTE, 0, MPI_COMM_WORLD);
            }
            host_ranks_threads(&st.cfg);
            rank_reply rep;
            memset(&rep, 0, sizeof rep);
            st.cfg.env.program = NULL;
            if (env_text) {
                st.env_label[sizeof st.env_label - 1] = 0;
                st.cfg.env.program = host_env_program(env_text, st.env_text_n, st.env_label, st.env_checks,
                                                      st.env_memory_kib, rep.msg, sizeof rep.msg);
                free(env_text);   /* the program keeps a copy */
                if (!st.cfg.env.program) rep.status = MR_ERR_BACKEND;
            }
            if (rep.status == MR_OK && setup(&st, init, &t, rep.msg, sizeof rep.msg) != 0) rep.status = MR_ERR_BACKEND;
            free(init);
            char rmsg[512] = "";
            if (use_reducer(t, rmsg, sizeof rmsg) != 0 && rep.status == MR_OK) {
                rep.status = MR_ERR_BACKEND;
                snprintf(rep.msg, sizeof rep.msg, "%s", rmsg);
            }
            MPI_Gather(&rep, sizeof rep, MPI_BYTE, NULL, 0, MPI_BYTE, 0, MPI_COMM_WORLD);
            if (rep.status != MR_OK && t) {   /* rank 0 ends the run: END follows */
                mr_trainer_free(t);
                t = NULL;
            }
            if (t) {
                per = mr_trainer_env_state_bytes(t);
                free(env);
                env = malloc(per ? per : 1);
                if (!env) follower_die("start", "out of memory for the environment state");
            }
            continue;
        }
        if (o.op == HOST_OP_END) {
            if (t) mr_trainer_free(t);
            t = NULL;
            drop_reducer();
            continue;
        }
        if (!t) follower_die(op_name(o.op), "no trainer (the start failed on this rank)");
        if (o.op == HOST_OP_UPDATE) {
            rank_reply rep;
            run_update(t, &o, &rep);
            MPI_Gather(&rep, sizeof rep, MPI_BYTE, NULL, 0, MPI_BYTE, 0, MPI_COMM_WORLD);
            if (rep.status != MR_OK && rep.status != MR_ERR_NUMERIC) follower_die("update", rep.msg);
        } else if (o.op == HOST_OP_SAVE) {
            if (mr_trainer_read_env_state(t, env, per, &err) != MR_OK) follower_die("checkpoint", err.msg);
            MPI_Gather(env, (int)per, MPI_BYTE, NULL, 0, MPI_BYTE, 0, MPI_COMM_WORLD);
        } else if (plain_call(t, o.op, &err) != MR_OK) {
            follower_die(op_name(o.op), err.msg);
        }
    }
    free(env);
    if (t) mr_trainer_free(t);
    MPI_Finalize();
    return 0;
}

/* ------------------------------------------------------------ rank 0 */

/* The followers wait for it with MPI_Ibcast (bcast_quiet), and a blocking
 * collective does not match a nonblocking one: rank 0 sends it with
 * MPI_Ibcast too. */
static void send_block(rank_op *o) {
    MPI_Request req;
    MPI_Ibcast(o, sizeof *o, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static void send_op(int op, int warm, uint64_t update, const mr_hot_params *h) {
    rank_op o;
    memset(&o, 0, sizeof o);
    o.op = op;
    o.warm = warm;
    o.update = update;
    if (h) o.hot = *h;
    send_block(&o);
}

int host_ranks_begin(host_run *r, mr_trainer *t, char *msg, size_t n) {
    if (g_size <= 1) return 0;
    rank_start st;
    memset(&st, 0, sizeof st);
    st.cfg = r->cfg;
    st.has_resume = r->resume_path[0] != 0;
    snprintf(st.resume_path, sizeof st.resume_path, "%s", r->resume_path);
    st.init_n = r->init_params ? r->init_n : 0;
    const char *env_text = NULL;
    if (r->cfg.env.program) {   /* a Lua environment: the followers make theirs from its text */
        size_t len = 0, kib = 0;
        int checks = 0;
        if (host_env_program_source(r->cfg.env.program, &env_text, &len, &checks, &kib) != 0 || len > INT32_MAX) {
            snprintf(msg, n, "the Lua environment %s cannot be sent to the other ranks", r->cfg.env.program->label);
            host_ranks_broken();
            return -1;
        }
        st.env_text_n = len;
        st.env_checks = checks;
        st.env_memory_kib = kib;
        snprintf(st.env_label, sizeof st.env_label, "%s", r->cfg.env.program->label);
    }
    send_op(HOST_OP_START, 0, 0, NULL);
    MPI_Bcast(&st, sizeof st, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (st.init_n) MPI_Bcast(r->init_params, (int)st.init_n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (st.env_text_n) MPI_Bcast((void *)env_text, (int)st.env_text_n, MPI_BYTE, 0, MPI_COMM_WORLD);
    rank_reply mine, *all = calloc((size_t)g_size, sizeof *all);
    memset(&mine, 0, sizeof mine);
    if (use_reducer(t, mine.msg, sizeof mine.msg) != 0) mine.status = MR_ERR_BACKEND;
    if (!all) { snprintf(msg, n, "out of memory for the ranks' replies"); host_ranks_broken(); return -1; }
    MPI_Gather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD);
    int rc = 0;
    if (mine.status != MR_OK) {
        snprintf(msg, n, "rank 0 of %d: %s", g_size, mine.msg);
        rc = -1;
    }
    for (int i = 1; i < g_size && rc == 0; i++)
        if (all[i].status != MR_OK) {
            snprintf(msg, n, "rank %d of %d: %s", i, g_size, all[i].msg);
            rc = -1;
        }
    free(all);
    return rc;
}

mr_status host_ranks_call(int op, mr_trainer *t, mr_error *err) {
    if (g_size > 1) send_op(op, 0, 0, NULL);
    return plain_call(t, op, err);
}

/* The ranks' metrics as one run's: sums, pooled episodes, means of the
 * losses (each rank's over its own samples), the largest times. */
static void combine(const rank_reply *all, mr_metrics *m) {
    mr_metrics c = all[0].m;
    double eps = 0, ret = 0, len = 0, food = 0, poison = 0, deaths = 0, sps = 0;
    double pl = 0, vl = 0, ent = 0, kl = 0, cf = 0, ev = 0;
    uint64_t steps = 0;
    int seen = 0;
    for (int i = 0; i < g_size; i++) {
        const mr_metrics *x = &all[i].m;
        eps += x->episodes;
        ret += x->episode_return_mean * x->episodes;
        len += x->episode_length_mean * x->episodes;
        food += x->food_per_episode * x->episodes;
        poison += x->poison_per_episode * x->episodes;
        deaths += x->deaths;
        sps += x->sps;
        steps += x->agent_steps;
        pl += x->policy_loss; vl += x->value_loss; ent += x->entropy; kl += x->approx_kl;
        cf += x->clip_fraction; ev += x->explained_variance;
        if (x->episodes > 0) {
            if (!seen || x->episode_return_min < c.episode_return_min) c.episode_return_min = x->episode_return_min;
            if (!seen || x->episode_return_max > c.episode_return_max) c.episode_return_max = x->episode_return_max;
            seen = 1;
        }
        if (x->time_total > c.time_total) {
            c.time_total = x->time_total; c.time_rollout = x->time_rollout; c.time_gae = x->time_gae;
            c.time_update = x->time_update; c.time_env = x->time_env; c.time_inference = x->time_inference;
            c.time_gather = x->time_gather; c.time_forward = x->time_forward; c.time_loss = x->time_loss;
            c.time_backward = x->time_backward; c.time_optimizer = x->time_optimizer;
        }
        if (x->memory_peak_bytes > c.memory_peak_bytes) c.memory_peak_bytes = x->memory_peak_bytes;
        if (x->memory_planned_bytes > c.memory_planned_bytes) c.memory_planned_bytes = x->memory_planned_bytes;
        c.nonfinite |= x->nonfinite;
        if (x->skipped_steps > c.skipped_steps) c.skipped_steps = x->skipped_steps;
    }
    const double R = (double)g_size;
    c.episodes = eps;
    if (eps > 0) {
        c.episode_return_mean = ret / eps;
        c.episode_length_mean = len / eps;
        c.food_per_episode = food / eps;
        c.poison_per_episode = poison / eps;
        c.efficiency = food + poison > 0 ? food / (food + poison) : c.efficiency;
    }
    c.deaths = deaths;
    c.sps = sps;
    c.agent_steps = steps;
    c.policy_loss = pl / R; c.value_loss = vl / R; c.entropy = ent / R; c.approx_kl = kl / R;
    c.clip_fraction = cf / R; c.explained_variance = ev / R;
    *m = c;
}

int host_ranks_update(const mr_hot_params *h, int warm, uint64_t update, mr_trainer *t, mr_metrics *m,
                      mr_status *st, char *msg, size_t n) {
    rank_op o;
    memset(&o, 0, sizeof o);
    o.op = HOST_OP_UPDATE;
    o.warm = warm;
    o.update = update;
    o.hot = *h;
    send_block(&o);
    rank_reply mine, *all = calloc((size_t)g_size, sizeof *all);
    const double t0 = now_s();
    run_update(t, &o, &mine);
    g_update_s += now_s() - t0;
    if (!all) { host_ranks_broken(); snprintf(msg, n, "out of memory for the ranks' replies"); return -1; }
    MPI_Gather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD);
    *st = (mr_status)mine.status;
    int rc = 0;
    if (mine.status != MR_OK && mine.status != MR_ERR_NUMERIC) {
        snprintf(msg, n, "%s", mine.msg);
        host_ranks_broken();   /* the others may wait in a collective of this update */
        rc = -1;
    }
    for (int i = 1; i < g_size && rc == 0; i++) {
        if (all[i].status == MR_ERR_NUMERIC) *st = MR_ERR_NUMERIC;   /* any rank's: skipped alike */
        const mr_metrics *x = &all[i].m, *z = &mine.m;
        if (x->lr != z->lr || x->clip != z->clip || x->ent_coef != z->ent_coef) {
            snprintf(msg, n, "rank %d trained update %llu with lr %g, clip %g, ent_coef %g, rank 0 with %g, %g, %g: "
                     "the ranks no longer apply the same hot parameters (a bug of moonrl: please report it)", i,
                     (unsigned long long)update, x->lr, x->clip, x->ent_coef, z->lr, z->clip, z->ent_coef);
            rc = -1;
            break;
        }
        if (all[i].has_hash && mine.has_hash && all[i].hash != mine.hash) {
            snprintf(msg, n, "the ranks' parameters differ after update %llu (rank %d's checksum %016llx, rank 0's "
                     "%016llx): the ranks no longer train one model; this is a bug of moonrl or of the MPI library, "
                     "please report it with the run's config", (unsigned long long)update, i,
                     (unsigned long long)all[i].hash, (unsigned long long)mine.hash);
            rc = -1;
        }
    }
    if (rc == 0) combine(all, m);
    free(all);
    return rc;
}

int host_ranks_gather_envs(mr_trainer *t, void **states, char *msg, size_t n) {
    *states = NULL;
    if (g_size <= 1) return 0;
    mr_error err = {0};
    const uint64_t per = mr_trainer_env_state_bytes(t);
    unsigned char *all = malloc((size_t)per * (size_t)g_size);
    if (!all) {
        snprintf(msg, n, "out of memory gathering the %d ranks' environments for the checkpoint", g_size);
        return -1;
    }
    send_op(HOST_OP_SAVE, 0, 0, NULL);
    /* Rank 0's own state first (its slot of the gather); whatever happens it
     * takes part in the gather, or the others wait in it. */
    int ok = mr_trainer_read_env_state(t, all, per, &err) == MR_OK;
    MPI_Gather(MPI_IN_PLACE, (int)per, MPI_BYTE, all, (int)per, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (!ok) {
        snprintf(msg, n, "gathering the ranks' environments for the checkpoint: %s", err.msg);
        free(all);
        return -1;
    }
    *states = all;
    return 0;
}

void host_ranks_end(char *line, size_t n) {
    if (g_size <= 1) return;
    send_op(HOST_OP_END, 0, 0, NULL);
    drop_reducer();
    snprintf(line, n, "%d ranks: %llu allreduces of the gradient took %.3f s of rank 0's %.3f s of updates (%.1f%%)",
             g_size, (unsigned long long)g_reduces, g_reduce_s, g_update_s,
             g_update_s > 0 ? 100.0 * g_reduce_s / g_update_s : 0.0);
    g_reduce_s = g_update_s = 0;
    g_reduces = 0;
}

void host_ranks_finish(int code) {
    if (!g_active) return;
    if (g_rank == 0) {
        if (g_broken) {
            fprintf(stderr, "moonrl: rank 0 failed inside an update; ending every rank (MPI_Abort)\n");
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
        }
        send_op(HOST_OP_EXIT, 0, 0, NULL);
    }
    MPI_Finalize();
}

#endif
