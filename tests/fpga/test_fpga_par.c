/* The emulator's threads (fpga/emu/emu_par.c: fpga_k_parallel — the decode step's KV heads, the
 * card prefill's (row, KV head) pairs, every matrix product's 32 channel engines — on several
 * cores; an import's kv_scatter slots and kv_check layers) change no bits: the same card prefill
 * of a 100-token prompt, 40 decode steps after it, 8 batched steps of three sequences, and 4
 * steps of a sequence whose 200 positions were imported, on an emulated card with every kernel on
 * its card's worker (TANDEM_EMU_THREADS=1) and with four threads, the hand-off forced at any size
 * (TANDEM_EMU_PAR_MIN_BYTES=0), give the same logits bit for bit — and the threaded runs did hand
 * their work off (the runs' par_jobs: a step's KV heads and matrix products, layer by layer).
 * Each in a child process of its own: the pool is the loaded library's, started once.
 *
 * Two kernels at once (two cards stepping) share the pool: fpga_par_two_jobs_share_the_pool. */
#include "cpu/kv_quant.h"
#include "devices/devices.h"
#include "devices/exe_dir.h"
#include "fpga/kernels/kernel.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define STEPS  40
#define PROMPT 100
#define BSEQS  3 /* the batched steps' sequences */
#define BSTEPS 8
#define IMPORT 200 /* positions imported into a sequence of their own, then ISTEPS steps */
#define ISTEPS 4

/* In a child: a card prefill of PROMPT tokens, then STEPS greedy decode steps from token 1, then
 * BSTEPS batched steps of BSEQS new sequences, then an import of IMPORT positions into a sequence
 * of its own and ISTEPS steps from it, on fpga-emu:0 with TANDEM_EMU_THREADS `threads`; writes
 * the runs' par_jobs summed (the prefill's, the steps', the batched steps', the import's
 * kv_scatter and kv_check runs'), then the logits of the prefill and of every step, to path. */
static int decode_child(const char *threads, const char *path)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setenv("TANDEM_EMU_THREADS", threads, 1);
        setenv("TANDEM_EMU_PAR_MIN_BYTES", "0", 1);
        model *m;
        accel_dev *d;
        if (tf_open("fpga-emu:0", 8, &m, &d)) _exit(2);
        FILE *f = fopen(path, "wb");
        float *lg = malloc(sizeof(float) * (size_t)m->cfg.vocab);
        accel_seq *s;
        if (!f || !lg || accel_seq_new(d, PROMPT + STEPS + 1, &s)) _exit(3);
        /* the prefill's, the decode steps', the batched ones', the import's scatter and check */
        uint64_t jobs[5] = {0, 0, 0, 0, 0};
        fwrite(jobs, sizeof jobs, 1, f);
        int32_t ids[PROMPT];
        for (int i = 0; i < PROMPT; i++) ids[i] = (int32_t)((i * 53 + 17) % m->cfg.vocab);
        accel_prefill_req r = {.seq = s, .ids = ids, .n = PROMPT, .logits = lg};
        if (accel_prefill(d, &r)) _exit(6);
        jobs[0] = fpga_dev_card(d)->pf_par_jobs;
        fwrite(lg, sizeof(float), (size_t)m->cfg.vocab, f);
        int32_t id = 1;
        for (int t = 0; t < STEPS; t++) {
            if (accel_decode(d, 1, &s, &id, lg)) _exit(4);
            jobs[1] += fpga_dev_card(d)->last_dec.par_jobs;
            fwrite(lg, sizeof(float), (size_t)m->cfg.vocab, f);
            int best = 0;
            for (int v = 1; v < m->cfg.vocab; v++)
                if (lg[v] > lg[best]) best = v;
            id = best;
        }
        accel_seq *bs[BSEQS];
        int32_t bid[BSEQS];
        float *blg = malloc(sizeof(float) * (size_t)m->cfg.vocab * BSEQS);
        for (int i = 0; i < BSEQS; i++) {
            if (accel_seq_new(d, BSTEPS + 1, &bs[i])) _exit(7);
            bid[i] = (int32_t)(i * 101 + 3) % m->cfg.vocab;
        }
        for (int t = 0; blg && t < BSTEPS; t++) {
            if (accel_decode(d, BSEQS, bs, bid, blg)) _exit(8);
            jobs[2] += fpga_dev_card(d)->last_decb.par_jobs;
            fwrite(blg, sizeof(float), (size_t)m->cfg.vocab * BSEQS, f);
            for (int i = 0; i < BSEQS; i++) bid[i] = (int32_t)((bid[i] * 7 + t + 1) % m->cfg.vocab);
        }
        if (!blg) _exit(9);
        /* an import (kv_scatter's slots, kv_check's layers), decoded from */
        const model_config *cf = &m->cfg;
        size_t nf = (size_t)IMPORT * cf->n_kv_heads * cf->head_dim;
        size_t need = cpu_kv_layer_bytes(PROTO_KV_INT8, IMPORT, cf->n_kv_heads, cf->head_dim);
        float *k = malloc(sizeof(float) * nf), *v = malloc(sizeof(float) * nf);
        void *buf = aligned_alloc(64, (need + 63) & ~(size_t)63);
        accel_seq *is;
        if (!k || !v || !buf || accel_seq_new(d, IMPORT + ISTEPS, &is)) _exit(10);
        for (int l = 0; l < cf->n_layers; l++) {
            for (size_t i = 0; i < nf; i++) {
                k[i] = (float)((i * 2654435761u + (size_t)l * 977) % 2001) / 1000.0f - 1.0f;
                v[i] = (float)((i * 40503u + (size_t)l * 131) % 1999) / 999.0f - 1.0f;
            }
            proto_kv_layer ch;
            if (cpu_kv_quantize_layer(PROTO_KV_INT8, k, v, l, 0, IMPORT, cf->n_kv_heads,
                                      cf->head_dim, buf, need, &ch) ||
                accel_kv_import(d, is, &ch))
                _exit(11);
        }
        if (accel_seq_len(d, is) != IMPORT) _exit(13);
        jobs[3] = fpga_dev_card(d)->sc_par_jobs;
        jobs[4] = fpga_dev_card(d)->ck_par_jobs;
        id = 5;
        for (int t = 0; t < ISTEPS; t++) {
            if (accel_decode(d, 1, &is, &id, lg)) _exit(12);
            fwrite(lg, sizeof(float), (size_t)m->cfg.vocab, f);
            id = (id * 13 + 7) % m->cfg.vocab;
        }
        rewind(f);
        fwrite(jobs, sizeof jobs, 1, f);
        _exit(fclose(f) ? 5 : 0);
    }
    int ws;
    if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws)) return -1;
    return WEXITSTATUS(ws);
}

static uint8_t *slurp(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    uint8_t *b = len > 0 ? malloc((size_t)len) : NULL;
    *n = b && fread(b, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    return b;
}

TEST(fpga_par_heads_same_bits)
{
    char one[512], four[512];
    snprintf(one, sizeof one, "%s/one.bin", t_tmpdir());
    snprintf(four, sizeof four, "%s/four.bin", t_tmpdir());
    tf_cache_env();
    REQUIRE(decode_child("1", one) == 0);
    REQUIRE(decode_child("4", four) == 0);
    size_t n1, n4;
    uint8_t *a = slurp(one, &n1), *b = slurp(four, &n4);
    REQUIRE(a && b && n1 == n4 && n1 > 40);
    uint64_t j1[5], j4[5];
    memcpy(j1, a, 40);
    memcpy(j4, b, 40);
    for (int i = 0; i < 5; i++) CHECK_MSG(j1[i] == 0, "one thread handed off (%d)", i);
    CHECK_MSG(j4[0] > 0, "the prefill handed nothing off");
    /* a step: each layer's attention and four matrix products (QKV, O, gate/up, down), then the
     * LM head; stories260K has 5 layers */
    CHECK_MSG(j4[1] >= STEPS * (5 * 5 + 1), "%llu decode jobs", (unsigned long long)j4[1]);
    CHECK_MSG(j4[2] >= BSTEPS * (5 * 4 + 1), "%llu batched decode jobs", (unsigned long long)j4[2]);
    /* each layer's kv_scatter runs, and the kv_check run at the end */
    CHECK_MSG(j4[3] >= 5, "%llu scatter jobs", (unsigned long long)j4[3]);
    CHECK_MSG(j4[4] >= 1, "%llu check jobs", (unsigned long long)j4[4]);
    CHECK_MSG(!memcmp(a + 40, b + 40, n1 - 40), "the logits differ");
    free(a);
    free(b);
}

/* ---- two jobs at once: a second card's kernel is not left to its own worker ---- */

#define JA 2  /* job A's iterations: each waits until job B is done */
#define JB 48 /* job B's: short, each notes its thread */

typedef void (*par_fn)(uint32_t, fpga_k_iter_fn, void *, uint64_t);

static struct {
    par_fn par;
    atomic_int a_in, b_done, a_timeout;
    atomic_int a_runs[JA], b_runs[JB];
    pthread_t b_th[JB];
} g2;

static void iter_a(void *ctx, uint32_t i)
{
    (void)ctx;
    atomic_fetch_add(&g2.a_runs[i], 1);
    atomic_fetch_add(&g2.a_in, 1);
    for (int w = 0; w < 10000 && !atomic_load(&g2.b_done); w++) usleep(500); /* <= 5 s */
    if (!atomic_load(&g2.b_done)) atomic_store(&g2.a_timeout, 1);
}

static void iter_b(void *ctx, uint32_t i)
{
    (void)ctx;
    atomic_fetch_add(&g2.b_runs[i], 1);
    g2.b_th[i] = pthread_self();
    usleep(300);
}

static void *job_a(void *arg)
{
    (void)arg;
    g2.par(JA, iter_a, NULL, 1);
    return NULL;
}

/* In a child (four threads in all, every job handed off): job A's two iterations hold the caller
 * and one pool thread until job B, handed in while they wait, is done; exits 0 when B's
 * iterations each ran once on more than one thread (the two pool threads left: before, B's caller
 * found the pool busy and ran them all itself) and A's each ran once. */
static int two_jobs_child(void)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setenv("TANDEM_EMU_THREADS", "4", 1);
        setenv("TANDEM_EMU_PAR_MIN_BYTES", "0", 1);
        char lib[4096];
        if (devices_lib_find(DEVICES_EMU_LIB, lib, sizeof lib)) _exit(2);
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h || !(g2.par = (par_fn)(uintptr_t)dlsym(h, "fpga_k_parallel"))) _exit(3);
        pthread_t ta;
        if (pthread_create(&ta, NULL, job_a, NULL)) _exit(4);
        for (int w = 0; w < 10000 && atomic_load(&g2.a_in) < JA; w++) usleep(500);
        if (atomic_load(&g2.a_in) < JA) _exit(5);
        g2.par(JB, iter_b, NULL, 1);
        atomic_store(&g2.b_done, 1);
        pthread_join(ta, NULL);
        if (atomic_load(&g2.a_timeout)) _exit(6);
        for (int i = 0; i < JA; i++)
            if (atomic_load(&g2.a_runs[i]) != 1) _exit(7);
        int others = 0;
        for (int i = 0; i < JB; i++) {
            if (atomic_load(&g2.b_runs[i]) != 1) _exit(8);
            if (!pthread_equal(g2.b_th[i], pthread_self())) others++;
        }
        _exit(others > 0 ? 0 : 9);
    }
    int ws;
    if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws)) return -1;
    return WEXITSTATUS(ws);
}

TEST(fpga_par_two_jobs_share_the_pool)
{
    int rc = two_jobs_child();
    CHECK_MSG(rc == 0, "child exit %d (9: job B ran on its caller alone)", rc);
}

/* ---- two emulated cards stepping at once: the same bits as one after the other ---- */

#define CSTEPS 24

typedef struct card_run {
    accel_dev *d;
    int vocab, first, rc;
    float *out; /* CSTEPS x vocab */
    uint64_t jobs;
} card_run;

static void *card_steps(void *arg)
{
    card_run *r = arg;
    accel_seq *s;
    if (accel_seq_new(r->d, CSTEPS + 1, &s)) {
        r->rc = 1;
        return NULL;
    }
    int32_t id = r->first;
    for (int t = 0; t < CSTEPS && !r->rc; t++) {
        float *lg = r->out + (size_t)t * r->vocab;
        if (accel_decode(r->d, 1, &s, &id, lg)) r->rc = 2;
        r->jobs += fpga_dev_card(r->d)->last_dec.par_jobs;
        id = (id * 31 + t + 3) % r->vocab;
    }
    accel_seq_free(r->d, s);
    return NULL;
}

/* In a child: fpga-emu:0 and fpga-emu:1 decode CSTEPS steps each, on one thread after the other
 * with TANDEM_EMU_THREADS=1 (together = 0) or from two threads at once with four (together = 1);
 * writes both runs' hand-offs, then their logits, to path. */
static int cards_child(int together, const char *path)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setenv("TANDEM_EMU_THREADS", together ? "4" : "1", 1);
        setenv("TANDEM_EMU_PAR_MIN_BYTES", "0", 1);
        model *m[2];
        card_run r[2] = {{0}};
        for (int c = 0; c < 2; c++) {
            if (tf_open(c ? "fpga-emu:1" : "fpga-emu:0", 8, &m[c], &r[c].d)) _exit(2);
            r[c].vocab = m[c]->cfg.vocab;
            r[c].first = 1 + 40 * c;
            r[c].out = malloc(sizeof(float) * (size_t)r[c].vocab * CSTEPS);
            if (!r[c].out) _exit(3);
        }
        if (together) {
            pthread_t th[2];
            for (int c = 0; c < 2; c++)
                if (pthread_create(&th[c], NULL, card_steps, &r[c])) _exit(4);
            for (int c = 0; c < 2; c++) pthread_join(th[c], NULL);
        } else {
            for (int c = 0; c < 2; c++) card_steps(&r[c]);
        }
        FILE *f = fopen(path, "wb");
        if (!f || r[0].rc || r[1].rc) _exit(5);
        for (int c = 0; c < 2; c++) fwrite(&r[c].jobs, sizeof r[c].jobs, 1, f);
        for (int c = 0; c < 2; c++) fwrite(r[c].out, sizeof(float), (size_t)r[c].vocab * CSTEPS, f);
        _exit(fclose(f) ? 6 : 0);
    }
    int ws;
    if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws)) return -1;
    return WEXITSTATUS(ws);
}

TEST(fpga_par_two_cards_same_bits)
{
    char apart[512], together[512];
    snprintf(apart, sizeof apart, "%s/apart.bin", t_tmpdir());
    snprintf(together, sizeof together, "%s/together.bin", t_tmpdir());
    tf_cache_env();
    REQUIRE(cards_child(0, apart) == 0);
    REQUIRE(cards_child(1, together) == 0);
    size_t na, nt;
    uint8_t *a = slurp(apart, &na), *b = slurp(together, &nt);
    REQUIRE(a && b && na == nt && na > 16);
    uint64_t ja[2], jt[2];
    memcpy(ja, a, 16);
    memcpy(jt, b, 16);
    CHECK_MSG(ja[0] == 0 && ja[1] == 0, "one thread handed off");
    CHECK_MSG(jt[0] > 0 && jt[1] > 0, "a card handed nothing off (%llu, %llu)",
              (unsigned long long)jt[0], (unsigned long long)jt[1]);
    CHECK_MSG(!memcmp(a + 16, b + 16, na - 16), "the logits differ");
    free(a);
    free(b);
}
