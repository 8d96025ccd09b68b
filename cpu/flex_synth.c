/* cpu/flex_synth.c — synthetic attention inputs (the feature layout is in flex_synth.h). */
#include "cpu/flex_synth.h"
#include "cpu/flex.h"
#include <math.h>
#include <string.h>

/* Logit lifts (after the 1/sqrt(d) scale) of the favoured keys over the background: large
 * enough that the pattern holds most of the attention mass at 128K keys (e^8 ~ 3000), small
 * enough that fp32 softmaxes keep the background non-zero. */
#define LIFT_LOCAL    14.0
#define LIFT_SINK     12.0
#define LIFT_VERTICAL 8.0
#define LIFT_SLASH    14.0
#define LIFT_TOPIC    8.0
#define LIFT_WEAK     4.0
#define N_SINK        4   /* StreamingLLM keeps 4 initial tokens */
#define VERTICAL_RATE 256 /* one key in 256 is a vertical column */

enum { TAG_QN = 1, TAG_KN, TAG_VN, TAG_VERT, TAG_KTOPIC, TAG_QTOPIC, TAG_OFFSET };

static uint64_t mix(uint64_t x)
{
    /* splitmix64's finalizer */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t hash4(uint64_t seed, uint64_t tag, uint64_t a, uint64_t b)
{
    return mix(mix(mix(seed ^ tag << 56) ^ a) ^ b);
}

/* A standard normal from one 64-bit hash (Box-Muller on its two 32-bit halves). */
static float gauss(uint64_t h)
{
    double u1 = ((double)(h >> 32) + 1.0) / 4294967297.0;
    double u2 = (double)(h & 0xffffffffu) / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

const char *cpu_flex_synth_kind_name(enum cpu_flex_synth_kind k)
{
    static const char *names[] = {"random",       "sink_local", "vertical_slash",
                                  "query_blocks", "mixed",      "structured"};
    return (unsigned)k < 6 ? names[k] : "?";
}

int cpu_flex_synth_kind_parse(const char *name)
{
    for (int k = 0; k < 6; k++)
        if (!strcmp(name, cpu_flex_synth_kind_name((enum cpu_flex_synth_kind)k))) return k;
    return -1;
}

enum cpu_flex_synth_kind cpu_flex_synth_head_kind(const cpu_flex_synth *s, int h)
{
    if (s->kind == CPU_FLEX_SYNTH_MIXED) return (enum cpu_flex_synth_kind)(h % 4);
    if (s->kind == CPU_FLEX_SYNTH_STRUCTURED) return (enum cpu_flex_synth_kind)(1 + h % 3);
    return s->kind;
}

typedef struct layout {
    int d, T, F;
    int sink, vert, topic, rot; /* first dims of each feature */
    double rs;                  /* sqrt(d) */
} layout;

static layout layout_of(int d)
{
    layout L = {.d = d};
    L.T = d / 8 < 8 ? d / 8 : 8;
    L.sink = 0;
    L.vert = 1;
    L.topic = 2;
    L.rot = 2 + L.T;
    L.F = (d - L.rot) / 2;
    L.rs = sqrt((double)d);
    return L;
}

/* Frequencies from 1 down to 1/64 rad per token, geometric: the aligned sum falls off within a
 * few tens of tokens (a window of that width, or a slash line that thin), and the F terms of a
 * misaligned key add up to noise of about lift / sqrt(2F) logits. */
static double omega(int f, int F)
{
    return F > 1 ? pow(2.0, -6.0 * f / (F - 1)) : 1.0;
}

static void key_row(const cpu_flex_synth *s, const layout *L, int j, int g, float *k)
{
    for (int e = 0; e < L->d; e++)
        k[e] = 0.05f * gauss(hash4(s->seed, TAG_KN, (uint64_t)j, (uint64_t)g * 4096 + e));
    for (int f = 0; f < L->F; f++) {
        const double w = omega(f, L->F) * j;
        k[L->rot + 2 * f] += (float)cos(w);
        k[L->rot + 2 * f + 1] += (float)sin(w);
    }
    if (j < N_SINK) k[L->sink] += 1.0f;
    if (hash4(s->seed, TAG_VERT, (uint64_t)j, (uint64_t)g) % VERTICAL_RATE == 0) k[L->vert] += 1.0f;
    int topic = (int)(hash4(s->seed, TAG_KTOPIC, (uint64_t)(j / s->block_size), (uint64_t)g) %
                      (uint64_t)L->T);
    k[L->topic + topic] += 1.0f;
}

static void query_row(const cpu_flex_synth *s, const layout *L, int i, int h, float *q)
{
    enum cpu_flex_synth_kind kind = cpu_flex_synth_head_kind(s, h);
    const double rs = L->rs;
    for (int e = 0; e < L->d; e++) {
        float z = gauss(hash4(s->seed, TAG_QN, (uint64_t)i, (uint64_t)h * 4096 + e));
        q[e] = kind == CPU_FLEX_SYNTH_RANDOM ? 4.0f * z : 0.1f * z;
    }
    double rot = 0; /* rotary lift and offset */
    int off = 0;
    switch (kind) {
    case CPU_FLEX_SYNTH_RANDOM: return;
    case CPU_FLEX_SYNTH_SINK_LOCAL:
        q[L->sink] += (float)(LIFT_SINK * rs);
        rot = LIFT_LOCAL;
        break;
    case CPU_FLEX_SYNTH_VERTICAL_SLASH:
        q[L->sink] += (float)(LIFT_SINK * rs);
        q[L->vert] += (float)(LIFT_VERTICAL * rs);
        rot = LIFT_SLASH;
        /* a head-specific diagonal within the first half of the prompt */
        off = (int)(hash4(s->seed, TAG_OFFSET, (uint64_t)h, 0) % (uint64_t)(s->n_tokens / 2 + 1));
        break;
    case CPU_FLEX_SYNTH_QUERY_BLOCKS: {
        q[L->sink] += (float)(LIFT_WEAK * rs);
        int topic = (int)(hash4(s->seed, TAG_QTOPIC, (uint64_t)(i / s->block_size), (uint64_t)h) %
                          (uint64_t)L->T);
        q[L->topic + topic] += (float)(LIFT_TOPIC * rs);
        break;
    }
    default: break;
    }
    if (rot > 0) {
        const double a = rot * rs / L->F; /* F aligned terms sum to the lift */
        for (int f = 0; f < L->F; f++) {
            const double w = omega(f, L->F) * (i - off);
            q[L->rot + 2 * f] += (float)(a * cos(w));
            q[L->rot + 2 * f + 1] += (float)(a * sin(w));
        }
    }
}

int cpu_flex_synth_rows(const cpu_flex_synth *s, int t0, int t1, float *q, float *k, float *v)
{
    if (!s || s->head_dim < 16 || s->head_dim > CPU_FLEX_MAX_HEAD_DIM || s->n_heads < 1 ||
        s->n_kv_heads < 1 || s->n_heads % s->n_kv_heads || s->n_heads > CPU_FLEX_MAX_HEADS ||
        s->n_tokens < 1 || s->n_tokens > CPU_FLEX_MAX_TOKENS || s->block_size < 1 || t0 < 0 ||
        t1 > s->n_tokens || t0 > t1 || (unsigned)s->kind > CPU_FLEX_SYNTH_STRUCTURED)
        return -1;
    const layout L = layout_of(s->head_dim);
    const int d = s->head_dim, H = s->n_heads, Hk = s->n_kv_heads;
    for (int t = t0; t < t1; t++) {
        size_t r = (size_t)(t - t0);
        for (int h = 0; q && h < H; h++) query_row(s, &L, t, h, q + (r * H + h) * d);
        for (int g = 0; k && g < Hk; g++) key_row(s, &L, t, g, k + (r * Hk + g) * d);
        for (int g = 0; v && g < Hk; g++)
            for (int e = 0; e < d; e++)
                v[(r * Hk + g) * d + e] =
                    gauss(hash4(s->seed, TAG_VN, (uint64_t)t, (uint64_t)g * 4096 + e));
    }
    return 0;
}
