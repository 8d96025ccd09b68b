/* fpga/xattn_model.c — see xattn_model.h; every charge mirrors fpga/kernels/xattn_est.c. */
#include "fpga/xattn_model.h"
#include "fpga/xrt/u280.h"
#include <string.h>

static uint64_t log2_ceil(uint64_t m)
{
    uint64_t k = 0;
    while ((1ull << k) < m) k++;
    return k;
}

static uint64_t sort_cycles(uint64_t m)
{
    return m > 1 ? (m * log2_ceil(m) + FPGA_FLEX_SCAN_LANES - 1) / FPGA_FLEX_SCAN_LANES : 0;
}

void fpga_xattn_model(uint32_t n, uint32_t q0, uint32_t H, uint32_t Hk, uint32_t d,
                      const fpga_xattn_params *p, uint64_t nnz, fpga_xattn_cost *o)
{
    memset(o, 0, sizeof *o);
    (void)Hk;
    const uint64_t nb = ((uint64_t)n + FPGA_FLEX_BS - 1) / FPGA_FLEX_BS;
    const uint64_t qb = fpga_flex_qblock_bytes((int)d);
    uint64_t rows_written = 0;
    for (uint64_t I = q0; I < nb; I++) {
        if (p->method == FPGA_XATTN_METHOD_TRISHAPE) {
            uint64_t cnt = I + 1;
            if (p->tri_hi > p->tri_lo && I >= p->tri_lo) {
                uint64_t hi = p->tri_hi < I + 1 ? p->tri_hi : I + 1;
                cnt -= hi - p->tri_lo;
            }
            o->cycles += (uint64_t)H * ((cnt + FPGA_FLEX_SCAN_LANES - 1) / FPGA_FLEX_SCAN_LANES);
            rows_written += cnt ? H : 0;
            continue;
        }
        const uint64_t S = p->stride, rpb = FPGA_FLEX_BS / S, nrs = ((uint64_t)n + S - 1) / S;
        const uint64_t i0 = I * rpb, i1 = (I + 1) * rpb < nrs ? (I + 1) * rpb : nrs;
        /* rows i0..i1-1 each score keys 0..i: sum of (i + 1) */
        const uint64_t pairs = (i0 + 1 + i1) * (i1 - i0) / 2;
        const uint64_t mpu = pairs * S * d / FPGA_FLEX_MPU_MACS, sfu = 2 * pairs / FPGA_FLEX_SFU_LANES;
        o->cycles += H * ((mpu > sfu ? mpu : sfu) + sort_cycles(I > 1 ? I - 1 : 0));
        o->mpu_cycles += H * mpu;
        o->sfu_cycles += H * sfu;
        o->macs += H * pairs * S * d;
        o->read_bytes += H * (I + 2) * qb;
        o->read_cmds += H * (I + 2);
        rows_written += H; /* every XAttention row keeps block 0 */
    }
    o->write_bytes = nnz * 4 + (uint64_t)H * (nb + 1) * 4;
    o->write_cmds = rows_written + H;
    const double cmd_ns = FPGA_U280_CMD_CYCLES / FPGA_U280_KERNEL_HZ * 1e9;
    const double bps = FPGA_U280_HBM_PC_BPS * FPGA_U280_HBM_UTIL * FPGA_U280_HBM_BANKS;
    o->compute_ns = (double)o->cycles / FPGA_U280_KERNEL_HZ * 1e9;
    o->mem_ns = (double)(o->read_bytes + o->write_bytes) / bps * 1e9 +
                (double)(o->read_cmds + o->write_cmds) / FPGA_U280_HBM_BANKS * cmd_ns;
    o->ns = FPGA_U280_RUN_OVERHEAD_NS + (o->compute_ns > o->mem_ns ? o->compute_ns : o->mem_ns);
}

uint64_t fpga_xattn_dense_attn_cycles(uint32_t n, uint32_t r0, uint32_t H, uint32_t d)
{
    /* rows r0..n-1, row t over keys 0..t: sum of (t + 1) */
    const uint64_t keys = ((uint64_t)r0 + 1 + n) * (n - r0) / 2;
    const uint64_t mpu = keys * 2 * d * H / FPGA_FLEX_MPU_MACS, sfu = keys * H / FPGA_FLEX_SFU_LANES;
    return mpu > sfu ? mpu : sfu;
}
