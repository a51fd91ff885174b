/*
 * checkpoint_config.h - a checkpoint's config section (checkpoint_format.h's
 * format): the config as keyed text records, written from the schema's
 * table (config_keys.h), and version 1's raw mr_config bytes, frozen.
 */
#ifndef MOONRL_CHECKPOINT_CONFIG_H
#define MOONRL_CHECKPOINT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "moonrl.h"

/* The records of c into buf ("key = value\n" each); the length, or
 * (size_t)-1 when len is too small. */
size_t mr_ck_config_records(const mr_config *c, char *buf, size_t len);
/* Records (d, n bytes, of the file `path`, named in messages) onto the
 * defaults: a key this build does not know, or a value that does not parse,
 * is refused naming it. */
mr_status mr_ck_config_parse(const char *path, const uint8_t *d, size_t n, mr_config *c, mr_error *err);
/* Version 1's section: its size, and the config it holds. */
size_t mr_ck_config_v1_bytes(void);
void mr_ck_config_from_v1(const void *bytes, mr_config *c);

/* Which settings mr_ck_config_conflicts compares: resume, every key but the
 * hot ones and the machine's (mr_checkpoint_config_conflicts); shapes, those
 * a trainer's buffers are laid out from (mr_trainer_load's check), with
 * env.num_envs or without it (a data-parallel load re-seeds the environments
 * it cannot carry). */
typedef enum ck_compare { CK_COMPARE_RESUME, CK_COMPARE_SHAPES, CK_COMPARE_SHAPES_ENVS } ck_compare;
/* The settings in `scope` on which a and b differ, as "key: a's vs b's"
 * joined by ", " into out (len bytes, cut short with "..."); how many. */
int mr_ck_config_conflicts(const mr_config *a, const mr_config *b, ck_compare scope, char *out, size_t len);

#endif
