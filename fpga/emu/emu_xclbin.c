/* fpga/emu/emu_xclbin.c — the emulator's xclbin: a small text description.
 *
 * A real xclbin is a binary AXLF image whose mem_topology and connectivity sections say which
 * memory banks each kernel port reaches. The emulator reads the same facts from text:
 *
 *   tandem-emu-xclbin 1                       first line: format and version
 *   uuid 7e4a1c2b-5d3f-4a8e-9b61-2c0d8f3e1a57 what xrtDeviceGetXclbinUUID returns
 *   kernel kv_gather                          a kernel (must exist in emu_registry.c) ...
 *   arg src global HBM[0:31]                  ... its arguments in order: a memory port and the
 *   arg dst global HBM[3]                         pseudo-channels it is connected to, or
 *   arg n u64                                     a scalar: u32 | i32 | u64 | f32
 *
 * '#' starts a comment; blank lines are ignored; at most EMU_XCLBIN_MAX bytes, EMU_MAX_KERNELS
 * kernels, FPGA_K_MAX_ARGS arguments each. Each kernel's argument kinds must match its C
 * implementation's descriptor.
 *
 * Memory groups (what xrtKernelArgGroupId returns and xrtBOAlloc takes): 0..31 are the single
 * pseudo-channels HBM[0]..HBM[31]; every distinct range HBM[a:b] with a < b in the description
 * gets the next id from 32 on, in order of first appearance. A BO allocated in a range group
 * may span the range's channels (XRT's bank groups); one in a single channel may not exceed
 * 256 MiB. DDR[0] and DDR[1] (the card's two 16 GiB DDR4 banks, after HBM in the address space)
 * get ids from 32 on like ranges. */
#include "fpga/emu/emu.h"
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Port c of the decode and scatter kernels reaches pseudo-channel c (fpga/BANKS.md). */
#define XC_PORTS(X)                                                                                \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) \
    X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28) X(29) X(30) X(31)
#define XC_BANK(n) "arg hbm" #n " global HBM[" #n "]\n"

const char emu_xclbin_builtin[] =
    "tandem-emu-xclbin 1\n"
    "# tandem's kernels as the emulated U280 shell comes programmed.\n"
    "uuid 7e4a1c2b-5d3f-4a8e-9b61-2c0d8f3e1a57\n"
    "kernel kv_gather\n"
    "arg src global HBM[0:31]\n"
    "arg dst global HBM[0:31]\n"
    "arg src_off u64\n"
    "arg dst_off u64\n"
    "arg n u64\n"
    "kernel tandem_decode\n" XC_PORTS(XC_BANK)
    "arg io global HBM[0]\n"
    "arg token u32\n"
    "arg pos u32\n"
    "arg kv_off u64\n"
    "arg part_tiles u32\n"
    "arg n_ids u32\n"
    "arg sel_cap u32\n"
    "arg tls_off u64\n"
    "arg tls_upto u32\n"
    "arg ddr0 global DDR[0]\n"
    "arg ddr1 global DDR[1]\n"
    "arg kv_tier u32\n"
    "arg host0 global HOST[0]\n"
    "kernel tandem_decode_batch\n" XC_PORTS(XC_BANK)
    "arg io global HBM[0]\n"
    "arg n_seq u32\n"
    "arg kv_off u64\n"
    "arg blk_tiles u32\n"
    "kernel kv_scatter\n"
    "arg stage0 global HBM[1:8]\n"
    "arg stage1 global HBM[1:8]\n"
    "arg stage2 global HBM[1:8]\n"
    "arg stage3 global HBM[1:8]\n" XC_PORTS(XC_BANK)
    "arg layer u32\n"
    "arg pos0 u32\n"
    "arg n u32\n"
    "arg per u32\n"
    "arg kv_off u64\n"
    "arg part_tiles u32\n"
    "arg stage_bytes u64\n"
    "arg paged u32\n"
    "arg n_ids u32\n"
    "arg ddr0 global DDR[0]\n"
    "arg ddr1 global DDR[1]\n"
    "arg host0 global HOST[0]\n"
    "kernel kv_check\n" XC_PORTS(XC_BANK)
    "arg report global HBM[1:8]\n"
    "arg pos0 u32\n"
    "arg n u32\n"
    "arg kv_off u64\n"
    "arg part_tiles u32\n"
    "arg report_bytes u64\n"
    "arg n_ids u32\n"
    "arg ddr0 global DDR[0]\n"
    "arg ddr1 global DDR[1]\n"
    "arg kv_tier u32\n"
    "arg host0 global HOST[0]\n"
    "# FAST-Prefill sparse prefill (fpga/kernels/flex_sigu.c, flex_sau.c)\n"
    "kernel flex_sigu\n"
    "arg qbuf global HBM[0:31]\n"
    "arg kvbuf global HBM[0:31]\n"
    "arg scratch global HBM[0:31]\n"
    "arg row_ptr global HBM[0:31]\n"
    "arg col global HBM[0:31]\n"
    "arg info global HBM[0:31]\n"
    "arg n u32\n"
    "arg n_heads u32\n"
    "arg n_kv_heads u32\n"
    "arg head_dim u32\n"
    "arg gamma_bits u32\n"
    "arg tau_bits u32\n"
    "arg min_blocks u32\n"
    "arg max_blocks u32\n"
    "arg gqa_interleave u32\n"
    "kernel flex_sau\n"
    "arg qbuf global HBM[0:31]\n"
    "arg kvbuf global HBM[0:31]\n"
    "arg row_ptr global HBM[0:31]\n"
    "arg col global HBM[0:31]\n"
    "arg jobs global HBM[0:31]\n"
    "arg out global HBM[0:31]\n"
    "arg stats global HBM[0:31]\n"
    "arg n u32\n"
    "arg n_heads u32\n"
    "arg n_kv_heads u32\n"
    "arg head_dim u32\n"
    "arg gqa_interleave u32\n"
    "arg cache_blocks u32\n"
    "arg hot_blocks u32\n"
    "arg window u32\n"
    "arg mode u32\n"
    "# XAttention / Tri-shape block lists (fpga/kernels/xattn_est.c; a unit of tandem_prefill too)\n"
    "kernel xattn_est\n"
    "arg qbuf global HBM[0:31]\n"
    "arg kvbuf global HBM[0:31]\n"
    "arg row_ptr global HBM[0:31]\n"
    "arg col global HBM[0:31]\n"
    "arg n u32\n"
    "arg q0 u32\n"
    "arg n_heads u32\n"
    "arg n_kv_heads u32\n"
    "arg head_dim u32\n"
    "arg method u32\n"
    "arg stride u32\n"
    "arg thr_lo u32\n"
    "arg thr_hi u32\n"
    "arg tri_lo u32\n"
    "arg tri_hi u32\n"
    "# FAST-Prefill's accelerator for whole prompts (fpga/kernels/prefill.c), on the decode banks\n"
    "kernel tandem_prefill\n" XC_PORTS(XC_BANK)
    "arg io global HBM[0]\n"
    "arg mode u32\n"
    "arg layer u32\n"
    "arg pos0 u32\n"
    "arg n u32\n"
    "arg r0 u32\n"
    "arg r1 u32\n"
    "arg kv_off u64\n"
    "arg part_tiles u32\n"
    "arg ws_off u64\n"
    "arg n_ids u32\n"
    "# AsyncTLS sparse decode: both selection levels for one query group (fpga/kernels/tls_select.c)\n"
    "kernel tls_select\n"
    "arg data global HBM[0:31]\n"
    "arg out global HBM[0:31]\n"
    "arg q_off u64\n"
    "arg ch_off u64\n"
    "arg summ_off u64\n"
    "arg code_off u64\n"
    "arg lmin_off u64\n"
    "arg lstep_off u64\n"
    "arg n_keys u32\n"
    "arg head_dim u32\n"
    "arg group u32\n"
    "arg r u32\n"
    "arg block_size u32\n"
    "arg block_budget u32\n"
    "arg token_budget u32\n";

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    ch = tolower(ch);
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

static int parse_uuid(const char *s, xuid_t out)
{
    /* 8-4-4-4-12 hex digits */
    if (strlen(s) != 36) return -1;
    int k = 0;
    for (int i = 0; i < 36;) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i++] != '-') return -1;
            continue;
        }
        int hi = hexval(s[i]), lo = hexval(s[i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[k++] = (unsigned char)(hi << 4 | lo);
        i += 2;
    }
    return 0;
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= EMU_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_') return 0;
    return 1;
}

/* "HBM[a]", "HBM[a:b]" or "DDR[i]" -> group id (adding a range or DDR group), or -1. */
static int parse_banks(const char *s, emu_xclbin *x)
{
    int lo, hi, used = 0;
    int host = sscanf(s, "HOST[%d]%n", &lo, &used) == 1 && used == (int)strlen(s);
    if (host) {
        if (lo != 0) return -1;
        lo = FPGA_U280_EXT_HOST;
    }
    if (host || (sscanf(s, "DDR[%d]%n", &lo, &used) == 1 && used == (int)strlen(s))) {
        if (lo < 0 || lo >= FPGA_U280_DDR_BANKS + host) return -1;
        lo = hi = FPGA_U280_HBM_BANKS + lo; /* channel 32 + i */
        for (int g = FPGA_U280_HBM_BANKS; g < x->n_groups; g++)
            if (x->groups[g].lo == lo && x->groups[g].hi == hi) return g;
        if (x->n_groups >= EMU_MAX_GROUPS) return -1;
        x->groups[x->n_groups] = (emu_group){lo, hi};
        return x->n_groups++;
    }
    if (sscanf(s, "HBM[%d:%d]%n", &lo, &hi, &used) == 2 && used == (int)strlen(s)) {
    } else if (sscanf(s, "HBM[%d]%n", &lo, &used) == 1 && used == (int)strlen(s)) {
        hi = lo;
    } else {
        return -1;
    }
    if (lo < 0 || hi >= FPGA_U280_HBM_BANKS || lo > hi) return -1;
    if (lo == hi) return lo;
    for (int g = FPGA_U280_HBM_BANKS; g < x->n_groups; g++)
        if (x->groups[g].lo == lo && x->groups[g].hi == hi) return g;
    if (x->n_groups >= EMU_MAX_GROUPS) return -1;
    x->groups[x->n_groups] = (emu_group){lo, hi};
    return x->n_groups++;
}

static int parse_kind(const char *s, enum fpga_k_arg_kind *k)
{
    static const struct {
        const char *name;
        enum fpga_k_arg_kind kind;
    } kinds[] = {{"global", FPGA_K_ARG_GLOBAL}, {"u32", FPGA_K_ARG_U32}, {"i32", FPGA_K_ARG_I32},
                 {"u64", FPGA_K_ARG_U64},       {"f32", FPGA_K_ARG_F32}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(s, kinds[i].name)) {
            *k = kinds[i].kind;
            return 0;
        }
    return -1;
}

/* Closes the current kernel: its arguments must match the C implementation. */
static int finish_kernel(const emu_xkernel *k, int line)
{
    const fpga_k_desc *d = k->impl;
    if (k->n_args != d->n_args)
        return emu_fail(EINVAL, "xclbin line %d: kernel %s declares %d arguments, its C "
                                "implementation takes %d", line, k->name, k->n_args, d->n_args);
    for (int i = 0; i < k->n_args; i++)
        if (k->args[i].kind != d->kinds[i])
            return emu_fail(EINVAL, "xclbin line %d: kernel %s argument %d (%s) is not of the "
                                    "kind its C implementation takes", line, k->name, i,
                            k->args[i].name);
    return 0;
}

int emu_xclbin_parse(const char *text, emu_xclbin *x)
{
    memset(x, 0, sizeof *x);
    x->n_groups = FPGA_U280_HBM_BANKS;
    for (int g = 0; g < FPGA_U280_HBM_BANKS; g++) x->groups[g] = (emu_group){g, g};
    if (strlen(text) > EMU_XCLBIN_MAX)
        return emu_fail(E2BIG, "xclbin description longer than %d bytes", EMU_XCLBIN_MAX);
    int line = 0, seen_header = 0, seen_uuid = 0;
    emu_xkernel *cur = NULL;
    const char *p = text;
    while (*p) {
        char buf[256];
        size_t len = strcspn(p, "\n");
        line++;
        if (len >= sizeof buf) return emu_fail(EINVAL, "xclbin line %d is too long", line);
        memcpy(buf, p, len);
        buf[len] = 0;
        p += len + (p[len] == '\n');
        char *hash = strchr(buf, '#');
        if (hash) *hash = 0;
        char w[4][128];
        int n = sscanf(buf, "%127s %127s %127s %127s", w[0], w[1], w[2], w[3]);
        if (n <= 0) continue;
        if (!seen_header) {
            if (n != 2 || strcmp(w[0], "tandem-emu-xclbin") != 0)
                return emu_fail(EINVAL, "xclbin line %d: not a tandem-emu-xclbin description",
                                line);
            if (strcmp(w[1], "1") != 0)
                return emu_fail(EINVAL, "xclbin line %d: version %s (this emulator reads 1)",
                                line, w[1]);
            seen_header = 1;
        } else if (!strcmp(w[0], "uuid")) {
            if (n != 2 || seen_uuid || parse_uuid(w[1], x->uuid) != 0)
                return emu_fail(EINVAL, "xclbin line %d: bad or repeated uuid", line);
            seen_uuid = 1;
        } else if (!strcmp(w[0], "kernel")) {
            if (n != 2 || !valid_name(w[1]))
                return emu_fail(EINVAL, "xclbin line %d: kernel needs one name of [A-Za-z0-9_]",
                                line);
            if (cur && finish_kernel(cur, line) != 0) return -1;
            if (x->n_kernels >= EMU_MAX_KERNELS)
                return emu_fail(EINVAL, "xclbin line %d: more than %d kernels", line,
                                EMU_MAX_KERNELS);
            for (int i = 0; i < x->n_kernels; i++)
                if (!strcmp(x->kernels[i].name, w[1]))
                    return emu_fail(EINVAL, "xclbin line %d: kernel %s twice", line, w[1]);
            cur = &x->kernels[x->n_kernels++];
            snprintf(cur->name, sizeof cur->name, "%.63s", w[1]);
            cur->impl = emu_registry_find(w[1]);
            if (!cur->impl)
                return emu_fail(ENOENT, "xclbin line %d: kernel %s has no C implementation in "
                                        "this emulator", line, w[1]);
        } else if (!strcmp(w[0], "arg")) {
            if (!cur) return emu_fail(EINVAL, "xclbin line %d: arg before any kernel", line);
            if (cur->n_args >= FPGA_K_MAX_ARGS)
                return emu_fail(EINVAL, "xclbin line %d: more than %d arguments", line,
                                FPGA_K_MAX_ARGS);
            emu_xarg *a = &cur->args[cur->n_args];
            if (n < 3 || !valid_name(w[1]) || parse_kind(w[2], &a->kind) != 0)
                return emu_fail(EINVAL, "xclbin line %d: expected 'arg NAME global HBM[..]' or "
                                        "'arg NAME u32|i32|u64|f32'", line);
            snprintf(a->name, sizeof a->name, "%.63s", w[1]);
            if (a->kind == FPGA_K_ARG_GLOBAL) {
                if (n != 4 || (a->group = parse_banks(w[3], x)) < 0)
                    return emu_fail(EINVAL, "xclbin line %d: a global argument needs its banks, "
                                            "HBM[a] or HBM[a:b] with 0 <= a <= b <= 31", line);
            } else if (n != 3) {
                return emu_fail(EINVAL, "xclbin line %d: trailing words after a scalar", line);
            }
            cur->n_args++;
        } else {
            return emu_fail(EINVAL, "xclbin line %d: unknown directive '%s'", line, w[0]);
        }
    }
    if (!seen_header) return emu_fail(EINVAL, "empty xclbin description");
    if (!seen_uuid) return emu_fail(EINVAL, "xclbin description has no uuid");
    if (!cur) return emu_fail(EINVAL, "xclbin description has no kernel");
    return finish_kernel(cur, line);
}
