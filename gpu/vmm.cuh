/* gpu/vmm.cuh — the CUDA driver's virtual memory management calls, looked up once through the
 * runtime's driver entry points (the plugin does not link libcuda). Used by the KV pool
 * (gpu/kv_pool.cu: device memory mapped in chunks as the pool grows) and by the offload's VMM host
 * memory (gpu/tls_hmem.cu). */
#ifndef GPU_VMM_CUH
#define GPU_VMM_CUH
#include <cuda.h>
#include <cudaTypedefs.h>

struct gpu_vmm_fns {
    PFN_cuMemAddressReserve_v10020 reserve;
    PFN_cuMemAddressFree_v10020 afree;
    PFN_cuMemCreate_v10020 create;
    PFN_cuMemRelease_v10020 release;
    PFN_cuMemMap_v10020 map;
    PFN_cuMemUnmap_v10020 unmap;
    PFN_cuMemSetAccess_v10020 access;
    PFN_cuMemGetAllocationGranularity_v10020 gran;
    PFN_cuDeviceGetAttribute_v2000 attr;
    int ok; /* every one of them found */
};

/* The calls, looked up on first use (gpu/kv_pool.cu). */
const gpu_vmm_fns &gpu_vmm();

#endif
