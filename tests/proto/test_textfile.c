/* proto/textfile.c: small text files read whole and bounded (the config file, API and peer key
 * files take them so): the bytes as written, a file over the bound, a NUL byte, a directory, a
 * device that never ends and a missing file refused with why; lines and trimming. */
#include "proto/textfile.h"
#include "tests/test.h"
#include "tests/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

TEST(textfile_reads_whole_and_bounded)
{
    char path[512], why[160], *text;
    size_t n;
    snprintf(path, sizeof path, "%s/t.txt", t_tmpdir());
    REQUIRE(t_write_file(path, "a\nbb\r\n", 6) == 0);
    REQUIRE(proto_textfile_read(path, 6, &text, &n, why, sizeof why) == 0);
    CHECK(n == 6 && !memcmp(text, "a\nbb\r\n", 7)); /* NUL-terminated */
    proto_textfile_free(text, n);
    /* one byte over the bound */
    CHECK_EQ(proto_textfile_read(path, 5, &text, &n, why, sizeof why), -1);
    CHECK_MSG(strstr(why, "over 5 bytes") && !text, "%s", why);
    CHECK_EQ(proto_textfile_read(path, 0, &text, &n, why, sizeof why), -1);
    /* a NUL byte anywhere */
    REQUIRE(t_write_file(path, "key\0rest\n", 9) == 0);
    CHECK_EQ(proto_textfile_read(path, 1024, &text, &n, why, sizeof why), -1);
    CHECK_MSG(strstr(why, "NUL"), "%s", why);
    /* a device that never ends, a directory, nothing there */
    CHECK_EQ(proto_textfile_read("/dev/zero", 1u << 20, &text, &n, why, sizeof why), -1);
    CHECK_MSG(strstr(why, "over 1 MiB") || strstr(why, "NUL"), "%s", why);
    CHECK_EQ(proto_textfile_read("/dev/urandom", 4096, &text, &n, why, sizeof why), -1);
    CHECK_MSG(strstr(why, "over 4 KiB") || strstr(why, "NUL"), "%s", why);
    CHECK_EQ(proto_textfile_read(t_tmpdir(), 4096, &text, &n, why, sizeof why), -1);
    CHECK_MSG(strstr(why, "directory"), "%s", why);
    CHECK_EQ(proto_textfile_read("/nonexistent/x", 4096, &text, &n, why, sizeof why), -1);
    CHECK_MSG(strstr(why, "No such file"), "%s", why);
    /* empty is fine */
    REQUIRE(t_write_file(path, "", 0) == 0);
    REQUIRE(proto_textfile_read(path, 16, &text, &n, why, sizeof why) == 0);
    CHECK(n == 0 && text[0] == 0);
    proto_textfile_free(text, n);
    proto_textfile_free(NULL, 0);
}

TEST(textfile_lines_and_trim)
{
    const char t[] = "  one \n\n\ttwo\r\nthree";
    const char *at = t, *end = t + strlen(t), *line;
    size_t len;
    const char *want[] = {"one", "", "two", "three"};
    for (int i = 0; i < 4; i++) {
        REQUIRE(proto_textfile_line(&at, end, &line, &len));
        proto_textfile_trim(&line, &len);
        CHECK_MSG(len == strlen(want[i]) && !memcmp(line, want[i], len), "line %d: '%.*s'", i,
                  (int)len, line);
    }
    CHECK(!proto_textfile_line(&at, end, &line, &len));
    const char *sp = "   ";
    len = 3;
    proto_textfile_trim(&sp, &len);
    CHECK_EQ(len, 0);
}
