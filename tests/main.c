/* Runs every TEST() found in tests/ (see build/test_list.h), each in a forked child with a
 * time limit, and prints TAP-like lines: "ok N name", "not ok N name", "ok N name # SKIP why".
 * Usage: tandem-tests [substring ...]   (run only tests whose name contains one of them) */
#include "tests/test.h"
#include <stdarg.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/mman.h>
#include <time.h>

#define X(name) void test_##name(void);
#include "test_list.h"
#undef X

static const struct {
    const char *name;
    void (*fn)(void);
} tests[] = {
#define X(name) {#name, test_##name},
#include "test_list.h"
#undef X
};

/* Shared with the child so that it can report a skip reason and failure count. */
struct t_shared {
    int failures;
    int skipped;
    char skip_reason[256];
    char tmpdir[256];
};
static struct t_shared *shm;

void t_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "  FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    shm->failures++;
}

void t_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shm->skip_reason, sizeof shm->skip_reason, fmt, ap);
    va_end(ap);
    shm->skipped = 1;
}

int t_failed(void)
{
    return shm->failures;
}

const char *t_tmpdir(void)
{
    return shm->tmpdir;
}

static int selected(const char *name, int argc, char **argv)
{
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i])) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int n = sizeof tests / sizeof tests[0], passed = 0, failed = 0, skipped = 0, num = 0;
    int limit = getenv("TANDEM_TEST_TIMEOUT") ? atoi(getenv("TANDEM_TEST_TIMEOUT")) : 300;
    shm = mmap(NULL, sizeof *shm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < n; i++) {
        if (!selected(tests[i].name, argc, argv)) continue;
        num++;
        memset(shm, 0, sizeof *shm);
        snprintf(shm->tmpdir, sizeof shm->tmpdir, "/tmp/tandem-test-XXXXXX");
        if (!mkdtemp(shm->tmpdir)) shm->tmpdir[0] = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(limit);
            tests[i].fn();
            fflush(NULL);
            _exit(shm->failures ? 1 : 0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
        if (shm->tmpdir[0]) {
            char cmd[300];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", shm->tmpdir);
            if (system(cmd)) {}
        }
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && shm->failures == 0;
        if (!ok && WIFSIGNALED(st))
            fprintf(stderr, "  FAIL: killed by signal %d (%s)\n", WTERMSIG(st),
                    WTERMSIG(st) == SIGALRM ? "timeout" : strsignal(WTERMSIG(st)));
        if (ok && shm->skipped) {
            printf("ok %d %s # SKIP %s\n", num, tests[i].name, shm->skip_reason);
            skipped++;
        } else if (ok) {
            printf("ok %d %s (%.2fs)\n", num, tests[i].name, secs);
            passed++;
        } else {
            printf("not ok %d %s (%.2fs)\n", num, tests[i].name, secs);
            failed++;
        }
    }
    printf("# unit: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
