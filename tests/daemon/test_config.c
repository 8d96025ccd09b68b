/* Tests for daemon/config.c (precedence flag > env > file > default, bounds, errors), the
 * documentation of every key in deploy/tandem.conf.example, daemon/auth.c and daemon/metrics.c. */
#include "tests/test.h"
#include "tests/util.h"
#include "daemon/auth.h"
#include "daemon/config.h"
#include "daemon/metrics.h"
#include "proto/textfile.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *write_file(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", t_tmpdir(), name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

TEST(config_defaults)
{
    dmn_config c;
    dmn_config_defaults(&c);
    CHECK_STR(c.host, "0.0.0.0");
    CHECK_EQ(c.port, 8080);
    CHECK_STR(c.admin_host, "127.0.0.1");
    CHECK_EQ(c.admin_port, 8090);
    CHECK_STR(c.devices, "cpu,fpga-emu:0,fpga-emu:1");
    CHECK_STR(c.model, "");
    CHECK_EQ(c.max_body_bytes, 4 << 20);
    dmn_config_deinit(&c);
}

TEST(config_precedence)
{
    char *path = write_file("t.conf", "# comment\n"
                                      "port = 1111\n"
                                      "admin_port=2222\n"
                                      "host = \"127.0.0.1\"\n"
                                      "devices = cpu\n"
                                      "  max_waiting =  7  \n"
                                      "max_body_bytes = 2M\n");
    char *env[] = {"TANDEM_ADMIN_PORT=3333", "TANDEM_MAX_WAITING=8", "OTHER=1", NULL};
    char *argv[] = {"serve", "--config", path, "--max-waiting=9", "--devices", "cpu,fpga-emu:0", NULL};
    dmn_config c;
    char err[256];
    REQUIRE(dmn_config_load(&c, 6, argv, env, err, sizeof err) == 0);
    CHECK_EQ(c.port, 1111);        /* file only */
    CHECK_EQ(c.admin_port, 3333);  /* env beats file */
    CHECK_EQ(c.max_waiting, 9);    /* flag beats env and file */
    CHECK_STR(c.devices, "cpu,fpga-emu:0");
    CHECK_STR(c.host, "127.0.0.1"); /* quotes stripped */
    CHECK_EQ(c.max_body_bytes, 2 << 20);
    CHECK_EQ(c.max_connections, 1024); /* default */
    CHECK_STR(c.config, path);
    dmn_config_deinit(&c);
    /* TANDEM_CONFIG names the file when no --config is given */
    char envc[600];
    snprintf(envc, sizeof envc, "TANDEM_CONFIG=%s", path);
    char *env2[] = {envc, NULL};
    char *argv2[] = {"serve", NULL};
    REQUIRE(dmn_config_load(&c, 1, argv2, env2, err, sizeof err) == 0);
    CHECK_EQ(c.port, 1111);
    dmn_config_deinit(&c);
}

TEST(config_errors)
{
    char *env[] = {NULL};
    dmn_config c;
    char err[256];
    struct {
        const char *file; /* NULL: no file */
        const char *flag;
        const char *want; /* substring of the message */
    } cases[] = {
        {"port = 70000\n", NULL, "port"},
        /* cards configured: their run watchdog must fire before systemd's */
        {"devices = cpu,fpga-emu:0\nwatchdog_stall = 3\n", NULL, "fpga_run_timeout_ms"},
        {"colour = blue\n", NULL, "unknown key 'colour'"},
        {"just text\n", NULL, "key = value"},
        {"max_body_bytes = 12Q\n", NULL, "max_body_bytes"},
        {"request_timeout = -1\n", NULL, "request_timeout"},
        {NULL, "--nope=1", "unknown flag"},
        {NULL, "--port=abc", "port"},
        {NULL, "--max-n=0", "max_n"},
        {NULL, "--port", "needs a value"},
        {NULL, "stray", "unexpected argument"},
        {"gpu_dtype = fp8\n", NULL, "gpu_dtype must be auto, bf16 or fp16, got 'fp8'"},
        {NULL, "--gpu-dtype=BF16", "gpu_dtype must be auto, bf16 or fp16"},
        /* the sparse method's keys, checked at start-up as a request's are (naming the key) */
        {"sparse_mode = sliding\n", NULL, "sparse_mode must be flexprefill, xattention or trishape"},
        {"sparse_mode = xattention\nxattention_stride = 3\n", NULL, "xattention_stride: must divide"},
        {"sparse_mode = xattention\nxattention_block_size = 48\n", NULL, "xattention_block_size: must be"},
        {"sparse_mode = trishape\nnum_retained_recent_tokens_in_cache = 1000\n", NULL,
         "num_retained_recent_tokens_in_cache: must be a multiple of 128"},
        {NULL, "--xattention-threshold=0", "xattention_threshold"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[4] = {"serve", NULL, NULL, NULL};
        int argc = 1;
        if (cases[i].file) {
            argv[argc++] = "--config";
            argv[argc++] = write_file("bad.conf", cases[i].file);
        } else {
            argv[argc++] = (char *)cases[i].flag;
        }
        err[0] = 0;
        int rc = dmn_config_load(&c, argc, argv, env, err, sizeof err);
        CHECK_MSG(rc == -1, "case %zu: rc %d", i, rc);
        CHECK_MSG(strstr(err, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, err, cases[i].want);
        dmn_config_deinit(&c);
    }
    char *argv[] = {"serve", "--config", "/nonexistent/x.conf", NULL};
    CHECK_EQ(dmn_config_load(&c, 3, argv, env, err, sizeof err), -1);
    CHECK(strstr(err, "/nonexistent/x.conf") != NULL);
    dmn_config_deinit(&c);
}

/* A lending node's devices reach its peers as "NODE/device": a node name of up to 63 characters
 * (a DNS label: what a host or pod name is) and a device name of up to 63, 127 together. A name
 * over 63 is refused at load rather than cut (two pods with one long prefix would share the cut
 * name), and so is a lent device whose name passes 63 (every peer would refuse it, retried
 * forever). Version 4 of the peer protocol held 31 for NODE/device together: a Deployment's
 * 23-character pod name could not lend fpga-emu:0. */
TEST(config_node_name_fits_device_names)
{
    char *env[] = {NULL};
    dmn_config c;
    char err[512];
    /* 63 and 64 characters: a realistic pod name padded, and one more */
    static const char n63[] = "tandem-decode-pool-eu-west-1a-inference-fleet2-7d9f8b6c5d-x2k4z";
    static const char n64[] = "tandem-decode-pool-eu-west-1a-inference-fleet2-7d9f8b6c5d-x2k4z9";
    /* device names of 63 (lent as n63/...: 127) and 64 (128) characters */
    static const char d63[] = "fpga-emu-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:0";
    static const char d64[] = "fpga-emu-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:0";
    _Static_assert(sizeof n63 == 64 && sizeof n64 == 65 && sizeof d63 == 64 && sizeof d64 == 65,
                   "the lengths the cases say");
    struct {
        const char *name, *lent;
        int ok;
        const char *want;
    } cases[] = {
        /* a Deployment's pod name: tandem-<10-character hash>-<5> is 23 */
        {"tandem-7d9c6b5f4d-x2x9q", "fpga:0", 1, NULL},
        {"tandem-7d9c6b5f4d-x2x9q", "cuda:0,fpga:1", 1, NULL},
        /* the audit's 26-character pod name with an emulated card: refused under version 4 */
        {"tandem-node-7d9c6b5f4d-x2x", "fpga-emu:0", 1, NULL},
        {"tandem-node-7d9c6b5f4d-x2x", "cpu", 1, NULL},
        {n63, "fpga-emu:0", 1, NULL},
        {n63, "fpga-emu", 1, NULL}, /* named fpga-emu:0 */
        {n63, "cpu, fpga:10, cuda:007", 1, NULL},
        {n63, d63, 1, NULL}, /* NODE/device: 63 + 1 + 63 = 127 */
        {n63, d64, 0,
         "is a device name of 64 characters: a lent device's name may have at most 63"},
        {"b", d64, 0, "name may have at most 63 (its peers name it b/device, in at most 127)"},
        {n63, "", 1, NULL}, /* lending nothing */
        {n64, "", 0, "is 64 characters: at most 63"},
        {n64, "fpga-emu:0", 0, "is 64 characters: at most 63"}, /* 64 + 1 + 10 */
        {"node/1", "", 0, "A-Z a-z 0-9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a1[128], a2[128];
        snprintf(a1, sizeof a1, "--node-name=%s", cases[i].name);
        snprintf(a2, sizeof a2, "--peer-devices=%s", cases[i].lent);
        char *argv[] = {"serve", a1, a2, "--kv-listen=127.0.0.1:0", NULL};
        err[0] = 0;
        int rc = dmn_config_load(&c, 4, argv, env, err, sizeof err);
        CHECK_MSG(rc == (cases[i].ok ? 0 : -1), "case %zu: rc %d (%s)", i, rc, err);
        if (!cases[i].ok)
            CHECK_MSG(strstr(err, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, err,
                      cases[i].want);
        dmn_config_deinit(&c);
    }
    /* without kv_listen nothing is lent: the devices named are not checked */
    char a1[128], a2[128];
    snprintf(a1, sizeof a1, "--node-name=%s", n63);
    snprintf(a2, sizeof a2, "--peer-devices=%s", d64);
    char *argv[] = {"serve", a1, a2, NULL};
    CHECK_EQ(dmn_config_load(&c, 3, argv, env, err, sizeof err), 0);
    dmn_config_deinit(&c);
    /* the host name, which stands for an unset node_name, goes through the same check */
    CHECK_EQ(
        dmn_config_check_node_name(n63, "node_name (the host name)", "fpga-emu:0", err, sizeof err),
        0);
    CHECK_EQ(dmn_config_check_node_name(n64, "node_name (the host name)", "", err, sizeof err), -1);
    CHECK_MSG(strstr(err, "node_name (the host name) 'tandem-decode-pool-eu-west-1a-inference-"
                          "fleet2-7d9f8b6c5d-x2k4z9' is 64 characters: at most 63") != NULL,
              "%s", err);
}

/* served_model_name past 127 characters was cut, and a request naming it got 404: refused at
 * load; the model directory's name stands for it under the same bound, trailing slashes left out.
 */
TEST(config_served_name_bounds)
{
    char *env[] = {NULL};
    dmn_config c;
    char err[256], name[128], long_name[200];
    memset(long_name, 'm', 128);
    long_name[128] = 0;
    char flag[220];
    snprintf(flag, sizeof flag, "--served-model-name=%s", long_name);
    char *argv[] = {"serve", flag, NULL};
    CHECK_EQ(dmn_config_load(&c, 2, argv, env, err, sizeof err), -1);
    CHECK(strstr(err, "served_model_name is 128 characters: at most 127") != NULL);
    dmn_config_deinit(&c);
    long_name[127] = 0; /* 127: served whole */
    snprintf(flag, sizeof flag, "--served-model-name=%s", long_name);
    REQUIRE(dmn_config_load(&c, 2, argv, env, err, sizeof err) == 0);
    REQUIRE(dmn_config_served_name(&c, name, sizeof name, err, sizeof err) == 0);
    CHECK_EQ((int)strlen(name), 127);
    dmn_config_deinit(&c);

    dmn_config_defaults(&c);
    free(c.model);
    c.model = strdup("/srv/models/Llama-3.1-8B-Instruct//");
    REQUIRE(dmn_config_served_name(&c, name, sizeof name, err, sizeof err) == 0);
    CHECK_STR(name, "Llama-3.1-8B-Instruct");
    free(c.model);
    long_name[127] = 'm'; /* a directory named with 128 characters */
    char dir[256];
    snprintf(dir, sizeof dir, "/srv/%s", long_name);
    c.model = strdup(dir);
    CHECK_EQ(dmn_config_served_name(&c, name, sizeof name, err, sizeof err), -1);
    CHECK(strstr(err, "128 characters") && strstr(err, "set served_model_name"));
    dmn_config_deinit(&c);
}

/* gpu_dtype goes through every layer like any key, checked once after the last. */
TEST(config_gpu_dtype)
{
    dmn_config c;
    char err[256];
    dmn_config_defaults(&c);
    CHECK_STR(c.gpu_dtype, "auto");
    dmn_config_deinit(&c);
    char *path = write_file("g.conf", "gpu_dtype = bf16\n");
    char *env[] = {"TANDEM_GPU_DTYPE=fp16", NULL}, *noenv[] = {NULL};
    char *argv[] = {"serve", "--config", path, "--gpu-dtype", "auto", NULL};
    REQUIRE(dmn_config_load(&c, 3, argv, noenv, err, sizeof err) == 0);
    CHECK_STR(c.gpu_dtype, "bf16"); /* file */
    dmn_config_deinit(&c);
    REQUIRE(dmn_config_load(&c, 3, argv, env, err, sizeof err) == 0);
    CHECK_STR(c.gpu_dtype, "fp16"); /* env beats file */
    dmn_config_deinit(&c);
    REQUIRE(dmn_config_load(&c, 5, argv, env, err, sizeof err) == 0);
    CHECK_STR(c.gpu_dtype, "auto"); /* flag beats env */
    dmn_config_deinit(&c);
}

/* The config file is read whole, at most 1 MiB, before a line is parsed: a NUL byte, a file past
 * the bound (a device that never ends included), a line past 4,095 bytes and a directory are
 * refused with the file's name; the last line needs no newline, CRLF lines read as LF. */
TEST(config_file_bounds)
{
    char *env[] = {NULL};
    dmn_config c;
    char err[512];
    char path[512];
    snprintf(path, sizeof path, "%s/b.conf", t_tmpdir());
    char *argv[] = {"serve", "--config", path, NULL};
    static const char nul[] = "port = 8080\n\0admin_port = 9\n";
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fwrite(nul, 1, sizeof nul - 1, f);
    fclose(f);
    CHECK_EQ(dmn_config_load(&c, 3, argv, env, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "NUL") && strstr(err, path), "%s", err);
    dmn_config_deinit(&c);
    f = fopen(path, "wb");
    REQUIRE(f);
    for (int i = 0; i < (1 << 20) / 32 + 1; i++) fputs("# a comment line of 32 bytes ..\n", f);
    fclose(f);
    CHECK_EQ(dmn_config_load(&c, 3, argv, env, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "over 1 MiB"), "%s", err);
    dmn_config_deinit(&c);
    char *dev[] = {"serve", "--config", "/dev/zero", NULL};
    CHECK_EQ(dmn_config_load(&c, 3, dev, env, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "/dev/zero"), "%s", err);
    dmn_config_deinit(&c);
    f = fopen(path, "wb");
    REQUIRE(f);
    fputs("# ", f);
    for (int i = 0; i < 4096; i++) fputc('x', f);
    fputs("\n", f);
    fclose(f);
    CHECK_EQ(dmn_config_load(&c, 3, argv, env, err, sizeof err), -1);
    CHECK_MSG(strstr(err, ":1: line too long"), "%s", err);
    dmn_config_deinit(&c);
    /* the limit exactly: 4,095 bytes before the newline are a line, 4,096 are not */
    for (int len = 4095; len <= 4096; len++) {
        f = fopen(path, "wb");
        REQUIRE(f);
        fputs("#", f);
        for (int i = 1; i < len; i++) fputc('x', f);
        fputs("\nport = 8080\n", f);
        fclose(f);
        CHECK_EQ(dmn_config_load(&c, 3, argv, env, err, sizeof err), len == 4095 ? 0 : -1);
        dmn_config_deinit(&c);
    }
    /* a directory is not a config file */
    char *dir[] = {"serve", "--config", (char *)t_tmpdir(), NULL};
    CHECK_EQ(dmn_config_load(&c, 3, dir, env, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "directory"), "%s", err);
    dmn_config_deinit(&c);
    write_file("b.conf", "port = 8080\r\n# last line without a newline\r\nadmin_port = 9091");
    CHECK_EQ(dmn_config_load(&c, 3, argv, env, err, sizeof err), 0);
    CHECK_EQ(c.port, 8080);
    CHECK_EQ(c.admin_port, 9091);
    dmn_config_deinit(&c);
}

TEST(config_bytes)
{
    long long v;
    CHECK(dmn_config_parse_bytes("64", &v) == 0 && v == 64);
    CHECK(dmn_config_parse_bytes("4k", &v) == 0 && v == 4096);
    CHECK(dmn_config_parse_bytes("16M", &v) == 0 && v == 16 << 20);
    CHECK(dmn_config_parse_bytes("1G", &v) == 0 && v == 1 << 30);
    CHECK(dmn_config_parse_bytes("1.5k", &v) == 0 && v == 1536);
    CHECK(dmn_config_parse_bytes("2MB", &v) == 0 && v == 2 << 20);
    CHECK(dmn_config_parse_bytes("-1", &v) < 0);
    CHECK(dmn_config_parse_bytes("x", &v) < 0);
    CHECK(dmn_config_parse_bytes("1Z", &v) < 0);
    CHECK(dmn_config_parse_bytes("99999999T", &v) < 0);
}

TEST(config_example_documents_every_key)
{
    size_t len;
    char *text, why[160];
    int rd =
        proto_textfile_read("deploy/tandem.conf.example", 1u << 20, &text, &len, why, sizeof why);
    CHECK_MSG(rd == 0, "%s", why);
    REQUIRE(rd == 0);
    for (int i = 0; dmn_config_key_name(i); i++) {
        char pat[80];
        snprintf(pat, sizeof pat, "\n# %s =", dmn_config_key_name(i));
        char pat2[80];
        snprintf(pat2, sizeof pat2, "\n%s =", dmn_config_key_name(i));
        CHECK_MSG(strstr(text, pat) || strstr(text, pat2), "deploy/tandem.conf.example does not document '%s'",
                  dmn_config_key_name(i));
    }
    /* and the example itself loads (every line it sets is a valid key and value) */
    char *argv[] = {"serve", "--config", "deploy/tandem.conf.example", NULL};
    char *env[] = {NULL};
    dmn_config c;
    char err[256];
    CHECK_MSG(dmn_config_load(&c, 3, argv, env, err, sizeof err) == 0, "%s", err);
    dmn_config_deinit(&c);
    proto_textfile_free(text, len);
}

TEST(config_resolves_bundled_model)
{
    dmn_config c;
    dmn_config_defaults(&c);
    char err[256];
    /* the test binary lives in build/ (or build/san/), like the daemon */
    REQUIRE(dmn_config_resolve_model(&c, err, sizeof err) == 0);
    CHECK(strstr(c.model, "models/stories260K") != NULL);
    free(c.model);
    c.model = strdup("/nonexistent");
    CHECK_EQ(dmn_config_resolve_model(&c, err, sizeof err), -1);
    dmn_config_deinit(&c);
}

TEST(auth_keys)
{
    dmn_auth *a = dmn_auth_new();
    CHECK_EQ(dmn_auth_count(a), 0);
    CHECK(dmn_auth_check_bearer(a, NULL)); /* no keys: open */
    REQUIRE(dmn_auth_add_key(a, "sk-one", 6) == 0);
    CHECK_EQ(dmn_auth_add_key(a, "", 0), -1);
    char *path = write_file("keys", "# team keys\n\n  sk-two  \nsk-three\r\n");
    char err[256];
    CHECK_EQ(dmn_auth_add_file(a, path, err, sizeof err), 2);
    CHECK_EQ(dmn_auth_count(a), 3);
    CHECK(dmn_auth_check(a, "sk-one", 6));
    CHECK(dmn_auth_check(a, "sk-two", 6));
    CHECK(dmn_auth_check(a, "sk-three", 8));
    CHECK(!dmn_auth_check(a, "sk-on", 5));
    CHECK(!dmn_auth_check(a, "sk-one ", 7));
    CHECK(!dmn_auth_check(a, "SK-ONE", 6));
    CHECK(dmn_auth_check_bearer(a, "Bearer sk-two"));
    CHECK(dmn_auth_check_bearer(a, "bearer   sk-two "));
    CHECK(!dmn_auth_check_bearer(a, "sk-two"));
    CHECK(!dmn_auth_check_bearer(a, "Basic sk-two"));
    CHECK(!dmn_auth_check_bearer(a, "Bearer"));
    CHECK(!dmn_auth_check_bearer(a, "Bearer "));
    CHECK(!dmn_auth_check_bearer(a, "Bearersk-two"));
    CHECK(!dmn_auth_check_bearer(a, NULL));
    CHECK_EQ(dmn_auth_add_file(a, write_file("empty", "# nothing\n"), err, sizeof err), -1);
    CHECK(strstr(err, "no key") != NULL);
    CHECK_EQ(dmn_auth_add_file(a, "/nonexistent", err, sizeof err), -1);
    dmn_auth_free(a);
}

/* A key file is read whole and bounded (proto/textfile.h): a key line too long or with a NUL byte
 * is refused whole with its line's number — fgets in 4 KiB pieces made a 5,000-byte line two
 * keys, each a part of it, and a NUL byte cut a key short —, a device that never ends or a
 * directory are refused, a 4,095-byte key is one key. */
TEST(auth_key_file_bounds)
{
    dmn_auth *a = dmn_auth_new();
    char err[256], path[512];
    char *big = malloc(5002);
    REQUIRE(big);
    memset(big, 'k', 5000);
    big[5000] = '\n';
    big[5001] = 0;
    snprintf(path, sizeof path, "%s/keys.long", t_tmpdir());
    REQUIRE(t_write_file(path, big, 5001) == 0);
    CHECK_EQ(dmn_auth_add_file(a, path, err, sizeof err), -1);
    CHECK_MSG(strstr(err, ":1: a key over 4,095 bytes"), "%s", err);
    CHECK_EQ(dmn_auth_count(a), 0);
    CHECK(!dmn_auth_check(a, big, 4095));              /* no part of it became a key */
    REQUIRE(t_write_file(path, big + 905, 4096) == 0); /* 4,095 bytes and the line's end */
    CHECK_EQ(dmn_auth_add_file(a, path, err, sizeof err), 1);
    CHECK(dmn_auth_check(a, big, 4095));
    REQUIRE(t_write_file(path, "sk-one\nsk-t\0wo\n", 15) == 0);
    CHECK_EQ(dmn_auth_add_file(a, path, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "NUL") && strstr(err, path), "%s", err);
    CHECK(!dmn_auth_check(a, "sk-t", 4));
    CHECK_EQ(dmn_auth_add_file(a, "/dev/zero", err, sizeof err), -1);
    CHECK_MSG(strstr(err, "/dev/zero"), "%s", err);
    CHECK_EQ(dmn_auth_add_file(a, t_tmpdir(), err, sizeof err), -1);
    CHECK_MSG(strstr(err, "directory"), "%s", err);
    /* the text parser alone: a NUL byte inside a line, as a fuzzer may give it */
    CHECK_EQ(dmn_auth_add_text(a, "x\n\0y\n", 5, "t", err, sizeof err), -1);
    CHECK_MSG(strstr(err, "t:2: a NUL byte"), "%s", err);
    free(big);
    dmn_auth_free(a);
}

TEST(auth_compare_is_constant_time_by_construction)
{
    /* Timing is not asserted (tests assert correctness, not timings); what makes the compare
     * constant-time is that it hashes first and compares every stored digest with
     * CRYPTO_memcmp. Check the observable half: a key differing only in its last byte and one
     * differing in its first byte are both refused, for every stored key position. */
    dmn_auth *a = dmn_auth_new();
    const char *keys[] = {"alpha-key-0001", "alpha-key-0002", "alpha-key-0003"};
    for (int i = 0; i < 3; i++) dmn_auth_add_key(a, keys[i], strlen(keys[i]));
    for (int i = 0; i < 3; i++) {
        char k[32];
        strcpy(k, keys[i]);
        CHECK(dmn_auth_check(a, k, strlen(k)));
        k[strlen(k) - 1] = 'x';
        CHECK(!dmn_auth_check(a, k, strlen(k)));
        strcpy(k, keys[i]);
        k[0] = 'A';
        CHECK(!dmn_auth_check(a, k, strlen(k)));
    }
    dmn_auth_free(a);
}

TEST(metrics_histogram_format)
{
    static const double b[] = {0.1, 0.5, 1};
    dmn_hist h;
    dmn_hist_init(&h, b, 3);
    dmn_hist_observe(&h, 0.05);
    dmn_hist_observe(&h, 0.1); /* le is inclusive */
    dmn_hist_observe(&h, 0.7);
    dmn_hist_observe(&h, 3);
    dmn_hist_observe(&h, NAN); /* ignored */
    proto_buf buf;
    proto_buf_init(&buf);
    dmn_prom_hist(&buf, "tandem_x_seconds", "An example.", &h);
    CHECK_STR(buf.p, "# HELP tandem_x_seconds An example.\n"
                     "# TYPE tandem_x_seconds histogram\n"
                     "tandem_x_seconds_bucket{le=\"0.1\"} 2\n"
                     "tandem_x_seconds_bucket{le=\"0.5\"} 2\n"
                     "tandem_x_seconds_bucket{le=\"1\"} 3\n"
                     "tandem_x_seconds_bucket{le=\"+Inf\"} 4\n"
                     "tandem_x_seconds_sum 3.85\n"
                     "tandem_x_seconds_count 4\n");
    proto_buf_deinit(&buf);
    proto_buf_init(&buf);
    dmn_prom_label_value(&buf, "a\"b\\c\nd");
    CHECK_STR(buf.p, "\"a\\\"b\\\\c\\nd\"");
    proto_buf_deinit(&buf);
}

TEST(metrics_render_families)
{
    dmn_metrics m;
    dmn_metrics_init(&m);
    dmn_hist_observe(&m.ttft, 0.002);
    m.prompt_tokens = 10;
    m.success[DMN_FINISH_LENGTH] = 2;
    m.rejected_queue_full = 5;
    dmn_metrics_count_status(&m, 429);
    dmn_metrics_count_status(&m, 418); /* "other" */
    dmn_metrics_dev dev = {.name = "cpu", .kind = "cpu", .health = "ok", .busy_seconds = 1.5,
                           .mem_total = 1000, .mem_used = 250, .running = 2, .steps = 7,
                           .tokens = 70,
                           .kv = {.paged = 1, .blocks_total = 8, .blocks_used = 5,
                                  .blocks_cached = 3, .queries = 40, .hits = 32}};
    proto_buf b;
    proto_buf_init(&b);
    dmn_metrics_render(&b, &m, 1, 3, &dev, 1, 1, 0);
    REQUIRE(b.p && !b.oom);
    const char *want[] = {
        "tandem_num_requests_running 1\n",
        "tandem_num_requests_waiting 3\n",
        "tandem_prompt_tokens_total 10\n",
        "tandem_request_success_total{finished_reason=\"length\"} 2\n",
        "tandem_http_responses_total{status=\"429\"} 1\n",
        "tandem_http_responses_total{status=\"other\"} 1\n",
        "# TYPE tandem_request_rejected_queue_full_total counter\n",
        "tandem_request_rejected_queue_full_total 5\n", /* counted, once never exported */
        "tandem_device_busy_seconds_total{device=\"cpu\",kind=\"cpu\"} 1.5\n",
        "tandem_device_memory_used_bytes{device=\"cpu\",kind=\"cpu\"} 250\n",
        "tandem_device_health{device=\"cpu\",kind=\"cpu\",state=\"ok\"} 1\n",
        "tandem_device_health{device=\"cpu\",kind=\"cpu\",state=\"failed\"} 0\n",
        "# TYPE tandem_time_to_first_token_seconds histogram\n",
        "tandem_time_to_first_token_seconds_count 1\n",
        "# TYPE tandem_inter_token_latency_seconds histogram\n",
        "# TYPE tandem_e2e_request_latency_seconds histogram\n",
        "# TYPE tandem_request_queue_time_seconds histogram\n",
        "# TYPE tandem_generation_tokens_total counter\n",
        "tandem_device_kv_cache_usage_perc{device=\"cpu\",kind=\"cpu\"} 0.25\n", /* (5-3)/8 */
        "tandem_kv_cache_usage_perc 0.25\n",
        "tandem_prefix_cache_queries_total 40\n",
        "tandem_prefix_cache_hits_total 32\n",
        "tandem_device_prefix_cache_hits_total{device=\"cpu\",kind=\"cpu\"} 32\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(strstr(b.p, want[i]) != NULL, "missing: %s", want[i]);
    /* every line is a comment or "name{labels} value" */
    for (char *line = b.p; *line;) {
        char *end = strchr(line, '\n');
        REQUIRE(end);
        CHECK(line[0] == '#' || strncmp(line, "tandem_", 7) == 0);
        /* ':' is reserved for recording rules (promtool check metrics flags it) */
        size_t name_len = line[0] == '#' ? 0 : strcspn(line, "{ ");
        CHECK_MSG(memchr(line, ':', name_len) == NULL, "a ':' in %.*s", (int)name_len, line);
        line = end + 1;
    }
    proto_buf_deinit(&b);
}
