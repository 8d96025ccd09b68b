/* gpu/tls_hmem.cuh — pinned host memory mapped into the device's address space, three ways
 * (gpu/tls_off.cu: the offload's host pool; gpu/test/tls_hmem_test_api.cu: what each costs a
 * kernel reading scattered rows over PCIe). */
#pragma once
#include <stddef.h>

enum {
    GPU_HMEM_HOSTALLOC = 0, /* one cudaHostAlloc (mapped, portable) */
    GPU_HMEM_REGISTER = 1,  /* anonymous mmap, huge pages advised, faulted in by up to 16
                               threads, then cudaHostRegister (mapped, portable) */
    GPU_HMEM_VMM = 2,       /* CUDA VMM: cuMemCreate of CU_MEM_LOCATION_TYPE_HOST memory in
                               chunks of the recommended granularity's multiple (by up to 16
                               threads), cuMemMap'ed into one reserved range, cuMemSetAccess
                               read-write for the device; the host has no mapping of it */
    GPU_HMEM_REGISTER_4K = 3, /* as GPU_HMEM_REGISTER with huge pages refused (MADV_NOHUGEPAGE) */
    GPU_HMEM_KINDS = 4
};

struct gpu_hmem {
    int kind;
    char *h;      /* the host's address (NULL for GPU_HMEM_VMM) */
    char *d;      /* the device's address */
    size_t bytes; /* as asked, rounded up to gran */
    size_t gran;  /* GPU_HMEM_VMM: the chunk (a multiple of the recommended granularity); else 0 */
};

/* 0 and *m filled, or a CUDA / mmap failure: -1 (nothing held). dev: the device to map it for. */
int gpu_hmem_alloc(int kind, size_t bytes, int dev, gpu_hmem *m);
void gpu_hmem_free(gpu_hmem *m);
/* The kind TANDEM_TLS_HPOOL names (hostalloc, register, vmm, register4k), else dflt. */
int gpu_hmem_kind_env(int dflt);
/* The device's CU_MEM_LOCATION_TYPE_HOST granularities (minimum, recommended): 0, or -1 where
 * the driver lacks the entry points or the device host VMM (CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_
 * MEMORY_MANAGEMENT_SUPPORTED). */
int gpu_hmem_vmm_gran(int dev, size_t *min, size_t *rec);
/* 1: offloaded sequences take the page layout with K and V side by side (a layer and KV head's
 * 128 K rows, then its 128 V rows: the default); 0 where TANDEM_TLS_HLAYOUT=far: the KV pool
 * block's (all layers' K, then all V) (gpu/tls_off.cu) */
int gpu_tls_off_near(void);
