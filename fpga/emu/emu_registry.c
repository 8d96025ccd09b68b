/* fpga/emu/emu_registry.c — which C function stands in for each kernel an xclbin names.
 * A new kernel in fpga/kernels/ adds its descriptor here. */
#include "fpga/emu/emu.h"
#include "fpga/kernels/flex_kernel.h"
#include "fpga/kernels/tls_kernel.h"
#include "fpga/kernels/xattn_kernel.h"
#include <string.h>

static const fpga_k_desc *const kernels[] = {
    &fpga_k_kv_gather_desc,
    &fpga_k_decode_desc,
    &fpga_k_decode_batch_desc,
    &fpga_k_kv_scatter_desc,
    &fpga_k_kv_check_desc,
    &fpga_k_flex_sigu_desc,
    &fpga_k_flex_sau_desc,
    &fpga_k_prefill_desc,
    &fpga_k_tls_select_desc,
    &fpga_k_xattn_est_desc,
};

const fpga_k_desc *emu_registry_find(const char *name)
{
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (!strcmp(kernels[i]->name, name)) return kernels[i];
    return NULL;
}
