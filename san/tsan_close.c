/* san/tsan_close.c — linked only into ThreadSanitizer builds (make SAN=thread; make test-tsan).
 *
 * libuv on Linux closes descriptors with syscall(SYS_close, fd) (uv__close_nocancel, to keep
 * close() from being a cancellation point), unless libuv itself was built with TSan; Debian's is
 * not. TSan intercepts close() but not syscall(), so it never learns that libuv's descriptors are
 * closed: when another thread is then given the same number (UCX's opendir over /sys while it
 * queries its devices, its sockets), TSan takes the new owner's accesses for a race with the
 * thread that created the old socket. Every such report is the kernel's descriptor reuse, not a
 * race in memory.
 *
 * This definition of syscall() comes first in symbol resolution (the executable exports it,
 * -rdynamic), so libuv's SYS_close goes through the intercepted close() and TSan sees it; every
 * other number goes on to libc's syscall(). Nothing else changes: the same descriptor is closed
 * with the same result and errno. */
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

long syscall(long number, ...)
{
    long a[6];
    va_list ap;
    va_start(ap, number);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long); /* as libc's syscall(): six argument registers, used or not */
    va_end(ap);
    if (number == SYS_close)
        return close((int)a[0]);
    static long (*next)(long, ...);
    if (!next)
        next = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return next(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
