/* Runs every TEST() found in tests/ (see build/test_list.h), each in a forked child with a
 * time limit, and prints TAP-like lines: "ok N name", "not ok N name", "ok N name # SKIP why".
 * Usage: tandem-tests [substring ...]   (run only tests whose name contains one of them)
 * TANDEM_TEST_TIMEOUT: seconds per test (300). TANDEM_TEST_JOBS: tests run at once (1; tests/run.sh
 * gives the core count): each test's output is printed when it ends, lines in the order tests end
 * (N stays the test's place in the list); a test on the GPU runs alone (runs_alone). */
#include "tests/test.h"
#include <errno.h>
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
static struct t_shared *shm; /* the running test's (in the child) */

#define T_MAX_JOBS 64

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

/* A test that may use the GPU runs alone under -j: two processes on one device would each size
 * their KV pool from the memory the other is taking. Those are tests/gpu's (gpu_*), the
 * conformance tests' cuda rows (*_cuda), the CLI's and the plugin's tests that open cuda
 * (*gpu*, plugin_abi_*). */
static int runs_alone(const char *name)
{
    return strstr(name, "gpu") || strstr(name, "cuda") || strncmp(name, "plugin_abi", 10) == 0;
}

/* A running test: its child, its shared block, and (-j > 1) the files its stdout and stderr go
 * to, printed whole when it ends so that the lines of tests running at once do not interleave. */
struct t_slot {
    pid_t pid;
    int idx, num;
    struct timespec t0;
    struct t_shared *sh;
    FILE *out, *err;
};

static void copy_out(FILE *from, FILE *to)
{
    char buf[4096];
    size_t k;
    fflush(from);
    rewind(from);
    while ((k = fread(buf, 1, sizeof buf, from)) > 0) fwrite(buf, 1, k, to);
    fflush(to);
    rewind(from);
    if (ftruncate(fileno(from), 0)) {}
}

static void start(struct t_slot *s, int i, int num, int limit)
{
    s->idx = i;
    s->num = num;
    memset(s->sh, 0, sizeof *s->sh);
    snprintf(s->sh->tmpdir, sizeof s->sh->tmpdir, "/tmp/tandem-test-XXXXXX");
    if (!mkdtemp(s->sh->tmpdir)) s->sh->tmpdir[0] = 0;
    clock_gettime(CLOCK_MONOTONIC, &s->t0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        shm = s->sh;
        if (s->out) dup2(fileno(s->out), 1), dup2(fileno(s->err), 2);
        alarm(limit);
        tests[i].fn();
        fflush(NULL);
        _exit(shm->failures ? 1 : 0);
    }
    s->pid = pid;
}

/* The end of the test in s (st: its wait status): prints its output and its line. */
static int finish(struct t_slot *s, int st, int *passed, int *failed, int *skipped)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (t1.tv_sec - s->t0.tv_sec) + (t1.tv_nsec - s->t0.tv_nsec) / 1e9;
    if (s->sh->tmpdir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->sh->tmpdir);
        if (system(cmd)) {}
    }
    if (s->out) copy_out(s->out, stdout), copy_out(s->err, stderr);
    const char *name = tests[s->idx].name;
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && s->sh->failures == 0;
    if (!ok && WIFSIGNALED(st))
        fprintf(stderr, "  FAIL: killed by signal %d (%s)\n", WTERMSIG(st),
                WTERMSIG(st) == SIGALRM ? "timeout" : strsignal(WTERMSIG(st)));
    if (ok && s->sh->skipped) {
        printf("ok %d %s # SKIP %s\n", s->num, name, s->sh->skip_reason);
        (*skipped)++;
    } else if (ok) {
        printf("ok %d %s (%.2fs)\n", s->num, name, secs);
        (*passed)++;
    } else {
        printf("not ok %d %s (%.2fs)\n", s->num, name, secs);
        (*failed)++;
    }
    s->pid = 0;
    return ok;
}

int main(int argc, char **argv)
{
    int n = sizeof tests / sizeof tests[0], passed = 0, failed = 0, skipped = 0, num = 0;
    int limit = getenv("TANDEM_TEST_TIMEOUT") ? atoi(getenv("TANDEM_TEST_TIMEOUT")) : 300;
    int jobs = getenv("TANDEM_TEST_JOBS") ? atoi(getenv("TANDEM_TEST_JOBS")) : 1;
    if (jobs < 1) jobs = 1;
    if (jobs > T_MAX_JOBS) jobs = T_MAX_JOBS;
    struct t_shared *sh = mmap(NULL, jobs * sizeof *sh, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return 2;
    struct t_slot slot[T_MAX_JOBS] = {{0}};
    for (int j = 0; j < jobs; j++) {
        slot[j].sh = &sh[j];
        if (jobs > 1 && (!(slot[j].out = tmpfile()) || !(slot[j].err = tmpfile()))) return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int running = 0, alone = 0;
    for (int i = 0; i <= n; i++) {
        if (i < n && !selected(tests[i].name, argc, argv)) continue;
        /* wait for a free slot; for the end of every test before one that runs alone, and after
         * it; for every test at the end */
        int need = i == n ? 0 : (alone || runs_alone(tests[i].name)) ? 0 : jobs - 1;
        while (running > need) {
            int st = 0;
            pid_t pid = waitpid(-1, &st, 0);
            if (pid < 0 && errno == EINTR) continue;
            if (pid < 0) break;
            for (int j = 0; j < jobs; j++)
                if (slot[j].pid == pid) {
                    finish(&slot[j], st, &passed, &failed, &skipped);
                    running--;
                }
        }
        if (i == n) break;
        alone = runs_alone(tests[i].name);
        for (int j = 0; j < jobs; j++)
            if (!slot[j].pid) {
                start(&slot[j], i, ++num, limit);
                running++;
                if (slot[j].pid < 0) { /* no child: the test fails */
                    perror("  FAIL: fork");
                    finish(&slot[j], 1 << 8, &passed, &failed, &skipped);
                    running--;
                }
                break;
            }
    }
    printf("# unit: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
