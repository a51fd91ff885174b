/*
 * checkpoint_format.c - what checkpoint_format.h declares: the CRC, the
 * sections of a trainer's checkpoint, and the environment's state as those
 * sections hold it (mr_trainer_env_state_bytes / mr_trainer_read_env_state,
 * which data-parallel runs gather from every rank).
 */
#include "checkpoint_format.h"
#include "errors.h"
#include "config.h"
#include "net_layout.h"

#include <pthread.h>
#include <string.h>

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_fill(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

/* Several trainers may save at once (one per run thread): fill the table once. */
static void crc_init(void) { pthread_once(&crc_once, crc_fill); }

uint32_t mr_ck_crc32(uint32_t crc, const void *data, size_t n) {
    crc_init();
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* The sections of environments e and a network of P parameters, in file
 * order (grads when `grads`); data pointers are e's (NULL when planned). */
static int sections_of(const mr_env_state *e, size_t P, const float *params, const float *adam_m, const float *adam_v,
                       const float *grads, int with_grads, ck_progress *pg, const char *cfg_text, size_t cfg_len,
                       ck_section *s) {
    int k = 0;
#define SEC(nm, ptr, sz) s[k++] = (ck_section){nm, (void *)(ptr), (sz)}
    SEC("config.keys", cfg_text, cfg_len);
    SEC("progress", pg, sizeof *pg);
    SEC("params", params, P * sizeof(float));
    SEC("adam_m", adam_m, P * sizeof(float));
    SEC("adam_v", adam_v, P * sizeof(float));
    /* the environment's own buffers, as its registry entry names them */
    mr_env_section es[MR_ENV_MAX_SECTIONS];
    const int ne = mr_env_sections(e, es);
    for (int i = 0; i < ne; i++) SEC(es[i].name, es[i].data, es[i].bytes);
    if (with_grads) SEC("grads", grads, P * sizeof(float));
#undef SEC
    return k;
}

int mr_ck_sections(mr_trainer *t, ck_progress *pg, const char *cfg_text, size_t cfg_len, ck_section *s) {
    return sections_of(&t->env, t->net.n_params, t->pol.params, t->adam_m, t->adam_v, t->pol.grads,
                       t->keep_grads && t->grads_ready, pg, cfg_text, cfg_len, s);
}

int mr_ck_section_bytes(const mr_config *cfg, uint64_t instances, const char *name, uint64_t *bytes,
                        int *per_param) {
    mr_net_layout net;
    mr_net_layout_init(&net, &cfg->policy, mr_config_side(cfg));
    mr_env_config one = cfg->env;   /* one instance, planned: no buffers, only the sizes are read */
    one.num_envs = 1;
    one.index0 = 0;
    mr_env_state e;
    mr_arena plan = {NULL, 0, 0, 0};
    mr_env_layout(&e, &one, 0, &plan);
    ck_progress pg;
    ck_section s[CK_MAX_SECTIONS];
    int ns = sections_of(&e, net.n_params, NULL, NULL, NULL, NULL, 1, &pg, NULL, 0, s);
    for (int i = 1; i < ns; i++) {   /* 0, the config records, has no fixed size */
        if (strcmp(s[i].name, name) != 0) continue;
        int env = mr_ck_is_env_section(name);
        if (per_param) *per_param = !env && strcmp(name, "progress") != 0;
        *bytes = env ? (uint64_t)s[i].bytes * instances : (uint64_t)s[i].bytes;
        return 1;
    }
    if (strcmp(name, "ranks") == 0) {
        if (per_param) *per_param = 0;
        *bytes = sizeof(ck_ranks);
        return 1;
    }
    return 0;
}

int mr_ck_is_env_section(const char *name) { return strncmp(name, "env.", 4) == 0; }

uint64_t mr_trainer_env_state_bytes(mr_trainer *t) {
    ck_progress pg;
    ck_section sec[CK_MAX_SECTIONS];
    int ns = mr_ck_sections(t, &pg, NULL, 0, sec);
    uint64_t n = 0;
    for (int i = 0; i < ns; i++) if (mr_ck_is_env_section(sec[i].name)) n += sec[i].bytes;
    return n;
}

mr_status mr_trainer_read_env_state(mr_trainer *t, void *out, uint64_t bytes, mr_error *err) {
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_read_env_state: trainer or out is NULL");
    if (bytes != mr_trainer_env_state_bytes(t))
        return mr_fail(err, MR_ERR_ARG, "mr_trainer_read_env_state: %llu bytes given, the state has %llu",
                       (unsigned long long)bytes, (unsigned long long)mr_trainer_env_state_bytes(t));
    mr_status ps;
    if ((ps = mr_trainer_pull(t, MR_SYNC_ALL, err))) return ps;
    ck_progress pg;
    ck_section sec[CK_MAX_SECTIONS];
    int ns = mr_ck_sections(t, &pg, NULL, 0, sec);
    uint8_t *o = out;
    for (int i = 0; i < ns; i++)
        if (mr_ck_is_env_section(sec[i].name)) { memcpy(o, sec[i].data, sec[i].bytes); o += sec[i].bytes; }
    mr_ok(err);
    return MR_OK;
}

