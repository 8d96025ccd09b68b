/* fpga/image_cache.c — the on-disk weight image cache (see image_cache.h). */
#include "fpga/image_cache.h"
#include "proto/crc32c.h"
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IMG_MAGIC "TDMIMAGE"
#define IMG_VERSION 1
#define IMG_HEADER 4096

typedef struct img_header {
    char magic[8];
    uint32_t version, header_bytes;
    uint8_t key[32];
    fpga_dec_desc desc;
    uint64_t image_bytes;
    uint32_t n_ch;
    uint32_t crc[FPGA_DEC_CH];
    char opts[256];
    uint32_t header_crc; /* CRC32C of the bytes before it */
} img_header;

_Static_assert(sizeof(img_header) <= IMG_HEADER, "image header fits its block");

/* ---------------------------------------------------------------- the weights' checksums */

#define LAYER_TENSORS 12 /* model_layer's tensors (weights_read) */

static _Atomic uint64_t weights_read_count;

/* Appends the CRC32C of every byte of tensor t (if present) to crc[0..n); the new count. */
static int tensor_crc(const model_tensor *t, uint32_t *crc, int n)
{
    if (!t->data) return n;
    size_t b =
        (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1) * model_dtype_size(t->dtype);
    crc[n] = proto_crc32c(0, t->data, b);
    return n + 1;
}

/* Every present tensor's CRC32C, in the key's order, into crc (room for 3 + LAYER_TENSORS a
 * layer): an edit anywhere changes the key (image_cache.h). The count. */
static int weights_read(const model *m, uint32_t *crc)
{
    int n = tensor_crc(&m->embed, crc, 0);
    n = tensor_crc(&m->norm, crc, n);
    n = tensor_crc(&m->lm_head, crc, n);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_layer *L = &m->layers[l];
        const model_tensor *ts[LAYER_TENSORS] = {&L->attn_norm, &L->wq,     &L->wk,   &L->wv,
                                                 &L->wo,        &L->bq,     &L->bk,   &L->bv,
                                                 &L->ffn_norm,  &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < LAYER_TENSORS; i++) n = tensor_crc(ts[i], crc, n);
    }
    weights_read_count++;
    return n;
}

/* The memo: a held model's checksums (image_cache.h fpga_image_hold says why it is safe). */
typedef struct memo {
    const model *m;
    int holds;
    int n;         /* checksums, 0 until a key was first made */
    uint32_t *crc; /* (n) */
    struct memo *next;
} memo;

static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;
static memo *memos;

static memo *memo_find(const model *m)
{
    for (memo *e = memos; e; e = e->next)
        if (e->m == m) return e;
    return NULL;
}

int fpga_image_hold(const model *m)
{
    pthread_mutex_lock(&memo_mu);
    memo *e = memo_find(m);
    if (!e && (e = calloc(1, sizeof *e))) {
        e->m = m;
        e->next = memos;
        memos = e;
    }
    if (e) e->holds++;
    pthread_mutex_unlock(&memo_mu);
    return e ? 0 : -1;
}

void fpga_image_drop(const model *m)
{
    pthread_mutex_lock(&memo_mu);
    for (memo **pp = &memos; *pp; pp = &(*pp)->next) {
        memo *e = *pp;
        if (e->m != m) continue;
        if (--e->holds == 0) {
            *pp = e->next;
            free(e->crc);
            free(e);
        }
        break;
    }
    pthread_mutex_unlock(&memo_mu);
}

uint64_t fpga_image_weights_read(void)
{
    return weights_read_count;
}

/* The weights' checksums into crc: the memo's when m is held and they were read already, else
 * read now (and kept when m is held). Under the lock, so that a second card opening on the same
 * model meanwhile waits for these rather than reading every byte again. The count. */
static int weights_crcs(const model *m, uint32_t *crc)
{
    pthread_mutex_lock(&memo_mu);
    memo *e = memo_find(m);
    int n;
    if (e && e->crc) {
        n = e->n;
        memcpy(crc, e->crc, sizeof *crc * (size_t)n);
    } else {
        n = weights_read(m, crc);
        if (e && n && (e->crc = malloc(sizeof *crc * (size_t)n))) {
            memcpy(e->crc, crc, sizeof *crc * (size_t)n);
            e->n = n;
        }
    }
    pthread_mutex_unlock(&memo_mu);
    return n;
}

/* ---------------------------------------------------------------- the key */

static int make_key(const model *m, const fpga_quant_opts *q, const fpga_dec_desc *d,
                    uint8_t key[32], char *opts, size_t optlen)
{
    fpga_quant_opts_str(q, opts, optlen);
    uint32_t *crc = malloc(sizeof *crc * (3 + (size_t)LAYER_TENSORS * (size_t)m->cfg.n_layers));
    EVP_MD_CTX *ctx = crc ? EVP_MD_CTX_new() : NULL;
    unsigned n = 0;
    const uint32_t version[2] = {IMG_VERSION, FPGA_IMAGE_BUILDER_VERSION};
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
             EVP_DigestUpdate(ctx, version, sizeof version) &&
             EVP_DigestUpdate(ctx, m->fingerprint, sizeof m->fingerprint) &&
             EVP_DigestUpdate(ctx, opts, strlen(opts)) && EVP_DigestUpdate(ctx, d, sizeof *d);
    if (ok) {
        /* each tensor's CRC in turn, as before the memo: keys of cached files stay valid */
        int k = weights_crcs(m, crc);
        for (int i = 0; ok && i < k; i++) ok = EVP_DigestUpdate(ctx, &crc[i], sizeof crc[i]);
        ok = ok && EVP_DigestFinal_ex(ctx, key, &n);
    }
    EVP_MD_CTX_free(ctx);
    free(crc);
    return ok ? 0 : -1;
}

/* The cache directory (created), or 0 when there is none to use; one that another user owns or
 * others may write is refused (anyone who can write it can plant the image the card runs), the
 * reason in why and on stderr. */
static int cache_dir(const char *dir, char *out, size_t n, char *why, size_t whylen)
{
    const char *env = getenv("TANDEM_CACHE_DIR");
    if (!dir || !*dir) dir = env && *env ? env : NULL;
    if (dir && !strcmp(dir, "off")) return 0;
    char buf[1024];
    if (!dir) {
        const char *home = getenv("HOME");
        if (!home || !*home) return 0;
        snprintf(buf, sizeof buf, "%s/.cache/tandem", home);
        dir = buf;
    }
    if (strlen(dir) >= n - 80) return 0;
    /* mkdir -p */
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0700);
            *p = '/';
        }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return 0;
    struct stat st;
    if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode) || access(tmp, W_OK | X_OK) != 0) return 0;
    if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        snprintf(why, whylen, "cache directory refused: %s",
                 st.st_uid != geteuid() ? "owned by another user" : "writable by others");
        fprintf(stderr, "tandem: warning: fpga: %s %s; the weight image is built in memory\n", tmp,
                why);
        return 0;
    }
    snprintf(out, n, "%s", tmp);
    return 1;
}

static uint32_t header_crc(const img_header *h)
{
    return proto_crc32c(0, h, offsetof(img_header, header_crc));
}

/* Maps and checks an existing file. 0 on a valid image; else -1 with the reason in why. */
static int try_load(const char *path, const uint8_t key[32], const fpga_dec_desc *d,
                    const fpga_dec_layout *lo, fpga_image_file *f)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(f->why, sizeof f->why, errno == ENOENT ? "" : "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    size_t want = IMG_HEADER + (size_t)FPGA_DEC_CH * lo->image_bytes;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != want) {
        snprintf(f->why, sizeof f->why, "size %lld, expected %zu", (long long)st.st_size, want);
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, want, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(f->why, sizeof f->why, "cannot map: %s", strerror(errno));
        return -1;
    }
    const img_header *h = map;
    const uint8_t *data = (const uint8_t *)map + IMG_HEADER;
    const char *bad = NULL;
    if (memcmp(h->magic, IMG_MAGIC, 8) || h->version != IMG_VERSION || h->header_bytes != IMG_HEADER)
        bad = "not a tandem image of this version";
    else if (header_crc(h) != h->header_crc) bad = "header checksum mismatch";
    else if (memcmp(h->key, key, 32)) bad = "key mismatch";
    else if (memcmp(&h->desc, d, sizeof *d) || h->image_bytes != lo->image_bytes ||
             h->n_ch != FPGA_DEC_CH)
        bad = "descriptor mismatch";
    for (int c = 0; !bad && c < FPGA_DEC_CH; c++)
        if (proto_crc32c(0, data + (size_t)c * lo->image_bytes, lo->image_bytes) != h->crc[c])
            bad = "section checksum mismatch (corrupt)";
    if (bad) {
        snprintf(f->why, sizeof f->why, "%s", bad);
        munmap(map, want);
        return -1;
    }
    f->map = map;
    f->map_bytes = want;
    f->data = data;
    f->from_cache = f->cached = 1;
    return 0;
}

int fpga_image_get(const model *m, const fpga_quant_opts *q, const fpga_calib_ref *ref,
                   const char *dir, fpga_image_file *f, fpga_image_report *rep, char *err,
                   size_t errlen)
{
    memset(f, 0, sizeof *f);
    *err = 0;
    if (fpga_image_desc(m, q, &f->desc, err, errlen)) return -1;
    fpga_dec_layout_of(&f->desc, &f->lo);
    uint8_t key[32] = {0};
    char opts[256] = "", cdir[1024], path[1100], tmp[1200];
    int have_dir = cache_dir(dir, cdir, sizeof cdir, f->why, sizeof f->why);
    /* the key reads every byte of the weights: only when there is a cache to look in */
    if (have_dir && make_key(m, q, &f->desc, key, opts, sizeof opts)) {
        snprintf(err, errlen, "fpga: cannot hash the image key");
        return -1;
    }
    if (have_dir) {
        char hex[65];
        for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", key[i]);
        snprintf(path, sizeof path, "%s/%s.img", cdir, hex);
        if (try_load(path, key, &f->desc, &f->lo, f) == 0) {
            snprintf(f->path, sizeof f->path, "%s", path);
            return 0;
        }
    }
    /* Build: into a temporary file in the cache directory (renamed when complete), or into
     * anonymous memory when there is no cache. */
    size_t bytes = IMG_HEADER + (size_t)FPGA_DEC_CH * f->lo.image_bytes;
    int fd = -1;
    static _Atomic unsigned seq;
    for (int i = 0; have_dir && fd < 0 && i < 64; i++) {
        /* a name of its own: never a file or a link someone put there */
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), seq++);
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        unlink(tmp);
        fd = -1;
    }
    void *map = fd >= 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                        : mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) {
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        snprintf(err, errlen, "fpga: cannot map %zu bytes for the weight image", bytes);
        return -1;
    }
    uint8_t *data = (uint8_t *)map + IMG_HEADER;
    if (fpga_image_build(m, q, ref, &f->desc, data, rep, err, errlen)) {
        munmap(map, bytes);
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return -1;
    }
    img_header *h = map;
    memcpy(h->magic, IMG_MAGIC, 8);
    h->version = IMG_VERSION;
    h->header_bytes = IMG_HEADER;
    memcpy(h->key, key, 32);
    h->desc = f->desc;
    h->image_bytes = f->lo.image_bytes;
    h->n_ch = FPGA_DEC_CH;
    for (int c = 0; c < FPGA_DEC_CH; c++)
        h->crc[c] = proto_crc32c(0, data + (size_t)c * f->lo.image_bytes, f->lo.image_bytes);
    snprintf(h->opts, sizeof h->opts, "%s", opts);
    h->header_crc = header_crc(h);
    if (fd >= 0) {
        int ok = msync(map, bytes, MS_SYNC) == 0 && fsync(fd) == 0 && rename(tmp, path) == 0;
        close(fd);
        if (ok) {
            f->cached = 1;
            snprintf(f->path, sizeof f->path, "%s", path);
        } else {
            unlink(tmp);
        }
    }
    f->map = map;
    f->map_bytes = bytes;
    f->data = data;
    return 0;
}

void fpga_image_release(fpga_image_file *f)
{
    if (f->map) munmap(f->map, f->map_bytes);
    f->map = NULL;
    f->data = NULL;
}
