/*
 * checkpoint_format.h - the checkpoint file's format, shared by
 * checkpoint_save.c (writing it atomically) and checkpoint_load.c (checking
 * and reading it); internal to the engine's core.
 *
 * File layout (little-endian, version 2):
 *   header   "MOONRLCK" | u32 version | u32 sections | u64 bytes of the file
 *   section  char name[32] | u64 bytes | u32 crc32 | u32 0  | data
 *   ...
 *   trailer  u32 crc32 of everything before it | "MRCKEND\0"
 * The config is the section "config.keys": one text record per setting the
 * engine holds, "key = value\n", written from the schema's table
 * (config_keys.h): enums by name, schedules as "kind from to gamma every",
 * lists comma-separated; '#' starts a comment line. Reading starts from the
 * defaults, so a setting added after the file was written takes its
 * default; a key this build does not know is refused, naming it
 * (checkpoint_config.c writes and reads the records). Version 1 (until
 * 2026-11-25) held the raw mr_config bytes in "config" instead; those files
 * still load.
 *
 * Everything a run's future depends on is saved (weights, Adam moments and
 * step, PopArt, progress, hot parameters, the whole environment state with its
 * RNG counters: mr_ck_sections), so a resumed CPU run continues bit for bit.
 */
#ifndef MR_CHECKPOINT_FORMAT_H
#define MR_CHECKPOINT_FORMAT_H
#include "trainer.h"

#include <stddef.h>
#include <stdint.h>

#define CK_MAGIC "MOONRLCK"
#define CK_END "MRCKEND"
#define CK_VERSION 2u        /* written; 1 is read too */
#define CK_CONFIG_TEXT 16384 /* the config records, at most */
#define CK_NAME MR_CHECKPOINT_NAME_LEN            /* 32: a section's name field (moonrl.h) */
#define CK_MAX_SECTIONS MR_CHECKPOINT_MAX_SECTIONS /* 32: the sections a file may have */

typedef struct ck_section {
    const char *name;
    void *data;
    size_t bytes;
} ck_section;

/* What the checkpoint holds beside the big arrays. Its hot record is
 * mr_hot_params, generated from the schema's engine hot keys in hot_slot
 * order: a key made hot later appends to it, and a file from before (a
 * shorter record, at least CK_PROGRESS_MIN_BYTES) still loads, the key taking
 * the file's config value (checkpoint_load.c, read_progress). */
typedef struct ck_progress {
    uint64_t updates, agent_steps;
    int64_t adam_step;
    double popart_mean, popart_std, popart_count;
    mr_hot_params hot;
} ck_progress;
/* The record of every file up to 2026-11 (versions 1 and 2): the hot record
 * of slots 1 .. 8 (ppo.lr .. total_steps), whose bytes never move. */
#define CK_PROGRESS_MIN_BYTES 208u
_Static_assert(offsetof(ck_progress, hot) == 48 && offsetof(mr_hot_params, lr) == 0 &&
               offsetof(mr_hot_params, clip) == 40 && offsetof(mr_hot_params, ent_coef) == 80 &&
               offsetof(mr_hot_params, max_grad_norm) == 120 && offsetof(mr_hot_params, vf_coef) == 128 &&
               offsetof(mr_hot_params, ent_floor) == 136 && offsetof(mr_hot_params, ent_floor_coef) == 144 &&
               offsetof(mr_hot_params, total_steps) == 152 && sizeof(ck_progress) >= CK_PROGRESS_MIN_BYTES,
               "the checkpoint's progress record keeps its first 208 bytes: never renumber a hot_slot in "
               "lua/moonrl/config/schema.lua");

/* The section "ranks" of a data-parallel checkpoint (or of one a run wrote
 * after resuming on another rank count): how many ranks wrote it and the
 * run's agent-steps (each rank's trainer counts only its own). */
typedef struct ck_ranks {
    uint32_t ranks, pad;
    uint64_t agent_steps;
} ck_ranks;

/* CRC-32 (IEEE 802.3, as zlib's crc32) of n bytes, continuing crc (0 to start). */
uint32_t mr_ck_crc32(uint32_t crc, const void *data, size_t n);

/* The sections of a checkpoint of t, in file order, into s (at most
 * CK_MAX_SECTIONS); the first, the config records, is cfg_text (NULL when
 * loading: the config is read on its own). Returns how many. */
int mr_ck_sections(mr_trainer *t, ck_progress *pg, const char *cfg_text, size_t cfg_len, ck_section *s);

/* The size section `name` has in a checkpoint of a run of cfg whose
 * environments number `instances` (its ranks x env.num_envs): 1 and *bytes,
 * or 0 for a name this format does not have (the config records, whose
 * size varies, included). *per_param (if given): 1 for the sections of one
 * float per parameter (params, adam_m, adam_v, grads). */
int mr_ck_section_bytes(const mr_config *cfg, uint64_t instances, const char *name, uint64_t *bytes, int *per_param);

/* The environment's sections are the ones named "env.*": per instance, in
 * instance order, so the state of R ranks of E instances, each rank's
 * sections joined rank after rank, is the state of R x E instances. */
int mr_ck_is_env_section(const char *name);

#endif
