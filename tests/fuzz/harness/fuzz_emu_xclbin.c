/* tests/fuzz/harness/fuzz_emu_xclbin.c — libFuzzer harness for the card emulator's two parsers
 * of outside text: the xclbin description (fpga/emu/emu_xclbin.c, emu_xclbin_parse: what
 * xrtDeviceLoadXclbin reads from the file a config's xclbin names, at most EMU_XCLBIN_MAX bytes)
 * and the fault-injection spec (fpga/emu/emu_fault.c, emu_fault_parse: TANDEM_EMU_FAULT).
 *
 * Input: byte 0 bit 0 picks the parser; the rest, up to its first NUL, is the text. Promises
 * checked: an accepted description has 1..EMU_MAX_KERNELS kernels, each with its C
 * implementation and exactly its argument kinds, every global argument in a memory group that
 * exists — a single HBM channel (groups 0..31), an HBM range a < b, a DDR4 bank or the host bank
 * —, names NUL-terminated; a refusal leaves a reason (fpga_emu_last_error). An accepted fault spec
 * has 0..max faults, each with run >= 1, a kind, a card and an argument in range, bit 0..7; a
 * refusal has a message. */
#include "fpga/emu/emu.h"
#include "tests/fuzz/harness/harness_util.h"
#include <string.h>

static void xclbin(const char *text)
{
    static emu_xclbin x; /* 300 KB: not on the stack */
    if (emu_xclbin_parse(text, &x) != 0) {
        const char *why = fpga_emu_last_error();
        CHECK(why && why[0]);
        return;
    }
    CHECK(x.n_kernels >= 1 && x.n_kernels <= EMU_MAX_KERNELS);
    CHECK(x.n_groups >= FPGA_U280_HBM_BANKS && x.n_groups <= EMU_MAX_GROUPS);
    for (int g = 0; g < x.n_groups; g++) {
        const emu_group *e = &x.groups[g];
        if (g < FPGA_U280_HBM_BANKS)
            CHECK(e->lo == g && e->hi == g);
        else
            CHECK((e->lo >= 0 && e->lo < e->hi && e->hi < FPGA_U280_HBM_BANKS) ||
                  (e->lo == e->hi && e->lo >= FPGA_U280_HBM_BANKS &&
                   e->lo < FPGA_U280_HBM_BANKS + FPGA_U280_EXT_BANKS));
    }
    for (int k = 0; k < x.n_kernels; k++) {
        const emu_xkernel *kn = &x.kernels[k];
        CHECK(memchr(kn->name, 0, sizeof kn->name));
        CHECK(kn->impl && !strcmp(kn->impl->name, kn->name));
        CHECK(kn->n_args == kn->impl->n_args);
        for (int a = 0; a < kn->n_args; a++) {
            CHECK(memchr(kn->args[a].name, 0, sizeof kn->args[a].name));
            CHECK(kn->args[a].kind == kn->impl->kinds[a]);
            if (kn->args[a].kind == FPGA_K_ARG_GLOBAL)
                CHECK(kn->args[a].group >= 0 && kn->args[a].group < x.n_groups);
        }
    }
}

static void faults(const char *spec)
{
    emu_fault f[EMU_MAX_FAULTS];
    char err[256] = "";
    int n = emu_fault_parse(spec, f, EMU_MAX_FAULTS, err, sizeof err);
    if (n < 0) {
        CHECK(n == -1 && err[0]);
        return;
    }
    CHECK(n <= EMU_MAX_FAULTS);
    for (int i = 0; i < n; i++) {
        CHECK(f[i].run >= 1 && f[i].kind >= EMU_FAULT_HANG && f[i].kind <= EMU_FAULT_LATE);
        CHECK(f[i].card >= 0 && f[i].card < EMU_MAX_CARDS);
        CHECK(f[i].arg >= -1 && f[i].arg < FPGA_K_MAX_ARGS && f[i].bit >= 0 && f[i].bit <= 7);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    char *text = malloc(n);
    if (!text) return 0;
    memcpy(text, data + 1, n - 1);
    text[n - 1] = 0;
    if (data[0] & 1)
        faults(text);
    else
        xclbin(text);
    free(text);
    return 0;
}
