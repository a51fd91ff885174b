/*
 * checkpoint_config.c - a checkpoint's config section: the config as keyed
 * text records (version 2: enums by name, schedules as "kind from to gamma
 * every", lists comma-separated; '#' starts a comment line; reading starts
 * from the defaults, so a setting added later takes its default) and the
 * raw mr_config bytes of version 1, frozen here. checkpoint_format.h holds the
 * rest of the format. And the one comparison of a config with a checkpoint's,
 * key by key from the same table (mr_checkpoint_config_conflicts, a resume;
 * mr_ck_config_conflicts on the shape keys, mr_trainer_load).
 */
#include "checkpoint_config.h"
#include "errors.h"
#include "config.h"
#include "config_keys.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Choice i of "a|b|c" into buf ("?" past the end). */
static const char *choice_name(const char *names, int i, char *buf, size_t len) {
    for (int k = 0; names && k < i; k++) {
        names = strchr(names, '|');
        if (names) names++;
    }
    if (!names || i < 0) return "?";
    size_t n = strcspn(names, "|");
    if (n >= len) n = len - 1;
    memcpy(buf, names, n);
    buf[n] = 0;
    return buf;
}

/* The records of c into buf; the length, or (size_t)-1 when len is too small. */
size_t mr_ck_config_records(const mr_config *c, char *buf, size_t len) {
    size_t o = 0;
    char nb[64];
#define PUT(...) do { int n_ = snprintf(buf + o, o < len ? len - o : 0, __VA_ARGS__); \
                      o += n_ > 0 ? (size_t)n_ : 0; } while (0)
#define W_INT(k, f, d, lo, hi) PUT("%s = %lld\n", k, (long long)c->f);
#define W_REAL(k, f, d, lo, hi) PUT("%s = %.17g\n", k, (double)c->f);
#define W_U64(k, f, d, lo, hi) PUT("%s = %llu\n", k, (unsigned long long)c->f);
#define W_ENUM(k, f, d, n, names) PUT("%s = %s\n", k, choice_name(names, (int)c->f, nb, sizeof nb));
#define W_SCHED(k, f, kd, a, b, lo, hi) \
    PUT("%s = %d %.17g %.17g %.17g %.17g\n", k, (int)c->f.kind, c->f.start, c->f.end, c->f.gamma, c->f.every);
#define W_LIST(k, f, count, lo, hi, mn, mx) \
    PUT("%s = ", k); \
    for (int i = 0; i < c->count; i++) PUT(i ? ",%d" : "%d", c->f[i]); \
    PUT("\n");
    MR_CONFIG_KEYS(W_INT, W_REAL, W_U64, W_ENUM, W_SCHED, W_LIST)
    const mr_env_program *p = c->env.name == MR_ENV_LUA ? c->env.program : NULL;
    if (p) {
        const mr_env_spaces *sp = &p->spaces;
        PUT("lua.label = %s\n", p->label);
        if (sp->obs.kind == MR_SPACE_IMAGE)   /* read back by program_record; a vector as before */
            PUT("lua.obs = image %d %d %d\n", sp->obs.shape[0], sp->obs.shape[1], sp->obs.shape[2]);
        else
            PUT("lua.obs = %d\n", sp->obs.shape[0]);
        if (sp->act.kind == MR_SPACE_BOX) {
            PUT("lua.action = box %d", sp->act.n);
            for (int k = 0; k < sp->act.n && k < MR_SPACE_MAX_DIMS; k++)
                PUT(" %.9g %.9g", (double)sp->act.low[k], (double)sp->act.high[k]);
            PUT("\n");
        } else {
            PUT("lua.action = discrete %d\n", sp->act.n);
        }
        for (int k = 0; k < sp->counters && k < MR_ENV_MAX_COUNTERS; k++) PUT("lua.counter = %s\n", p->counter_name[k]);
        PUT("lua.success = %d %d\n", sp->success, sp->success_counter);
        PUT("lua.max_steps = %d\n", p->max_steps);
        for (int i = 0; i < p->fields && i < MR_PROGRAM_MAX_FIELDS; i++)
            PUT("lua.field = %s %d %d\n", p->field[i].name, p->field[i].type, p->field[i].count);
    }
#undef W_INT
#undef W_REAL
#undef W_U64
#undef W_ENUM
#undef W_SCHED
#undef W_LIST
#undef PUT
    return o < len ? o : (size_t)-1;
}

/* One record "key = value" onto c: 0, 1 for a key this build does not know,
 * -1 for a value that does not parse. */
static int config_record(mr_config *c, const char *key, const char *val) {
    int m = -1;
    char nb[64];
#define R_INT(k, f, d, lo, hi) \
    if (!strcmp(key, k)) { long long v; if (sscanf(val, "%lld%n", &v, &m) != 1 || val[m]) return -1; \
                           c->f = v; return 0; }
#define R_REAL(k, f, d, lo, hi) \
    if (!strcmp(key, k)) { double v; if (sscanf(val, "%lf%n", &v, &m) != 1 || val[m]) return -1; \
                           c->f = v; return 0; }
#define R_U64(k, f, d, lo, hi) \
    if (!strcmp(key, k)) { unsigned long long v; if (sscanf(val, "%llu%n", &v, &m) != 1 || val[m]) return -1; \
                           c->f = v; return 0; }
#define R_ENUM(k, f, d, n, names) \
    if (!strcmp(key, k)) { for (int i = 0; i < (n); i++) \
                               if (!strcmp(val, choice_name(names, i, nb, sizeof nb))) { c->f = i; return 0; } \
                           return -1; }
#define R_SCHED(k, f, kd, a, b, lo, hi) \
    if (!strcmp(key, k)) { int kind_; \
                           if (sscanf(val, "%d %lf %lf %lf %lf%n", &kind_, &c->f.start, &c->f.end, &c->f.gamma, \
                                      &c->f.every, &m) != 5 || val[m]) return -1; \
                           c->f.kind = kind_; return 0; }
#define R_LIST(k, f, count, lo, hi, mn, mx) \
    if (!strcmp(key, k)) { int n_ = 0; const char *p_ = val; memset(c->f, 0, sizeof c->f); \
                           while (*p_) { int v_; if (n_ >= (mx) || sscanf(p_, "%d%n", &v_, &m) != 1) return -1; \
                                         c->f[n_++] = v_; p_ += m; if (*p_ == ',') p_++; else if (*p_) return -1; } \
                           c->count = n_; return 0; }
    MR_CONFIG_KEYS(R_INT, R_REAL, R_U64, R_ENUM, R_SCHED, R_LIST)
#undef R_INT
#undef R_REAL
#undef R_U64
#undef R_ENUM
#undef R_SCHED
#undef R_LIST
    return 1;
}

/* One "lua.*" record onto the stand-in program p: 0, or -1 when it does not parse. */
static int program_record(mr_env_program *p, const char *key, const char *val) {
    int m = -1;
    mr_env_spaces *sp = &p->spaces;
    if (!strcmp(key, "lua.label")) {
        snprintf(p->label, sizeof p->label, "%s", val);
        return 0;
    }
    if (!strcmp(key, "lua.obs")) {
        if (!strncmp(val, "image ", 6)) {   /* a float image: C V V */
            sp->obs.kind = MR_SPACE_IMAGE;
            return sscanf(val, "image %d %d %d%n", &sp->obs.shape[0], &sp->obs.shape[1], &sp->obs.shape[2], &m) == 3 &&
                   !val[m] ? 0 : -1;
        }
        sp->obs.kind = MR_SPACE_VECTOR;
        sp->obs.shape[1] = sp->obs.shape[2] = 1;
        return sscanf(val, "%d%n", &sp->obs.shape[0], &m) == 1 && !val[m] ? 0 : -1;
    }
    if (!strcmp(key, "lua.action")) {
        if (sscanf(val, "discrete %d%n", &sp->act.n, &m) == 1 && !val[m]) {
            sp->act.kind = MR_SPACE_DISCRETE;
            return 0;
        }
        if (sscanf(val, "box %d%n", &sp->act.n, &m) != 1 || sp->act.n < 1 || sp->act.n > MR_SPACE_MAX_DIMS) return -1;
        sp->act.kind = MR_SPACE_BOX;
        const char *q = val + m;
        for (int k = 0; k < sp->act.n; k++) {
            if (sscanf(q, " %f %f%n", &sp->act.low[k], &sp->act.high[k], &m) != 2) return -1;
            q += m;
        }
        return *q ? -1 : 0;
    }
    if (!strcmp(key, "lua.counter")) {
        if (sp->counters >= MR_ENV_MAX_COUNTERS) return -1;
        snprintf(p->counter_name[sp->counters], sizeof p->counter_name[0], "%s", val);
        sp->counter_names[sp->counters] = p->counter_name[sp->counters];
        sp->counters++;
        return 0;
    }
    if (!strcmp(key, "lua.success"))
        return sscanf(val, "%d %d%n", &sp->success, &sp->success_counter, &m) == 2 && !val[m] ? 0 : -1;
    if (!strcmp(key, "lua.max_steps")) return sscanf(val, "%d%n", &p->max_steps, &m) == 1 && !val[m] ? 0 : -1;
    if (!strcmp(key, "lua.field")) {
        if (p->fields >= MR_PROGRAM_MAX_FIELDS) return -1;
        mr_program_field *f = &p->field[p->fields];
        char name[64];
        if (sscanf(val, "%63s %d %d%n", name, &f->type, &f->count, &m) != 3 || val[m] ||
            strlen(name) >= sizeof f->name) return -1;
        snprintf(f->name, sizeof f->name, "%s", name);
        snprintf(f->section, sizeof f->section, "env.%s", name);
        p->fields++;
        return 0;
    }
    return -1;
}

/* The stand-ins read so far, one per distinct declaration, kept for the
 * process (configs read back point at them). */
typedef struct stand_in {
    mr_env_program key;   /* the declarations with the counter names' pointers zeroed */
    mr_env_program p;
    struct stand_in *next;
} stand_in;
static stand_in *stand_ins;
static pthread_mutex_t stand_in_mu = PTHREAD_MUTEX_INITIALIZER;

static const mr_env_program *intern(const mr_env_program *p) {
    mr_env_program key;
    memcpy(&key, p, sizeof key);
    memset(key.spaces.counter_names, 0, sizeof key.spaces.counter_names);
    pthread_mutex_lock(&stand_in_mu);
    stand_in *s = stand_ins;
    while (s && memcmp(&s->key, &key, sizeof key) != 0) s = s->next;
    if (!s && (s = calloc(1, sizeof *s)) != NULL) {
        memcpy(&s->key, &key, sizeof key);
        memcpy(&s->p, &key, sizeof key);
        for (int k = 0; k < s->p.spaces.counters; k++) s->p.spaces.counter_names[k] = s->p.counter_name[k];
        s->next = stand_ins;
        stand_ins = s;
    }
    pthread_mutex_unlock(&stand_in_mu);
    return s ? &s->p : NULL;
}

mr_status mr_ck_config_parse(const char *path, const uint8_t *d, size_t n, mr_config *c, mr_error *err) {
    mr_config_default(c);
    mr_env_program lua;
    memset(&lua, 0, sizeof lua);
    int lua_records = 0;
    /* Written before ppo.truncation existed: truncated episodes ended their
     * value chain then, so a resume goes on as it began (a record, when
     * there is one, says otherwise). */
    c->ppo.truncation = MR_TRUNCATION_END;
    char line[512];
    size_t i = 0;
    while (i < n) {
        size_t e = i;
        while (e < n && d[e] != '\n') e++;
        if (e - i >= sizeof line)
            return mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: a config record of %zu bytes", path, e - i);
        memcpy(line, d + i, e - i);
        line[e - i] = 0;
        i = e + 1;
        if (!line[0] || line[0] == '#') continue;   /* blank lines and comments */
        char *eq = strstr(line, " = ");
        if (!eq) return mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: config record '%s' is not 'key = value'", path, line);
        *eq = 0;
        if (!strncmp(line, "lua.", 4)) {
            if (program_record(&lua, line, eq + 3) != 0)
                return mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: config record '%s = %s' does not parse", path, line,
                               eq + 3);
            lua_records++;
            continue;
        }
        const int r = config_record(c, line, eq + 3);
        if (r > 0)
            return mr_fail(err, MR_ERR_FORMAT, "'%s' holds the setting '%s', which this moonrl does not know (a "
                           "checkpoint of a newer moonrl?); the settings it knows are in docs/config.md", path, line);
        if (r < 0)
            return mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: config record '%s = %s' does not parse", path, line,
                           eq + 3);
    }
    if (c->env.name == MR_ENV_LUA && lua_records) {
        /* the counter names pointing into the local copy are made the stand-in's own by intern */
        c->env.program = intern(&lua);
        if (!c->env.program) return mr_fail(err, MR_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    mr_config_follow_env(c);   /* the network's sizes from env.name: not records */
    return MR_OK;
}

/* Version 1's config section: the bytes of mr_config as it was then, frozen
 * here (moonrl.h's structs have grown since: env.name, policy.num_actions;
 * a later change to another section of mr_config freezes that one here too). */
typedef struct {
    mr_mode mode;
    int num_envs, grid_size, view_range, density_min, density_max, respawn_tries, max_episode_steps;
} ck_env_config_v1;
typedef struct {
    int num_conv, conv_channels[MR_MAX_CONV], hidden, critic_hidden, popart;
    float popart_beta_min;
    mr_obs_storage proxy_obs_storage;
} ck_policy_config_v1;
typedef struct {   /* mr_ppo_config before ppo.truncation */
    int rollout_steps, epochs, minibatches;
    double gamma, gae_lambda;
    mr_schedule lr, clip, ent_coef;
    double vf_coef, ent_floor, ent_floor_coef, max_grad_norm, adam_beta1, adam_beta2, adam_eps;
    int norm_adv;
    double reward_clip;
} ck_ppo_config_v1;
typedef struct {   /* mr_cuda_config before cuda.conv */
    int device_index, graphs;
    double memory_fraction, release_threshold;
} ck_cuda_config_v1;
typedef struct {
    ck_env_config_v1 env;
    ck_policy_config_v1 policy;
    ck_ppo_config_v1 ppo;
    ck_cuda_config_v1 cuda;
    mr_device device;
    mr_precision precision;
    int threads;
    struct { int16_t conv, activations; } cpu;   /* mr_cpu_config then (conv_layers came later) */
    uint64_t seed, total_steps;
} ck_config_v1;

size_t mr_ck_config_v1_bytes(void) { return sizeof(ck_config_v1); }

void mr_ck_config_from_v1(const void *bytes, mr_config *c) {
    ck_config_v1 vv;
    memcpy(&vv, bytes, sizeof vv);   /* the file's bytes need not be aligned */
    const ck_config_v1 *v = &vv;
    mr_config_default(c);   /* env.name = foraging, the only environment then */
    c->env.mode = v->env.mode;
    c->env.num_envs = v->env.num_envs;
    c->env.grid_size = v->env.grid_size;
    c->env.view_range = v->env.view_range;
    c->env.density_min = v->env.density_min;
    c->env.density_max = v->env.density_max;
    c->env.respawn_tries = v->env.respawn_tries;
    c->env.max_episode_steps = v->env.max_episode_steps;
    c->policy.num_conv = v->policy.num_conv;
    memcpy(c->policy.conv_channels, v->policy.conv_channels, sizeof c->policy.conv_channels);
    c->policy.hidden = v->policy.hidden;
    c->policy.critic_hidden = v->policy.critic_hidden;
    c->policy.popart = v->policy.popart;
    c->policy.popart_beta_min = v->policy.popart_beta_min;
    c->policy.proxy_obs_storage = v->policy.proxy_obs_storage;
#define PPO_(f) c->ppo.f = v->ppo.f;
    PPO_(rollout_steps) PPO_(epochs) PPO_(minibatches) PPO_(gamma) PPO_(gae_lambda) PPO_(lr) PPO_(clip)
    PPO_(ent_coef) PPO_(vf_coef) PPO_(ent_floor) PPO_(ent_floor_coef) PPO_(max_grad_norm) PPO_(adam_beta1)
    PPO_(adam_beta2) PPO_(adam_eps) PPO_(norm_adv) PPO_(reward_clip)
#undef PPO_
    c->ppo.truncation = MR_TRUNCATION_END;   /* truncated episodes ended then */
    c->cuda.device_index = v->cuda.device_index;   /* cuda.conv and its layers: the defaults (im2col) */
    c->cuda.graphs = v->cuda.graphs;
    c->cuda.memory_fraction = v->cuda.memory_fraction;
    c->cuda.release_threshold = v->cuda.release_threshold;
    c->device = v->device;
    c->precision = v->precision;
    c->threads = v->threads;
    c->cpu.conv = v->cpu.conv;
    c->cpu.activations = v->cpu.activations;
    c->seed = v->seed;
    c->total_steps = v->total_steps;
}


/* ------------------------------------------------ config against config */

/* The engine's hot keys (hot_keys.h): a checkpoint holds their values in force. */
#define HOT_KEY_NAME(k, m, f, lo, hi) k,
static const char *const hot_keys[] = {MR_HOT_KEYS(HOT_KEY_NAME, HOT_KEY_NAME, HOT_KEY_NAME, HOT_KEY_NAME) NULL};
#undef HOT_KEY_NAME

/* The keys a trainer's buffers are laid out from (CK_COMPARE_SHAPES;
 * env.num_envs with CK_COMPARE_SHAPES_ENVS). */
static const char *const shape_keys[] = {"env.name", "env.grid_size", "env.view_range", "policy.conv_channels",
                                         "policy.hidden", "policy.critic_hidden", NULL};

static int listed(const char *const *list, const char *key) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], key)) return 1;
    return 0;
}

static int compared(const char *key, ck_compare scope) {
    if (scope == CK_COMPARE_RESUME)
        return !listed(hot_keys, key) && strcmp(key, "device") && strcmp(key, "precision") &&
               strcmp(key, "threads") && strncmp(key, "cuda.", 5);
    return listed(shape_keys, key) || (scope == CK_COMPARE_SHAPES_ENVS && !strcmp(key, "env.num_envs"));
}

/* The differences found so far, "a, b, ..." into out. */
typedef struct conflicts {
    char *out;
    size_t len, at;
    int n;
} conflicts;

static void say(conflicts *c, const char *key, const char *a, const char *b) {
    c->n++;
    if (!c->out || c->len == 0 || c->at + 1 >= c->len) return;
    int w = snprintf(c->out + c->at, c->len - c->at, "%s%s: %s vs %s", c->n > 1 ? ", " : "", key, a, b);
    if (w < 0) return;
    if ((size_t)w >= c->len - c->at) {   /* cut: end it with "..." */
        c->at = c->len - 1;
        if (c->len >= 4) memcpy(c->out + c->len - 4, "...", 3);
        return;
    }
    c->at += (size_t)w;
}

/* The shortest of %.15g .. %.17g that reads back to x. */
static const char *real_text(double x, char *buf, size_t len) {
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, len, "%.*g", p, x);
        if (strtod(buf, NULL) == x) break;
    }
    return buf;
}

static const char *list_text(const int *v, int n, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n && o < len; i++) {
        int w = snprintf(buf + o, len - o, i ? ",%d" : "%d", v[i]);
        if (w < 0) break;
        o += (size_t)w;
    }
    return buf;
}

int mr_ck_config_conflicts(const mr_config *a, const mr_config *b, ck_compare scope, char *out, size_t len) {
    conflicts c = {out, len, 0, 0};
    if (out && len) out[0] = 0;
    char x[160], y[160];
#define C_INT(k, f, d, lo, hi) \
    if (compared(k, scope) && a->f != b->f) { \
        snprintf(x, sizeof x, "%lld", (long long)a->f); \
        snprintf(y, sizeof y, "%lld", (long long)b->f); \
        say(&c, k, x, y); \
    }
#define C_REAL(k, f, d, lo, hi) \
    if (compared(k, scope) && (double)a->f != (double)b->f) \
        say(&c, k, real_text((double)a->f, x, sizeof x), real_text((double)b->f, y, sizeof y));
#define C_U64(k, f, d, lo, hi) \
    if (compared(k, scope) && a->f != b->f) { \
        snprintf(x, sizeof x, "%llu", (unsigned long long)a->f); \
        snprintf(y, sizeof y, "%llu", (unsigned long long)b->f); \
        say(&c, k, x, y); \
    }
#define C_ENUM(k, f, d, n, names) \
    if (compared(k, scope) && (int)a->f != (int)b->f) \
        say(&c, k, choice_name(names, (int)a->f, x, sizeof x), choice_name(names, (int)b->f, y, sizeof y));
#define C_SCHED(k, f, kd, lo_, hi_, lo, hi) \
    if (compared(k, scope) && (a->f.kind != b->f.kind || a->f.start != b->f.start || a->f.end != b->f.end || \
                               a->f.gamma != b->f.gamma || a->f.every != b->f.every)) { \
        snprintf(x, sizeof x, "%d %.17g %.17g %.17g %.17g", (int)a->f.kind, a->f.start, a->f.end, a->f.gamma, \
                 a->f.every); \
        snprintf(y, sizeof y, "%d %.17g %.17g %.17g %.17g", (int)b->f.kind, b->f.start, b->f.end, b->f.gamma, \
                 b->f.every); \
        say(&c, k, x, y); \
    }
#define C_LIST(k, f, count, lo, hi, mn, mx) \
    if (compared(k, scope)) { \
        int same_ = a->count == b->count; \
        for (int i_ = 0; same_ && i_ < a->count && i_ < (mx); i_++) same_ = a->f[i_] == b->f[i_]; \
        if (!same_) say(&c, k, list_text(a->f, a->count < (mx) ? a->count : (mx), x, sizeof x), \
                        list_text(b->f, b->count < (mx) ? b->count : (mx), y, sizeof y)); \
    }
    MR_CONFIG_KEYS(C_INT, C_REAL, C_U64, C_ENUM, C_SCHED, C_LIST)
#undef C_INT
#undef C_REAL
#undef C_U64
#undef C_ENUM
#undef C_SCHED
#undef C_LIST
    if (scope == CK_COMPARE_RESUME) {
        /* what the network takes from the environment (mr_config_follow_env):
         * no keys, but a Lua environment's file may have changed them */
#define DERIVED(f) \
    if (a->policy.f != b->policy.f) { \
        snprintf(x, sizeof x, "%d", a->policy.f); \
        snprintf(y, sizeof y, "%d", b->policy.f); \
        say(&c, "policy." #f " (from the environment)", x, y); \
    }
        DERIVED(num_actions) DERIVED(obs_vector) DERIVED(critic_extra) DERIVED(act_box) DERIVED(obs_channels)
        DERIVED(obs_image) DERIVED(obs_side)
#undef DERIVED
    }
    return c.n;
}

int mr_checkpoint_config_conflicts(const mr_config *run, const mr_config *stored, char *out, size_t len) {
    if (!run || !stored) {
        if (out && len) snprintf(out, len, "mr_checkpoint_config_conflicts: a config is NULL");
        return 1;
    }
    return mr_ck_config_conflicts(run, stored, CK_COMPARE_RESUME, out, len);
}
