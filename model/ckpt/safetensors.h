/* model/ckpt/safetensors.h — one memory-mapped .safetensors file, validated (internal to model/).
 *
 * Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
 * then the data region; offsets are relative to the data region. model_st_open() checks every
 * field before anything is read: header inside the file, known dtype, shape product * dtype size
 * equal to the byte range, ranges inside the data region and not overlapping. */
#ifndef TANDEM_MODEL_SAFETENSORS_H
#define TANDEM_MODEL_SAFETENSORS_H
#include "model/ckpt/model.h"

#define MODEL_ST_MAX_DIMS 4

typedef struct model_st_tensor {
    char *name;
    char dtype_name[8]; /* as written in the file */
    int supported;      /* dtype is one of F32/F16/BF16 */
    enum model_dtype dtype;
    int ndim;
    int64_t shape[MODEL_ST_MAX_DIMS];
    uint64_t begin, end; /* byte range inside the data region */
} model_st_tensor;

struct model_file {
    char path[4096];
    void *map;
    size_t size;
    const uint8_t *data; /* start of the data region */
    uint64_t data_size;
    uint64_t header_len;
    model_st_tensor *tensors;
    int n_tensors;
};

model_file *model_st_open(const char *path, char *err, size_t errlen);
void model_st_close(model_file *f);
const model_st_tensor *model_st_find(const model_file *f, const char *name);

#endif
