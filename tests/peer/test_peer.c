/* tests/peer — the peer protocol (peer/msg.h), its proofs (peer/auth.h, against Python's hmac),
 * and two nodes in one process over UCX on loopback (peer/peer.h): a device lent by one is
 * driven by the other through the remote backend and decodes as the device itself does; a
 * wrong key, an oversized or malformed frame and a message out of turn are refused while the
 * server goes on serving; a node that stops is noticed. */
#include "tests/test.h"
#include "devices/devices.h"
#include "peer/auth.h"
#include "peer/kv_rx.h"
#include "peer/link.h"
#include "peer/peer.h"
#include "proto/kv_wire.h"
#include "tests/peer/peer_util.h"
#include "tests/util.h"
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>


/* ---------------------------------------------------------------- messages and proofs */

TEST(peer_mac_matches_python_hmac)
{
    /* python3: hmac.new(key, b'tandem-peer-1 s' + nc + ns, hashlib.sha256).hexdigest(), with
     * nc = bytes(range(32)), ns = bytes(range(100, 132)); and 'c' over ns + nc */
    static const char *want_s = "0de24cc6ce1ac5f775aa1bbf755c895746976003d2ffb098f6c97e5357f22fc3";
    static const char *want_c = "fd08cfcf45a52600211ab272690a75d16abb7727186414ca288d7cd3bfa23ef8";
    uint8_t nc[32], ns[32], mac[32];
    for (int i = 0; i < 32; i++) nc[i] = (uint8_t)i, ns[i] = (uint8_t)(100 + i);
    char hex[65];
    peer_mac((const uint8_t *)KEY, strlen(KEY), 's', nc, ns, mac);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", mac[i]);
    CHECK_STR(hex, want_s);
    peer_mac((const uint8_t *)KEY, strlen(KEY), 'c', ns, nc, mac);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", mac[i]);
    CHECK_STR(hex, want_c);
    uint8_t other[32];
    memcpy(other, mac, 32);
    CHECK(peer_mac_equal(mac, other));
    other[31] ^= 1;
    CHECK(!peer_mac_equal(mac, other));
}

TEST(peer_key_bounds)
{
    char key[PEER_KEY_MAX + 1], err[256];
    CHECK(peer_key_load("short", NULL, key, sizeof key, err, sizeof err) < 0);
    CHECK(peer_key_load("", "", key, sizeof key, err, sizeof err) < 0);
    CHECK(peer_key_load("  " KEY "\n", NULL, key, sizeof key, err, sizeof err) == 0);
    CHECK_STR(key, KEY);
    char path[512];
    snprintf(path, sizeof path, "%s/key", t_tmpdir());
    CHECK(t_write_file(path, KEY "\nignored\n", strlen(KEY) + 9) == 0);
    CHECK(peer_key_load(NULL, path, key, sizeof key, err, sizeof err) == 0);
    CHECK_STR(key, KEY);
    CHECK(peer_key_load(NULL, "/nonexistent/key", key, sizeof key, err, sizeof err) < 0);
    /* read whole and bounded: a NUL byte (it cut the key short: 16 bytes of a longer key passed),
     * an empty first line, a device that never ends are refused, naming the file */
    CHECK(t_write_file(path, KEY "\0tail\n", strlen(KEY) + 6) == 0);
    CHECK(peer_key_load(NULL, path, key, sizeof key, err, sizeof err) < 0);
    CHECK_MSG(strstr(err, "NUL") && strstr(err, path), "%s", err);
    CHECK(t_write_file(path, "\n" KEY "\n", strlen(KEY) + 2) == 0);
    CHECK(peer_key_load(NULL, path, key, sizeof key, err, sizeof err) < 0);
    CHECK_MSG(strstr(err, "no key"), "%s", err);
    CHECK(peer_key_load(NULL, "/dev/zero", key, sizeof key, err, sizeof err) < 0);
    CHECK_MSG(strstr(err, "/dev/zero"), "%s", err);
    /* the parser alone: one line only, bounds */
    CHECK(peer_key_parse(KEY "\nmore", strlen(KEY) + 5, key, sizeof key, err, sizeof err) < 0);
    CHECK_MSG(strstr(err, "more than one line"), "%s", err);
    CHECK(peer_key_parse(KEY, strlen(KEY), key, strlen(KEY), err, sizeof err) < 0); /* no room */
    CHECK(peer_key_parse(KEY, strlen(KEY), key, sizeof key, err, sizeof err) == 0);
}

TEST(peer_msg_bounds)
{
    uint8_t h[PEER_HEADER_BYTES];
    peer_header ph;
    peer_header_write(h, PEER_HELLO, 100);
    CHECK_EQ(peer_header_read(h, PEER_MAX_PREAUTH, &ph), PEER_OK);
    CHECK_EQ(ph.type, PEER_HELLO);
    peer_header_write(h, PEER_HELLO, PEER_MAX_PREAUTH + 1); /* oversized before the handshake */
    CHECK_EQ(peer_header_read(h, PEER_MAX_PREAUTH, &ph), PEER_ERR_PROTO);
    peer_header_write(h, PEER_KV, PEER_MAX_PAYLOAD + 1u);
    CHECK_EQ(peer_header_read(h, PEER_MAX_PAYLOAD, &ph), PEER_ERR_PROTO);
    peer_header_write(h, PEER_HELLO, 10);
    h[4] = 1; /* an older node's version (its device list and KV chunks are not ours) */
    CHECK_EQ(peer_header_read(h, PEER_MAX_PREAUTH, &ph), PEER_ERR_PROTO);
    h[4] = 2; /* the version that announced each tagged chunk on the stream (KV_TAG) */
    CHECK_EQ(peer_header_read(h, PEER_MAX_PREAUTH, &ph), PEER_ERR_PROTO);
    h[4] = 3; /* the version whose tagged chunks carried no KV token */
    CHECK_EQ(peer_header_read(h, PEER_MAX_PREAUTH, &ph), PEER_ERR_PROTO);
    h[4] = 4; /* the version of 31-character names (a device list's names in 32 bytes) */
    CHECK_EQ(peer_header_read(h, PEER_MAX_PREAUTH, &ph), PEER_ERR_PROTO);
    h[4] = 6; /* unknown version */
    CHECK_EQ(peer_header_read(h, PEER_MAX_PREAUTH, &ph), PEER_ERR_PROTO);
    peer_header_write(h, PEER_TYPE_LAST + 1, 0);
    CHECK_EQ(peer_header_read(h, PEER_MAX_PREAUTH, &ph), PEER_ERR_PROTO);
    peer_header_write(h, PEER_PING, 0);
    h[0] = 'X';
    CHECK_EQ(peer_header_read(h, PEER_MAX_PREAUTH, &ph), PEER_ERR_PROTO);

    /* a device list: round trip, then counts that disagree with the bytes */
    static peer_info in, out;
    memset(&in, 0, sizeof in);
    in.vocab = 512, in.n_layers = 5, in.n_kv_heads = 4, in.head_dim = 8, in.n_devs = 2;
    for (int i = 0; i < 2; i++) {
        snprintf(in.devs[i].name, sizeof in.devs[i].name, "fpga-emu:%d", i);
        in.devs[i].kind = ACCEL_KIND_FPGA, in.devs[i].caps = ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT;
        in.devs[i].max_batch = 1, in.devs[i].mem_total = 8ull << 30, in.devs[i].mem_free = 1 << 20;
        in.devs[i].kv_bytes_per_token = 400;
        in.devs[i].kv_block_tokens = 16 << i;
    }
    /* device 1 states a decode curve (device 0 none) */
    peer_curve *cv = &in.devs[1].curve;
    cv->n = 3, cv->ctx = 1024, cv->s_per_pos = 2.5e-9;
    int cb[3] = {1, 4, 16};
    double cs[3] = {0.004, 0.0051, 0.0093};
    for (int i = 0; i < 3; i++) cv->batch[i] = cb[i], cv->step_s[i] = cs[i];
    static uint8_t buf[PEER_INFO_MAX_BYTES];
    size_t n = peer_info_write(buf, &in);
    CHECK_EQ(n, peer_info_bytes(2));
    REQUIRE(peer_info_read(buf, n, &out) == PEER_OK);
    CHECK_STR(out.devs[1].name, "fpga-emu:1");
    CHECK_EQ(out.devs[0].mem_total, 8ull << 30);
    CHECK_EQ(out.devs[0].kv_block_tokens, 16);
    CHECK_EQ(out.devs[1].kv_block_tokens, 32);
    CHECK_EQ(out.devs[0].curve.n, 0);
    CHECK(!memcmp(&out.devs[1].curve, cv, sizeof *cv)); /* exact: doubles travel as their bits */
    /* a curve outside its bounds is refused: batches not increasing, a time that is NaN, past
     * 1000 s or not positive, a point past n that is not zero, a block size past the format's */
    const size_t nb = PEER_DEV_NAME_BYTES; /* a device's fixed fields follow its name */
    const size_t d1 = PEER_INFO_FIXED + PEER_DEV_INFO_BYTES, cq = d1 + nb + 44;
    struct {
        size_t off;
        uint64_t v;
        int bytes;
    } bad[] = {
        {cq, PEER_CURVE_MAX + 1, 4},                  /* n */
        {cq + 4 + 4, 1, 4},                           /* batch[1] == batch[0] */
        {cq + 4, 0, 4},                               /* batch[0] 0 */
        {cq + 4 + 8, PEER_MAX_BATCH + 1, 4},          /* batch[2] too large */
        {cq + 4 + 48 + 8, 0x7ff8000000000000ull, 8},  /* step_s[1] NaN */
        {cq + 4 + 48, 0x408f400000000000ull, 8},      /* step_s[0] 1000 s */
        {cq + 4 + 48, 0xbf50624dd2f1a9fcull, 8},      /* step_s[0] negative */
        {cq + 4 + 12, 64, 4},                         /* batch[3], past n */
        {cq + 4 + 48 + 24, 0x3ff0000000000000ull, 8}, /* step_s[3], past n */
        {cq + 4 + 144 + 8, 0x3ff0000000000000ull, 8}, /* s_per_pos 1 s */
        {d1 + nb + 40, 4097, 4},                      /* block size */
        {PEER_INFO_FIXED + nb + 44, 1, 4},            /* device 0: no curve, but a point */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        peer_info_write(buf, &in);
        if (bad[i].bytes == 4) peer_wr32(buf + bad[i].off, (uint32_t)bad[i].v);
        else peer_wr64(buf + bad[i].off, bad[i].v);
        CHECK_MSG(peer_info_read(buf, n, &out) == PEER_ERR_PROTO, "curve case %zu", i);
        CHECK_EQ(peer_curve_check(&in.devs[1].curve), PEER_OK);
    }
    peer_info_write(buf, &in);
    CHECK_EQ(peer_info_read(buf, n - 1, &out), PEER_ERR_PROTO);
    peer_wr32(buf + 32 + 16, PEER_MAX_DEVS + 1);
    CHECK_EQ(peer_info_read(buf, n, &out), PEER_ERR_PROTO);
    peer_wr32(buf + 32 + 16, 2);
    buf[52 + nb - 1] = 'x'; /* a name that does not end inside its field */
    CHECK_EQ(peer_info_read(buf, n, &out), PEER_ERR_PROTO);
    buf[52 + nb - 1] = 0;
    buf[52 + 4] = ' '; /* a space inside a name */
    CHECK_EQ(peer_info_read(buf, n, &out), PEER_ERR_PROTO);
    /* a device name of PEER_DEV_NAME_MAX (63) travels whole: version 4's field held 31 */
    memset(in.devs[0].name, 'd', PEER_DEV_NAME_MAX);
    in.devs[0].name[PEER_DEV_NAME_MAX] = 0;
    n = peer_info_write(buf, &in);
    REQUIRE(peer_info_read(buf, n, &out) == PEER_OK);
    CHECK_STR(out.devs[0].name, in.devs[0].name);
    CHECK(peer_dev_name_valid(in.devs[0].name, NULL, 0) && strlen(out.devs[0].name) == 63);
    in.devs[0].name[PEER_DEV_NAME_MAX - 1] = ' ';
    char why[200];
    CHECK(!peer_dev_name_valid(in.devs[0].name, why, sizeof why));
    CHECK_MSG(strstr(why, "1 to 63 printable characters, no spaces"), "%s", why);

    uint32_t seqs[PEER_MAX_BATCH], dev;
    int32_t ids[PEER_MAX_BATCH];
    int k;
    uint8_t d[8 + 8 * 2];
    uint32_t s2[2] = {1, 2};
    int32_t i2[2] = {5, 6};
    n = peer_decode_write(d, 0, 2, s2, i2);
    CHECK_EQ(peer_decode_read(d, n, &dev, &k, seqs, ids), PEER_OK);
    CHECK_EQ(k, 2);
    CHECK_EQ(ids[1], 6);
    peer_wr32(d + 4, PEER_MAX_BATCH + 1);
    CHECK_EQ(peer_decode_read(d, n, &dev, &k, seqs, ids), PEER_ERR_PROTO);
    peer_wr32(d + 4, 0);
    CHECK_EQ(peer_decode_read(d, 8, &dev, &k, seqs, ids), PEER_ERR_PROTO);

    /* DECODE_ARGMAX and its TOKENS answer: the rows wanted back, each token in the vocabulary */
    uint8_t da[8 + 9 * 2];
    unsigned char want[PEER_MAX_BATCH], w2[2] = {0, 1};
    int n_want;
    n = peer_decode_argmax_write(da, 3, 2, s2, i2, w2);
    CHECK_EQ(n, sizeof da);
    CHECK_EQ(peer_decode_argmax_read(da, n, &dev, &k, seqs, ids, want, &n_want), PEER_OK);
    CHECK(dev == 3 && k == 2 && ids[0] == 5 && seqs[1] == 2 && want[0] == 0 && want[1] == 1 && n_want == 1);
    CHECK_EQ(peer_decode_argmax_read(da, n - 1, &dev, &k, seqs, ids, want, &n_want), PEER_ERR_PROTO);
    da[n - 1] = 2; /* a want byte other than 0 or 1 */
    CHECK_EQ(peer_decode_argmax_read(da, n, &dev, &k, seqs, ids, want, &n_want), PEER_ERR_PROTO);
    n = peer_decode_argmax_write(da, 3, 2, s2, i2, NULL); /* NULL: every row */
    CHECK_EQ(peer_decode_argmax_read(da, n, &dev, &k, seqs, ids, want, &n_want), PEER_OK);
    CHECK_EQ(n_want, 2);
    uint8_t tk[PEER_TOKENS_FIXED + 4 * 2 + 4 * 4];
    int32_t am[2], tst;
    const uint8_t *tl;
    peer_tokens_write_fixed(tk, 0, 2, 4, 1);
    peer_wr32(tk + PEER_TOKENS_FIXED, 3);
    peer_wr32(tk + PEER_TOKENS_FIXED + 4, (uint32_t)-1); /* no finite logit */
    CHECK_EQ(peer_tokens_read(tk, sizeof tk, 2, 4, 1, &tst, am, &tl), PEER_OK);
    CHECK(tst == 0 && am[0] == 3 && am[1] == -1 && tl == tk + PEER_TOKENS_FIXED + 8);
    CHECK_EQ(peer_tokens_read(tk, sizeof tk, 2, 4, 2, &tst, am, &tl), PEER_ERR_PROTO); /* n_want */
    CHECK_EQ(peer_tokens_read(tk, sizeof tk - 4, 2, 4, 1, &tst, am, &tl), PEER_ERR_PROTO);
    peer_wr32(tk + PEER_TOKENS_FIXED, 4); /* past the vocabulary */
    CHECK_EQ(peer_tokens_read(tk, sizeof tk, 2, 4, 1, &tst, am, &tl), PEER_ERR_PROTO);
    peer_tokens_write_fixed(tk, ACCEL_ERR_NOMEM, 2, 4, 1);
    CHECK_EQ(peer_tokens_read(tk, PEER_TOKENS_FIXED, 2, 4, 1, &tst, am, &tl), PEER_OK);
    CHECK_EQ(tst, ACCEL_ERR_NOMEM);
    CHECK_EQ(peer_tokens_read(tk, sizeof tk, 2, 4, 1, &tst, am, &tl), PEER_ERR_PROTO); /* a failure has no body */

    /* a worker address and a tagged chunk's announcement */
    static uint8_t ab[PEER_ADDR_FIXED + PEER_ADDR_MAX + 1];
    const uint8_t *ap;
    size_t al;
    uint64_t base;
    size_t an = peer_addr_write(ab, 0x1122334455667788ull, "worker", 6);
    CHECK_EQ(peer_addr_read(ab, an, &base, &ap, &al), PEER_OK);
    CHECK(base == 0x1122334455667788ull && al == 6 && !memcmp(ap, "worker", 6));
    CHECK_EQ(peer_addr_read(ab, an - 1, &base, &ap, &al), PEER_ERR_PROTO);
    peer_wr32(ab + 8, 0);
    CHECK_EQ(peer_addr_read(ab, PEER_ADDR_FIXED, &base, &ap, &al), PEER_ERR_PROTO); /* empty */
    peer_wr32(ab + 8, PEER_ADDR_MAX + 1);
    CHECK_EQ(peer_addr_read(ab, sizeof ab, &base, &ap, &al), PEER_ERR_PROTO);      /* oversized */
    /* a tagged chunk's message: the token, its fixed part, then the chunk (bounded, flags known) */
    uint8_t kt[PEER_KV_TAG_FIXED + 8] = {0}, tok[PEER_MAC];
    for (int i = 0; i < PEER_MAC; i++) tok[i] = (uint8_t)(0xa0 + i);
    peer_kv kk = {1, 2, 3, PEER_KV_RUN_START, NULL, 0, 0, 0}, kr;
    peer_kv_tag_write_fixed(kt, tok, &kk);
    CHECK(!memcmp(kt, tok, PEER_MAC)); /* first, where the node compares it */
    CHECK_EQ(peer_kv_tag_read(kt, sizeof kt, &kr), PEER_OK);
    CHECK(kr.dev == 1 && kr.seq == 2 && kr.producer_crc == 3 && kr.flags == PEER_KV_RUN_START);
    CHECK(kr.bytes == kt + PEER_KV_TAG_FIXED && kr.n_bytes == 8);
    CHECK_EQ(peer_kv_tag_read(kt, PEER_KV_TAG_FIXED, &kr), PEER_ERR_PROTO); /* no chunk after it */
    CHECK_EQ(peer_kv_tag_read(kt, PEER_KV_TAG_FIXED - 1, &kr), PEER_ERR_PROTO);
    CHECK_EQ(peer_kv_tag_read(kt, PEER_KV_TAG_MAX + 1, &kr), PEER_ERR_PROTO); /* past the bound: not read */
    kk.flags = PEER_KV_RUN_START | PEER_KV_TAG_AHEAD; /* the tcp lanes' mark: known */
    peer_kv_tag_write_fixed(kt, tok, &kk);
    CHECK_EQ(peer_kv_tag_read(kt, sizeof kt, &kr), PEER_OK);
    CHECK(kr.flags == (PEER_KV_RUN_START | PEER_KV_TAG_AHEAD));
    kk.flags = 4;
    peer_kv_tag_write_fixed(kt, tok, &kk);
    CHECK_EQ(peer_kv_tag_read(kt, sizeof kt, &kr), PEER_ERR_PROTO);
    peer_kv_write_fixed(kt, &kk);
    CHECK_EQ(peer_kv_read(kt, sizeof kt, &kr), PEER_ERR_PROTO);
    kk.flags = PEER_KV_TAG_AHEAD; /* a stream KV frame has no lanes' mark */
    peer_kv_write_fixed(kt, &kk);
    CHECK_EQ(peer_kv_read(kt, sizeof kt, &kr), PEER_ERR_PROTO);

    peer_hello hello;
    uint8_t hb[64] = {0};
    hb[32] = 3;
    memcpy(hb + 33, "a\0b", 3); /* a NUL inside a name (found by fuzz_peer_msg) */
    CHECK_EQ(peer_hello_read(hb, 36, 0, &hello), PEER_ERR_PROTO);
    memcpy(hb + 33, "a/b", 3);
    CHECK_EQ(peer_hello_read(hb, 36, 0, &hello), PEER_ERR_PROTO);
    memcpy(hb + 33, "a-b", 3);
    CHECK_EQ(peer_hello_read(hb, 36, 0, &hello), PEER_OK);
    /* a node name of 63 characters (a DNS label: a pod's host name) passes, 64 does not */
    uint8_t hl[PEER_NONCE + 1 + PEER_NAME_MAX + 1] = {0};
    memset(hl + PEER_NONCE + 1, 'n', PEER_NAME_MAX + 1);
    hl[PEER_NONCE] = PEER_NAME_MAX;
    CHECK_EQ(peer_hello_read(hl, sizeof hl - 1, 0, &hello), PEER_OK);
    CHECK_EQ(strlen(hello.name), 63);
    hl[PEER_NONCE] = PEER_NAME_MAX + 1;
    CHECK_EQ(peer_hello_read(hl, sizeof hl, 0, &hello), PEER_ERR_PROTO);
    char nm[PEER_NAME_MAX + 2];
    memset(nm, 'n', sizeof nm - 1);
    nm[sizeof nm - 1] = 0;
    CHECK(!peer_name_valid(nm));
    nm[PEER_NAME_MAX] = 0;
    CHECK(peer_name_valid(nm));
}

/* ---------------------------------------------------------------- two nodes in one process */

/* CPU time of every thread of the process */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void remote_decodes(int poll_us, int rx_threads)
{
    two t;
    peer_link_set_poll_us(poll_us);
    /* read at the first chunk sent: layer 0 of the second import of each pass below (chunks are
     * counted per remote device) */
    setenv("TANDEM_PEER_FAULT", "kv_bitflip=6", 1);
    accel_dev *pf;
    if (two_start_pf(&t, rx_threads, &pf)) return;
    int32_t ids[] = {1, 403, 407, 261, 378, 429, 267, 297};
    int n = 8;
    kvcopy kv = {0};
    int32_t first;
    REQUIRE(prefill_kv(pf, ids, n, &kv, &first) == 0);
    int32_t want[12], got[12];
    CHECK_EQ(import_decode(t.lent, &kv, first, 12, want), 0); /* the lent device, driven here */

    /* the KV on the TCP stream, then as tagged messages on the endpoint made from the server's
     * worker address (in one process UCX picks among shared memory, cma and tcp for it) */
    for (int pass = 0; pass < 2; pass++) {
        peer_node *node;
        accel_dev *rd;
        if (two_remote(&t, pass ? PEER_TRANSPORT_ADDRESS : PEER_TRANSPORT_STREAM, &node, &rd))
            break;
        CHECK_STR(peer_node_name(node), "nodeB");
        CHECK_EQ(peer_node_n_devs(node), 1);
        accel_info info;
        accel_get_info(rd, &info);
        CHECK_STR(info.name, "nodeB/cpu");
        CHECK(info.caps & ACCEL_CAP_REMOTE);
        CHECK(!(info.caps & ACCEL_CAP_PREFILL));
        CHECK_MSG((strstr(info.desc, "tcp stream") != NULL) == !pass, "pass %d: %s", pass, info.desc);
        CHECK_EQ(accel_warmup(rd), 0);

        CHECK_EQ(info.link_bps, 0); /* nothing sent yet */
        memset(got, 0, sizeof got);
        CHECK_EQ(import_decode(rd, &kv, first, 12, got), 0); /* the same device over UCX */
        for (int i = 0; i < 12; i++) CHECK_EQ(got[i], want[i]);
        /* the KV chunks it took measured the link (the placement's network term) */
        accel_get_info(rd, &info);
        CHECK_MSG(info.link_bps > 0 && info.link_bps < 1e13, "pass %d: %g B/s", pass, info.link_bps);
        CHECK(info.link_s >= 0 && info.link_s < PEER_DEAD_S);

        /* a corrupt chunk on the wire (layer 0 of the second import): refused as corrupt, the
         * device stays usable */
        accel_seq *s;
        REQUIRE(accel_seq_new(rd, 16, &s) == 0);
        int st = 0;
        for (int i = 0; i < kv.n && !st; i++) st = accel_kv_import_crc(rd, s, &kv.l[i], kv.crc[i]);
        CHECK_EQ(st, ACCEL_ERR_CORRUPT);
        accel_seq_free(rd, s);
        accel_get_info(rd, &info);
        CHECK(info.health != ACCEL_HEALTH_FAILED);
        if ((poll_us || rx_threads == 2) && pass) {
            /* polling (and the receiving threads' spin for their turn) is bounded: with both
             * nodes' threads up (the node's, its import thread, the remote device's connection,
             * the heartbeat) and the link idle, the process uses next to no CPU once the window
             * has passed — a thread that went on spinning would take a core (or its share of
             * one) for the whole pause */
            usleep(50000);
            double c0 = cpu_seconds(), w0 = peer_now();
            usleep(500000);
            double cpu = cpu_seconds() - c0, wall = peer_now() - w0;
            CHECK_MSG(cpu < 0.1 * wall, "polling %d us, %d receiving threads: %.3f s of CPU in %.3f s idle", poll_us,
                      rx_threads, cpu, wall);
        }
        accel_free(rd);
        peer_node_free(node);
    }

    /* two receiving threads: the tagged chunks' CRCs were handed to the thread that copied
     * each in while the other went on (in order: the same tokens, the corrupt one refused) */
    if (rx_threads == 2) CHECK(peer_server_handoffs(t.srv) > 0);
    for (int i = 0; i < kv.n; i++) free(kv.mem[i]);
    accel_free(pf);
    two_stop(&t);
    peer_link_set_poll_us(0);
}

TEST(peer_remote_decodes_like_the_device)
{
    remote_decodes(0, 1);
}

/* The node's loop on two receiving threads taking turns (config peer_rx_threads 2). */
TEST(peer_remote_decodes_like_the_device_two_receivers)
{
    remote_decodes(0, 2);
}

/* The same with every chunk's CRC cut in two, the second half offered to the node's kv_rx thread
 * (peer_server_crc_split_min, 64 KiB by default, above this model's chunks): the same tokens,
 * the corrupt chunk (its flipped bit mid-payload, in either half) refused. */
TEST(peer_remote_decodes_like_the_device_crc_split)
{
    size_t was = peer_server_crc_split_min;
    peer_server_crc_split_min = 1;
    remote_decodes(0, 2);
    peer_server_crc_split_min = was;
}

/* The same with polling on (config peer_poll_us): every wait of both nodes and the node's KV
 * hand-off busy-poll for 2 ms after activity; the same tokens, the same corrupt chunk refused,
 * and no CPU burnt once the link is idle. */
TEST(peer_remote_decodes_like_the_device_polling)
{
    remote_decodes(2000, 0);
}

/* A node's device answers DECODE_ARGMAX (caps PEER_CAP_DECODE_ARGMAX): through the remote backend,
 * accel_decode_argmax gives each row's greedy token as the lent device's own logits do, the
 * rows wanted back bit for bit, and the rows not wanted never written (they did not cross the
 * network); want NULL brings every row. Two sequences in one step, a few steps. */
TEST(peer_remote_argmax_ships_tokens)
{
    unsetenv("TANDEM_PEER_FAULT");
    two t;
    accel_dev *pf;
    if (two_start_pf(&t, 0, &pf)) return;
    const int vocab = t.m->cfg.vocab, n = 8, steps = 4;
    int32_t ids[] = {1, 403, 407, 261, 378, 429, 267, 297};
    kvcopy kv = {0};
    int32_t first;
    REQUIRE(prefill_kv(pf, ids, n, &kv, &first) == 0);
    float *lg = malloc(sizeof(float) * 2 * (size_t)vocab), *ref = malloc(sizeof(float) * 2 * (size_t)vocab);

    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);
    accel_info info;
    accel_get_info(rd, &info);
    CHECK(info.caps & ACCEL_CAP_DECODE_ARGMAX);
    CHECK_EQ(accel_warmup(rd), 0);
    /* the same two sequences on the lent device driven here (reference) and over the network */
    accel_seq *ls[2], *rs[2];
    for (int j = 0; j < 2; j++) {
        REQUIRE(accel_seq_new(t.lent, n + steps + 2, &ls[j]) == 0);
        REQUIRE(accel_seq_new(rd, n + steps + 2, &rs[j]) == 0);
        for (int i = 0; i < kv.n; i++) {
            CHECK_EQ(accel_kv_import_crc(t.lent, ls[j], &kv.l[i], kv.crc[i]), 0);
            CHECK_EQ(accel_kv_import_crc(rd, rs[j], &kv.l[i], kv.crc[i]), 0);
        }
    }
    int32_t tok[2] = {first, 300}, am[2];
    for (int step = 0; step < steps; step++) {
        CHECK_EQ(accel_decode(t.lent, 2, ls, tok, ref), 0);
        for (size_t i = 0; i < 2 * (size_t)vocab; i++) lg[i] = -7.25f; /* what no row holds */
        unsigned char want[2] = {0, 1};
        int all = step == steps - 1; /* the last step: want NULL, every row back */
        am[0] = am[1] = -2;
        CHECK_EQ(accel_decode_argmax(rd, 2, rs, tok, lg, all ? NULL : want, am), 0);
        for (int j = 0; j < 2; j++) {
            CHECK_EQ(am[j], t_argmax(ref + (size_t)j * vocab, vocab));
            int same = !memcmp(lg + (size_t)j * vocab, ref + (size_t)j * vocab, sizeof(float) * (size_t)vocab);
            int untouched = 1;
            for (int i = 0; i < vocab; i++) untouched &= lg[(size_t)j * vocab + i] == -7.25f;
            CHECK_MSG(all || j == 1 ? same : untouched, "step %d row %d: same %d untouched %d", step, j, same, untouched);
        }
        tok[0] = am[0], tok[1] = am[1];
    }
    for (int j = 0; j < 2; j++) {
        CHECK_EQ(accel_seq_len(rd, rs[j]), n + steps);
        accel_seq_free(rd, rs[j]);
        accel_seq_free(t.lent, ls[j]);
    }
    accel_free(rd);
    peer_node_free(node);
    for (int i = 0; i < kv.n; i++) free(kv.mem[i]);
    free(lg);
    free(ref);
    accel_free(pf);
    two_stop(&t);
}

/* A chunk cut short on the wire (its message ends inside it, TANDEM_PEER_FAULT kv_truncate) is
 * found when it arrives: the import fails as corrupt, the device stays usable and the next
 * import decodes as the device does — on the TCP stream and as tagged messages. */
TEST(peer_truncated_chunk_detected)
{
    two t;
    accel_dev *pf;
    if (two_start_pf(&t, 0, &pf)) return;
    int32_t ids[] = {1, 403, 407, 261, 378, 429, 267, 297};
    kvcopy kv = {0};
    int32_t first, want[6], got[6];
    REQUIRE(prefill_kv(pf, ids, 8, &kv, &first) == 0);
    CHECK_EQ(import_decode(t.lent, &kv, first, 6, want), 0);
    for (int pass = 0; pass < 2; pass++) {
        /* layer 2 of the first import, then layer 4 of the same: the last of its run */
        setenv("TANDEM_PEER_FAULT", pass ? "kv_truncate=5" : "kv_truncate=3", 1);
        peer_node *node;
        accel_dev *rd;
        int bad = two_remote(&t, pass ? PEER_TRANSPORT_ADDRESS : PEER_TRANSPORT_STREAM, &node, &rd);
        unsetenv("TANDEM_PEER_FAULT");
        if (bad) break;
        memset(got, 0, sizeof got);
        CHECK_EQ(import_decode(rd, &kv, first, 6, got), ACCEL_ERR_CORRUPT);
        accel_info info;
        accel_get_info(rd, &info);
        CHECK(info.health != ACCEL_HEALTH_FAILED);
        CHECK_EQ(import_decode(rd, &kv, first, 6, got), 0);
        for (int i = 0; i < 6; i++) CHECK_EQ(got[i], want[i]);
        accel_free(rd);
        peer_node_free(node);
    }
    for (int i = 0; i < kv.n; i++) free(kv.mem[i]);
    accel_free(pf);
    two_stop(&t);
}

/* A lent card's description crosses the link: its KV block size (the remote backend cuts the
 * KV it sends in it) and its decode curve (placement weighs a remote card like a local one),
 * exactly as the card states them. */
TEST(peer_remote_carries_block_size_and_decode_curve)
{
    two t;
    if (two_start(&t, "fpga-emu:0")) return;
    peer_node *node;
    accel_dev *rd;
    if (two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0) {
        accel_info lent, remote;
        accel_get_info(t.lent, &lent);
        accel_get_info(rd, &remote);
        CHECK(lent.kv_block_tokens > 0 && lent.decode_curve.n > 0); /* what there is to carry */
        CHECK_EQ(remote.kv_block_tokens, lent.kv_block_tokens);
        CHECK_EQ(remote.decode_curve.n, lent.decode_curve.n);
        for (int i = 0; i < lent.decode_curve.n; i++) {
            CHECK_EQ(remote.decode_curve.batch[i], lent.decode_curve.batch[i]);
            CHECK(remote.decode_curve.step_s[i] == lent.decode_curve.step_s[i]);
        }
        CHECK(remote.decode_curve.ctx == lent.decode_curve.ctx &&
              remote.decode_curve.s_per_pos == lent.decode_curve.s_per_pos);
        accel_free(rd);
        peer_node_free(node);
    }
    two_stop(&t);
}

TEST(peer_refuses_wrong_key_and_bad_frames)
{
    two t;
    if (two_start(&t, "cpu")) return;
    char err[256];
    peer_node *node;
    int st = peer_node_connect(t.addr, "intruder", "a-different-key-of-20", t.m, 5, &node, err, sizeof err);
    CHECK_EQ(st, PEER_ERR_AUTH);

    /* raw connections: each bad first frame closes the connection, the server stays up */
    const char *what[] = {"oversized", "unknown version",     "out of turn",
                          "garbage",   "address before auth", "a version 4 hello"};
    for (int k = 0; k < 6; k++) {
        peer_conn *c;
        REQUIRE(peer_conn_connect(t.addr, &c, err, sizeof err) == PEER_OK);
        uint8_t h[PEER_HEADER_BYTES + 8] = {0}, hv4[PEER_HEADER_BYTES + PEER_MAX_PREAUTH];
        size_t len = sizeof h;
        if (k == 0) peer_header_write(h, PEER_HELLO, 1u << 30);
        if (k == 1) peer_header_write(h, PEER_HELLO, 8), h[4] = 9;
        if (k == 2) peer_header_write(h, PEER_DECODE, 8);
        if (k == 3) memcpy(h, "GET / HTTP/1.1\r\n\r\n", 18);
        if (k == 4) { /* no worker address to the unkeyed */
            peer_header_write(h, PEER_ADDR_REQ, 0);
            len = PEER_HEADER_BYTES;
        }
        if (k == 5) {
            /* a well-formed HELLO of a node of version 4 (31-character names): refused at this
             * first frame, as its device list would not parse */
            peer_hello hl = {{1}, {0}, "nodeV4"};
            size_t n = peer_hello_write(hv4 + PEER_HEADER_BYTES, &hl, 0);
            peer_header_write(hv4, PEER_HELLO, (uint32_t)n);
            hv4[4] = 4;
            len = PEER_HEADER_BYTES + n;
        }
        peer_conn_send_raw(c, k == 5 ? hv4 : h, len, 2);
        peer_header ph;
        const uint8_t *p;
        int r = peer_conn_recv(c, PEER_MAX_PREAUTH, &ph, &p, 3);
        CHECK_MSG(r == PEER_ERR_IO, "%s: the server answered (%s) instead of closing", what[k], peer_strerror(r));
        peer_conn_free(c);
    }
    /* and a good node still gets in */
    st = peer_node_connect(t.addr, "nodeA", KEY, t.m, 5, &node, err, sizeof err);
    CHECK_MSG(st == PEER_OK, "%s", err);
    if (!st) peer_node_free(node);
    two_stop(&t);
}

TEST(peer_dead_node_noticed_and_reused)
{
    two t;
    if (two_start(&t, "cpu")) return;
    char err[256];
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);
    accel_seq *old;
    REQUIRE(accel_seq_new(rd, 8, &old) == 0);
    peer_server_stop(t.srv);
    t.srv = NULL;
    double t0 = peer_now();
    accel_info info;
    do {
        usleep(100000);
        accel_get_info(rd, &info);
    } while (info.health != ACCEL_HEALTH_FAILED && peer_now() - t0 < PEER_HEARTBEAT_S + PEER_DEAD_S + 2);
    CHECK_MSG(info.health == ACCEL_HEALTH_FAILED, "still %s after %.1f s", accel_health_name(info.health),
              peer_now() - t0);
    accel_seq *s;
    CHECK_EQ(accel_seq_new(rd, 8, &s), ACCEL_ERR_DEVICE);
    CHECK_EQ(info.revivals, 0u);

    /* the node comes back at the same address: the device is revived, works, and the sequence
     * of the old incarnation is only freed here (the node dropped it with its connection) */
    char listen[64];
    snprintf(listen, sizeof listen, "%s", t.addr);
    peer_server_cfg sc = {listen, "nodeB", KEY, t.m, &t.lent, 1, 0};
    int st = peer_server_start(&sc, &t.srv, err, sizeof err);
    CHECK_MSG(st == PEER_OK, "%s", err);
    if (st) {
        accel_seq_free(rd, old);
        accel_free(rd);
        peer_node_free(node);
        two_stop(&t);
        return;
    }
    t0 = peer_now();
    do {
        usleep(100000);
        accel_get_info(rd, &info);
    } while (info.health != ACCEL_HEALTH_OK && peer_now() - t0 < 2 * PEER_RECONNECT_MAX_S + 2);
    CHECK_MSG(info.health == ACCEL_HEALTH_OK, "still %s %.1f s after the node came back",
              accel_health_name(info.health), peer_now() - t0);
    CHECK_EQ(info.revivals, 1u);
    float lg[512];
    int32_t id = 1;
    CHECK_EQ(accel_decode(rd, 1, &old, &id, lg), ACCEL_ERR_INVALID); /* stale: refused, not sent */
    accel_seq_free(rd, old);
    REQUIRE(accel_seq_new(rd, 8, &s) == 0);
    CHECK_EQ(accel_decode(rd, 1, &s, &id, lg), 0);
    accel_seq_free(rd, s);
    accel_get_info(rd, &info);
    CHECK(info.health == ACCEL_HEALTH_OK);

    accel_free(rd);
    peer_node_free(node);
    two_stop(&t);
}

/* A node that is not up when we start (peer_node_pending) joins when it first answers: its
 * device list becomes known, its device opens and decodes; one that answers with another key
 * stays out (still joining) */
TEST(peer_late_node_joins)
{
    two t;
    if (two_start(&t, "cpu")) return;
    char err[256], listen[64];
    snprintf(listen, sizeof listen, "%s", t.addr);
    peer_server_stop(t.srv); /* its port is known now, and nobody listens there */
    t.srv = NULL;
    peer_node *node, *wrong;
    REQUIRE(peer_node_pending(listen, "nodeA", KEY, t.m, &node, err, sizeof err) == PEER_OK);
    REQUIRE(peer_node_pending(listen, "nodeX", "another-key-of-the-fleet", t.m, &wrong, err, sizeof err) == PEER_OK);
    CHECK_EQ(peer_node_state(node), PEER_NODE_JOINING);
    CHECK_EQ(peer_node_n_devs(node), 0);
    CHECK_STR(peer_node_name(node), "");
    CHECK(devices_open_remote(node, 0, t.m, NULL, err, sizeof err) == NULL);
    usleep(300000); /* a try or so while nobody listens */
    CHECK_EQ(peer_node_state(node), PEER_NODE_JOINING);
    peer_server_cfg sc = {listen, "nodeB", KEY, t.m, &t.lent, 1, 0};
    int st = peer_server_start(&sc, &t.srv, err, sizeof err);
    CHECK_MSG(st == PEER_OK, "%s", err);
    double t0 = peer_now();
    while (!st && peer_node_state(node) != PEER_NODE_UP && peer_now() - t0 < PEER_RECONNECT_MAX_S + 2) usleep(50000);
    CHECK_MSG(peer_node_state(node) == PEER_NODE_UP, "not up %.1f s after the node started", peer_now() - t0);
    CHECK_EQ(peer_node_n_devs(node), 1);
    CHECK_STR(peer_node_name(node), "nodeB");
    accel_dev *rd = st ? NULL : devices_open_remote(node, 0, t.m, NULL, err, sizeof err);
    CHECK_MSG(rd != NULL, "%s", err);
    if (rd) {
        accel_info info;
        accel_get_info(rd, &info);
        CHECK_STR(info.name, "nodeB/cpu");
        CHECK(info.health == ACCEL_HEALTH_OK);
        accel_seq *s;
        float lg[512];
        int32_t id = 1;
        REQUIRE(accel_seq_new(rd, 8, &s) == 0);
        CHECK_EQ(accel_decode(rd, 1, &s, &id, lg), 0);
        accel_seq_free(rd, s);
        accel_free(rd);
    }
    /* the one with another key was tried meanwhile (its refusal logged) and is still out */
    CHECK_EQ(peer_node_state(wrong), PEER_NODE_JOINING);
    CHECK_EQ(peer_node_n_devs(wrong), 0);
    peer_node_free(wrong);
    peer_node_free(node);
    two_stop(&t);
}

/* The node's KV pipeline (peer/kv_rx.h): chunks are applied on its thread in the order pushed,
 * each from the bytes received into its buffer (the node's thread fills the next buffer
 * meanwhile), results come back in that order, and a sync waits for every pushed chunk */
typedef struct rx_log {
    int n, order[32];
    uint32_t sum[32];
} rx_log;

static int rx_apply(void *ctx, void *owner, const peer_kv *k)
{
    rx_log *l = ctx;
    usleep(2000); /* slower than the pushes: the node's thread waits for a buffer */
    uint32_t sum = 0;
    for (size_t i = 0; i < k->n_bytes; i++) sum = sum * 31 + k->bytes[i];
    l->order[l->n] = (int)k->seq;
    l->sum[l->n++] = sum;
    return (int)(intptr_t)owner;
}

static void rx_pipeline(int poll_us)
{
    peer_link_set_poll_us(poll_us);
    rx_log l = {0};
    peer_kv_rx *rx;
    REQUIRE(peer_kv_rx_new(1, rx_apply, &l, NULL, NULL, &rx) == PEER_OK);
    int got = 0, status[20];
    uint32_t want[20];
    for (int i = 0; i < 20; i++) {
        void *o;
        int st;
        while (peer_kv_rx_done(rx, &o, &st)) status[got++] = st;
        size_t n = 1000 + 100 * (size_t)i;
        uint8_t *b;
        int slot = peer_kv_rx_take(rx, n, 1, &b);
        REQUIRE(slot >= 0 && slot < PEER_KV_RX_SLOTS && b);
        uint32_t sum = 0;
        for (size_t j = 0; j < n; j++) b[j] = (uint8_t)(i * 7 + j), sum = sum * 31 + b[j];
        want[i] = sum;
        peer_kv k = {0, (uint32_t)i, 0, 0, b, n, 0, 0};
        peer_kv_rx_push(rx, slot, 0, (void *)(intptr_t)-i, &k);
        CHECK(peer_kv_rx_pending(rx) <= PEER_KV_RX_SLOTS + got + 20);
    }
    peer_kv_rx_sync(rx);
    CHECK_EQ(l.n, 20); /* every pushed chunk applied once sync returns */
    void *o;
    int st;
    while (peer_kv_rx_done(rx, &o, &st)) status[got++] = st;
    CHECK_EQ(got, 20);
    CHECK_EQ(peer_kv_rx_pending(rx), 0);
    for (int i = 0; i < 20 && i < l.n; i++) {
        CHECK_EQ(l.order[i], i);
        CHECK_EQ(l.sum[i], want[i]); /* its bytes, not overwritten by a later chunk's */
        CHECK_EQ(status[i], -i);
    }
    peer_kv_rx_free(rx);
    peer_link_set_poll_us(0);
}

TEST(peer_kv_rx_pipeline_in_order)
{
    rx_pipeline(0);
}

/* with both hand-offs spinning before they sleep (polling on; the apply's 2 ms outlast a
 * 1 ms window, so both the spin and the sleep after it are taken) */
TEST(peer_kv_rx_pipeline_in_order_polling)
{
    rx_pipeline(1000);
}

/* Slots taken for several connections' chunks at once complete in any order: they are applied
 * in the order pushed, each from its own bytes; with every slot taken a take fails at once
 * (wait 0) or, when none is queued to free one, even with wait 1; a slot put back (a receive
 * that failed) is free again and its bytes are never applied. */
TEST(peer_kv_rx_slots_out_of_order)
{
    rx_log l = {0};
    peer_kv_rx *rx;
    REQUIRE(peer_kv_rx_new(1, rx_apply, &l, NULL, NULL, &rx) == PEER_OK);
    int slot[PEER_KV_RX_SLOTS];
    uint8_t *b[PEER_KV_RX_SLOTS];
    uint32_t want[PEER_KV_RX_SLOTS];
    for (int i = 0; i < PEER_KV_RX_SLOTS; i++) {
        slot[i] = peer_kv_rx_take(rx, 4096 + (size_t)i, 0, &b[i]);
        REQUIRE(slot[i] >= 0 && b[i]);
        for (int j = 0; j < i; j++) CHECK(slot[j] != slot[i] && b[j] != b[i]);
        uint32_t sum = 0;
        for (size_t j = 0; j < 4096 + (size_t)i; j++) b[i][j] = (uint8_t)(i * 13 + j * 7), sum = sum * 31 + b[i][j];
        want[i] = sum;
    }
    uint8_t *x;
    CHECK_EQ(peer_kv_rx_take(rx, 16, 0, &x), PEER_KV_RX_BUSY);
    CHECK_EQ(peer_kv_rx_take(rx, 16, 1, &x), PEER_KV_RX_BUSY); /* none queued: waiting would never end */
    /* the last one's receive failed; the others complete last to first */
    peer_kv_rx_put_back(rx, slot[PEER_KV_RX_SLOTS - 1]);
    for (int i = PEER_KV_RX_SLOTS - 2; i >= 0; i--) {
        peer_kv k = {0, (uint32_t)i, 0, 0, b[i], 4096 + (size_t)i, 0, 0};
        peer_kv_rx_push(rx, slot[i], 0, (void *)(intptr_t)(100 + i), &k);
    }
    int again = peer_kv_rx_take(rx, 8, 1, &x); /* the slot put back, or one applied since */
    CHECK(again >= 0 && again < PEER_KV_RX_SLOTS);
    if (again >= 0) peer_kv_rx_put_back(rx, again);
    peer_kv_rx_sync(rx);
    CHECK_EQ(l.n, PEER_KV_RX_SLOTS - 1);
    for (int n = 0; n < l.n; n++) {
        int i = PEER_KV_RX_SLOTS - 2 - n;
        CHECK_EQ(l.order[n], i);
        CHECK_EQ(l.sum[n], want[i]);
        void *o;
        int st;
        CHECK(peer_kv_rx_done(rx, &o, &st) && st == 100 + i);
    }
    CHECK_EQ(peer_kv_rx_pending(rx), 0);
    peer_kv_rx_free(rx);
}

/* peer_kv_rx_reserve: a slot reserved keeps its place in the apply order — a chunk pushed after
 * it waits, unapplied, until another thread (the receiving thread that took the chunk's CRC
 * with it, peer/server.c) pushes the reserved one — and both are applied in that order. */
typedef struct rx_late {
    peer_kv_rx *rx;
    int slot;
    peer_kv k;
    _Atomic int go; /* set once the main thread has seen the later push wait */
} rx_late;

/* pushes the reserved slot once told to, and a little later, so that the main thread's sync is
 * waiting for it (not timed against the main thread: a loaded machine could delay the main
 * thread's checks past a fixed sleep) */
static void *rx_push_late(void *arg)
{
    rx_late *a = arg;
    while (!atomic_load(&a->go)) usleep(1000);
    usleep(20000);
    peer_kv_rx_push(a->rx, a->slot, 0, (void *)(intptr_t)7, &a->k);
    return NULL;
}

TEST(peer_kv_rx_reserved_keeps_its_place)
{
    rx_log l = {0};
    peer_kv_rx *rx;
    REQUIRE(peer_kv_rx_new(1, rx_apply, &l, NULL, NULL, &rx) == PEER_OK);
    uint8_t *ba, *bb;
    int sa = peer_kv_rx_take(rx, 1000, 0, &ba), sb = peer_kv_rx_take(rx, 1000, 0, &bb);
    REQUIRE(sa >= 0 && sb >= 0);
    memset(ba, 1, 1000);
    memset(bb, 2, 1000);
    peer_kv_rx_reserve(rx, sa, 0);
    peer_kv kb = {0, 2, 0, 0, bb, 1000, 0, 0};
    peer_kv_rx_push(rx, sb, 0, (void *)(intptr_t)8, &kb);
    rx_late a = {rx, sa, {0, 1, 0, 0, ba, 1000, 0, 0}, 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, rx_push_late, &a) == 0);
    usleep(15000); /* time for the kv_rx thread to apply the later push, were it free to */
    void *o;
    int st;
    CHECK_EQ(peer_kv_rx_pending(rx), 2);
    CHECK(!peer_kv_rx_done(rx, &o, &st)); /* the later push waits behind the reservation */
    atomic_store(&a.go, 1);
    peer_kv_rx_sync(rx); /* returns once the reserved one came and both applied */
    pthread_join(th, NULL);
    REQUIRE(l.n == 2);
    CHECK(l.order[0] == 1 && l.order[1] == 2);
    CHECK(peer_kv_rx_done(rx, &o, &st) && st == 7);
    CHECK(peer_kv_rx_done(rx, &o, &st) && st == 8);
    peer_kv_rx_free(rx);
}

/* peer_bulk_alloc: at least what was asked; from 1 MiB up whole 2 MiB pages, aligned to them
 * (what a huge page needs); below, a plain allocation of exactly n. Every byte writable. */
TEST(peer_bulk_alloc_sizes)
{
    const size_t sizes[] = {1, 4096, (1u << 20) - 1, 1u << 20, (8u << 20) + 131136, 64u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t cap = 0, n = sizes[i];
        uint8_t *p = peer_bulk_alloc(n, &cap);
        CHECK_MSG(p && cap >= n, "n %zu cap %zu", n, cap);
        if (!p) continue;
        if (n >= (1u << 20)) {
            CHECK_MSG(((uintptr_t)p & ((2u << 20) - 1)) == 0 && cap % (2u << 20) == 0 && cap - n < (2u << 20),
                      "n %zu: %p cap %zu", n, (void *)p, cap);
        } else {
            CHECK_EQ(cap, n);
        }
        memset(p, 0xa5, cap);
        CHECK(p[cap - 1] == 0xa5);
        free(p);
    }
}

/* A sender that stalls after a tagged chunk's announcement (TANDEM_PEER_FAULT kv_stall) holds up
 * its own connection only: while the node waits for those bytes, another node connects,
 * authenticates and gets an answer at once (the node used to wait for the bytes, up to the
 * call timeout, serving no one); that node's own KV is received and imported meanwhile (into
 * another kv_rx slot: it used to wait its turn behind the held chunk), and a third node is
 * still answered at once; once the bytes come the stalled import completes too, and both
 * decode alike. */
typedef struct stall_import {
    accel_dev *rd;
    accel_seq *s;
    const kvcopy *kv;
    int st;
    _Atomic int done;
} stall_import;

static void *stall_import_main(void *arg)
{
    stall_import *a = arg;
    a->st = 0;
    for (int i = 0; i < a->kv->n && !a->st; i++) a->st = accel_kv_import_crc(a->rd, a->s, &a->kv->l[i], a->kv->crc[i]);
    atomic_store(&a->done, 1);
    return NULL;
}

TEST(peer_stalled_sender_holds_up_no_one_else)
{
    char stall[64];
    snprintf(stall, sizeof stall, "/tmp/tandem-peer-stall.%d", (int)getpid());
    char fault[96];
    snprintf(fault, sizeof fault, "kv_stall=%s", stall);
    setenv("TANDEM_PEER_FAULT", fault, 1);
    two t;
    accel_dev *pf;
    if (two_start_pf(&t, 0, &pf)) return;
    char err[256];
    int vocab = t.m->cfg.vocab;
    int32_t ids[] = {1, 403, 407, 261, 378, 429, 267, 297};
    kvcopy kv = {0};
    int32_t first;
    REQUIRE(prefill_kv(pf, ids, 8, &kv, &first) == 0);
    float *lg = malloc(sizeof(float) * (size_t)vocab);

    peer_node *na, *nc;
    REQUIRE(peer_node_connect(t.addr, "nodeA", KEY, t.m, 5, &na, err, sizeof err) == PEER_OK);
    accel_dev *rd = devices_open_remote(na, 0, t.m, NULL, err, sizeof err);
    REQUIRE(rd);
    unsetenv("TANDEM_PEER_FAULT");
    stall_import a = {rd, NULL, &kv, 0, 0};
    REQUIRE(accel_seq_new(rd, 16, &a.s) == 0);
    FILE *f = fopen(stall, "w");
    REQUIRE(f);
    fclose(f);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, stall_import_main, &a) == 0);
    struct timespec ts = {0, 300 * 1000 * 1000}; /* the first chunk announced, its bytes held */
    nanosleep(&ts, NULL);
    double t0 = peer_now();
    int st = peer_node_connect(t.addr, "nodeC", KEY, t.m, 5, &nc, err, sizeof err);
    accel_dev *rc = st ? NULL : devices_open_remote(nc, 0, t.m, NULL, err, sizeof err);
    int wst = rc ? accel_warmup(rc) : -1;
    double took = peer_now() - t0;
    CHECK_MSG(st == PEER_OK && rc && wst == 0, "the other node: %s", err);
    CHECK_MSG(took < 2.0, "the other node waited %.2f s for the stalled one", took);
    /* the other node's KV comes in beside the held chunk, and still a third node is answered
     * meanwhile */
    stall_import c = {rc, NULL, &kv, -1, 0};
    pthread_t thc;
    int c_started = rc && accel_seq_new(rc, 16, &c.s) == 0 && pthread_create(&thc, NULL, stall_import_main, &c) == 0;
    CHECK(c_started);
    for (int i = 0; i < 500 && c_started && !atomic_load(&c.done); i++) usleep(10000);
    CHECK_MSG(atomic_load(&c.done) && !atomic_load(&a.done), "the other node's import %s while the held chunk %s",
              atomic_load(&c.done) ? "completed" : "did not complete in 5 s",
              atomic_load(&a.done) ? "was not held" : "was held");
    peer_node *nd;
    t0 = peer_now();
    int dst = peer_node_connect(t.addr, "nodeD", KEY, t.m, 5, &nd, err, sizeof err);
    accel_dev *rdd = dst ? NULL : devices_open_remote(nd, 0, t.m, NULL, err, sizeof err);
    int dwst = rdd ? accel_warmup(rdd) : -1;
    double took_d = peer_now() - t0;
    unlink(stall); /* the bytes go */
    pthread_join(th, NULL);
    if (c_started) pthread_join(thc, NULL);
    CHECK_MSG(dst == PEER_OK && rdd && dwst == 0, "the third node: %s", err);
    CHECK_MSG(took_d < 2.0, "the third node waited %.2f s while two senders' chunks waited", took_d);
    CHECK_EQ(a.st, 0);
    CHECK_EQ(c.st, 0);
    int32_t tok = first;
    CHECK_EQ(accel_decode(rd, 1, &a.s, &tok, lg), 0); /* the stalled chunk came in whole */
    int32_t tok_a = t_argmax(lg, vocab);
    tok = first;
    if (c_started) { /* and the one that came in beside it: the same KV, the same next token */
        CHECK_EQ(accel_decode(rc, 1, &c.s, &tok, lg), 0);
        CHECK_EQ(t_argmax(lg, vocab), tok_a);
        accel_seq_free(rc, c.s);
    }
    accel_seq_free(rd, a.s);
    if (rdd) accel_free(rdd);
    if (!dst) peer_node_free(nd);
    if (rc) accel_free(rc);
    if (!st) peer_node_free(nc);
    accel_free(rd);
    peer_node_free(na);
    for (int i = 0; i < kv.n; i++) free(kv.mem[i]);
    free(lg);
    accel_free(pf);
    two_stop(&t);
}
