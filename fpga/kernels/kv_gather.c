/* fpga/kernels/kv_gather.c — copy a region of HBM into an output buffer.
 *
 * Used to read KV back from the banks it was shipped into (the KV round-trip check: the bytes
 * the kernel sees must be exactly the bytes the host wrote) and, later, to move a sequence's KV
 * between regions. One command per direction: the region is streamed in one burst train.
 *
 *   arg 0  src      global  the BO holding the region
 *   arg 1  dst      global  the output BO
 *   arg 2  src_off  u64     byte offset of the region in src
 *   arg 3  dst_off  u64     byte offset in dst
 *   arg 4  n        u64     bytes */
#include "fpga/kernels/kernel.h"

void kv_gather(const uint8_t *src, uint8_t *dst, uint64_t src_off, uint64_t dst_off, uint64_t n)
{
#pragma HLS INTERFACE m_axi port = src offset = slave bundle = gmem0 max_read_burst_length = 64
#pragma HLS INTERFACE m_axi port = dst offset = slave bundle = gmem1 max_write_burst_length = 64
#pragma HLS INTERFACE s_axilite port = src_off
#pragma HLS INTERFACE s_axilite port = dst_off
#pragma HLS INTERFACE s_axilite port = n
#pragma HLS INTERFACE s_axilite port = return
    fpga_k_read(src + src_off, n);
    fpga_k_write(dst + dst_off, n);
    for (uint64_t i = 0; i < n; i++) {
#pragma HLS PIPELINE II = 1
        dst[dst_off + i] = src[src_off + i];
    }
}

static int kv_gather_adapter(const fpga_kargs *a)
{
    const fpga_k_arg *src = &a->a[0], *dst = &a->a[1];
    uint64_t src_off = a->a[2].u, dst_off = a->a[3].u, n = a->a[4].u;
    if (!fpga_k_range_ok(src_off, n, src->size) || !fpga_k_range_ok(dst_off, n, dst->size))
        return -1;
    kv_gather(src->ptr, dst->ptr, src_off, dst_off, n);
    return 0;
}

const fpga_k_desc fpga_k_kv_gather_desc = {
    .name = "kv_gather",
    .n_args = 5,
    .kinds = {FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_U64, FPGA_K_ARG_U64,
              FPGA_K_ARG_U64},
    .run = kv_gather_adapter,
};
