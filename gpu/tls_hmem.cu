/* gpu/tls_hmem.cu — pinned host memory mapped into the device, three ways (gpu/tls_hmem.cuh).
 *
 * Why three: the offloaded AsyncTLS rows (gpu/tls_off.cu) read scattered 256-byte K / V rows of
 * the host pool in place, and a kernel reading rows at random positions of a 4 GiB cudaHostAlloc
 * buffer moves 12 GB/s where the link does 55 (BENCHMARKS.md, "The row cache"). If the cost is
 * per host page the device translates, the way the memory is mapped matters: cudaHostAlloc and
 * cudaHostRegister map what the kernel gave (4 KiB pages, or 2 MiB ones where the range is
 * backed by transparent huge pages), VMM host memory (cuMemCreate, CU_MEM_LOCATION_TYPE_HOST)
 * is allocated by the driver in chunks of its granularity and mapped as such.
 * gpu/test/tls_hmem_test_api.cu measures the three; TANDEM_TLS_HPOOL picks the pool's. */
#include "gpu/engine.cuh"
#include "gpu/tls_hmem.cuh"
#include "gpu/vmm.cuh"
#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

namespace
{
struct span {
    char *p;
    size_t n;
};

void *touch(void *a)
{
    const span *s = (const span *)a;
    for (size_t o = 0; o < s->n; o += 4096) s->p[o] = 0; /* faults the page (or huge page) in */
    return NULL;
}

int threads()
{
    const long nc = sysconf(_SC_NPROCESSORS_ONLN);
    return nc < 1 ? 1 : nc > 16 ? 16 : (int)nc;
}

/* anonymous memory (huge pages advised, or refused), faulted in by up to 16 threads (the kernel
 * zeroes each page on its first touch: one thread does ~1.5 GB/s), then pinned and mapped */
char *pin_parallel(size_t bytes, int huge)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    const int nt = threads();
    pthread_t th[16];
    span sp[16];
    const size_t per = (bytes / nt + 4095) / 4096 * 4096;
    int started = 0;
    for (int i = 0; i < nt; i++) {
        const size_t o = (size_t)i * per;
        sp[i].p = (char *)p + (o < bytes ? o : bytes);
        sp[i].n = o < bytes ? (bytes - o < per ? bytes - o : per) : 0;
        if (pthread_create(&th[i], NULL, touch, &sp[i])) touch(&sp[i]);
        else started |= 1 << i;
    }
    for (int i = 0; i < nt; i++)
        if (started >> i & 1) pthread_join(th[i], NULL);
    if (cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable) != cudaSuccess) {
        cudaGetLastError();
        munmap(p, bytes);
        return NULL;
    }
    return (char *)p;
}

/* ---------------------------------------------------------------- VMM host memory */

CUmemAllocationProp host_prop()
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_HOST; /* id ignored; no handle types (not IPC) */
    return p;
}

/* chunks of 1 GiB rounded down to the granularity (few handles, still spread over threads), or
 * all of a smaller size rounded up to it */
size_t vmm_chunk(size_t gran, size_t bytes)
{
    size_t c = ((size_t)1 << 30) / gran * gran;
    if (!c) c = gran;
    return bytes < c ? (bytes + gran - 1) / gran * gran : c;
}

struct vmm_job {
    int dev;
    CUdeviceptr base;
    size_t chunk;
    size_t first, n; /* chunks [first, first + n) */
    int bad;
};

/* create and map this thread's chunks (the driver zeroes and pins each: in parallel) */
void *vmm_chunks(void *a)
{
    vmm_job *j = (vmm_job *)a;
    const gpu_vmm_fns &f = gpu_vmm();
    if (cudaSetDevice(j->dev) != cudaSuccess) { /* the device's context current on this thread */
        cudaGetLastError();
        j->bad = 1;
        return NULL;
    }
    const CUmemAllocationProp p = host_prop();
    for (size_t i = j->first; i < j->first + j->n && !j->bad; i++) {
        CUmemGenericAllocationHandle h;
        if (f.create(&h, j->chunk, &p, 0) != CUDA_SUCCESS) {
            j->bad = 1;
            break;
        }
        if (f.map(j->base + i * j->chunk, j->chunk, 0, h, 0) != CUDA_SUCCESS) j->bad = 1;
        f.release(h); /* the mapping keeps it */
    }
    return NULL;
}

void vmm_unmap(CUdeviceptr base, size_t chunk, size_t nchunks, size_t reserved)
{
    const gpu_vmm_fns &f = gpu_vmm();
    for (size_t i = 0; i < nchunks; i++) f.unmap(base + i * chunk, chunk); /* unmapped ones: error */
    f.afree(base, reserved);
}

int vmm_alloc(size_t bytes, int dev, gpu_hmem *m)
{
    size_t gmin = 0, grec = 0;
    if (gpu_hmem_vmm_gran(dev, &gmin, &grec)) return -1;
    const size_t chunk = vmm_chunk(grec, bytes);
    const size_t nchunks = (bytes + chunk - 1) / chunk, total = nchunks * chunk;
    const gpu_vmm_fns &f = gpu_vmm();
    CUdeviceptr base = 0;
    if (f.reserve(&base, total, grec, 0, 0) != CUDA_SUCCESS) return -1;
    const int nt = (int)(nchunks < (size_t)threads() ? nchunks : (size_t)threads());
    pthread_t th[16];
    vmm_job jb[16];
    int started = 0, bad = 0;
    for (int i = 0; i < nt; i++) {
        jb[i].dev = dev, jb[i].base = base, jb[i].chunk = chunk, jb[i].bad = 0;
        jb[i].first = nchunks * i / nt, jb[i].n = nchunks * (i + 1) / nt - jb[i].first;
        if (pthread_create(&th[i], NULL, vmm_chunks, &jb[i])) vmm_chunks(&jb[i]);
        else started |= 1 << i;
    }
    for (int i = 0; i < nt; i++) {
        if (started >> i & 1) pthread_join(th[i], NULL);
        bad |= jb[i].bad;
    }
    CUmemAccessDesc ad;
    memset(&ad, 0, sizeof ad);
    ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ad.location.id = dev;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (bad || f.access(base, total, &ad, 1) != CUDA_SUCCESS) {
        vmm_unmap(base, chunk, nchunks, total);
        return -1;
    }
    m->kind = GPU_HMEM_VMM;
    m->h = NULL;
    m->d = (char *)(uintptr_t)base;
    m->bytes = total;
    m->gran = chunk;
    return 0;
}
} // namespace

int gpu_hmem_vmm_gran(int dev, size_t *min, size_t *rec)
{
    const gpu_vmm_fns &f = gpu_vmm();
    int sup = 0;
    if (!f.ok || f.attr(&sup, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
                     CUDA_SUCCESS || !sup)
        return -1;
    CUmemAllocationProp p = host_prop();
    size_t a = 0, b = 0;
    if (f.gran(&a, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
        f.gran(&b, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || !a || !b)
        return -1;
    if (min) *min = a;
    if (rec) *rec = b;
    return 0;
}

int gpu_hmem_alloc(int kind, size_t bytes, int dev, gpu_hmem *m)
{
    memset(m, 0, sizeof *m);
    if (!bytes) return -1;
    if (kind == GPU_HMEM_VMM) return vmm_alloc(bytes, dev, m);
    char *h = NULL;
    if (kind == GPU_HMEM_REGISTER || kind == GPU_HMEM_REGISTER_4K) {
        if (!(h = pin_parallel(bytes, kind == GPU_HMEM_REGISTER))) return -1;
    } else if (kind != GPU_HMEM_HOSTALLOC ||
               cudaHostAlloc((void **)&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable) !=
                   cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    m->kind = kind;
    m->h = h;
    m->bytes = bytes;
    if (cudaHostGetDevicePointer((void **)&m->d, h, 0) != cudaSuccess) {
        cudaGetLastError();
        gpu_hmem_free(m);
        return -1;
    }
    return 0;
}

void gpu_hmem_free(gpu_hmem *m)
{
    if (m->kind == GPU_HMEM_VMM && m->d) {
        /* gran 0: as vmm_alloc chose it for these bytes (the same granularity) */
        size_t c = m->gran;
        if (!c) {
            CUmemAllocationProp p = host_prop();
            size_t g = 0;
            if (gpu_vmm().gran(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS && g)
                c = vmm_chunk(g, m->bytes);
        }
        const size_t n = c ? (m->bytes + c - 1) / c : 0;
        if (n) vmm_unmap((CUdeviceptr)(uintptr_t)m->d, c, n, n * c);
    } else if (m->h && m->kind == GPU_HMEM_HOSTALLOC) {
        cudaFreeHost(m->h);
    } else if (m->h) {
        cudaHostUnregister(m->h);
        munmap(m->h, m->bytes);
    }
    memset(m, 0, sizeof *m);
}

int gpu_hmem_kind_env(int dflt)
{
    static const char *names[GPU_HMEM_KINDS] = {"hostalloc", "register", "vmm", "register4k"};
    const char *v = getenv("TANDEM_TLS_HPOOL");
    for (int k = 0; v && k < GPU_HMEM_KINDS; k++)
        if (!strcmp(v, names[k])) return k;
    return dflt;
}
