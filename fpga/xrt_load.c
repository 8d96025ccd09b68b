/* fpga/xrt_load.c — dlopen()s an XRT C API library and wraps each call (see xrt_load.h). */
#include "fpga/xrt_load.h"
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One pointer per XRT function, typed from the prototypes in xrt_api.h so that a mismatch is a
 * compile error rather than a corrupted call. */
#define XRT_FUNCS(X)                                                                               \
    X(xrtDeviceOpen)                                                                               \
    X(xrtDeviceOpenByBDF)                                                                          \
    X(xrtDeviceClose)                                                                              \
    X(xrtDeviceLoadXclbin)                                                                         \
    X(xrtDeviceLoadXclbinFile)                                                                     \
    X(xrtDeviceGetXclbinUUID)                                                                      \
    X(xrtPLKernelOpen)                                                                             \
    X(xrtPLKernelOpenExclusive)                                                                    \
    X(xrtKernelClose)                                                                              \
    X(xrtKernelArgGroupId)                                                                         \
    X(xrtRunOpen)                                                                                  \
    X(xrtRunSetArg)                                                                                \
    X(xrtRunStart)                                                                                 \
    X(xrtRunWait)                                                                                  \
    X(xrtRunWaitFor)                                                                               \
    X(xrtRunState)                                                                                 \
    X(xrtRunClose)                                                                                 \
    X(xrtBOAllocUserPtr)                                                                           \
    X(xrtBOAlloc)                                                                                  \
    X(xrtBOFree)                                                                                   \
    X(xrtBOSize)                                                                                   \
    X(xrtBOAddress)                                                                                \
    X(xrtBOSync)                                                                                   \
    X(xrtBOMap)                                                                                    \
    X(xrtBOWrite)                                                                                  \
    X(xrtBORead)

/* Optional: only the emulator has them. */
#define EMU_FUNCS(X)                                                                               \
    X(fpga_emu_run_stats_get)                                                                          \
    X(fpga_emu_card_stats_get)                                                                         \
    X(fpga_emu_set_pace)                                                                           \
    X(fpga_emu_model_sync_ns)                                                                      \
    X(fpga_emu_last_error)

struct fpga_xrt {
    void *dl;
    char path[512];
#define FIELD(name) __typeof__(&name) name;
    XRT_FUNCS(FIELD)
    EMU_FUNCS(FIELD)
#undef FIELD
};

static _Thread_local char last_err[512];

const char *fpga_xrt_error(void)
{
    return last_err;
}

fpga_xrt *fpga_xrt_new(const char *lib_path, char *err, size_t errlen)
{
    const char *path = lib_path && *lib_path ? lib_path : FPGA_XRT_DEFAULT_LIB;
    fpga_xrt *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "xrt: out of memory");
        return NULL;
    }
    snprintf(x->path, sizeof x->path, "%s", path);
    /* RTLD_LOCAL: XRT's (or the emulator's) symbols stay out of the global namespace.
     * RTLD_NODELETE: the library stays loaded for the life of the process once opened, as the
     * CUDA plugin does: XRT is not written to be unloaded and reloaded, and the emulator's
     * cards must keep their state (a card that disappeared stays gone) when the last device
     * handle closes and a later open loads the library again. */
    x->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!x->dl) {
        snprintf(err, errlen, "xrt: cannot load %s: %s", path, dlerror());
        free(x);
        return NULL;
    }
#define RESOLVE(name)                                                                              \
    *(void **)&x->name = dlsym(x->dl, #name);                                                      \
    if (!x->name) {                                                                                \
        snprintf(err, errlen, "xrt: %s lacks %s (XRT 2.14 or newer is needed)", path, #name);     \
        dlclose(x->dl);                                                                            \
        free(x);                                                                                   \
        return NULL;                                                                               \
    }
    XRT_FUNCS(RESOLVE)
#undef RESOLVE
#define RESOLVE_OPT(name) *(void **)&x->name = dlsym(x->dl, #name);
    EMU_FUNCS(RESOLVE_OPT)
#undef RESOLVE_OPT
    return x;
}

void fpga_xrt_free(fpga_xrt *x)
{
    if (!x) return;
    dlclose(x->dl);
    free(x);
}

int fpga_xrt_is_emulator(const fpga_xrt *x)
{
    return x->fpga_emu_card_stats_get != NULL;
}

const char *fpga_xrt_path(const fpga_xrt *x)
{
    return x->path;
}

/* ---------------------------------------------------------------- error translation */

static int status_of_errno(int e)
{
    switch (e) {
    case ENOMEM:
    case ENOSPC: return ACCEL_ERR_NOMEM;
    case EINVAL:
    case E2BIG:
    case ERANGE:
    case EFBIG:
    case EBADF:
    case ENOENT: return ACCEL_ERR_INVALID;
    case ETIMEDOUT:
    case ETIME: return ACCEL_ERR_TIMEOUT;
    default: return ACCEL_ERR_DEVICE;
    }
}

/* Records "what: reason" for a failed call whose errno was saved in e and returns the status. */
__attribute__((format(printf, 3, 4))) static int fail(const fpga_xrt *x, int e, const char *fmt,
                                                      ...)
{
    /* XRT stores -code from xrt_core::error; a foreign exception leaves errno as it was (we
     * cleared it), so 0 means "XRT failed without saying why". */
    if (e < 0) e = -e;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *detail = x->fpga_emu_last_error ? x->fpga_emu_last_error() : "";
    snprintf(last_err, sizeof last_err, "%s: %s%s%s", what, e ? strerror(e) : "failed (no errno)",
             *detail ? ": " : "", detail);
    return e ? status_of_errno(e) : ACCEL_ERR_DEVICE;
}

/* Calls an int-returning XRT function: 0 on success, else a status via fail(). */
#define CALL_INT(expr, ...)                                                                        \
    do {                                                                                           \
        errno = 0;                                                                                 \
        int rc_ = (expr);                                                                          \
        if (rc_ == 0) return ACCEL_OK;                                                             \
        return fail(x, errno, __VA_ARGS__);                                                        \
    } while (0)

/* Calls a handle-returning XRT function into *out. */
#define CALL_HANDLE(out, expr, ...)                                                                \
    do {                                                                                           \
        errno = 0;                                                                                 \
        void *h_ = (expr);                                                                         \
        if (h_) {                                                                                  \
            *(out) = h_;                                                                           \
            return ACCEL_OK;                                                                       \
        }                                                                                          \
        *(out) = NULL;                                                                             \
        return fail(x, errno, __VA_ARGS__);                                                        \
    } while (0)

/* ---------------------------------------------------------------- devices and kernels */

int fpga_xrt_device_open(fpga_xrt *x, unsigned index, xrtDeviceHandle *out)
{
    CALL_HANDLE(out, x->xrtDeviceOpen(index), "xrtDeviceOpen(%u)", index);
}

int fpga_xrt_device_open_bdf(fpga_xrt *x, const char *bdf, xrtDeviceHandle *out)
{
    CALL_HANDLE(out, x->xrtDeviceOpenByBDF(bdf), "xrtDeviceOpenByBDF(%s)", bdf);
}

int fpga_xrt_device_close(fpga_xrt *x, xrtDeviceHandle d)
{
    CALL_INT(x->xrtDeviceClose(d), "xrtDeviceClose");
}

int fpga_xrt_load_xclbin_file(fpga_xrt *x, xrtDeviceHandle d, const char *path)
{
    CALL_INT(x->xrtDeviceLoadXclbinFile(d, path), "xrtDeviceLoadXclbinFile(%s)", path);
}

int fpga_xrt_xclbin_uuid(fpga_xrt *x, xrtDeviceHandle d, xuid_t out)
{
    CALL_INT(x->xrtDeviceGetXclbinUUID(d, out), "xrtDeviceGetXclbinUUID");
}

int fpga_xrt_kernel_open(fpga_xrt *x, xrtDeviceHandle d, const xuid_t uuid, const char *name,
                         int exclusive, xrtKernelHandle *out)
{
    if (exclusive)
        CALL_HANDLE(out, x->xrtPLKernelOpenExclusive(d, uuid, name),
                    "xrtPLKernelOpenExclusive(%s)", name);
    CALL_HANDLE(out, x->xrtPLKernelOpen(d, uuid, name), "xrtPLKernelOpen(%s)", name);
}

int fpga_xrt_kernel_close(fpga_xrt *x, xrtKernelHandle k)
{
    CALL_INT(x->xrtKernelClose(k), "xrtKernelClose");
}

int fpga_xrt_kernel_group(fpga_xrt *x, xrtKernelHandle k, int argno, uint32_t *group)
{
    errno = 0;
    int g = x->xrtKernelArgGroupId(k, argno);
    if (g >= 0) {
        *group = (uint32_t)g;
        return ACCEL_OK;
    }
    /* XRT returns -1 with errno; be robust to an implementation returning -errno instead. */
    return fail(x, errno ? errno : -g, "xrtKernelArgGroupId(arg %d)", argno);
}

/* ---------------------------------------------------------------- buffer objects */

int fpga_xrt_bo_alloc(fpga_xrt *x, xrtDeviceHandle d, size_t size, uint32_t flags, uint32_t group,
                      xrtBufferHandle *out)
{
    CALL_HANDLE(out, x->xrtBOAlloc(d, size, flags, group), "xrtBOAlloc(%zu bytes, group %u)",
                size, group);
}

int fpga_xrt_bo_alloc_userptr(fpga_xrt *x, xrtDeviceHandle d, void *userptr, size_t size,
                              uint32_t flags, uint32_t group, xrtBufferHandle *out)
{
    CALL_HANDLE(out, x->xrtBOAllocUserPtr(d, userptr, size, flags, group),
                "xrtBOAllocUserPtr(%zu bytes, group %u)", size, group);
}

int fpga_xrt_bo_free(fpga_xrt *x, xrtBufferHandle b)
{
    CALL_INT(x->xrtBOFree(b), "xrtBOFree");
}

int fpga_xrt_bo_size(fpga_xrt *x, xrtBufferHandle b, size_t *size)
{
    /* xrtBOSize has no error value: 0 is what a failure looks like (no BO has size 0). */
    errno = 0;
    *size = x->xrtBOSize(b);
    if (*size) return ACCEL_OK;
    return fail(x, errno, "xrtBOSize");
}

int fpga_xrt_bo_address(fpga_xrt *x, xrtBufferHandle b, uint64_t *addr)
{
    /* Address 0 is valid (HBM[0] starts there), so only errno tells a failure. */
    errno = 0;
    *addr = x->xrtBOAddress(b);
    if (errno == 0) return ACCEL_OK;
    return fail(x, errno, "xrtBOAddress");
}

int fpga_xrt_bo_write(fpga_xrt *x, xrtBufferHandle b, const void *src, size_t n, size_t off)
{
    CALL_INT(x->xrtBOWrite(b, src, n, off), "xrtBOWrite(%zu bytes at %zu)", n, off);
}

int fpga_xrt_bo_read(fpga_xrt *x, xrtBufferHandle b, void *dst, size_t n, size_t off)
{
    CALL_INT(x->xrtBORead(b, dst, n, off), "xrtBORead(%zu bytes at %zu)", n, off);
}

int fpga_xrt_bo_map(fpga_xrt *x, xrtBufferHandle b, void **host)
{
    CALL_HANDLE(host, x->xrtBOMap(b), "xrtBOMap");
}

int fpga_xrt_bo_sync(fpga_xrt *x, xrtBufferHandle b, enum xclBOSyncDirection dir, size_t n,
                     size_t off)
{
    CALL_INT(x->xrtBOSync(b, dir, n, off), "xrtBOSync(%s, %zu bytes at %zu)",
             dir == XCL_BO_SYNC_BO_TO_DEVICE ? "to device" : "from device", n, off);
}

/* ---------------------------------------------------------------- runs */

int fpga_xrt_run_open(fpga_xrt *x, xrtKernelHandle k, xrtRunHandle *out)
{
    CALL_HANDLE(out, x->xrtRunOpen(k), "xrtRunOpen");
}

int fpga_xrt_run_set_bo(fpga_xrt *x, xrtRunHandle r, int argno, xrtBufferHandle b)
{
    CALL_INT(x->xrtRunSetArg(r, argno, b), "xrtRunSetArg(arg %d, bo)", argno);
}

int fpga_xrt_run_set_u32(fpga_xrt *x, xrtRunHandle r, int argno, uint32_t v)
{
    CALL_INT(x->xrtRunSetArg(r, argno, v), "xrtRunSetArg(arg %d, u32 %u)", argno, v);
}

int fpga_xrt_run_set_u64(fpga_xrt *x, xrtRunHandle r, int argno, uint64_t v)
{
    CALL_INT(x->xrtRunSetArg(r, argno, v), "xrtRunSetArg(arg %d, u64 %llu)", argno,
             (unsigned long long)v);
}

int fpga_xrt_run_start(fpga_xrt *x, xrtRunHandle r)
{
    CALL_INT(x->xrtRunStart(r), "xrtRunStart");
}

const char *fpga_xrt_state_name(enum ert_cmd_state s)
{
    switch (s) {
    case ERT_CMD_STATE_NEW: return "NEW";
    case ERT_CMD_STATE_QUEUED: return "QUEUED";
    case ERT_CMD_STATE_RUNNING: return "RUNNING";
    case ERT_CMD_STATE_COMPLETED: return "COMPLETED";
    case ERT_CMD_STATE_ERROR: return "ERROR";
    case ERT_CMD_STATE_ABORT: return "ABORT";
    case ERT_CMD_STATE_SUBMITTED: return "SUBMITTED";
    case ERT_CMD_STATE_TIMEOUT: return "TIMEOUT";
    case ERT_CMD_STATE_NORESPONSE: return "NORESPONSE";
    case ERT_CMD_STATE_SKERROR: return "SKERROR";
    case ERT_CMD_STATE_SKCRASHED: return "SKCRASHED";
    }
    return "?";
}

int fpga_xrt_run_wait(fpga_xrt *x, xrtRunHandle r, unsigned timeout_ms, enum ert_cmd_state *state)
{
    errno = 0;
    enum ert_cmd_state s = x->xrtRunWaitFor(r, timeout_ms);
    int e = errno;
    if (state) *state = s;
    switch (s) {
    case ERT_CMD_STATE_COMPLETED: return ACCEL_OK;
    case ERT_CMD_STATE_TIMEOUT:
    case ERT_CMD_STATE_NEW:
    case ERT_CMD_STATE_QUEUED:
    case ERT_CMD_STATE_SUBMITTED:
    case ERT_CMD_STATE_RUNNING:
        snprintf(last_err, sizeof last_err, "xrtRunWaitFor(%u ms): run still %s", timeout_ms,
                 s == ERT_CMD_STATE_TIMEOUT ? "in flight" : fpga_xrt_state_name(s));
        return ACCEL_ERR_TIMEOUT;
    default:
        /* ABORT is also the C API's "the call itself failed" (bad handle: errno set). */
        if (e && status_of_errno(e < 0 ? -e : e) == ACCEL_ERR_INVALID)
            return fail(x, e, "xrtRunWaitFor");
        fail(x, e, "xrtRunWaitFor: run ended in state %s", fpga_xrt_state_name(s));
        return ACCEL_ERR_DEVICE;
    }
}

enum ert_cmd_state fpga_xrt_run_state(fpga_xrt *x, xrtRunHandle r)
{
    return x->xrtRunState(r);
}

int fpga_xrt_run_close(fpga_xrt *x, xrtRunHandle r)
{
    CALL_INT(x->xrtRunClose(r), "xrtRunClose");
}

/* ---------------------------------------------------------------- emulator extensions */

static int no_ext(const char *name)
{
    snprintf(last_err, sizeof last_err, "%s: only the emulator has it", name);
    return ACCEL_ERR_UNSUPPORTED;
}

int fpga_xrt_emu_run_stats(fpga_xrt *x, xrtRunHandle r, fpga_emu_run_stats *out)
{
    if (!x->fpga_emu_run_stats_get) return no_ext("fpga_emu_run_stats_get");
    CALL_INT(x->fpga_emu_run_stats_get(r, out), "fpga_emu_run_stats_get");
}

int fpga_xrt_emu_card_stats(fpga_xrt *x, xrtDeviceHandle d, fpga_emu_card_stats *out)
{
    if (!x->fpga_emu_card_stats_get) return no_ext("fpga_emu_card_stats_get");
    CALL_INT(x->fpga_emu_card_stats_get(d, out), "fpga_emu_card_stats_get");
}

int fpga_xrt_emu_set_pace(fpga_xrt *x, xrtDeviceHandle d, int on)
{
    if (!x->fpga_emu_set_pace) return no_ext("fpga_emu_set_pace");
    CALL_INT(x->fpga_emu_set_pace(d, on), "fpga_emu_set_pace");
}

uint64_t fpga_xrt_emu_model_sync_ns(fpga_xrt *x, uint64_t bytes)
{
    return x->fpga_emu_model_sync_ns ? x->fpga_emu_model_sync_ns(bytes) : 0;
}
