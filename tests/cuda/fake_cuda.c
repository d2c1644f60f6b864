/*
 * fake_cuda.c: a stand-in libcuda.so.1 for machines without a GPU (tests only).
 *
 * It implements the driver entry points that runtime_c/aotc_cuda.c calls: device memory
 * is host memory, copies are memcpy, and kernels are the CPU-compiled kernels of
 * tests/cuda/emulation.py (the library named by $AOTC_FAKE_CUDA_KERNELS), run by its
 * emulator.  Environment:
 *   AOTC_FAKE_CUDA_ARCH   compute capability times ten the device reports (default 90)
 *   AOTC_FAKE_CUDA_INIT   a CUresult for cuInit to return (default 0)
 *   AOTC_FAKE_CUDA_LOG    a file that gets one line per module load and kernel launch
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void (*aotc_emu_fn)(void **params);
typedef struct {
    const char *name;
    aotc_emu_fn fn;
    unsigned shared;
    int cooperative;
} aotc_emu_kernel;
typedef int (*launch_fn)(const aotc_emu_kernel *, unsigned, unsigned, void **);

enum {
    SUCCESS = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    NO_DEVICE = 100,
    INVALID_DEVICE = 101,
    INVALID_IMAGE = 200,
    NOT_FOUND = 500,
    LAUNCH_FAILED = 719,
};

static void *kernels_library;
static const aotc_emu_kernel *kernel_table;
static launch_fn emulated_launch;

static void log_line(const char *format, ...) {
    const char *path = getenv("AOTC_FAKE_CUDA_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f != NULL) {
        va_list args;
        va_start(args, format);
        vfprintf(f, format, args);
        va_end(args);
        fputc('\n', f);
        fclose(f);
    }
}

static int device_arch(void) {
    const char *arch = getenv("AOTC_FAKE_CUDA_ARCH");
    return arch ? atoi(arch) : 90;
}

CUresult cuInit(unsigned flags) {
    const char *status = getenv("AOTC_FAKE_CUDA_INIT");
    (void)flags;
    return status ? atoi(status) : SUCCESS;
}

CUresult cuDeviceGet(int *device, int ordinal) {
    if (ordinal != 0)
        return INVALID_DEVICE;
    *device = 0;
    return SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)device;
    switch (attribute) {
    case 13: *value = 1800000; break; /* clock rate, kHz */
    case 16: *value = 4; break; /* multiprocessors */
    case 36: *value = 1000000; break; /* memory clock rate, kHz */
    case 37: *value = 256; break; /* memory bus width, bits */
    case 75: *value = device_arch() / 10; break;
    case 76: *value = device_arch() % 10; break;
    default: return INVALID_VALUE;
    }
    return SUCCESS;
}

static int context_token;
CUresult cuDevicePrimaryCtxRetain(void **context, int device) {
    (void)device;
    *context = &context_token;
    return SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(int device) { (void)device; return SUCCESS; }
CUresult cuCtxSetCurrent(void *context) { return context == &context_token ? SUCCESS : INVALID_VALUE; }

static CUresult open_kernels(void **module) {
    const char *path = getenv("AOTC_FAKE_CUDA_KERNELS");
    if (path == NULL)
        return INVALID_IMAGE;
    kernels_library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (kernels_library == NULL) {
        fprintf(stderr, "fake libcuda: %s\n", dlerror());
        return INVALID_IMAGE;
    }
    kernel_table = dlsym(kernels_library, "aotc_emu_kernels");
    *(void **)(&emulated_launch) = dlsym(kernels_library, "aotc_emu_launch");
    if (kernel_table == NULL || emulated_launch == NULL)
        return INVALID_IMAGE;
    *module = kernels_library;
    return SUCCESS;
}

CUresult cuModuleLoadData(void **module, const void *image) {
    const unsigned char *elf = image;
    if (memcmp(elf, "\177ELF", 4) != 0)
        return INVALID_IMAGE;
    uint32_t flags;
    memcpy(&flags, elf + 0x30, 4);
    /* cubins name the SM in e_flags: bits 0-7 before CUDA 12.?, bits 8-15 after */
    unsigned sm = (flags & 0xff) >= 20 ? flags & 0xff : (flags >> 8) & 0xff;
    log_line("load cubin sm_%u", sm);
    return open_kernels(module);
}

CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned count, int *options,
                            void **values) {
    const char *ptx = image;
    const char *target = strstr(ptx, ".target sm_");
    (void)count, (void)options, (void)values;
    if (target == NULL)
        return INVALID_IMAGE;
    log_line("load ptx sm_%d", atoi(target + 11));
    return open_kernels(module);
}

CUresult cuModuleUnload(void *module) {
    (void)module;
    return SUCCESS;
}

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    (void)module;
    for (const aotc_emu_kernel *k = kernel_table; k && k->name; k++)
        if (strcmp(k->name, name) == 0) {
            *function = (void *)k;
            return SUCCESS;
        }
    return NOT_FOUND;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
    void *memory = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (memory == NULL)
        return OUT_OF_MEMORY;
    /* garbage, as fresh device memory: AOTC_FAKE_CUDA_FILL's byte (hex), 0xff making
     * every float NaN, so that a kernel reading what no kernel wrote shows */
    const char *fill = getenv("AOTC_FAKE_CUDA_FILL");
    memset(memory, fill ? (int)strtol(fill, NULL, 16) : 0xA5, (bytes + 255) / 256 * 256);
    *ptr = (CUdeviceptr)(uintptr_t)memory;
    return SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
    free((void *)(uintptr_t)ptr);
    return SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return SUCCESS;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *stream) {
    (void)stream;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
    return SUCCESS;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream,
                        void **params, void **extra) {
    const aotc_emu_kernel *kernel = f;
    (void)stream, (void)extra;
    if (gy != 1 || gz != 1 || by != 1 || bz != 1 || shared != 0 || gx == 0)
        return INVALID_VALUE;
    log_line("launch %s %u %u", kernel->name, gx, bx);
    return emulated_launch(kernel, gx, bx, params) == 0 ? SUCCESS : LAUNCH_FAILED;
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    return cuMemcpyDtoDAsync_v2(dst, src, bytes, NULL);
}

/* events: host clock readings (the emulated work is synchronous) */
CUresult cuEventCreate(void **event, unsigned flags) {
    (void)flags;
    *event = calloc(1, sizeof(struct timespec));
    return *event ? SUCCESS : OUT_OF_MEMORY;
}

CUresult cuEventRecord(void *event, void *stream) {
    (void)stream;
    clock_gettime(CLOCK_MONOTONIC, event);
    return SUCCESS;
}

CUresult cuEventSynchronize(void *event) {
    (void)event;
    return SUCCESS;
}

CUresult cuEventElapsedTime(float *ms, void *start, void *stop) {
    const struct timespec *a = start, *b = stop;
    *ms = (float)((b->tv_sec - a->tv_sec) * 1e3 + (b->tv_nsec - a->tv_nsec) * 1e-6);
    return SUCCESS;
}

CUresult cuEventDestroy_v2(void *event) {
    free(event);
    return SUCCESS;
}

CUresult cuStreamSynchronize(void *stream) {
    (void)stream;
    return SUCCESS;
}

static const struct {
    int code;
    const char *name, *text;
} errors[] = {
    {INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
};

CUresult cuGetErrorName(CUresult code, const char **name) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == code) {
            *name = errors[i].name;
            return SUCCESS;
        }
    return INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult code, const char **text) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == code) {
            *text = errors[i].text;
            return SUCCESS;
        }
    return INVALID_VALUE;
}
