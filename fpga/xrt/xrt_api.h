/* fpga/xrt/xrt_api.h — our own declarations of the part of the XRT C API that tandem uses.
 *
 * This is the edge where XRT's names (xrtCamelCase, XCL_*, ERT_*) are kept as XRT spells them:
 * the same prototypes are (a) looked up with dlsym in libxrt_coreutil.so.2 by fpga/xrt_load.c and
 * (b) implemented by the card emulator (fpga/emu/), which includes this header so that the
 * compiler checks its definitions against these prototypes. Nothing else in tandem calls these
 * functions directly: it calls the fpga_xrt_* wrappers of fpga/xrt_load.h.
 *
 * fpga/xrt/ is the contract between the host code (fpga/) and a card: this API, the emulator's
 * extensions to it (emu_api.h) and the U280's facts both sides use (u280.h). The emulator
 * (fpga/emu/) implements it and includes nothing of fpga/ beyond this folder and the kernels
 * (fpga/kernels/), which the layout check (tools/check_layout.py) enforces.
 *
 * Source of the signatures: XRT 2.14 (tag 202220.2.14.354) headers
 * src/runtime_src/core/include/xrt/xrt_device.h, xrt_bo.h, xrt_kernel.h (the extern "C" part),
 * xrt_mem.h (BO flags), deprecated/xrt.h (enum xclBOSyncDirection), ert.h (enum ert_cmd_state),
 * xrt_uuid.h (xuid_t is libuuid's uuid_t, unsigned char[16]). They are unchanged in 2.15-2.17.
 *
 * Pitfalls of the C API that the wrappers handle (read in XRT's xrt_kernel.cpp / xrt_bo.cpp):
 *  - Errors are NULL (handles), -1 (int results) or ERT_CMD_STATE_ABORT (waits) with errno set
 *    from the C++ exception's code, which XRT constructs as a NEGATIVE errno (xrt_core::error
 *    (-EINVAL, ...)); exceptions that are not xrt_core::error leave errno untouched.
 *  - xrtRunSetArg() is variadic and reads each scalar with va_arg at the type the xclbin
 *    declares: "int"/"uint" -> (unsigned) int, 4-byte others -> uint32_t, 8-byte -> uint64_t,
 *    "float" -> double (C promotion). A scalar must be passed at exactly that width; a global
 *    (memory) argument is passed as an xrtBufferHandle.
 *  - xrtRunWaitFor(run, 0) waits forever; on a timeout it returns ERT_CMD_STATE_TIMEOUT and the
 *    run is still in flight.
 *  - Through the C API XRT does not check that a BO lies in a bank the kernel argument is
 *    connected to (the C++ xrt::run::set_arg does, and copies); our host code allocates every BO
 *    in the group xrtKernelArgGroupId() names, and the emulator refuses a wrong bank outright.
 */
#ifndef TANDEM_FPGA_XRT_API_H
#define TANDEM_FPGA_XRT_API_H
#include <stddef.h>
#include <stdint.h>

typedef void *xrtDeviceHandle;
typedef void *xrtBufferHandle;
typedef void *xrtKernelHandle;
typedef void *xrtRunHandle;
typedef uint64_t xrtBufferFlags; /* XCL_BO_FLAGS_* in bits 24..31; bits 0..15 the bank */
typedef uint32_t xrtMemoryGroup; /* memory index (mem_topology) or group from the xclbin */
typedef unsigned char xuid_t[16];
struct axlf; /* a loaded xclbin image (opaque here) */

/* xrt_mem.h */
#define XCL_BO_FLAGS_NONE      (0U)
#define XCL_BO_FLAGS_CACHEABLE (1U << 24)
#define XCL_BO_FLAGS_KERNBUF   (1U << 25)
#define XCL_BO_FLAGS_SGL       (1U << 26)
#define XCL_BO_FLAGS_SVM       (1U << 27)
#define XCL_BO_FLAGS_DEV_ONLY  (1U << 28)
#define XCL_BO_FLAGS_HOST_ONLY (1U << 29)
#define XCL_BO_FLAGS_P2P       (1U << 30)
#define XCL_BO_FLAGS_EXECBUF   (1U << 31)

/* deprecated/xrt.h */
enum xclBOSyncDirection {
    XCL_BO_SYNC_BO_TO_DEVICE = 0,
    XCL_BO_SYNC_BO_FROM_DEVICE = 1,
    XCL_BO_SYNC_BO_GMIO_TO_AIE = 2,
    XCL_BO_SYNC_BO_AIE_TO_GMIO = 3,
};

/* ert.h */
enum ert_cmd_state {
    ERT_CMD_STATE_NEW = 1,
    ERT_CMD_STATE_QUEUED = 2,
    ERT_CMD_STATE_RUNNING = 3,
    ERT_CMD_STATE_COMPLETED = 4,
    ERT_CMD_STATE_ERROR = 5,
    ERT_CMD_STATE_ABORT = 6,
    ERT_CMD_STATE_SUBMITTED = 7,
    ERT_CMD_STATE_TIMEOUT = 8,
    ERT_CMD_STATE_NORESPONSE = 9,
    ERT_CMD_STATE_SKERROR = 10,
    ERT_CMD_STATE_SKCRASHED = 11,
};

/* xrt_device.h */
xrtDeviceHandle xrtDeviceOpen(unsigned int index);
xrtDeviceHandle xrtDeviceOpenByBDF(const char *bdf);
int xrtDeviceClose(xrtDeviceHandle dhdl);
int xrtDeviceLoadXclbin(xrtDeviceHandle dhdl, const struct axlf *xclbin);
int xrtDeviceLoadXclbinFile(xrtDeviceHandle dhdl, const char *xclbin_fnm);
int xrtDeviceGetXclbinUUID(xrtDeviceHandle dhdl, xuid_t out);

/* xrt_kernel.h */
xrtKernelHandle xrtPLKernelOpen(xrtDeviceHandle deviceHandle, const xuid_t xclbinId,
                                const char *name);
xrtKernelHandle xrtPLKernelOpenExclusive(xrtDeviceHandle deviceHandle, const xuid_t xclbinId,
                                         const char *name);
int xrtKernelClose(xrtKernelHandle kernelHandle);
int xrtKernelArgGroupId(xrtKernelHandle kernelHandle, int argno);
xrtRunHandle xrtRunOpen(xrtKernelHandle kernelHandle);
int xrtRunSetArg(xrtRunHandle rhdl, int index, ...);
int xrtRunStart(xrtRunHandle rhdl);
enum ert_cmd_state xrtRunWait(xrtRunHandle rhdl);
enum ert_cmd_state xrtRunWaitFor(xrtRunHandle rhdl, unsigned int timeout_ms);
enum ert_cmd_state xrtRunState(xrtRunHandle rhdl);
int xrtRunClose(xrtRunHandle rhdl);

/* xrt_bo.h */
xrtBufferHandle xrtBOAllocUserPtr(xrtDeviceHandle dhdl, void *userptr, size_t size,
                                  xrtBufferFlags flags, xrtMemoryGroup grp);
xrtBufferHandle xrtBOAlloc(xrtDeviceHandle dhdl, size_t size, xrtBufferFlags flags,
                           xrtMemoryGroup grp);
int xrtBOFree(xrtBufferHandle bhdl);
size_t xrtBOSize(xrtBufferHandle bhdl);
uint64_t xrtBOAddress(xrtBufferHandle bhdl);
int xrtBOSync(xrtBufferHandle bhdl, enum xclBOSyncDirection dir, size_t size, size_t offset);
void *xrtBOMap(xrtBufferHandle bhdl);
int xrtBOWrite(xrtBufferHandle bhdl, const void *src, size_t size, size_t seek);
int xrtBORead(xrtBufferHandle bhdl, void *dst, size_t size, size_t skip);

#endif
