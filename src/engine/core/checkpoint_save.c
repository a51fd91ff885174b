/*
 * checkpoint_save.c - writing a trainer's checkpoint (checkpoint_format.h
 * has the format). A file is written to "<path>.tmp", fsync'ed and renamed
 * over <path>, and the directory is fsync'ed: a crash leaves the old
 * checkpoint or the new one, never a torn one. A data-parallel run's file
 * holds every rank's environments (mr_trainer_save_ranks).
 */
#include "checkpoint_format.h"
#include "errors.h"
#include "checkpoint_config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void progress_of(const mr_trainer *t, ck_progress *pg) {
    memset(pg, 0, sizeof *pg);
    pg->updates = t->updates;
    pg->agent_steps = t->agent_steps;
    pg->adam_step = t->adam_step;
    pg->popart_mean = t->popart.mean;
    pg->popart_std = t->popart.std;
    pg->popart_count = t->popart.count;
    pg->hot = t->hot;
}

/* The backend's gradient of the last optimizer step into the host copy's
 * grads (fp16: divided by the loss scale now in force). */
static mr_status pull_gradients(mr_trainer *t, mr_error *err) {
    const size_t P = t->net.n_params;
    mr_status s = t->be->copy(t->pol.grads, t->d.pol.grads, P * sizeof(float), MR_COPY_D2H, t->stream, err);
    if (!s) s = t->be->stream_sync(t->stream, err);
    if (s) return s;
    if (t->cfg.precision == MR_FP16 && t->h.opt->s.loss_scale > 0.0f) {
        const float inv = 1.0f / t->h.opt->s.loss_scale;
        for (size_t i = 0; i < P; i++) t->pol.grads[i] *= inv;
    }
    return MR_OK;
}

static int write_all(FILE *f, const void *p, size_t n, uint32_t *crc) {
    *crc = mr_ck_crc32(*crc, p, n);
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

static mr_status save_impl(mr_trainer *t, const char *path, const mr_ranks_info *info, const void *states,
                           mr_error *err);

mr_status mr_trainer_save(mr_trainer *t, const char *path, mr_error *err) {
    return save_impl(t, path, NULL, NULL, err);
}

mr_status mr_trainer_save_ranks(mr_trainer *t, const char *path, const mr_ranks_info *info, const void *states,
                                mr_error *err) {
    if (!info || info->ranks < 1 || (info->ranks > 1 && !states))
        return mr_fail(err, MR_ERR_ARG, "mr_trainer_save_ranks: info missing, ranks < 1, or no states for %d ranks",
                       info ? info->ranks : 0);
    return save_impl(t, path, info, states, err);
}

static mr_status save_impl(mr_trainer *t, const char *path, const mr_ranks_info *info, const void *states,
                           mr_error *err) {
    if (!t || !path || !*path) return mr_fail(err, MR_ERR_ARG, "mr_trainer_save: trainer or path is missing");
    mr_status ps;
    if ((ps = mr_trainer_pull(t, MR_SYNC_ALL, err))) return ps;   /* the backend state to the host copies */
    if (t->keep_grads && t->grads_ready && (ps = pull_gradients(t, err))) return ps;
    ck_progress pg;
    progress_of(t, &pg);
    char cfg_text[CK_CONFIG_TEXT];
    const size_t cfg_len = mr_ck_config_records(&t->cfg, cfg_text, sizeof cfg_text);
    if (cfg_len == (size_t)-1)
        return mr_fail(err, MR_ERR_STATE, "saving a checkpoint: the config's records pass %d bytes", CK_CONFIG_TEXT);
    ck_section sec[CK_MAX_SECTIONS];
    int ns = mr_ck_sections(t, &pg, cfg_text, cfg_len, sec);
    /* Several ranks: each environment section becomes all ranks' (above). */
    uint8_t *global = NULL;
    ck_ranks rk = {0};
    if (info) {
        int R = info->ranks;
        if (R > 1) {
            uint64_t per = mr_trainer_env_state_bytes(t);
            global = malloc((size_t)per * (size_t)R);
            if (!global) return mr_fail(err, MR_ERR_NOMEM, "out of memory gathering %d ranks' environments", R);
            size_t off = 0;   /* of section i within one rank's state */
            for (int i = 0; i < ns; i++) {
                if (!mr_ck_is_env_section(sec[i].name)) continue;
                uint8_t *dst = global + off * (size_t)R;
                for (int r = 0; r < R; r++)
                    memcpy(dst + (size_t)r * sec[i].bytes, (const uint8_t *)states + (size_t)r * per + off, sec[i].bytes);
                off += sec[i].bytes;
                sec[i].data = dst;
                sec[i].bytes *= (size_t)R;
            }
        }
        rk.ranks = (uint32_t)R;
        rk.agent_steps = info->agent_steps;
        sec[ns++] = (ck_section){"ranks", &rk, sizeof rk};
    }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 8);
    if (!tmp) { free(global); return mr_fail(err, MR_ERR_NOMEM, "out of memory saving a checkpoint"); }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    t->extra_allocations++;

    FILE *f = fopen(tmp, "wb");
    if (!f) {
        mr_status s = mr_fail(err, MR_ERR_IO, "cannot write checkpoint '%s': %s", tmp, strerror(errno));
        free(tmp);
        free(global);
        return s;
    }
    uint64_t total = 8 + 4 + 4 + 8 + 4 + 8;
    for (int i = 0; i < ns; i++) total += CK_NAME + 8 + 4 + 4 + sec[i].bytes;
    uint32_t crc = 0, version = CK_VERSION, count = (uint32_t)ns;
    int bad = write_all(f, CK_MAGIC, 8, &crc) | write_all(f, &version, 4, &crc) |
              write_all(f, &count, 4, &crc) | write_all(f, &total, 8, &crc);
    for (int i = 0; i < ns && !bad; i++) {
        char name[CK_NAME] = {0};
        strncpy(name, sec[i].name, CK_NAME - 1);
        uint64_t bytes = sec[i].bytes;
        uint32_t scrc = mr_ck_crc32(0, sec[i].data, sec[i].bytes), zero = 0;
        bad |= write_all(f, name, CK_NAME, &crc) | write_all(f, &bytes, 8, &crc) |
               write_all(f, &scrc, 4, &crc) | write_all(f, &zero, 4, &crc) |
               write_all(f, sec[i].data, sec[i].bytes, &crc);
    }
    free(global);
    uint32_t dummy = 0;
    if (!bad) bad |= write_all(f, &crc, 4, &dummy) | write_all(f, CK_END, 8, &dummy);
    if (!bad) bad |= fflush(f) != 0;
    if (!bad) bad |= fsync(fileno(f)) != 0;
    int close_bad = fclose(f) != 0;
    if (bad || close_bad) {
        mr_status s = mr_fail(err, MR_ERR_IO, "writing checkpoint '%s' failed: %s (the previous checkpoint, if any, is untouched)",
                              tmp, strerror(errno));
        unlink(tmp);
        free(tmp);
        return s;
    }
    if (rename(tmp, path) != 0) {
        mr_status s = mr_fail(err, MR_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return s;
    }
    /* Make the rename itself durable. */
    memcpy(tmp, path, plen + 1);
    int dfd = open(dirname(tmp), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
    free(tmp);
    mr_ok(err);
    return MR_OK;
}

