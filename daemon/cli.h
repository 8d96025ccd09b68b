/* daemon/cli.h — small helpers shared by the subcommands (option parsing, id lists, opening a
 * model on a device). Everything here prints its own one-line error to stderr. */
#ifndef TANDEM_CLI_H
#define TANDEM_CLI_H
#include <stddef.h>
#include <stdint.h>
#include "model/ckpt/model.h"
#include "scheduler/accel.h"
#include "model/sample/sample.h"
#include "daemon/model_dir.h"

/* Longest id list the CLI takes (a bound before allocation; far above any context length). */
#define DMN_MAX_IDS (1 << 24)

/* If argv[*i] is --name VALUE or --name=VALUE, returns VALUE (advancing *i past it), else NULL.
 * A missing VALUE prints an error and exits the subcommand's parse with *bad set. */
const char *dmn_opt(int *i, int argc, char **argv, const char *name, int *bad);
/* argv[*i] == --name (a flag without value) */
int dmn_flag(int i, char **argv, const char *name);

/* "1,403,407" or whitespace separated; ids must be 0 <= id < 2^31. Returns 0 or -1 (message in
 * err). The caller frees *ids. */
int dmn_parse_ids(const char *s, int32_t **ids, size_t *n, char *err, size_t errlen);

/* Integer / float options with range checks: 0 or -1 (printed). */
int dmn_parse_int(const char *name, const char *s, long lo, long hi, long *out);
int dmn_parse_float(const char *name, const char *s, double lo, double hi, double *out);

/* --gpu-dtype auto|bf16|fp16 (accel_opts.gpu_half, cuda only): 0 or -1 (printed). */
int dmn_parse_gpu_dtype(const char *s, enum accel_gpu_half *out);

/* The sampling options every generating subcommand takes: --temperature, --top-p, --top-k,
 * --min-p, --seed. Returns 1 when argv[*i] was one of them (consumed into s), 0 when not, -1 on a
 * bad value (printed). */
int dmn_sampling_opt(int *i, int argc, char **argv, model_sampling *s, int *bad);

/* model_load + devices_open, printing errors. Returns 0 or -1. */
int dmn_open_model(const char *dir, const char *device, const accel_opts *opts, model **m,
                   accel_dev **d);

/* argv[i] is --help or -h. Every subcommand then prints its usage to stdout and exits 0 (a
 * usage error prints it to stderr and exits 2). */
int dmn_help(int i, char **argv);

#endif
