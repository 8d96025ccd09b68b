/* daemon/log.h — structured log lines (logfmt: key=value pairs, one event per line).
 *
 *   ts=2024-05-01T12:00:00.123Z level=info event=request id=cmpl-... status=200 ...
 *
 * Lines go to stderr (the journal under systemd, which adds its own timestamp; the journal's
 * priority prefix "<N>" is added when JOURNAL_STREAM says stderr is the journal) or to a file
 * that dmn_log_reopen() opens again after logrotate moved it (SIGHUP).
 *
 * Threads: any thread may log; a line is written with one write() under a mutex, so lines from
 * device workers and the loop never interleave. dmn_log_open/reopen/close: main/loop thread. */
#ifndef TANDEM_DMN_LOG_H
#define TANDEM_DMN_LOG_H
#include <stddef.h>

enum dmn_log_level { DMN_LOG_DEBUG, DMN_LOG_INFO, DMN_LOG_WARN, DMN_LOG_ERROR };

/* path NULL or "": stderr. level: "debug" | "info" | "warn" | "error". Returns 0 or -1 (err). */
int dmn_log_open(const char *path, const char *level, char *err, size_t errlen);
/* Reopens the file (no-op for stderr). Returns 0 or -1 (the old file stays in use). */
int dmn_log_reopen(void);
void dmn_log_close(void);

/* One line: level, event name, then the caller's "key=value ..." text. */
void dmn_log(enum dmn_log_level lvl, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes s as a logfmt value into out (quoted and escaped when it has spaces, quotes, '=' or
 * control bytes). Returns out. */
char *dmn_log_quote(char *out, size_t n, const char *s);

#endif
