/* gpu/chain_trace.cu — where a single-token decode step's time goes (chain_trace=1 in
 * gpu/tuning.h, for measurements; off by default, when none of this runs).
 *
 * Each traced launch of a decode pass (fused QKV, attention, GEMVs, fused gate/up, lm_head) gets
 * a slot; its first block stamps its start and the moment its PDL wait returned (engine.cuh,
 * gpu_chain_mark), the attention also points inside its block 0. A one-thread kernel stamps the
 * pass's start and the lm_head's end. The slots are rewritten by every pass (CUDA graphs
 * included: the pointers are part of the capture); gpu_chain_report reads the last pass at
 * engine exit. An op's time on the critical path is the gap between its wait's return and the
 * next op's. gpu_chain_step adds the host's view of the step (forward.cu, gpu_decode): the
 * host's wall time, the GPU's time from the metadata upload to the graph's end, the logits'
 * device-to-host copy. */
#include "gpu/engine.cuh"
#include <stdlib.h>
#include <time.h>
#include <algorithm>
#include <vector>

/* A one-thread kernel stamping the GPU clock (the trace's step start and lm_head end). */
__global__ void k_chain_stamp(unsigned long long *p)
{
    *p = gpu_globaltimer();
}

int gpu_chain_stamp(gpu_engine *e, int which)
{
    if (!e->ctrace || e->ctrace_n < 0) return ACCEL_OK;
    k_chain_stamp<<<1, 1, 0, e->compute>>>(e->ctrace + GPU_CHAIN_STAMPS * (size_t)(GPU_CHAIN_SLOTS - 1) + which);
    GPU_LAUNCHED();
    return ACCEL_OK;
}

unsigned long long *gpu_chain_slot(gpu_engine *e)
{
    if (!e->ctrace || e->ctrace_n < 0 || e->ctrace_n >= GPU_CHAIN_SLOTS - 1) return NULL; /* the last: stamps */
    return e->ctrace + GPU_CHAIN_STAMPS * (size_t)e->ctrace_n++;
}

/* Every block of the one-kernel decode attention (e->atrace): per layer, each stamp's min /
 * median / max over the blocks stamped in this pass, relative to block 0's wait; the report
 * gives the median of those over the layers. h: the chain slots (the layer's QKV wait bounds
 * the pass: older stamps are another pass's). */
static void attention_blocks(gpu_engine *e, const unsigned long long *h)
{
    static_assert(GPU_ATRACE_STAMPS <= 8, "names below");
    if (!e->atrace) return;
    const int L = e->d.L, S = GPU_CHAIN_STAMPS, B = GPU_ATRACE_BLOCKS, A = GPU_ATRACE_STAMPS;
    std::vector<unsigned long long> a((size_t)L * B * A);
    if (cudaMemcpy(a.data(), e->atrace, a.size() * sizeof a[0], cudaMemcpyDeviceToHost) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    static const char *nm[8] = {"start", "wait returned", "range computed", "done",
                                "merge: copies issued", "merge: weights", "merge: first piece in",
                                "merged"};
    std::vector<double> stat[8][3], nblk;
    for (int l = 0; l < L; l++) {
        const unsigned long long lo = h[S * (5 * l) + 1], w0 = h[S * (5 * l + 1) + 1];
        std::vector<double> v[8];
        for (int b = 0; b < B; b++) {
            const unsigned long long *r = &a[((size_t)l * B + b) * A];
            if (r[0] < lo || r[3] < r[0]) continue;
            for (int i = 0; i < A; i++)
                if (r[i] >= lo && r[i] >= r[0]) v[i].push_back(((double)r[i] - (double)w0) / 1e3);
        }
        if (v[0].empty()) continue;
        nblk.push_back((double)v[0].size());
        for (int i = 0; i < A; i++) {
            if (v[i].empty()) continue;
            std::sort(v[i].begin(), v[i].end());
            stat[i][0].push_back(v[i][0]);
            stat[i][1].push_back(v[i][v[i].size() / 2]);
            stat[i][2].push_back(v[i].back());
        }
    }
    if (nblk.empty()) return;
    std::sort(nblk.begin(), nblk.end());
    fprintf(stderr, "tandem cuda chain trace: attention, all %.0f blocks, us from block 0's wait (min / median / max over the blocks that stamp it, median over layers):",
            nblk[nblk.size() / 2]);
    for (int i = 0; i < A; i++) {
        if (stat[i][0].empty()) continue;
        double m[3];
        for (int k = 0; k < 3; k++) {
            std::sort(stat[i][k].begin(), stat[i][k].end());
            m[k] = stat[i][k][stat[i][k].size() / 2];
        }
        fprintf(stderr, " %s %.2f / %.2f / %.2f;", nm[i], m[0], m[1], m[2]);
    }
    fprintf(stderr, "\n");
}

void gpu_chain_report(gpu_engine *e)
{
    if (!e->ctrace || e->ctrace_passes == 0) return;
    const int L = e->d.L, n = 5 * L + 1;
    if (n > GPU_CHAIN_SLOTS) return;
    unsigned long long *h = (unsigned long long *)malloc(GPU_CHAIN_STAMPS * sizeof *h * n);
    if (!h || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(h, e->ctrace, GPU_CHAIN_STAMPS * sizeof *h * n, cudaMemcpyDeviceToHost) != cudaSuccess) {
        cudaGetLastError();
        free(h);
        return;
    }
    const int S = GPU_CHAIN_STAMPS;
    /* the fused chain only (5 traced kernels per layer and the lm_head): with other paths
     * (fused=0, gemv=0, the lab's step kernel) the slots do not line up */
    for (int k = 0; k < n; k++)
        if (!h[S * k + 1] || (k && h[S * k + 1] < h[S * (k - 1) + 1])) {
            fprintf(stderr, "tandem cuda chain trace: slots missing or out of order (not the fused chain?)\n");
            free(h);
            return;
        }
    static const char *ops[5] = {"qkv+norm", "attention", "o", "gate/up+norm", "down"};
    std::vector<double> dur[5], lead[5];
    for (int l = 0; l < L; l++)
        for (int o = 0; o < 5; o++) {
            const int k = 5 * l + o;
            dur[o].push_back((double)(h[S * (k + 1) + 1] - h[S * k + 1]) / 1e3);
            lead[o].push_back((double)(h[S * k + 1] - h[S * k]) / 1e3);
        }
    double total = (double)(h[S * (n - 1) + 1] - h[1]) / 1e3;
    unsigned long long stamp[2] = {0, 0};
    if (cudaMemcpy(stamp, e->ctrace + GPU_CHAIN_STAMPS * (size_t)(GPU_CHAIN_SLOTS - 1), sizeof stamp,
                   cudaMemcpyDeviceToHost) == cudaSuccess && stamp[0] && stamp[1])
        fprintf(stderr, "tandem cuda chain trace: step start to first QKV wait %.1f us, lm_head wait to "
                "lm_head done %.1f us\n", (double)(h[1] - stamp[0]) / 1e3,
                (double)(stamp[1] - h[S * (n - 1) + 1]) / 1e3);
    fprintf(stderr, "tandem cuda chain trace (last decode pass, %d layers): first QKV wait to lm_head wait %.1f us;", L, total);
    for (int o = 0; o < 5; o++) {
        std::sort(dur[o].begin(), dur[o].end());
        std::sort(lead[o].begin(), lead[o].end());
        double sum = 0;
        for (double v : dur[o]) sum += v;
        fprintf(stderr, " %s median %.2f us (min %.2f, max %.2f, total %.1f; started %.2f us before its wait returned);",
                ops[o], dur[o][L / 2], dur[o][0], dur[o][L - 1], sum, lead[o][L / 2]);
    }
    fprintf(stderr, "\n");
    /* the attention's first block inside (stamps 2..6 where its kernel sets them) */
    static const char *in[5] = {"ranges computed", "block merged + cluster running", "pushed", "rows merged", "-"};
    fprintf(stderr, "tandem cuda chain trace: attention block 0 after its wait (median over layers):");
    for (int i = 2; i < S - 1; i++) {
        std::vector<double> v;
        for (int l = 0; l < L; l++) {
            const unsigned long long *a = h + S * (5 * l + 1);
            if (a[i] > a[1]) v.push_back((double)(a[i] - a[1]) / 1e3);
        }
        if (v.empty()) continue;
        std::sort(v.begin(), v.end());
        fprintf(stderr, " %s %.2f us;", in[i - 2], v[v.size() / 2]);
    }
    fprintf(stderr, "\n");
    attention_blocks(e, h);
    free(h);
    const int ns = e->tsteps < 64 ? e->tsteps : 64;
    if (ns > 0) {
        static const char *ph[4] = {"host step", "H2D + graph (GPU)", "logits D2H (GPU)",
                                    "host enqueue"};
        fprintf(stderr, "tandem cuda decode step (median of the last %d single-token steps):", ns);
        for (int k = 0; k < 4; k++) {
            std::vector<double> v(e->tstep[k], e->tstep[k] + ns);
            std::sort(v.begin(), v.end());
            fprintf(stderr, " %s %.1f us;", ph[k], v[ns / 2]);
        }
        fprintf(stderr, "\n");
    }
}

void gpu_chain_step(gpu_engine *e, const struct timespec *h0, const struct timespec *h1)
{
    struct timespec h2;
    clock_gettime(CLOCK_MONOTONIC, &h2);
    float a = 0, b = 0;
    cudaEventElapsedTime(&a, e->tev[0], e->tev[1]);
    cudaEventElapsedTime(&b, e->tev[1], e->tev[2]);
    cudaGetLastError();
    const int k = e->tsteps++ % 64;
    e->tstep[0][k] = (h2.tv_sec - h0->tv_sec) * 1e6 + (h2.tv_nsec - h0->tv_nsec) / 1e3;
    e->tstep[1][k] = a * 1e3;
    e->tstep[2][k] = b * 1e3;
    e->tstep[3][k] = (h1->tv_sec - h0->tv_sec) * 1e6 + (h1->tv_nsec - h0->tv_nsec) / 1e3;
}
