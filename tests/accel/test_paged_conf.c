/* The paged-device contract (scheduler/accel.h, "Paged devices": ACCEL_CAP_PAGED) on every
 * device that has it, through devices_open on stories260K: copy-on-write of a shared partial
 * block (two forks and the original each writing their next token), save/load of blocks (the
 * host tier) bit for bit, growth to ACCEL_ERR_NOMEM and recovery in a pool of three blocks,
 * holders' blocks counted as cached, sequences whose blocks interleave in the pool equal to
 * one grown alone, and the export of held KV (accel_kv_export) equal to the prefill's export. The checks are tests/accel/paged_checks.h (bit for bit: see there why). A
 * device this machine does not have is skipped; one without ACCEL_CAP_PAGED is skipped, saying
 * so (it keeps the older contract, tests/accel/test_conformance.c). */
#include "devices/devices.h"
#include "tests/accel/paged_checks.h"
#include "tests/test.h"
#include "tests/util.h"

#define STORIES "models/stories260K"

typedef struct pconf {
    model *m;
    accel_dev *d;
} pconf;

static void pconf_close(pconf *c)
{
    if (c->d) accel_free(c->d);
    if (c->m) model_free(c->m);
    memset(c, 0, sizeof *c);
}

/* 1: absent or not paged (skip, why set); 0: open; -1: failed (reported). */
static int pconf_open(pconf *c, const char *device, uint64_t mem_limit, char *why, size_t n)
{
    char err[512];
    memset(c, 0, sizeof *c);
    if (!devices_present(device, why, n)) return 1;
    if (!getenv("TANDEM_CACHE_DIR")) {
        char cache[512];
        snprintf(cache, sizeof cache, "%s/fpga-test-cache", t_build_dir());
        setenv("TANDEM_CACHE_DIR", cache, 1);
    }
    if (!(c->m = model_load(STORIES, err, sizeof err))) {
        t_fail(__FILE__, __LINE__, "model_load: %s", err);
        return -1;
    }
    accel_opts o = {.threads = 2, .mem_limit = mem_limit};
    if (!(c->d = devices_open(device, c->m, &o, err, sizeof err))) {
        t_fail(__FILE__, __LINE__, "devices_open(%s): %s", device, err);
        pconf_close(c);
        return -1;
    }
    accel_info i;
    accel_get_info(c->d, &i);
    if (!(i.caps & ACCEL_CAP_PAGED)) {
        snprintf(why, n, "%s is not paged", device);
        pconf_close(c);
        return 1;
    }
    return 0;
}

#define PCONF_OPEN(c, device, limit)                                                               \
    pconf c;                                                                                       \
    do {                                                                                           \
        char why_[512];                                                                            \
        int r_ = pconf_open(&c, device, limit, why_, sizeof why_);                                 \
        if (r_ > 0) SKIP("%s", why_);                                                              \
        REQUIRE(r_ == 0);                                                                          \
    } while (0)

static void fork_cow(const char *device)
{
    PCONF_OPEN(c, device, 0);
    pc_fork_cow(c.d, c.m->cfg.vocab);
    pconf_close(&c);
}

static void save_load(const char *device)
{
    PCONF_OPEN(c, device, 0);
    pc_save_load(c.d, c.m->cfg.vocab);
    pconf_close(&c);
}

static void interleaved(const char *device)
{
    PCONF_OPEN(c, device, 0);
    accel_info i;
    accel_get_info(c.d, &i);
    /* as many blocks as the model's context holds, at most 8 */
    int blocks = model_context_limit(&c.m->cfg) / i.kv_block_tokens;
    pc_interleaved(c.d, c.m->cfg.vocab, blocks < 8 ? blocks : 8);
    pconf_close(&c);
}

static void export_held(const char *device)
{
    PCONF_OPEN(c, device, 0);
    pc_export_held(c.d, c.m->cfg.vocab);
    pconf_close(&c);
}

/* A prefix-cache hit == the same prompt cold, bit for bit (the CPU fixes every sum's order
 * whatever the chunking; a card's dense prefill runs each row through its decode arithmetic). On
 * the GPU this differs by the order of float32 sums: tests/gpu/test_paged.c checks it there. */
static void hit_vs_cold(const char *device)
{
    PCONF_OPEN(c, device, 0);
    const int V = c.m->cfg.vocab;
    float *cold = malloc(sizeof(float) * 4 * (size_t)V), *hit = malloc(sizeof(float) * 4 * (size_t)V);
    REQUIRE(cold && hit);
    pc_hit_vs_cold_rows(c.d, V, cold, hit);
    for (int i = 0; i < 4; i++)
        CHECK_MSG(pc_same(cold + (size_t)i * V, hit + (size_t)i * V, V),
                  "row %d (0: the prompt's last, then decode steps): the hit differs from cold", i);
    free(cold), free(hit);
    pconf_close(&c);
}

static void nomem(const char *device)
{
    uint64_t bb;
    {
        PCONF_OPEN(c, device, 0);
        accel_info i;
        accel_get_info(c.d, &i);
        bb = i.kv_block_bytes;
        pconf_close(&c);
    }
    PCONF_OPEN(c, device, 3 * bb);
    pc_nomem(c.d, c.m->cfg.vocab);
    pconf_close(&c);
}

/* clang-format off */
#define CPU "cpu"
#define CARD "fpga-emu:0"
#define GPU "cuda:0"
TEST(paged_fork_cow_cpu) { fork_cow(CPU); }
TEST(paged_fork_cow_fpga_emu) { fork_cow(CARD); }
TEST(paged_fork_cow_cuda) { fork_cow(GPU); }
TEST(paged_save_load_cpu) { save_load(CPU); }
TEST(paged_save_load_fpga_emu) { save_load(CARD); }
TEST(paged_save_load_cuda) { save_load(GPU); }
TEST(paged_interleaved_cpu) { interleaved(CPU); }
TEST(paged_interleaved_fpga_emu) { interleaved(CARD); }
TEST(paged_interleaved_cuda) { interleaved(GPU); }
TEST(paged_export_held_cpu) { export_held(CPU); }
TEST(paged_export_held_fpga_emu) { export_held(CARD); }
TEST(paged_export_held_cuda) { export_held(GPU); }
TEST(paged_hit_vs_cold_cpu) { hit_vs_cold(CPU); }
TEST(paged_hit_vs_cold_fpga_emu) { hit_vs_cold(CARD); }
TEST(paged_nomem_cpu) { nomem(CPU); }
TEST(paged_nomem_fpga_emu) { nomem(CARD); }
TEST(paged_nomem_cuda) { nomem(GPU); }
/* clang-format on */
