/* daemon/log.c — see log.h. */
#include "daemon/log.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = 2;
static char log_path[4096];
static enum dmn_log_level log_min = DMN_LOG_INFO;
static int log_journal; /* stderr is the journal: prefix "<N>" priorities (sd-daemon(3)) */

static const char *level_name[] = {"debug", "info", "warn", "error"};
/* syslog priorities of the levels: LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR */
static const int level_prio[] = {7, 6, 4, 3};

static int open_file(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
}

int dmn_log_open(const char *path, const char *level, char *err, size_t errlen)
{
    int lvl = -1;
    for (int i = 0; i < 4; i++)
        if (level && !strcasecmp(level, level_name[i])) lvl = i;
    if (lvl < 0) {
        snprintf(err, errlen, "log_level must be debug, info, warn or error, got '%s'", level ? level : "");
        return -1;
    }
    int fd = 2;
    if (path && *path) {
        fd = open_file(path);
        if (fd < 0) {
            snprintf(err, errlen, "cannot open log file %s: %s", path, strerror(errno));
            return -1;
        }
    }
    pthread_mutex_lock(&log_mu);
    if (log_fd > 2) close(log_fd);
    log_fd = fd;
    snprintf(log_path, sizeof log_path, "%s", path ? path : "");
    log_min = (enum dmn_log_level)lvl;
    log_journal = fd == 2 && getenv("JOURNAL_STREAM") != NULL;
    pthread_mutex_unlock(&log_mu);
    return 0;
}

int dmn_log_reopen(void)
{
    if (!log_path[0]) return 0;
    int fd = open_file(log_path);
    if (fd < 0) return -1;
    pthread_mutex_lock(&log_mu);
    int old = log_fd;
    log_fd = fd;
    pthread_mutex_unlock(&log_mu);
    if (old > 2) close(old);
    return 0;
}

void dmn_log_close(void)
{
    pthread_mutex_lock(&log_mu);
    if (log_fd > 2) close(log_fd);
    log_fd = 2;
    log_path[0] = 0;
    pthread_mutex_unlock(&log_mu);
}

char *dmn_log_quote(char *out, size_t n, const char *s)
{
    int plain = *s != 0;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p == 0x7f) plain = 0;
    if (plain) {
        snprintf(out, n, "%s", s);
        return out;
    }
    size_t o = 0;
    if (n < 3) {
        if (n) out[0] = 0;
        return out;
    }
    out[o++] = '"';
    for (const char *p = s; *p && o + 5 < n; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else if (c < ' ' || c == 0x7f) {
            o += (size_t)snprintf(out + o, n - o, "\\x%02x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    out[o] = 0;
    return out;
}

void dmn_log(enum dmn_log_level lvl, const char *event, const char *fmt, ...)
{
    if (lvl < log_min) return;
    char line[4096];
    size_t o = 0;
    if (log_journal) o += (size_t)snprintf(line, sizeof line, "<%d>", level_prio[lvl]);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    o += strftime(line + o, sizeof line - o, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    o += (size_t)snprintf(line + o, sizeof line - o, ".%03ldZ level=%s event=%s", ts.tv_nsec / 1000000,
                          level_name[lvl], event);
    if (fmt && *fmt && o + 1 < sizeof line) {
        line[o++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        size_t o0 = o;
        int k = vsnprintf(line + o, sizeof line - o, fmt, ap);
        va_end(ap);
        if (k > 0) o += (size_t)k;
        if (o > sizeof line - 2) o = sizeof line - 2; /* truncated: keep the line a line */
        /* one event, one line: a control byte a value brought (a client's text not quoted with
         * dmn_log_quote) cannot start a forged line or hide the rest of this one */
        for (size_t i = o0; i < o; i++)
            if ((unsigned char)line[i] < ' ' || line[i] == 0x7f) line[i] = '?';
    }
    line[o++] = '\n';
    pthread_mutex_lock(&log_mu);
    ssize_t w = write(log_fd, line, o);
    (void)w; /* a failing log must not take the daemon down */
    pthread_mutex_unlock(&log_mu);
}
