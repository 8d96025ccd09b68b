/* Helpers for tests that drive a device (any backend) through the accel interface. */
#ifndef TANDEM_TESTS_UTIL_H
#define TANDEM_TESTS_UTIL_H
#include "model/ckpt/model.h"
#include "scheduler/accel.h"

/* model_load + devices_open (2 threads for cpu); 0, or -1 after reporting a failure. */
int t_open(const char *model_dir, const char *device, model **m, accel_dev **d);
/* Logits of every position of ids (prefill in chunks of 256 on a fresh sequence): (n, vocab),
 * malloc'ed; NULL after reporting a failure. */
float *t_prefill_all(accel_dev *d, const int32_t *ids, int n);
/* Prefill ids then decode `steps` greedy tokens (argmax, lowest id on ties); returns them. */
int32_t *t_greedy(accel_dev *d, const int32_t *ids, int n, int steps);
double t_logsumexp(const float *x, int n);
int32_t t_argmax(const float *x, int n);
/* f rounded to bf16 (nearest even) and widened back: the inputs the GPU's bf16 kernels see. */
float t_bf16_round(float f);
/* Largest |a - b| over n values. */
double t_max_abs_diff(const float *a, const float *b, size_t n);
/* A whole file (at most 64 MiB), NUL-terminated, its length in *len (without the NUL; len may be
 * NULL); NULL if unreadable. The caller frees it. */
char *t_read_file(const char *path, size_t *len);
/* Writes a whole file; 0 or -1. */
int t_write_file(const char *path, const void *data, size_t n);
/* Runs a shell command, returns its exit status (-1 if it did not exit normally). Its stderr is
 * captured into err (first line) when err is not NULL. */
int t_run(const char *cmd, char *err, size_t errlen);
/* `$BUILD/tandem eval --model models/stories260K --golden tests/data/golden/stories260K ARGS`:
 * its JSON report (at most 4 KiB of stdout), or NULL when it fails or prints no JSON. */
struct json_t *t_eval_stories(const char *args);
/* A deep copy of an exported KV chunk (an accel_kv_sink's, valid only during its call): its K, V
 * and scales in one malloc'ed block, put in *mem for the caller to free (NULL: out of memory,
 * the copy then still points at c's data). */
proto_kv_layer t_kv_copy(const proto_kv_layer *c, void **mem);
/* A checkpoint written by tools/mkmodel with args (its options but --out: "--preset tiny-gqa
 * --shards 1") into t_tmpdir()/name, whose path goes to dir (n bytes); 0, or -1 after printing
 * the command that failed. */
int t_mkmodel(const char *args, const char *name, char *dir, size_t n);
/* t_mkmodel(args) into t_tmpdir()/m, then t_open of it on device; 0, or -1 (reported). */
int t_open_mkmodel(const char *args, const char *device, model **m, accel_dev **d);
/* The build directory the programs under test are in: $BUILD (tests/run.sh exports it: build,
 * build/san, build/tsan), else "build". */
const char *t_build_dir(void);
/* A settled FlexPrefill accel_sparse (the defaults of sparse_params_default with these members). */
accel_sparse t_flex_sparse(float gamma, float tau, int min_budget, int max_budget, int dense_below);
/* An AsyncTLS channel file for m (tandem calibrate-channels' calibration: 2 sequences of 64
 * tokens, 4 channels, which stories260K's head_dim 8 takes) written as t_tmpdir()/name; its path
 * (valid until the next call), or NULL after reporting a failure. */
const char *t_tls_channels(const model *m, const char *name);

#endif
