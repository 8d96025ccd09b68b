/* Tests for daemon/log.c: one event is one line whatever its values hold; dmn_log_quote escapes
 * what would break a logfmt value. */
#include "tests/test.h"
#include "daemon/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A value with a newline (a client's text in a request's message) used to end the line there: the
 * rest, "ts=... level=error event=forged", read as an event of its own. */
TEST(log_one_event_one_line)
{
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/log", t_tmpdir()); /* the test's own folder, removed after */
    REQUIRE(dmn_log_open(path, "info", err, sizeof err) == 0);
    dmn_log(DMN_LOG_WARN, "request_failed", "msg=\"%s\"",
            "bad\nts=2024-01-01T00:00:00.000Z level=error event=forged\r\x1b[2J");
    char q[256];
    dmn_log(DMN_LOG_WARN, "quoted", "msg=%s", dmn_log_quote(q, sizeof q, "a \"b\"\nc=d"));
    dmn_log_close();
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    unlink(path);
    buf[n] = 0;
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    CHECK_EQ(lines, 2);
    CHECK_MSG(strstr(buf, "event=request_failed msg=\"bad?ts=2024-01-01T00:00:00.000Z level=error "
                          "event=forged??[2J\"\n"),
              "%s", buf);
    CHECK_MSG(strstr(buf, "event=quoted msg=\"a \\\"b\\\"\\nc=d\"\n"), "%s", buf);
}
