/* fpga/emu/emu_run.c — kernels, runs and the card's worker thread (its one compute unit).
 *
 * A run holds a reference on its kernel, on each BO set as an argument, and (while queued or
 * executing) the worker holds one on the run; xrtRunStart snapshots the arguments (with their
 * own BO references) so that setting arguments for the next start cannot disturb the one in
 * flight. See the design note in emu.c. */
#include "fpga/emu/emu.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- kernels */

void emu_kernel_unref_locked(emu_kernel *k)
{
    if (--k->refs > 0) return;
    k->magic = 0;
    free(k);
}

static const emu_xkernel *find_kernel(const emu_xclbin *x, const char *name)
{
    /* "name" or "name:{cu_1,...}" as XRT accepts; we have one CU per kernel. */
    size_t len = strcspn(name, ":");
    for (int i = 0; i < x->n_kernels; i++)
        if (strlen(x->kernels[i].name) == len && !strncmp(x->kernels[i].name, name, len))
            return &x->kernels[i];
    return NULL;
}

static xrtKernelHandle kernel_open(xrtDeviceHandle dh, const xuid_t uuid, const char *name)
{
    emu_dev *d = emu_handle_get(dh, EMU_DEV);
    if (!d) return emu_fail_null(EINVAL, "not a device handle");
    emu_card *c = d->card;
    if (!uuid || !name) return emu_fail_null(EINVAL, "no xclbin uuid or kernel name");
    emu_kernel *k = calloc(1, sizeof *k);
    if (!k) return emu_fail_null(ENOMEM, "out of host memory");
    pthread_mutex_lock(&c->mu);
    int err = 0;
    if (c->gone) err = ENODEV;
    else if (memcmp(uuid, c->xclbin.uuid, sizeof(xuid_t)) != 0) err = EINVAL;
    const emu_xkernel *xk = err ? NULL : find_kernel(&c->xclbin, name);
    if (!err && !xk) err = ENOENT;
    if (!err) {
        k->magic = EMU_KERNEL;
        k->card = c;
        k->refs = 1;
        k->x = *xk;
        c->users++;
        c->kernels_open++;
    }
    pthread_mutex_unlock(&c->mu);
    if (err) {
        free(k);
        if (err == ENODEV) return emu_fail_null(err, "card %d has disappeared", c->index);
        if (err == EINVAL) return emu_fail_null(err, "that xclbin UUID is not loaded on card %d",
                                                c->index);
        return emu_fail_null(err, "no kernel '%s' in the loaded xclbin", name);
    }
    if (emu_handle_add(k) != 0) {
        int e = errno;
        pthread_mutex_lock(&c->mu);
        c->kernels_open--;
        emu_kernel_unref_locked(k);
        pthread_mutex_unlock(&c->mu);
        emu_card_release(c);
        errno = e;
        return NULL;
    }
    return k;
}

xrtKernelHandle xrtPLKernelOpen(xrtDeviceHandle d, const xuid_t uuid, const char *name)
{
    return kernel_open(d, uuid, name);
}

xrtKernelHandle xrtPLKernelOpenExclusive(xrtDeviceHandle d, const xuid_t uuid, const char *name)
{
    /* One process owns the emulated card anyway. */
    return kernel_open(d, uuid, name);
}

int xrtKernelClose(xrtKernelHandle h)
{
    emu_kernel *k = emu_handle_get(h, EMU_KERNEL);
    if (!k) return emu_fail(EINVAL, "not a kernel handle");
    emu_handle_del(k);
    emu_card *c = k->card;
    pthread_mutex_lock(&c->mu);
    c->kernels_open--;
    emu_kernel_unref_locked(k);
    pthread_mutex_unlock(&c->mu);
    emu_card_release(c);
    return 0;
}

int xrtKernelArgGroupId(xrtKernelHandle h, int argno)
{
    emu_kernel *k = emu_handle_get(h, EMU_KERNEL);
    if (!k) return emu_fail(EINVAL, "not a kernel handle");
    if (k->card->gone) return emu_fail(ENODEV, "card %d has disappeared", k->card->index);
    if (argno < 0 || argno >= k->x.n_args)
        return emu_fail(EINVAL, "kernel %s has no argument %d", k->x.name, argno);
    if (k->x.args[argno].kind != FPGA_K_ARG_GLOBAL)
        return emu_fail(EINVAL, "argument %d (%s) of %s is a scalar", argno,
                        k->x.args[argno].name, k->x.name);
    return k->x.args[argno].group;
}

/* ---------------------------------------------------------------- runs */

static void release_exec(emu_run *r)
{
    for (int i = 0; i < FPGA_K_MAX_ARGS; i++)
        if (r->exec_bo[i]) {
            emu_bo_unref_locked(r->exec_bo[i]);
            r->exec_bo[i] = NULL;
        }
}

void emu_run_unref_locked(emu_run *r)
{
    if (--r->refs > 0) return;
    release_exec(r);
    for (int i = 0; i < FPGA_K_MAX_ARGS; i++)
        if (r->bo[i]) emu_bo_unref_locked(r->bo[i]);
    emu_kernel_unref_locked(r->kernel);
    r->magic = 0;
    free(r);
}

xrtRunHandle xrtRunOpen(xrtKernelHandle h)
{
    emu_kernel *k = emu_handle_get(h, EMU_KERNEL);
    if (!k) return emu_fail_null(EINVAL, "not a kernel handle");
    emu_card *c = k->card;
    if (c->gone) return emu_fail_null(ENODEV, "card %d has disappeared", c->index);
    emu_run *r = calloc(1, sizeof *r);
    if (!r) return emu_fail_null(ENOMEM, "out of host memory");
    r->magic = EMU_RUN;
    r->state = ERT_CMD_STATE_NEW;
    r->refs = 1;
    r->kernel = k;
    pthread_mutex_lock(&c->mu);
    k->refs++;
    c->users++;
    pthread_mutex_unlock(&c->mu);
    if (emu_handle_add(r) != 0) {
        int e = errno;
        pthread_mutex_lock(&c->mu);
        emu_run_unref_locked(r);
        pthread_mutex_unlock(&c->mu);
        emu_card_release(c);
        errno = e;
        return NULL;
    }
    return r;
}

static emu_run *run_get(xrtRunHandle h)
{
    emu_run *r = emu_handle_get(h, EMU_RUN);
    if (!r) return emu_fail_null(EINVAL, "not a run handle");
    return r;
}

int xrtRunSetArg(xrtRunHandle h, int index, ...)
{
    emu_run *r = run_get(h);
    if (!r) return -1;
    emu_kernel *k = r->kernel;
    emu_card *c = k->card;
    if (c->gone) return emu_fail(ENODEV, "card %d has disappeared", c->index);
    if (index < 0 || index >= k->x.n_args)
        return emu_fail(EINVAL, "kernel %s has no argument %d", k->x.name, index);
    const emu_xarg *xa = &k->x.args[index];
    va_list ap;
    va_start(ap, index);
    fpga_k_arg v = {0};
    emu_bo *b = NULL;
    /* Read the value at the width the kernel declares, as XRT does (see xrt_api.h). */
    switch (xa->kind) {
    case FPGA_K_ARG_GLOBAL: b = emu_handle_get(va_arg(ap, xrtBufferHandle), EMU_BO); break;
    case FPGA_K_ARG_U32: v.u = va_arg(ap, uint32_t); break;
    case FPGA_K_ARG_I32: v.u = (uint32_t)va_arg(ap, int32_t); break;
    case FPGA_K_ARG_U64: v.u = va_arg(ap, uint64_t); break;
    case FPGA_K_ARG_F32: v.f = (float)va_arg(ap, double); break;
    }
    va_end(ap);
    if (xa->kind == FPGA_K_ARG_GLOBAL) {
        if (!b) return emu_fail(EINVAL, "argument %d (%s) of %s needs a BO handle", index,
                                xa->name, k->x.name);
        if (b->card != c)
            return emu_fail(EINVAL, "argument %d (%s): the BO is on card %d, the kernel on %d",
                            index, xa->name, b->card->index, c->index);
        /* Connectivity: the whole BO must lie in the banks this port reaches. */
        const emu_group *g = &c->xclbin.groups[xa->group];
        uint64_t lo = fpga_u280_chan_lo(g->lo);
        uint64_t hi = fpga_u280_chan_lo(g->hi + 1);
        if (b->addr < lo || b->addr + b->size > hi) {
            int ch = fpga_u280_chan_of(b->addr);
            char banks[24], at[24];
            const int H = FPGA_U280_HBM_BANKS;
            if (g->lo >= H)
                snprintf(banks, sizeof banks, g->lo - H == FPGA_U280_EXT_HOST ? "HOST[0]" : "DDR[%d]",
                         g->lo - H);
            else if (g->lo == g->hi) snprintf(banks, sizeof banks, "HBM[%d]", g->lo);
            else snprintf(banks, sizeof banks, "HBM[%d:%d]", g->lo, g->hi);
            if (ch >= H)
                snprintf(at, sizeof at, ch - H == FPGA_U280_EXT_HOST ? "HOST[0]" : "DDR[%d]", ch - H);
            else snprintf(at, sizeof at, "HBM[%d]", ch);
            return emu_fail(EINVAL, "argument %d (%s) of %s is connected to %s; the BO is in "
                                    "%s (wrong bank)", index, xa->name, k->x.name, banks, at);
        }
    }
    pthread_mutex_lock(&c->mu);
    if (b) {
        b->refs++;
        if (r->bo[index]) emu_bo_unref_locked(r->bo[index]);
        r->bo[index] = b;
    } else {
        r->val[index] = v;
    }
    r->set_mask[index / 64] |= 1ULL << (index % 64);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static const emu_fault *fault_for(const emu_card *c, uint64_t seq)
{
    for (int i = 0; i < c->n_faults; i++)
        if (c->faults[i].run == seq) return &c->faults[i];
    return NULL;
}

int xrtRunStart(xrtRunHandle h)
{
    emu_run *r = run_get(h);
    if (!r) return -1;
    emu_kernel *k = r->kernel;
    emu_card *c = k->card;
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    if (c->gone) {
        rc = emu_fail(ENODEV, "card %d has disappeared", c->index);
    } else if (r->state == ERT_CMD_STATE_QUEUED || r->state == ERT_CMD_STATE_RUNNING) {
        rc = emu_fail(EBUSY, "the run is already in flight");
    } else {
        for (int i = 0; i < k->x.n_args && rc == 0; i++)
            if (!(r->set_mask[i / 64] & (1ULL << (i % 64))))
                rc = emu_fail(EINVAL, "argument %d (%s) of %s is not set", i, k->x.args[i].name,
                              k->x.name);
    }
    if (rc != 0) {
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    release_exec(r);
    r->exec.n = k->x.n_args;
    for (int i = 0; i < k->x.n_args; i++) {
        if (k->x.args[i].kind == FPGA_K_ARG_GLOBAL) {
            emu_bo *b = r->bo[i];
            b->refs++;
            r->exec_bo[i] = b;
            r->exec.a[i] = (fpga_k_arg){.ptr = c->hbm + b->addr, .size = b->size,
                                        .addr = b->addr};
        } else {
            r->exec.a[i] = r->val[i];
        }
    }
    r->seq = ++c->st.runs_started;
    const emu_fault *f = fault_for(c, r->seq);
    r->fault = f ? (int)f->kind : EMU_FAULT_NONE;
    r->late_go = 0;
    r->have_stats = 0;
    r->refs++; /* the worker's */
    r->state = ERT_CMD_STATE_QUEUED;
    r->next = NULL;
    if (c->tail) c->tail->next = r;
    else c->head = r;
    c->tail = r;
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static int in_flight(enum ert_cmd_state s)
{
    return s == ERT_CMD_STATE_QUEUED || s == ERT_CMD_STATE_RUNNING;
}

enum ert_cmd_state xrtRunWaitFor(xrtRunHandle h, unsigned int timeout_ms)
{
    emu_run *r = run_get(h);
    if (!r) return ERT_CMD_STATE_ABORT;
    emu_card *c = r->kernel->card;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    /* a late run executes now, and this wait reports a timeout all the same */
    int late = r->fault == EMU_FAULT_LATE && !r->late_go && timeout_ms && in_flight(r->state);
    if (late) {
        r->late_go = 1;
        pthread_cond_broadcast(&c->work);
    }
    while (in_flight(r->state)) {
        if (timeout_ms == 0) {
            pthread_cond_wait(&c->done, &c->mu);
        } else if (pthread_cond_timedwait(&c->done, &c->mu, &until) == ETIMEDOUT &&
                   in_flight(r->state)) {
            pthread_mutex_unlock(&c->mu);
            return ERT_CMD_STATE_TIMEOUT;
        }
    }
    if (late) {
        pthread_mutex_unlock(&c->mu);
        return ERT_CMD_STATE_TIMEOUT;
    }
    enum ert_cmd_state s = r->state;
    int gone = c->gone;
    pthread_mutex_unlock(&c->mu);
    if (s == ERT_CMD_STATE_ABORT && gone) emu_fail(ENODEV, "card %d has disappeared", c->index);
    return s;
}

enum ert_cmd_state xrtRunWait(xrtRunHandle h)
{
    return xrtRunWaitFor(h, 0);
}

enum ert_cmd_state xrtRunState(xrtRunHandle h)
{
    emu_run *r = run_get(h);
    if (!r) return ERT_CMD_STATE_ABORT;
    pthread_mutex_lock(&r->kernel->card->mu);
    enum ert_cmd_state s = r->state;
    pthread_mutex_unlock(&r->kernel->card->mu);
    return s;
}

int xrtRunClose(xrtRunHandle h)
{
    emu_run *r = run_get(h);
    if (!r) return -1;
    emu_handle_del(r);
    emu_card *c = r->kernel->card;
    pthread_mutex_lock(&c->mu);
    emu_run_unref_locked(r); /* a queued / executing run lives on in the worker's hands */
    pthread_mutex_unlock(&c->mu);
    emu_card_release(c);
    return 0;
}

int fpga_emu_run_stats_get(xrtRunHandle h, fpga_emu_run_stats *out)
{
    emu_run *r = run_get(h);
    if (!r) return -1;
    if (!out) return emu_fail(EINVAL, "no output");
    emu_card *c = r->kernel->card;
    pthread_mutex_lock(&c->mu);
    int have = r->have_stats;
    if (have) *out = r->stats;
    pthread_mutex_unlock(&c->mu);
    if (!have) return emu_fail(EAGAIN, "the run has not completed an execution");
    return 0;
}

/* ---------------------------------------------------------------- the worker */

/* Ends a run that will not execute (card stopping or gone); card->mu held. */
static void abort_run_locked(emu_card *c, emu_run *r)
{
    r->state = ERT_CMD_STATE_ABORT;
    c->st.runs_failed++;
    release_exec(r);
    emu_run_unref_locked(r);
}

static void abort_queue_locked(emu_card *c)
{
    while (c->head) {
        emu_run *r = c->head;
        c->head = r->next;
        abort_run_locked(c, r);
    }
    c->tail = NULL;
}

static void flip_bit(emu_card *c, emu_run *r)
{
    const emu_fault *f = fault_for(c, r->seq);
    int arg = f->arg;
    if (arg < 0)
        for (int i = 0; i < r->exec.n && arg < 0; i++)
            if (r->kernel->x.args[i].kind == FPGA_K_ARG_GLOBAL) arg = i;
    if (arg < 0 || arg >= r->exec.n || !r->exec_bo[arg]) return;
    const fpga_k_arg *a = &r->exec.a[arg];
    uint8_t *p = (uint8_t *)a->ptr + f->byte % a->size;
    *p ^= (uint8_t)(1u << f->bit);
}

void *emu_worker_main(void *arg)
{
    emu_card *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && (c->hung || !c->head)) pthread_cond_wait(&c->work, &c->mu);
        if (c->stop) break;
        emu_run *r = c->head;
        c->head = r->next;
        if (!c->head) c->tail = NULL;
        r->state = ERT_CMD_STATE_RUNNING;
        uint64_t t0 = emu_now_ns();

        if (r->fault == EMU_FAULT_HANG) {
            /* The compute unit never raises done: this run and every later one stay put. */
            c->hung = 1;
            c->hung_run = r;
            continue;
        }
        if (r->fault == EMU_FAULT_LATE) {
            /* a slow compute unit: it finishes after a wait has given up on it */
            while (!r->late_go && !c->stop) pthread_cond_wait(&c->work, &c->mu);
            if (c->stop) {
                abort_run_locked(c, r);
                break;
            }
        }
        if (r->fault == EMU_FAULT_GONE) {
            emu_card_mark_gone(c);
            abort_run_locked(c, r);
            abort_queue_locked(c);
            pthread_cond_broadcast(&c->done);
            continue;
        }
        if (r->fault == EMU_FAULT_BITFLIP) flip_bit(c, r);
        const fpga_k_desc *impl = r->kernel->x.impl;
        int pace = c->pace;
        pthread_mutex_unlock(&c->mu);

        fpga_emu_run_stats st;
        emu_exec_ctx ctx = {.card = c, .args = &r->exec, .st = &st};
        emu_timing_begin(&ctx);
        int rc = impl->run(&r->exec);
        emu_timing_end(&ctx);
        st.wall_ns = emu_now_ns() - t0;
        st.seq = r->seq;

        pthread_mutex_lock(&c->mu);
        if (pace && !c->stop) emu_pace_until_locked(c, t0 + st.modeled_ns);
        int ok = rc == 0 && !ctx.bad_access && r->fault != EMU_FAULT_ERROR;
        r->state = ok ? ERT_CMD_STATE_COMPLETED : ERT_CMD_STATE_ERROR;
        r->stats = st;
        r->have_stats = 1;
        if (ok) {
            c->st.runs_completed++;
            c->st.run_modeled_ns += st.modeled_ns;
        } else {
            c->st.runs_failed++;
        }
        release_exec(r);
        emu_run_unref_locked(r);
        pthread_cond_broadcast(&c->done);
    }
    /* Teardown: nothing will ever complete these. */
    abort_queue_locked(c);
    if (c->hung_run) {
        abort_run_locked(c, c->hung_run);
        c->hung_run = NULL;
    }
    pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}
