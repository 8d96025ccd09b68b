/* model/ckpt/safetensors.c — see safetensors.h. */
#include "model/ckpt/safetensors.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header larger than this is not a checkpoint header (the safetensors library caps it at 100 MB). */
#define MAX_HEADER (100u << 20)
#define MAX_TENSORS 1000000

static const struct {
    const char *name;
    int size;
    int supported;
    enum model_dtype t;
} dtypes[] = {
    {"F32", 4, 1, MODEL_DTYPE_F32},  {"F16", 2, 1, MODEL_DTYPE_F16},
    {"BF16", 2, 1, MODEL_DTYPE_BF16}, {"F64", 8, 0, 0},
    {"I64", 8, 0, 0},                 {"U64", 8, 0, 0},
    {"I32", 4, 0, 0},                 {"U32", 4, 0, 0},
    {"I16", 2, 0, 0},                 {"U16", 2, 0, 0},
    {"I8", 1, 0, 0},                  {"U8", 1, 0, 0},
    {"BOOL", 1, 0, 0},                {"F8_E4M3", 1, 0, 0},
    {"F8_E5M2", 1, 0, 0},
};

static int cmp_begin(const void *a, const void *b)
{
    const model_st_tensor *x = *(model_st_tensor *const *)a, *y = *(model_st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

static int parse_tensor(model_file *f, const char *name, json_t *v, model_st_tensor *t, char *err,
                        size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (!json_is_object(v)) {
        snprintf(err, errlen, "%s: tensor %s: header entry is not an object", f->path, name);
        return -1;
    }
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2) {
        snprintf(err, errlen, "%s: tensor %s: needs dtype, shape and data_offsets[2]", f->path, name);
        return -1;
    }
    int esize = 0;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(json_string_value(dt), dtypes[i].name)) {
            esize = dtypes[i].size;
            t->supported = dtypes[i].supported;
            t->dtype = dtypes[i].t;
            snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dtypes[i].name);
        }
    if (!esize) {
        snprintf(err, errlen, "%s: tensor %s: unknown dtype \"%.16s\"", f->path, name,
                 json_string_value(dt));
        return -1;
    }
    if (json_array_size(sh) > MODEL_ST_MAX_DIMS) {
        snprintf(err, errlen, "%s: tensor %s: %zu dimensions (at most %d)", f->path, name,
                 json_array_size(sh), MODEL_ST_MAX_DIMS);
        return -1;
    }
    t->ndim = (int)json_array_size(sh);
    /* elements * esize must fit: each dim < 2^40 and the running product checked */
    uint64_t elems = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *e = json_array_get(sh, d);
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) > ((json_int_t)1 << 40)) {
            snprintf(err, errlen, "%s: tensor %s: bad shape", f->path, name);
            return -1;
        }
        t->shape[d] = json_integer_value(e);
        if (t->shape[d] && elems > (UINT64_MAX / 8) / (uint64_t)t->shape[d]) {
            snprintf(err, errlen, "%s: tensor %s: shape too large", f->path, name);
            return -1;
        }
        elems *= (uint64_t)t->shape[d];
    }
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b)) {
        snprintf(err, errlen, "%s: tensor %s: bad data_offsets", f->path, name);
        return -1;
    }
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(e);
    if (t->end > f->data_size) {
        snprintf(err, errlen, "%s: tensor %s: data_offsets [%llu, %llu) past the end of the file "
                 "(data region is %llu bytes; truncated file?)", f->path, name,
                 (unsigned long long)t->begin, (unsigned long long)t->end,
                 (unsigned long long)f->data_size);
        return -1;
    }
    if (t->end - t->begin != elems * (uint64_t)esize) {
        snprintf(err, errlen, "%s: tensor %s: %llu bytes for shape of %llu %s elements", f->path,
                 name, (unsigned long long)(t->end - t->begin), (unsigned long long)elems,
                 t->dtype_name);
        return -1;
    }
    t->name = strdup(name);
    return t->name ? 0 : -1;
}

model_file *model_st_open(const char *path, char *err, size_t errlen)
{
    model_file *f = calloc(1, sizeof *f);
    json_t *root = NULL;
    model_st_tensor **order = NULL;
    if (!f) goto oom;
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        goto fail;
    }
    f->size = (size_t)st.st_size;
    if (f->size < 8) {
        snprintf(err, errlen, "%s: truncated file (%zu bytes, no header)", path, f->size);
        close(fd);
        goto fail;
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno));
        goto fail;
    }
    const uint8_t *p = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | p[i];
    if (n > MAX_HEADER || n > f->size - 8) {
        snprintf(err, errlen, "%s: header length %llu exceeds the file (%zu bytes; truncated?)", path,
                 (unsigned long long)n, f->size);
        goto fail;
    }
    f->header_len = n;
    f->data = p + 8 + n;
    f->data_size = f->size - 8 - n;
    json_error_t je;
    root = json_loadb((const char *)p + 8, n, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        snprintf(err, errlen, "%s: header is not a JSON object (%s)", path, root ? "" : je.text);
        goto fail;
    }
    size_t cnt = json_object_size(root);
    if (cnt > MAX_TENSORS) {
        snprintf(err, errlen, "%s: %zu tensors (at most %d)", path, cnt, MAX_TENSORS);
        goto fail;
    }
    f->tensors = calloc(cnt ? cnt : 1, sizeof *f->tensors);
    if (!f->tensors) goto oom;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (!strcmp(key, "__metadata__")) continue;
        if (parse_tensor(f, key, v, &f->tensors[f->n_tensors], err, errlen)) goto fail;
        f->n_tensors++;
    }
    /* no two tensors may share bytes */
    order = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *order);
    if (!order) goto oom;
    for (int i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof *order, cmp_begin);
    /* against the furthest end so far, not the neighbour's: an empty tensor between two that
     * overlap ([0,100), [10,10), [20,30)) hid the overlap */
    for (int i = 1, far = 0; i < f->n_tensors; i++) {
        if (order[i]->begin < order[far]->end && order[i]->end > order[i]->begin) {
            snprintf(err, errlen, "%s: tensor %s overlaps tensor %s", path, order[i]->name,
                     order[far]->name);
            goto fail;
        }
        if (order[i]->end > order[far]->end) far = i;
    }
    free(order);
    json_decref(root);
    return f;
oom:
    snprintf(err, errlen, "%s: out of memory", path);
fail:
    free(order);
    json_decref(root);
    model_st_close(f);
    return NULL;
}

void model_st_close(model_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->map) munmap(f->map, f->size);
    free(f);
}

const model_st_tensor *model_st_find(const model_file *f, const char *name)
{
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}
