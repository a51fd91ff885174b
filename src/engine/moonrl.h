/*
 * moonrl.h - the one public header of the moonrl engine.
 *
 * Plain C, no Lua types: any program with a C compiler or an FFI can drive it.
 * The engine trains the `foraging` workload of ENV_SPEC.md with PPO on a CPU
 * backend (C + OpenBLAS + OpenMP) or, when built with CUDA and a GPU is
 * present, a CUDA backend.
 *
 * Conventions
 *   - Every function returns an mr_status. MR_OK is 0. On failure, the optional
 *     `mr_error *err` is filled with the status and a message a person can act
 *     on (what was wrong, what is accepted). Passing err = NULL is allowed.
 *   - No function aborts or exits on bad input.
 *   - The trainer owns every buffer; the steady state allocates nothing.
 *   - Not thread-safe per object: one thread drives one trainer at a time.
 *
 * Typical use:
 *   mr_config cfg; mr_config_default(&cfg);
 *   cfg.env.num_envs = 64;
 *   mr_trainer *t; mr_error e;
 *   if (mr_trainer_create(&cfg, &t, &e) != MR_OK) { puts(e.msg); return 1; }
 *   mr_metrics m;
 *   while (!mr_trainer_done(t)) mr_trainer_update(t, &m, &e);
 *   mr_trainer_save(t, "run/ckpt.mrck", &e);
 *   mr_trainer_free(t);
 */
#ifndef MOONRL_H
#define MOONRL_H

#include <stddef.h>
#include <stdint.h>

#include "hot_keys.h"   /* MR_HOT_KEYS: generated from the schema (mr_hot_params) */

#ifdef __cplusplus
extern "C" {
#endif

#define MR_VERSION_STRING "0.1.0"
#define MR_MAX_CONV 8          /* at most this many conv layers in the trunk */
#define MR_MAX_MLP 8           /* at most this many hidden layers in an MLP trunk */
#define MR_MAX_ACTIONS 8       /* an environment has 2 .. this many actions (foraging: all 8) */
#define MR_ERROR_LEN 512

typedef enum mr_status {
    MR_OK = 0,
    MR_ERR_ARG = 1,        /* a bad argument or config value */
    MR_ERR_NOMEM = 2,      /* an allocation failed (host or device) */
    MR_ERR_IO = 3,         /* a file could not be read or written */
    MR_ERR_FORMAT = 4,     /* a file is not a valid moonrl checkpoint / is damaged */
    MR_ERR_BACKEND = 5,    /* the requested backend is unavailable or failed */
    MR_ERR_STATE = 6,      /* the call does not fit the object's state */
    MR_ERR_NUMERIC = 7     /* a non-finite value was produced */
} mr_status;

typedef struct mr_error {
    mr_status status;
    char msg[MR_ERROR_LEN];
} mr_error;

const char *mr_status_name(mr_status s);
const char *mr_version(void);
/* Lines for a bug report: the build (commit, compiler, flags), the CUDA
 * toolkit it was built with, the BLAS and its kernel set, the CPU features. */
const char *mr_build_info(void);

/* ------------------------------------------------------------------ config */

typedef enum mr_mode {
    MR_MODE_GROUND_TRUTH = 0,
    MR_MODE_GROUND_TRUTH_BLINDED = 1,
    MR_MODE_PROXY_MORTAL = 2,
    MR_MODE_PROXY = 3
} mr_mode;

typedef enum mr_device { MR_DEVICE_AUTO = 0, MR_DEVICE_CPU = 1, MR_DEVICE_CUDA = 2 } mr_device;
typedef enum mr_precision { MR_FP32 = 0, MR_BF16 = 1, MR_FP16 = 2 } mr_precision;

/* Names <-> enums, for hosts and messages. Return -1 / NULL when unknown. */
int mr_mode_from_name(const char *name);
const char *mr_mode_name(int mode);

/* The environments the engine has (env.name; docs/environments.md says how
 * to add one): each is a header under src/engine/envs/ and a line in
 * envs/registry.h. MR_ENV_LUA is the one whose rules the host runs (a Lua
 * file, mr_env_program below): its spaces are the program's. */
typedef enum mr_env_name {
    MR_ENV_FORAGING = 0, MR_ENV_REACH = 1, MR_ENV_CARTPOLE = 2, MR_ENV_PENDULUM = 3, MR_ENV_SNAKE = 4,
    MR_ENV_LUA = 5,
    MR_ENV_DIALS = 6,
    MR_ENV_CATCH = 7
} mr_env_name;
#define MR_ENV_COUNT 8

/* An environment's shape, for hosts: its name, one line about it, what its
 * cell codes 0, 1, 2 are ("empty food poison") and its action count. NULL /
 * 0 when `name` is not one of mr_env_name. */
const char *mr_env_name_of(int name);
int mr_env_from_name(const char *name);
const char *mr_env_summary(int name);
const char *mr_env_codes(int name);
int mr_env_num_actions(int name);

/* What an environment declares (docs/environments.md, "Spaces"): what its
 * observation and action are, what its critic sees beside the trunk's
 * features, and the episode counters its logs report. The policy, the
 * checks at start, `moonrl envs`, evaluation and exports read these, not an
 * environment's state. A space of a kind this build cannot train yet is
 * declared all the same (a config asking for one is refused at start). */
typedef enum mr_space_kind {
    MR_SPACE_CODES = 0,      /* observation: C x H x W from uint8 cell codes (C channels the network expands) */
    MR_SPACE_IMAGE = 1,      /* observation: C x H x W floats */
    MR_SPACE_VECTOR = 2,     /* observation: shape[0] floats */
    MR_SPACE_DISCRETE = 3,   /* action: one of n */
    MR_SPACE_MULTI_DISCRETE = 4,   /* action: one of nvec[k] for each k < n */
    MR_SPACE_BOX = 5         /* action: n floats, nvec unused, within [low, high] */
} mr_space_kind;
#define MR_SPACE_MAX_DIMS 8      /* the most components a multi-discrete or box action has */
#define MR_ENV_MAX_COUNTERS 4    /* named episode counters an environment reports */

typedef struct mr_space {
    mr_space_kind kind;
    int shape[3];            /* observation: C, H, W (vector: N, 1, 1) */
    int codes;               /* MR_SPACE_CODES: how many codes a cell takes (0 .. codes-1) */
    int n;                   /* discrete: actions; multi-discrete: components; box: dimensions */
    int nvec[MR_SPACE_MAX_DIMS];
    float low[MR_SPACE_MAX_DIMS], high[MR_SPACE_MAX_DIMS];
} mr_space;

typedef struct mr_env_spaces {
    mr_space obs, act;
    int critic_extra;        /* privileged critic inputs: a vector of this many floats per instance */
    int critic_view;         /* and the observation's ground truth (1: foraging's two channels) */
    int counters;            /* named episode counters (foraging: food, poison) */
    const char *counter_names[MR_ENV_MAX_COUNTERS];
    /* Evaluation (docs/evaluation.md): the protocol `moonrl eval` runs by
     * default, and what makes an episode a success (MR_SUCCESS_COUNTER: the
     * counter success_counter counted at least once in it). */
    int eval;                /* an mr_eval_protocol: MR_EVAL_EPISODIC (0) unless it has its own */
    int success;             /* an mr_success_kind */
    int success_counter;     /* MR_SUCCESS_COUNTER: which counter, 0 .. counters-1 */
    /* Truncation (ppo.truncation, docs/configuration.md): the fewest steps
     * after which an episode is truncated with these sizes (0: never), and
     * whether ppo.truncation = "auto" bootstraps its truncated episodes
     * (1: its time limit is no part of what the critic sees, so a truncated
     * state's value is the critic's estimate, not 0) or ends them as before
     * (0: foraging and reach, whose results stay those of before). */
    int step_limit;
    int bootstrap_truncation;
} mr_env_spaces;

/* What an environment's episode counts as a success, declared in its spaces. */
typedef enum mr_success_kind {
    MR_SUCCESS_NONE = 0,         /* none declared (pendulum): the table has no success row */
    MR_SUCCESS_TRUNCATED = 1,    /* it ran to its step limit: truncated, not terminated (cartpole) */
    MR_SUCCESS_COUNTER = 2       /* its counter success_counter counted at least once (reach: a goal) */
} mr_success_kind;

struct mr_env_config;
/* The spaces of the environment cfg->name with cfg's sizes (view_range, ...).
 * MR_OK, or MR_ERR_ARG naming what in cfg does not give a space. */
mr_status mr_env_spaces_of(const struct mr_env_config *cfg, mr_env_spaces *out, mr_error *err);

typedef struct mr_env_config {
    mr_mode mode;
    int num_envs;           /* instances stepped in lock-step */
    int grid_size;          /* H = W */
    int view_range;         /* observation is (2r+1)^2 */
    int density_min;        /* food/poison count drawn from */
    int density_max;        /*   [density_min, density_max] */
    int respawn_tries;      /* candidate cells for a respawn */
    int max_episode_steps;  /* truncation; 0 = never */
    mr_env_name name;       /* which environment (env.name) */
    /* Data-parallel: the global index of this process's first instance (rank x
     * num_envs), so that R processes of num_envs instances step exactly the
     * instances one process of R x num_envs would (every random draw is keyed
     * by the global index). 0 in a single process; not a setting: the host
     * sets it from the rank, checkpoints do not store it. */
    int index0;
    /* env.name = lua: the program the host loaded (env.lua; mr_env_program
     * below), NULL otherwise. Not a setting: the host sets it from the
     * config's env.lua, checkpoints do not store it (a checkpoint read back
     * has NULL here until the host attaches the file again). */
    const struct mr_env_program *program;
} mr_env_config;

/* ------------------------------------------ an environment run by the host */
/* env.name = lua (docs/environments.md, "An environment in Lua"): the rules
 * are a program the host runs (a Lua file, src/host/lua_env.c). It declares
 * its spaces and the per-instance fields the registry lays out
 * (envs/program.h); the cpu backend hands each thread's slice of instances
 * to `step` / `reset` in one call (cpu/env_cpu.c). CPU only. The program
 * lives as long as the process (the host never frees one a state uses). */
#define MR_PROGRAM_MAX_FIELDS 16
#define MR_PROGRAM_NAME_LEN 32
#define MR_PROGRAM_MAX_COUNT (1 << 24)         /* values of one field per instance */
#define MR_PROGRAM_MAX_INSTANCE_BYTES (1 << 28)   /* all fields of one instance */
typedef enum mr_field_type {
    MR_FIELD_DOUBLE = 0, MR_FIELD_FLOAT = 1, MR_FIELD_INT32 = 2, MR_FIELD_UINT32 = 3, MR_FIELD_UINT8 = 4
} mr_field_type;

typedef struct mr_program_field {
    char name[MR_PROGRAM_NAME_LEN];   /* an identifier; its checkpoint section is "env.<name>" */
    char section[MR_PROGRAM_NAME_LEN + 8];   /* "env.<name>" (mr_program_check writes it) */
    int type;                          /* an mr_field_type */
    int count;                         /* values per instance, 1 .. MR_PROGRAM_MAX_COUNT */
} mr_program_field;

/* What a program's calls see of the state (the engine fills it for each
 * call): sizes, the interface's buffers and the declared fields, all (n, ...)
 * row-major, instance i's at i x its count. */
typedef struct mr_program_io {
    const void *state;        /* the engine's state, for mr_program_end_step / mr_program_begin */
    uint64_t id;              /* new for every state laid out: a cache key for what a driver builds */
    uint64_t seed;
    int n, index0, obs_size, act_bytes;
    int limit;                /* steps after which an episode truncates (0: never) */
    int counters;
    float *obs_f;             /* (n, obs_size) */
    float *reward;
    uint8_t *terminated, *truncated;
    int32_t *steps;           /* (n) steps of the episode so far */
    uint32_t *tick;           /* (n) steps ever taken */
    float *ep_return;
    uint32_t *resets;         /* (n) episodes the instance started before this one (the reset draws' counter) */
    int32_t *count[MR_ENV_MAX_COUNTERS];   /* (n) each declared counter over this episode */
    void *field[MR_PROGRAM_MAX_FIELDS];    /* (n, count) each declared field */
} mr_program_io;

typedef struct mr_env_program {
    char label[256];                  /* the file, for messages */
    mr_env_spaces spaces;             /* what it declares (counter_names point into counter_name) */
    char counter_name[MR_ENV_MAX_COUNTERS][MR_PROGRAM_NAME_LEN];
    int max_steps;                    /* its own episode limit; env.max_episode_steps may lower it; 0 = none */
    int fields;
    mr_program_field field[MR_PROGRAM_MAX_FIELDS];
    /* The host's calls, from any thread (one call per thread and slice at a
     * time): instances [i0, i1) of io. 0, or -1 with a message in msg. */
    void *user;
    int (*reset)(void *user, const mr_program_io *io, int i0, int i1, char *msg, size_t len);
    int (*step)(void *user, const mr_program_io *io, int i0, int i1, const void *actions, char *msg, size_t len);
} mr_env_program;

/* Checks what p declares (a vector observation of 1 .. 65536 floats, a
 * discrete action of 2 .. MR_MAX_ACTIONS or a box of 1 .. 4 floats, the
 * counters, the fields: identifiers, types, counts, the bytes of an
 * instance) and writes the fields' section names. MR_OK, or MR_ERR_ARG
 * naming what and what is accepted. */
mr_status mr_program_check(mr_env_program *p, mr_error *err);
/* The end of instance i's step (the program's rules have run): its tick
 * counted, the truncation at io.limit, the reward and the end flags
 * recorded as every environment's are (clamped; the episode's return,
 * length and log with the counters); returns 1 when the episode ended
 * (its counters and steps then cleared: the caller starts the next one). */
int mr_program_end_step(const void *state, int i, float reward, int terminated);
/* mr_program_end_step for each instance of [i0, i1) with the reward and
 * the terminated flag the program wrote into io.reward[i] and
 * io.terminated[i] (0 or 1): the indices of those whose episode ended go
 * into ended[0 .. m-1], in order; returns m. One call for a slice. */
int mr_program_end_steps(const void *state, int i0, int i1, int32_t *ended);
/* sn[j] = sin(x[j]), cs[j] = cos(x[j]) for j in [0, n), with the C
 * library's bits (sincos_small.h's vectorised series where it knows it has
 * them, sin and cos themselves elsewhere): a Lua environment's s.sincos. */
void mr_program_sincos(const double *x, int n, double *sn, double *cs);
/* A full reset's bookkeeping of instance i, before the program's reset:
 * the end flags, reward, steps, return and counters cleared. */
void mr_program_begin(const void *state, int i);
/* Random numbers keyed like every environment's (rng.h): uniform in [0, 1)
 * with 53 bits (mr_rng_u64's top 53 times 2^-53), and uniform in [0, n).
 * purpose 0 is rng.h's MR_RNG_LUA. */
double mr_program_uniform(uint64_t seed, uint32_t key, uint32_t counter, uint32_t purpose, uint32_t k);
uint32_t mr_program_below(uint64_t seed, uint32_t key, uint32_t counter, uint32_t purpose, uint32_t k, uint32_t n);

/* How the update stores proxy observations (env.proxy_obs_storage). */
typedef enum mr_obs_storage {
    MR_OBS_FAITHFUL = 0,   /* the update sees what the acting policy saw */
    MR_OBS_UINT8 = 1       /* as the original: poison's proxy 0.5 becomes 0 for the update */
} mr_obs_storage;

/* How a box action's Gaussian sample x becomes the environment's action
 * (policy.box_squash; shared/gauss_math.h): clip = the environment clips x
 * to its bounds, the log-probability is the Gaussian's; tanh = low + (high -
 * low) (tanh(x) + 1) / 2, the log-probability with the change of variables. */
typedef enum mr_box_squash { MR_BOX_SQUASH_CLIP = 0, MR_BOX_SQUASH_TANH = 1 } mr_box_squash;

typedef struct mr_policy_config {
    int num_conv;
    int conv_channels[MR_MAX_CONV];    /* 3x3, pad 1 */
    int hidden;                        /* trunk features */
    int critic_hidden;
    int popart;                        /* 1 = PopArt value head */
    float popart_beta_min;
    /* Lua's env.proxy_obs_storage; here, in what was mr_config's padding, so
     * checkpoints keep their size (old ones read as faithful). Changes only
     * what the training forward sees in the modes that observe the proxy. */
    mr_obs_storage proxy_obs_storage;  /* MR_OBS_FAITHFUL (0) unless env.proxy_obs_storage says */
    /* The actor's outputs: the environment's action count, never a setting of
     * its own (mr_config_default and the host set it from env.name,
     * mr_config_validate checks that it agrees). */
    int num_actions;
    int num_mlp;
    int mlp_widths[MR_MAX_MLP];        /* the MLP trunk's tanh layers (vector observations) */
    /* What the environment's spaces give the network, derived as
     * num_actions is (mr_config_follow_env): the length of a vector
     * observation (0: cell codes, the CNN trunk) and the critic's
     * privileged inputs. */
    int obs_vector;
    int critic_extra;
    int act_box;                       /* derived too: a box action's floats (the Gaussian head), 0 = discrete */
    mr_box_squash box_squash;          /* a box action's mapping (policy.box_squash); unused without a box */
    int obs_channels;                  /* derived too: the CNN's input channels, a cell-code observation's C
                                        * or a float image's (0 reads as 2, foraging's) */
    int obs_image;                     /* derived too: 1 when the CNN reads C x V x V floats (MR_SPACE_IMAGE),
                                        * 0 for cell codes */
    int obs_side;                      /* derived too: the CNN's V (the observation's H = W), 0 for a vector
                                        * (mr_config_side) */
} mr_policy_config;

typedef enum mr_schedule_kind {
    MR_SCHED_CONSTANT = 0,   /* start */
    MR_SCHED_LINEAR = 1,     /* start + (end - start) * p */
    MR_SCHED_COSINE = 2,     /* end + (start - end) * (1 + cos(pi p)) / 2 */
    MR_SCHED_STEP = 3        /* start * gamma ^ floor(p / every), never past end */
} mr_schedule_kind;

/* A value as a function of training progress p in [0, 1], evaluated once per
 * update with p = updates done / total updates. */
typedef struct mr_schedule {
    mr_schedule_kind kind;
    double start, end;
    double gamma, every;     /* MR_SCHED_STEP only */
} mr_schedule;

double mr_schedule_value(const mr_schedule *s, double progress);

/* What the update does at a truncated episode's last step (ppo.truncation):
 * bootstrap = its reward gets gamma V(final observation), the critic's
 * (PopArt-denormalised) value of the state the step reached before the
 * auto-reset, as SB3 does; end = it ends the value chain as a termination
 * does (the engine before); auto = the environment's choice
 * (mr_env_spaces.bootstrap_truncation). A checkpoint whose config lacks the
 * key (written before it existed) reads as end. */
typedef enum mr_truncation {
    MR_TRUNCATION_AUTO = 0, MR_TRUNCATION_BOOTSTRAP = 1, MR_TRUNCATION_END = 2
} mr_truncation;

typedef struct mr_ppo_config {
    int rollout_steps;
    int epochs;
    int minibatches;
    double gamma;
    double gae_lambda;
    mr_schedule lr;
    mr_schedule clip;
    mr_schedule ent_coef;
    double vf_coef;
    double ent_floor;        /* entropy floor */
    double ent_floor_coef;   /* loss += c * relu(floor - H) */
    double max_grad_norm;    /* per parameter group (policy, value) */
    double adam_beta1;
    double adam_beta2;
    double adam_eps;
    int norm_adv;
    double reward_clip;      /* rewards clamped to [-c, c] */
    mr_truncation truncation;   /* ppo.truncation (version 1 checkpoints froze the fields above) */
} mr_ppo_config;

/* How the CUDA backend computes the trunk's 3x3 convolutions (cuda.conv).
 * im2col: im2col + one cuBLAS GEMM per layer and chunk (the default, the
 * path every window so far measured); cudnn: layers 1.. through cuDNN
 * (loaded at run time, as cuBLAS is; docs/cuda.md), each with the
 * algorithms of conv_layers[l] where it names them, else cuDNN's heuristic
 * choice; auto: layer l through cuDNN where conv_layers[l].impl says so (the
 * warm-up's "algorithms" step or the cache chose it: lua/moonrl/run/
 * conv_algorithms.lua), else im2col. The first layer reads the observation
 * codes and stays im2col. Without a loadable cuDNN every layer is im2col and
 * the network's description says why. */
typedef enum mr_cuda_conv {
    MR_CUDA_CONV_AUTO = 0,
    MR_CUDA_CONV_CUDNN = 1,
    MR_CUDA_CONV_IM2COL = 2
} mr_cuda_conv;

/* How the CUDA backend finishes its products (cuda.epilogue). separate:
 * each cuBLAS GEMM is followed by its own element-wise kernels (bias + ReLU,
 * the ReLU mask, the bias-gradient sums; the default, the path the GPU
 * windows measured); fused: the products whose epilogue cuBLASLt can fuse
 * run as one cublasLtMatmul (bias, bias + ReLU with a bit mask kept for the
 * backward, ReLU mask + bias gradient, bias gradient of an operand), where a
 * product cuBLASLt has no algorithm for runs the separate way. Off by
 * default until a GPU window measures it faster (docs/cuda.md). */
typedef enum mr_cuda_epilogue {
    MR_CUDA_EPILOGUE_SEPARATE = 0,
    MR_CUDA_EPILOGUE_FUSED = 1
} mr_cuda_epilogue;

/* One conv layer's cuDNN choice: impl an mr_cuda_conv (0: the config's
 * conv), algo = cuDNN's forward, backward-data and backward-filter
 * algorithm numbers (cudnnConvolution*Algo_t), -1 = cuDNN's heuristics. */
typedef struct mr_cuda_conv_layer {
    int8_t impl;
    int8_t algo[3];
} mr_cuda_conv_layer;

/* Settings that only mean something on a GPU; a CPU trainer reports them in
 * mr_trainer_describe() as not applying. conv_layers is not a config key and
 * checkpoints do not keep it (as cpu.conv_layers: it belongs to the machine). */
typedef struct mr_cuda_config {
    int device_index;
    int graphs;                  /* capture steady state as CUDA graphs */
    double memory_fraction;      /* limit as a fraction of the card */
    double release_threshold;    /* fraction of the limit above which the cache is released */
    int conv;                    /* mr_cuda_conv */
    mr_cuda_conv_layer conv_layers[MR_MAX_CONV];   /* [0] unused: the first layer reads the codes */
    int epilogue;                /* mr_cuda_epilogue */
} mr_cuda_config;

/* How the CPU backend computes the trunk's 3x3 convolutions (cpu.conv).
 * onednn: the first layer straight from the observation codes (nn.c), the
 * others through oneDNN (conv_dnnl.h); im2col: every layer as im2col +
 * OpenBLAS sgemm (the engine before oneDNN; spec/c/test_bitcompat.c pins it,
 * its fixtures were written by it); winograd: the first layer from the
 * codes, the others by Winograd F(6x6,3x3) on 11 x 11 maps, F(4x4,3x3) where
 * that takes fewer products (conv_winograd.h: 4.3x fewer multiply-adds at
 * 11 x 11, fp32 only, rounding error up to ~100x direct summation's bound);
 * auto: the measured-faster choice, now onednn
 * (BENCHMARKS.md). Results differ between them in the last bits; each is
 * bit-identical for any thread count. The CUDA backend ignores it. */
typedef enum mr_cpu_conv {
    MR_CPU_CONV_AUTO = 0,
    MR_CPU_CONV_ONEDNN = 1,
    MR_CPU_CONV_IM2COL = 2,
    MR_CPU_CONV_WINOGRAD = 3
} mr_cpu_conv;

/* What the CPU network's training forward keeps for the backward
 * (cpu.activations): auto = store while keeping the conv activations takes
 * at most 256 MiB more than recomputing them, else recompute (policy.h).
 * store and recompute give the same conv gradients bit for bit; fc's weight
 * gradient differs in the last bits. The CUDA backend ignores it. */
typedef enum mr_cpu_activations {
    MR_CPU_ACTIVATIONS_AUTO = 0,
    MR_CPU_ACTIVATIONS_STORE = 1,
    MR_CPU_ACTIVATIONS_RECOMPUTE = 2
} mr_cpu_activations;

/* CPU-only settings (version 1 checkpoints hold the first two fields as
 * raw bytes: checkpoint_config.c keeps that layout frozen).
 * conv_layers[l] (l = 1 .. num_conv-1; [0] is unused: the first layer is
 * computed from the codes) is layer l's own implementation, an mr_cpu_conv:
 * MR_CPU_CONV_ONEDNN or MR_CPU_CONV_WINOGRAD; 0 (auto) = what `conv` says.
 * It is how cpu.conv = "auto" with warm-up's "algorithms" step hands its
 * per-layer choice to the engine (lua/moonrl/run/conv_algorithms.lua); with
 * conv = im2col it must be all 0 (im2col is a whole-network choice). It is
 * not a config key and checkpoints do not keep it: it belongs to the machine,
 * not the run (a resume chooses again). */
typedef struct mr_cpu_config {
    int16_t conv;                /* mr_cpu_conv */
    int16_t activations;         /* mr_cpu_activations */
    int8_t conv_layers[MR_MAX_CONV];   /* mr_cpu_conv per conv layer, 0 = conv's */
} mr_cpu_config;

/* The whole config. Checkpoints store it as keyed records (checkpoint_format.h),
 * not as these bytes: a field may be added anywhere. */
typedef struct mr_config {
    mr_env_config env;
    mr_policy_config policy;
    mr_ppo_config ppo;
    mr_cuda_config cuda;
    mr_device device;
    mr_precision precision;      /* the cpu backend takes bf16 where mr_cpu_bf16() says so */
    int threads;                 /* CPU threads, 0 = all cores */
    mr_cpu_config cpu;           /* CPU-only settings */
    uint64_t seed;
    uint64_t total_steps;        /* agent-steps to train; */
} mr_config;

/* Every field's default, range and meaning: docs/config.md, generated, like
 * mr_config_default and mr_config_validate's ranges, from the one
 * description of every setting (lua/moonrl/config/schema.lua). */
void mr_config_default(mr_config *cfg);
/* Sets what the network takes from env.name's spaces (policy.num_actions,
 * obs_vector, critic_extra): never settings of their own; call it after
 * changing env (mr_config_default and the hosts do). */
void mr_config_follow_env(mr_config *cfg);
/* Checks every field; on a bad one says which, its value and what is accepted. */
mr_status mr_config_validate(const mr_config *cfg, mr_error *err);

/* ----------------------------------------------------------------- metrics */

/* One update's numbers. Episode statistics cover the episodes that ended
 * during this update's rollout (episodes == 0 leaves them at 0). */
typedef struct mr_metrics {
    uint64_t update;             /* updates done, counting this one */
    uint64_t agent_steps;        /* total agent-steps so far */
    double progress;             /* in [0, 1] */
    /* episodes */
    double episodes;
    double episode_return_mean, episode_return_min, episode_return_max;
    double episode_length_mean;
    double food_per_episode, poison_per_episode;
    double efficiency;           /* food / (food + poison) over ended episodes */
    double deaths;               /* terminated (energy <= 0) in this rollout */
    /* training */
    double policy_loss, value_loss, entropy, approx_kl, clip_fraction;
    double explained_variance;
    double grad_norm_policy, grad_norm_value, grad_norm;   /* before clipping */
    double lr, clip, ent_coef;
    double popart_mean, popart_std;
    double loss_scale;           /* 1 unless fp16 */
    uint64_t skipped_steps;      /* fp16 steps skipped for inf/nan, total */
    int nonfinite;               /* 1 if a loss or gradient was not finite */
    /* time, seconds of this update */
    double time_rollout, time_gae, time_update, time_total;
    /* parts of time_rollout: stepping the environments (with the rollout's
     * bookkeeping), and the policy acting (forward, sampling); cuda: only
     * with mr_trainer_set_profile on, else 0 */
    double time_env, time_inference;
    /* parts of time_update, summed over its minibatches: gathering the
     * minibatch (with zeroing the gradients), the network's forward, the PPO
     * loss with its gradient, the network's backward (with data-parallel's
     * allreduce), the optimizer step (with the metrics' accumulation); the
     * rest of time_update is the epochs' permutations and the metrics'
     * reductions. When they are measured: as time_env. */
    double time_gather, time_forward, time_loss, time_backward, time_optimizer;
    double sps;                  /* agent-steps / time_total for this update */
    /* memory, bytes */
    uint64_t memory_planned_bytes;
    uint64_t memory_peak_bytes;
    uint64_t memory_limit_bytes; /* what the device offers: physical RAM (cpu), the limit (cuda) */
} mr_metrics;

/* ----------------------------------------------------------------- trainer */

typedef struct mr_trainer mr_trainer;

mr_status mr_trainer_create(const mr_config *cfg, mr_trainer **out, mr_error *err);
void mr_trainer_free(mr_trainer *t);

/* Per-step timing of the rollout (metrics time_env, time_inference) and
 * per-minibatch timing of the update (time_gather .. time_optimizer). The
 * cpu backend always measures them; on cuda it puts timing events around
 * every rollout step and every minibatch's phases, which also stops
 * CUDA-graph replay while it is on. */
mr_status mr_trainer_set_profile(mr_trainer *t, int on, mr_error *err);

/* One update: rollout of rollout_steps x num_envs, GAE, PPO epochs. */
mr_status mr_trainer_update(mr_trainer *t, mr_metrics *out, mr_error *err);
/* 1 once total_steps have been trained. */
int mr_trainer_done(const mr_trainer *t);
const mr_config *mr_trainer_config(const mr_trainer *t);
/* Which backend runs and what applies, e.g. "cpu (2 threads, OpenBLAS); cuda.graphs does not apply". */
const char *mr_trainer_describe(const mr_trainer *t);
/* Forward passes an update runs per sample beyond the rollout's: epochs, or
 * one fewer where the rollout's acts keep the first epoch's forward (one
 * minibatch, on a backend that offers it: docs/engine.md). */
int mr_trainer_update_forwards(const mr_trainer *t);

/* Hot parameters: changeable between updates without restarting. One
 * member per engine hot key of the schema (lua/moonrl/config/schema.lua:
 * hot = "engine"), named as the key's last part, in hot_slot order; the build
 * generates the list (hot_keys.h, MR_HOT_KEYS). Today: mr_schedule lr, clip,
 * ent_coef; double max_grad_norm, vf_coef, ent_floor, ent_floor_coef;
 * uint64_t total_steps. The checkpoint holds these bytes (its hot record). */
#define MR_HOT_MEMBER_SCHED(key, m, field, lo, hi) mr_schedule m;
#define MR_HOT_MEMBER_REAL(key, m, field, lo, hi) double m;
#define MR_HOT_MEMBER_INT(key, m, field, lo, hi) int m;
#define MR_HOT_MEMBER_U64(key, m, field, lo, hi) uint64_t m;
typedef struct mr_hot_params {
    MR_HOT_KEYS(MR_HOT_MEMBER_SCHED, MR_HOT_MEMBER_REAL, MR_HOT_MEMBER_INT, MR_HOT_MEMBER_U64)
} mr_hot_params;
#undef MR_HOT_MEMBER_SCHED
#undef MR_HOT_MEMBER_REAL
#undef MR_HOT_MEMBER_INT
#undef MR_HOT_MEMBER_U64

/* The hot parameters a config starts with; and a config with hot values put
 * back into it (what a trainer's config reads after mr_trainer_set_hot). */
void mr_config_hot_params(const mr_config *cfg, mr_hot_params *out);
void mr_config_apply_hot(mr_config *cfg, const mr_hot_params *hot);
/* Updates a run of cfg makes: ceil(total_steps / (num_envs x rollout_steps)),
 * at least 1. Progress p for update k+1 (k done) is k / this. */
uint64_t mr_config_total_updates(const mr_config *cfg);

mr_status mr_trainer_get_hot(const mr_trainer *t, mr_hot_params *out, mr_error *err);
mr_status mr_trainer_set_hot(mr_trainer *t, const mr_hot_params *in, mr_error *err);

/* Snapshot of all learnable state (weights, optimizer, PopArt) and the progress
 * counters in host memory, e.g. to restore after a warm-up update, which then
 * does not count as progress. The environments keep going. Allocated at creation. */
mr_status mr_trainer_snapshot(mr_trainer *t, mr_error *err);
mr_status mr_trainer_restore(mr_trainer *t, mr_error *err);

/* The same learnable state and progress kept on the backend itself (device
 * memory on cuda; copies enqueued on the trainer's stream, no host round
 * trip), cheap enough to call after every update: the host keeps the last
 * good state with it and goes back to it after non-finite updates. The first
 * keep takes 3 x 4 bytes per parameter (and two control blocks) from the
 * memory manager; later ones allocate nothing. mr_trainer_restore_kept
 * brings the weights, Adam moments and step, PopArt's statistics and the
 * progress counters back; the environments, the fp16 loss scale and the
 * skipped-step count go on. */
mr_status mr_trainer_keep(mr_trainer *t, mr_error *err);
mr_status mr_trainer_restore_kept(mr_trainer *t, mr_error *err);

/* A test aid, not for training: sets one weight, the value head's bias, to
 * NaN (pull of the weights, the host copy changed, push), so the next update's
 * loss and gradients are not finite and mr_trainer_update reports
 * MR_ERR_NUMERIC. The host's policy for such updates is tested end to end
 * with it (config debug.inject_nan_at_update). Restoring an earlier
 * snapshot or kept state, or a checkpoint load, undoes it. */
mr_status mr_trainer_debug_poison(mr_trainer *t, mr_error *err);

/* Checkpoints: versioned, checksummed, written atomically (temp + fsync + rename).
 * They hold the config, weights, optimizer, PopArt, environment state, RNG
 * counters and progress: a resumed CPU run continues bit-identically. */
mr_status mr_trainer_save(mr_trainer *t, const char *path, mr_error *err);
/* Loads into a trainer created with a compatible config (same shapes). */
mr_status mr_trainer_load(mr_trainer *t, const char *path, mr_error *err);
/* Adopts what another run has learned (population-based training's exploit):
 * the weights, the Adam moments and step and PopArt's statistics of the
 * checkpoint at path, from a run of the same network shapes and environment
 * (env.num_envs may differ). This trainer keeps its environments, progress
 * counters, seed and hot parameters, so its run goes on at its own update.
 * Nothing changes unless all of it loads. */
mr_status mr_trainer_load_learned(mr_trainer *t, const char *path, mr_error *err);
/* Reads just the config stored in a checkpoint, to create a matching trainer. */
mr_status mr_checkpoint_read_config(const char *path, mr_config *out, mr_error *err);
/* With on = 1, every checkpoint this trainer saves also holds the gradient of
 * its last optimizer step (the last minibatch of the last update, as the
 * backward computed it, before clipping; with fp16, divided by the loss
 * scale in force when the checkpoint is saved): histograms of gradients
 * (log.histograms), read back by mr_checkpoint_read_gradients into n =
 * mr_trainer_read_params's count of floats. A checkpoint saved without it
 * holds none, nor one saved before the trainer ran an update (MR_ERR_ARG,
 * saying so). */
void mr_trainer_keep_gradients(mr_trainer *t, int on);

/* Data-parallel training: how this rank's trainer meets the others' (the
 * host implements it on MPI; docs/data-parallel.md). With it set, every rank
 * takes the same steps from the same start:
 *   average  after every minibatch's backward, before the optimizer step:
 *            replace the gradient (n floats: on the cpu backend host memory;
 *            on cuda device memory, the trainer's stream's work queued
 *            before it) by the ranks' average;
 *   sum      replace n doubles (host memory) by their sum over the ranks:
 *            PopArt's statistics of the update's returns, so the value
 *            head is rescaled alike everywhere.
 * NULL turns it off. CUDA graphs are not used while it is set. */
typedef struct mr_reducer {
    mr_status (*average)(void *ctx, float *grads, uint64_t n, void *stream, mr_error *err);
    mr_status (*sum)(void *ctx, double *v, int n, mr_error *err);
    void *ctx;
} mr_reducer;
void mr_trainer_set_reducer(mr_trainer *t, const mr_reducer *r);
mr_status mr_checkpoint_read_gradients(const char *path, float *out, uint64_t n, mr_error *err);

/* Data-parallel checkpoints. A rank's environment state is
 * mr_trainer_env_state_bytes of opaque bytes (mr_trainer_read_env_state);
 * rank 0 saves with every rank's, in rank order, and the file then holds
 * the environments of ranks x env.num_envs instances, as one process of that
 * many would (instances are keyed by their global index, env.index0), plus
 * a section "ranks" {ranks, the run's agent-steps}. mr_trainer_load_rank
 * loads all of it into rank `rank` of `ranks`: its slice of the environments
 * when the file holds as many instances as ranks x this trainer's
 * env.num_envs (*env_carried = 1), else the environments stay as created
 * (fresh from the seed; *env_carried = 0); env_carried may be NULL.
 * mr_checkpoint_read_info reads the section back (has = 0, ranks = 1 for a
 * file without it). */
typedef struct mr_ranks_info {
    int ranks;
    int has;                     /* read: the file has the section */
    uint64_t agent_steps;        /* the run's, over all ranks */
} mr_ranks_info;
uint64_t mr_trainer_env_state_bytes(mr_trainer *t);
mr_status mr_trainer_read_env_state(mr_trainer *t, void *out, uint64_t bytes, mr_error *err);
mr_status mr_trainer_save_ranks(mr_trainer *t, const char *path, const mr_ranks_info *info, const void *states,
                                mr_error *err);
mr_status mr_trainer_load_rank(mr_trainer *t, const char *path, int ranks, int rank, int *env_carried,
                               mr_error *err);

/* What a host reads of a checkpoint before it loads one, from one read of
 * the file that checks all a load checks (magic, version, length, every
 * section's size and checksum, finite weights), so a damaged file is refused
 * here with the same message: its config (validated; env.program is the
 * stand-in of a Lua environment's declarations, or NULL), its progress (the
 * update it holds: its file name is only a label), the hot parameters then in
 * force, its ranks (the section "ranks") and its table of sections.
 * `moonrl train --resume` reads each candidate once with it; the
 * trainer's load is the only other read. */
#define MR_CHECKPOINT_MAX_SECTIONS 32
#define MR_CHECKPOINT_NAME_LEN 32
typedef struct mr_checkpoint_section {
    char name[MR_CHECKPOINT_NAME_LEN];
    uint64_t bytes;
} mr_checkpoint_section;
typedef struct mr_checkpoint_info {
    mr_config config;            /* the config it was written with */
    uint64_t updates;            /* updates done when it was written */
    uint64_t agent_steps;        /* the writing trainer's own (rank 0's on several ranks) */
    mr_hot_params hot;           /* the hot parameters in force then */
    mr_ranks_info ranks;         /* ranks = 1, has = 0 without the section "ranks" */
    uint32_t version;            /* of the format (checkpoint_format.h) */
    uint64_t bytes;              /* of the file */
    int sections;
    mr_checkpoint_section section[MR_CHECKPOINT_MAX_SECTIONS];   /* in file order */
} mr_checkpoint_info;
mr_status mr_checkpoint_read_info(const char *path, mr_checkpoint_info *out, mr_error *err);
/* 1 when path is a regular file that starts as a checkpoint (its magic
 * bytes), else 0; reads 8 bytes at most and never waits (a FIFO is 0). What
 * tells a checkpoint from a config file on a command line. */
int mr_checkpoint_is_file(const char *path);
/* The one check of a config against a checkpoint's: the settings on which a
 * run of `run` differs from `stored` that it may not change by going on
 * from that checkpoint. Every config key (config_keys.h) and what the
 * network takes from the environment (policy.num_actions, obs_vector, ...)
 * is compared, but not the engine's hot keys (hot_keys.h: the checkpoint
 * holds the values in force, a resumed run may set others) nor where the run
 * runs (device, precision, threads, cuda.*). Writes them as "key: run's vs
 * stored's", joined by ", ", into out (len bytes; cut short with "..."; out
 * may be NULL when len is 0) and returns how many differ: 0, the run may go
 * on. mr_trainer_load applies the same comparison to the keys the trainer's
 * buffers are laid out from. */
int mr_checkpoint_config_conflicts(const mr_config *run, const mr_config *stored, char *out, size_t len);

/* The network's parameters, for export (moonrl export): tensor i of
 * mr_trainer_tensor_count's, its name ("conv0.w", ..., "value.b"), shape and
 * place in the flat fp32 array of mr_trainer_read_params. Shapes: a conv
 * weight (OC, 3, 3, C) (channels last, as the engine computes), a linear
 * weight (OUT, IN), a bias (OUT). */
typedef struct mr_tensor {
    char name[24];
    int ndim;
    int shape[4];
    uint64_t offset, count;   /* in floats */
} mr_tensor;
int mr_trainer_tensor_count(const mr_trainer *t);
mr_status mr_trainer_tensor(const mr_trainer *t, int i, mr_tensor *out, mr_error *err);
/* The same for the network a config describes, without a trainer. */
int mr_config_tensor_count(const mr_config *cfg);
mr_status mr_config_tensor(const mr_config *cfg, int i, mr_tensor *out, mr_error *err);
/* The n = every tensor's count summed floats of the current weights. */
mr_status mr_trainer_read_params(mr_trainer *t, float *out, uint64_t n, mr_error *err);
/* Replaces the weights (a run started from exported ones: policy.init); the
 * Adam moments and PopArt are left as they are. */
mr_status mr_trainer_write_params(mr_trainer *t, const float *in, uint64_t n, mr_error *err);
/* The value head's output v is the value mean + std * v (PopArt's
 * statistics; 0 and 1 without PopArt). */
mr_status mr_trainer_value_scale(mr_trainer *t, double *mean, double *std, mr_error *err);

/* Policy inference with the trainer's current weights, for any batch size:
 *   obs    (n, (2r+1)^2) cell codes as mr_env_read returns them
 *   extra  (n, 2) the critic's item-count inputs: (count - mid) / half with
 *          mid, half the centre and half-width of [density_min, density_max],
 *          food first; NULL = zeros
 *   logits (n, policy.num_actions) out (8 for foraging, 4 for reach); value (n) out,
 *          denormalised (PopArt applied); either may be NULL
 * Mode decides ground-truth or proxy expansion of obs (the trainer's mode). */
mr_status mr_trainer_infer(mr_trainer *t, const uint8_t *obs, const float *extra, int n,
                           float *logits, float *value, mr_error *err);

/* --------------------------------------------------------------- evaluation */

/* The evaluation protocols (docs/evaluation.md). */
typedef enum mr_eval_protocol {
    MR_EVAL_EPISODIC = 0,   /* every environment's: episodes as trained (its truncation), one record per
                             * episode with its return, length, counters and success
                             * (mr_trainer_evaluate_episodes) */
    MR_EVAL_SURVIVAL = 1    /* foraging's "continuous survival": no truncation, energy real, deaths and
                             * survivors (mr_trainer_evaluate_records); needs two counters */
} mr_eval_protocol;

typedef struct mr_eval_config {
    int mode;           /* an mr_mode, or -1 = the trainer's mode */
    int num_envs;       /* default 1024 */
    int steps;          /* per run, default 4096 */
    int runs;           /* default 1 */
    uint64_t seed;      /* default 12345 */
    int protocol;       /* an mr_eval_protocol, or -1 (default) = the environment's own (mr_env_spaces.eval) */
    int episodes;       /* episodic: per run, stop once this many episodes ended (instance i records
                         * (episodes + i) / num_envs of them), or eval.steps first; 0 (default) = steps only */
    int greedy;         /* 1: the most likely action (a categorical's argmax, the Gaussian's mean) instead
                         * of a sample; default 0 */
} mr_eval_config;

/* "Continuous survival" (MR_EVAL_SURVIVAL): energy real in every mode, no
 * truncation, actions sampled from the policy (or greedy). Per-1k figures
 * are per 1,000 agent-steps. */
typedef struct mr_eval_result {
    double energy_per_1k;    /* (food - 2 poison - 0.01 steps) per 1k */
    double efficiency;       /* mean over agents of food / (food + poison) */
    double survival;         /* mean episode length, censored at the end */
    double deaths_per_1k;
    double food_per_1k;
    double poison_per_1k;
} mr_eval_result;

void mr_eval_config_default(mr_eval_config *cfg);
/* Does not disturb training state (its own environments and RNG stream). */
mr_status mr_trainer_evaluate(mr_trainer *t, const mr_eval_config *cfg,
                              mr_eval_result *out, mr_error *err);
/* Evaluation's progress: called on the evaluating thread after every step of
 * every run with `done` of `total` (= runs x steps) steps taken. */
typedef void (*mr_eval_progress_fn)(void *user, uint64_t done, uint64_t total);
/* mr_trainer_evaluate telling its progress (progress may be NULL); the same
 * results bit for bit. */
mr_status mr_trainer_evaluate_progress(mr_trainer *t, const mr_eval_config *cfg, mr_eval_result *out,
                                       mr_eval_progress_fn progress, void *user, mr_error *err);

/* One agent's episode in an evaluation: a death, or (died = 0) an agent still
 * alive when its run ended, a right-censored survival time. Evaluation never
 * truncates, so every other episode end is a death. The records of a call
 * re-add to its totals exactly: the sums of steps, food and poison are the
 * run's agent-steps, food and poison, and the deaths are the died = 1 ones. */
typedef struct mr_eval_record {
    int32_t run;                  /* 0 .. runs-1; run r uses seed + r x 1000003 */
    int32_t env;                  /* the environment instance, 0 .. num_envs-1 */
    int32_t died;                 /* 1 death (energy <= 0), 0 alive at the end (censored) */
    int32_t steps;                /* steps lived: survival (death) or so far (censored) */
    int32_t start;                /* the run's step at which the episode began */
    int32_t food, poison;         /* eaten in the episode */
    int32_t energy_gained_centi;  /* 100 food - 200 poison - steps: energy gained, hundredths */
    float reward;                 /* the episode's return in the evaluated mode (clamped rewards) */
    float final_energy;           /* energy at the end: <= 0 at a death */
} mr_eval_record;

/* Records of one evaluation, allocated by the engine (free them with
 * mr_eval_records_free). Per run: the deaths in the order they happened
 * (step, then environment), then the survivors by environment. */
typedef struct mr_eval_records {
    mr_eval_record *rec;
    uint64_t count;               /* deaths + survivors */
    uint64_t deaths;
} mr_eval_records;

/* mr_trainer_evaluate_progress that also returns every record; `out` holds the
 * same results bit for bit. *records is overwritten (zeroed on failure). */
mr_status mr_trainer_evaluate_records(mr_trainer *t, const mr_eval_config *cfg, mr_eval_result *out,
                                      mr_eval_records *records, mr_eval_progress_fn progress, void *user,
                                      mr_error *err);
void mr_eval_records_free(mr_eval_records *records);

/* The episodic protocol's record of one episode of one instance. Per run the
 * records are the episodes in the order they ended (step, then instance),
 * then (ended = 0) each instance's episode still running when the run
 * stopped, if it had taken a step: with episodes = 0 the lengths of a run's
 * records add up to num_envs x steps. */
typedef struct mr_eval_episode {
    int32_t run;                  /* 0 .. runs-1; run r uses seed + r x 1000003 */
    int32_t env;                  /* the environment instance, 0 .. num_envs-1 */
    int32_t start;                /* the run's step at which the episode began */
    int32_t length;               /* steps */
    int32_t ended;                /* 1 terminated, 2 truncated, 0 still running when the run stopped */
    int32_t success;              /* 1 or 0 (by mr_env_spaces.success); -1 where none is declared */
    int32_t count[MR_ENV_MAX_COUNTERS];   /* the declared counters over the episode (mr_env_spaces) */
    double ret;                   /* the return: the sum of the environment's rewards, unclipped */
} mr_eval_episode;

typedef struct mr_eval_episodes {
    mr_eval_episode *ep;
    uint64_t count;               /* records */
    uint64_t ended;               /* of them, the episodes that ended (ended != 0) */
} mr_eval_episodes;

/* The episodic protocol for any environment: cfg->runs runs of num_envs
 * instances, each its own environments seeded seed + r x 1000003 and its
 * own RNG stream, stepped cfg->steps steps (or until cfg->episodes ended),
 * with the environment's own truncation (env.max_episode_steps, its limit)
 * and actions from the policy (sampled, or cfg->greedy). *out is
 * overwritten (zeroed on failure); free it with mr_eval_episodes_free. */
mr_status mr_trainer_evaluate_episodes(mr_trainer *t, const mr_eval_config *cfg, mr_eval_episodes *out,
                                       mr_eval_progress_fn progress, void *user, mr_error *err);
void mr_eval_episodes_free(mr_eval_episodes *episodes);
/* The protocol cfg asks of a trainer's environment: cfg->protocol, or where
 * that is -1 the environment's own (mr_env_spaces.eval); -1 if t is NULL. */
int mr_trainer_eval_protocol(const mr_trainer *t, const mr_eval_config *cfg);

/* ------------------------------------------------------------------ memory */

typedef struct mr_memory_stats {
    uint64_t host_planned_bytes;     /* arena planned at creation */
    uint64_t host_peak_bytes;
    uint64_t host_allocations;       /* allocations made by the engine; constant in steady state */
    uint64_t device_allocated_bytes; /* CUDA only, else 0 */
    uint64_t device_reserved_bytes;
    uint64_t device_peak_bytes;
    uint64_t device_allocations;
    uint64_t device_cache_hits;
} mr_memory_stats;

mr_status mr_trainer_memory(const mr_trainer *t, mr_memory_stats *out, mr_error *err);

/* ------------------------------------------------------- environment alone */

/* The vectorised environment on its own: benchmarks, tests, other learners. */
typedef struct mr_env mr_env;

mr_status mr_env_create(const mr_env_config *cfg, uint64_t seed, int device,
                        int threads, mr_env **out, mr_error *err);
void mr_env_free(mr_env *e);
/* Full reset of every instance (grid, agent, energy). */
mr_status mr_env_reset(mr_env *e, mr_error *err);
/* actions: num_envs bytes in [0, mr_env_num_actions(env.name)), host memory;
 * for a multi-discrete action of k components (dials) num_envs x k bytes,
 * component c of instance i at [i * k + c], below its nvec[c]. */
mr_status mr_env_step(mr_env *e, const uint8_t *actions, mr_error *err);
/* `steps` steps of every instance, each on an action drawn where the
 * environment runs (on a GPU: inside the step kernel, no copy from the host):
 * uniform over the environment's actions from the engine's keyed RNG
 * (rng.h's mr_rng_below(seed, instance key, the instance's tick,
 * MR_RNG_ACTION, 0, actions)), so every device draws the same bytes. Waits
 * once, at the end; last_actions (num_envs bytes, host) or NULL receives the
 * last step's actions. Discrete environments of one action byte only. The
 * environment benchmark's actions on a GPU (moonrl bench env). */
mr_status mr_env_step_random(mr_env *e, uint64_t seed, int steps, uint8_t *last_actions, mr_error *err);
/* Copies of the current state into host memory (sizes in the comments). */
typedef struct mr_env_view {
    uint8_t *obs;          /* num_envs * (2r+1)^2 cell codes (0 empty, 1 food, 2 poison) */
    float *reward;         /* num_envs */
    uint8_t *terminated;   /* num_envs */
    uint8_t *truncated;    /* num_envs */
    uint8_t *grid;         /* num_envs * H * W, or NULL to skip */
    int32_t *x, *y;        /* num_envs each, or NULL */
    float *energy;         /* num_envs, or NULL */
} mr_env_view;
mr_status mr_env_read(const mr_env *e, mr_env_view *out, mr_error *err);
/* One step of every instance of an environment whose actions are a box
 * (pendulum): actions (n, dims) floats, each environment clipping its own
 * bounds; mr_env_step is for discrete actions. */
mr_status mr_env_step_box(mr_env *e, const float *actions, mr_error *err);
/* Set energy frozen (1) or real (0); the mode sets the default. */
mr_status mr_env_set_energy_frozen(mr_env *e, int frozen, mr_error *err);

/* The OpenBLAS kernel set in use: "Cooperlake", "SkylakeX", "Haswell", ... */
const char *mr_blas_kernels(void);
/* The kernel set OpenBLAS should be told to load (OPENBLAS_CORETYPE) on this
 * CPU because its own detection chose a weaker one, or NULL (also when
 * OPENBLAS_CORETYPE is already set). Two cases, both seen:
 *  - a CPU with AVX-512 (F, BW, DQ, VL, CD, with OS support) that OpenBLAS
 *    runs with its AVX2 kernels ("Haswell", "Zen": 0.3.21 knows no AMD core
 *    with AVX-512): "SkylakeX";
 *  - a virtual machine that hides the CPU's model: OpenBLAS 0.3.21 does not
 *    recognise it and falls back to "Prescott" (SSE3 kernels, several times
 *    slower), seen on the H100 machines' Xeon (AVX-512 with BF16 and FP16),
 *    2026-11-25: "SkylakeX" there, "Haswell" where the CPU has AVX2 + FMA.
 * OpenBLAS reads the variable when it loads, so only a new process can act on
 * the answer: the moonrl executable re-executes itself (src/host/main.c).
 * Both answer for the cpu backend's OpenBLAS; mr_blas_pick_kernels is the
 * rule itself (OpenBLAS's core name and the CPU's features in, the core to
 * ask for or NULL out). */
const char *mr_blas_pick_kernels(const char *core, int cpu_avx2_fma, int cpu_avx512);
const char *mr_blas_better_kernels(void);

/* The bf16 instructions the cpu backend uses for precision = bf16
 * ("avx512_core_bf16" or "avx512_core_amx": what oneDNN runs its bf16
 * convolutions with on this CPU), or NULL: this CPU has none and the cpu
 * backend accepts fp32 only. ONEDNN_MAX_CPU_ISA (read by oneDNN once per
 * process) can lower the answer. */
const char *mr_cpu_bf16(void);

/* Multiply-adds per sample of one pass (forward, or either product of the
 * backward) of a 3x3 pad-1 convolution C -> OC on H x W maps as cpu.conv
 * `conv` (an mr_cpu_conv) computes it: H*W*9*C*OC for the direct paths
 * (onednn, im2col); for winograd the transformed-domain products plus the
 * tiles' input and output transforms (conv_winograd.h). The trunk's first
 * layer is computed from the codes whatever the choice. */
double mr_cpu_conv_macs(int conv, int H, int W, int C, int OC);

/* Samples per conv chunk of the cpu network (what mr_cpu_conv_time's chunk
 * should be to time its layers as it runs them). */
int mr_cpu_conv_chunk(void);

/* Times the implementations convs[0..n-1] (mr_cpu_conv: onednn, im2col or
 * winograd) of one 3x3 pad-1 convolution C -> OC on H x W maps as the cpu
 * network runs a layer l >= 1 of its trunk: `threads` chunks of `chunk`
 * samples at once, one per thread (< 1: every core, as threads = 0), a few in
 * turn per round, each a forward (bias + ReLU) then a backward (input, weight and bias gradients); bf16 = 1
 * runs oneDNN in bf16 as precision = bf16 does (Winograd and im2col stay
 * fp32). reps rounds, each timing every candidate once in turn (interleaved,
 * so a change in the machine's load falls on all alike), after one untimed
 * round; seconds[i] = the median of candidate i's rounds, or -1 where it
 * cannot run here (oneDNN refused the shape: why in err->msg, the call still
 * returns MR_OK). The warm-up's "algorithms" step (cpu.conv = auto) picks
 * each layer's implementation from these. MR_ERR_NOMEM or MR_ERR_ARG (a
 * bad argument) with a message otherwise. */
mr_status mr_cpu_conv_time(const int *convs, int n, int H, int W, int C, int OC, int chunk, int threads, int bf16,
                           int reps, double *seconds, mr_error *err);

/* This CPU's arithmetic peak in GFLOP/s on `threads` threads (< 1: OpenMP's
 * default), measured (about 0.2 s) by a register-resident loop of 512-bit
 * FMAs (bf16 = 0) or, for bf16 = 1, AMX tile dot products where the CPU has
 * AMX, else AVX512-BF16 dot products; 256-bit FMAs on a CPU with AVX2 only.
 * 0: unknown here (no such instructions). The ceiling of every CPU GFLOP/s
 * figure, ours and PyTorch's (moonrl bench, bench_train); mr_cpu_peak_what
 * names the instructions it counts. mr_cpu_peak_kernel runs the loop once
 * on the calling thread and returns 66 + 12 * iters / 4096 for iters a
 * multiple of 4096 (-1: not on this CPU), so a test can tell that the loop
 * really ran. */
double mr_cpu_peak_gflops(int bf16, int threads);
const char *mr_cpu_peak_what(int bf16);
float mr_cpu_peak_kernel(int bf16, long iters);

/* Number of CUDA devices usable by this build (0 without CUDA or GPU). */
int mr_cuda_device_count(void);

/* cuDNN as cuda.conv would use it: "cuDNN 9.19.0 (libcudnn.so.9)", or why it
 * cannot ("not loaded: ..."; without CUDA: "no CUDA backend in this build").
 * Loads the library on the first call (no GPU is touched). */
const char *mr_cuda_cudnn(void);

/* One layer's timing for cuda.conv = "auto" (mr_cuda_conv_time). */
typedef struct mr_cuda_conv_timing {
    double ms_im2col, ms_cudnn;  /* median per round (forward + backward of a chunk); -1: could not run */
    int algo[3];                 /* cuDNN's fastest deterministic forward, backward-data and backward-filter
                                  * algorithms within its workspace (MR_PC_DNN_WS), -1: none */
    char machine[160];           /* "NVIDIA H100 80GB HBM3|sm_90|cuDNN 91900": what the timing depends on */
    char note[200];              /* why cuDNN did not run, or "" */
} mr_cuda_conv_timing;

/* Times one 3x3 pad-1 convolution C -> OC on H x W maps as the CUDA network
 * runs a trunk layer l >= 1 for a chunk of `chunk` samples in `precision`
 * (mr_precision): a forward (bias + ReLU) and a backward (weight, bias and
 * input gradients, the ReLU mask) through im2col + cuBLAS and through cuDNN
 * with the algorithms cuDNN's own search (cudnnFind*AlgorithmEx) finds
 * fastest among the deterministic ones, the two interleaved over `reps`
 * rounds after an untimed one; medians in *out (reps = 0: only out->machine,
 * nothing timed). cuDNN missing: ms_cudnn =
 * -1 and the note says why (MR_OK). MR_ERR_BACKEND without a GPU, MR_ERR_ARG
 * for bad sizes. */
mr_status mr_cuda_conv_time(int device, int H, int W, int C, int OC, int chunk, int precision, int reps,
                            mr_cuda_conv_timing *out, mr_error *err);
/* Free and total memory of CUDA device `device`, bytes (creates its context).
 * MR_ERR_BACKEND without CUDA or GPU. */
mr_status mr_cuda_device_memory(int device, uint64_t *free_bytes, uint64_t *total_bytes, mr_error *err);
/* Device memory a CUDA trainer for cfg takes from its memory manager
 * (environments, network, optimizer, rollout, control blocks), computed from
 * the shapes alone: no GPU is touched, any build answers. */
mr_status mr_config_device_bytes(const mr_config *cfg, uint64_t *bytes, mr_error *err);
/* env.num_envs = "auto": the largest num_envs, a multiple of 64 (at least 64,
 * at most 1,048,576) for which num_envs x rollout_steps divides into the
 * minibatches, whose mr_config_device_bytes is at most budget and whose
 * kernel jobs the kernels can index (2^31 elements each: a conv chunk, a
 * linear layer's rows; the whole-batch buffers may be larger). The other
 * fields of cfg are kept; MR_ERR_NOMEM with a message when not even 64 fit. */
mr_status mr_config_fit_num_envs(const mr_config *cfg, uint64_t budget, int *num_envs, mr_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MOONRL_H */
