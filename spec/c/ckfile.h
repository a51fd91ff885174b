/*
 * ckfile.h - a checkpoint file read by the tests themselves, independently
 * of the engine's reader (src/engine/core/checkpoint_load.c): the header and the
 * named sections, so a test can compare a section's bytes with another
 * file's. Format: magic "MOONRLCK", u32 version, u32 sections, u64 bytes,
 * then per section a 32-byte name, u64 bytes, 8 more header bytes, the data.
 */
#ifndef MOONRL_SPEC_CKFILE_H
#define MOONRL_SPEC_CKFILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct section {
    char name[33];
    size_t bytes;
    const unsigned char *data;
} section;

typedef struct ckfile {
    unsigned char *buf;
    size_t len;
    int n;
    section s[64];
} ckfile;

static inline int read_ck(const char *path, ckfile *f) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->buf = malloc((size_t)len);
    f->len = (size_t)len;
    if (!f->buf || fread(f->buf, 1, f->len, fp) != f->len) {
        fclose(fp);
        return -1;
    }
    fclose(fp);
    /* header: magic[8] u32 version u32 sections u64 bytes */
    if (f->len < 24 || memcmp(f->buf, "MOONRLCK", 8) != 0) return -1;
    uint32_t nsec;
    memcpy(&nsec, f->buf + 12, 4);
    size_t off = 24;
    for (uint32_t i = 0; i < nsec && i < 64; i++) {
        section *s = &f->s[f->n++];
        memcpy(s->name, f->buf + off, 32);
        s->name[32] = 0;
        uint64_t b;
        memcpy(&b, f->buf + off + 32, 8);
        s->bytes = (size_t)b;
        s->data = f->buf + off + 48;
        off += 48 + s->bytes;
        if (off > f->len) return -1;
    }
    return 0;
}

static inline const section *find(const ckfile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->s[i].name, name) == 0) return &f->s[i];
    return NULL;
}

static inline void free_ck(ckfile *f) {
    free(f->buf);
    f->buf = NULL;
}

#endif
