/*
 * aotc_cuda.c: the CUDA driver API through dlopen("libcuda.so.1"), for compiled models.
 *
 * The driver is opened once per process (pthread_once) and the few entry points the
 * launchers need are looked up by their versioned names (the ones cuda.h maps to).
 * Every failure becomes a return code and a message in the model's error buffer naming
 * the model, the call and the driver's own name and description of the error.
 */
#define _POSIX_C_SOURCE 200809L

#include "aotc_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;

enum {
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
};

#define DRIVER_LIBRARY "libcuda.so.1"

/* X(field, symbol, parameters): every driver function we call */
#define AOTC_DRIVER_FUNCTIONS(X)                                                          \
    X(init, "cuInit", (unsigned flags))                                                   \
    X(device_get, "cuDeviceGet", (CUdevice * device, int ordinal))                        \
    X(device_attribute, "cuDeviceGetAttribute", (int *value, int attribute, CUdevice dev)) \
    X(retain, "cuDevicePrimaryCtxRetain", (void **context, CUdevice dev))                 \
    X(release, "cuDevicePrimaryCtxRelease_v2", (CUdevice dev))                            \
    X(set_current, "cuCtxSetCurrent", (void *context))                                    \
    X(load, "cuModuleLoadData", (void **module, const void *image))                       \
    X(load_ex, "cuModuleLoadDataEx",                                                      \
      (void **module, const void *image, unsigned count, int *options, void **values))    \
    X(unload, "cuModuleUnload", (void *module))                                           \
    X(function, "cuModuleGetFunction", (void **function, void *module, const char *name)) \
    X(alloc, "cuMemAlloc_v2", (aotc_cuda_ptr * ptr, size_t bytes))                       \
    X(free, "cuMemFree_v2", (aotc_cuda_ptr ptr))                                          \
    X(htod, "cuMemcpyHtoD_v2", (aotc_cuda_ptr dst, const void *src, size_t bytes))        \
    X(dtoh, "cuMemcpyDtoH_v2", (void *dst, aotc_cuda_ptr src, size_t bytes))              \
    X(dtod_async, "cuMemcpyDtoDAsync_v2",                                                 \
      (aotc_cuda_ptr dst, aotc_cuda_ptr src, size_t bytes, aotc_cuda_stream stream))      \
    X(launch, "cuLaunchKernel",                                                           \
      (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,          \
       unsigned bz, unsigned shared, aotc_cuda_stream stream, void **params, void **extra)) \
    X(synchronize, "cuStreamSynchronize", (aotc_cuda_stream stream))                      \
    X(error_name, "cuGetErrorName", (CUresult error, const char **name))                  \
    X(error_string, "cuGetErrorString", (CUresult error, const char **text))

#define AOTC_DECLARE(field, symbol, params) CUresult(*field) params;
static struct {
    AOTC_DRIVER_FUNCTIONS(AOTC_DECLARE)
} driver;
#undef AOTC_DECLARE

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static int driver_status = AOTC_CUDA_ERROR_NO_DRIVER;
static char driver_problem[256];

static void open_driver(void) {
    void *library = dlopen(DRIVER_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *why = dlerror();
        snprintf(driver_problem, sizeof driver_problem, "cannot open the CUDA driver: %s",
                 why ? why : DRIVER_LIBRARY);
        return;
    }
    /* POSIX guarantees data and function pointers convert through void * like this */
#define AOTC_LOOKUP(field, symbol, params)                                                \
    *(void **)(&driver.field) = dlsym(library, symbol);                                   \
    if (driver.field == NULL) {                                                           \
        snprintf(driver_problem, sizeof driver_problem,                                   \
                 "the CUDA driver " DRIVER_LIBRARY " has no %s (too old?)", symbol);      \
        return;                                                                           \
    }
    AOTC_DRIVER_FUNCTIONS(AOTC_LOOKUP)
#undef AOTC_LOOKUP
    CUresult status = driver.init(0);
    if (status != 0) {
        driver_status = status;
        snprintf(driver_problem, sizeof driver_problem, "cuInit: %s",
                 aotc_cuda_error_string(status));
        return;
    }
    driver_status = 0;
}

static int driver_ready(void) {
    pthread_once(&driver_once, open_driver);
    return driver_status;
}

const char *aotc_cuda_error_string(int code) {
    static const char *const ours[] = {
        "success",
        "the CUDA driver (libcuda.so.1) is missing or too old: install the NVIDIA driver",
        "no kernel image of the model runs on this GPU: recompile for its architecture",
        "invalid model context (NULL, or its init failed)",
        "an extent outside its bounded dim's range",
    };
    if (code <= 0 && code >= AOTC_CUDA_ERROR_EXTENT)
        return ours[-code];
    if (code < 0 || driver.error_string == NULL)
        return "unknown error";
    /* the driver's "CUDA_ERROR_NAME: description"; one static buffer per thread */
    static __thread char text[256];
    const char *name = NULL, *description = NULL;
    driver.error_name(code, &name);
    driver.error_string(code, &description);
    snprintf(text, sizeof text, "%s (%d): %s", name ? name : "CUDA error", code,
             description ? description : "unknown error");
    return text;
}

/* Records "model: what: message" in the model's error buffer; returns `code`. */
static int fail(aotc_cuda_model *m, int code, const char *format, ...) {
    char what[256];
    va_list args;
    va_start(args, format);
    vsnprintf(what, sizeof what, format, args);
    va_end(args);
    if (m != NULL)
        snprintf(m->error, sizeof m->error, "%s: %s", what, aotc_cuda_error_string(code));
    return code;
}

static int check(aotc_cuda_model *m, CUresult status, const char *model, const char *call) {
    return status == 0 ? 0 : fail(m, status, "%s: %s", model, call);
}

/* The cubin to load: same major version, the highest minor not above the device's. */
static int pick_cubin(const aotc_cuda_image *cubins, int count, int device_arch) {
    int best = -1;
    for (int i = 0; i < count; i++) {
        int arch = cubins[i].arch;
        int fits = cubins[i].exact ? arch == device_arch
                                   : arch / 10 == device_arch / 10 && arch <= device_arch;
        if (fits && (best < 0 || arch > cubins[best].arch))
            best = i;
    }
    return best;
}

static int load_ptx(aotc_cuda_model *m, const char *model, const char *ptx) {
    char log[1024] = "";
    int options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {log, (void *)(size_t)sizeof log};
    CUresult status = driver.load_ex(&m->module, ptx, 2, options, values);
    if (status == 0)
        return 0;
    fail(m, status, "%s: cuModuleLoadDataEx (JIT of the PTX)", model);
    if (log[0] != '\0') {
        size_t used = strlen(m->error);
        snprintf(m->error + used, sizeof m->error - used, " [%s]", log);
    }
    return status;
}

int aotc_cuda_load(aotc_cuda_model *m, const char *model, int device,
                   const aotc_cuda_image *cubins, int count, int ptx_arch, const char *ptx,
                   const void *weights, size_t weight_bytes, size_t arena_bytes) {
    int status, major = 0, minor = 0;
    CUdevice dev;
    memset(m, 0, sizeof *m);
    m->device = device;
    if (driver_ready() != 0) {
        snprintf(m->error, sizeof m->error, "%s: %s", model, driver_problem);
        return driver_status;
    }
    if ((status = check(m, driver.device_get(&dev, device), model, "cuDeviceGet")) ||
        (status = check(m, driver.device_attribute(&major,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), model,
                        "cuDeviceGetAttribute")) ||
        (status = check(m, driver.device_attribute(&minor,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), model,
                        "cuDeviceGetAttribute")) ||
        (status = check(m, driver.retain(&m->context, dev), model,
                        "cuDevicePrimaryCtxRetain")))
        return status;
    if ((status = check(m, driver.set_current(m->context), model, "cuCtxSetCurrent"))) {
        aotc_cuda_unload(m);
        return status;
    }
    int arch = 10 * major + minor;
    int chosen = pick_cubin(cubins, count, arch);
    status = AOTC_CUDA_ERROR_NO_IMAGE;
    if (chosen >= 0) {
        status = check(m, driver.load(&m->module, cubins[chosen].data), model,
                       "cuModuleLoadData");
        snprintf(m->image, sizeof m->image, "sm_%d cubin", cubins[chosen].arch);
    }
    if (status != 0 && ptx_arch <= arch) { /* no cubin fits, or the driver refused it */
        status = load_ptx(m, model, ptx);
        snprintf(m->image, sizeof m->image, "PTX for sm_%d (JIT)", ptx_arch);
    }
    if (status == AOTC_CUDA_ERROR_NO_IMAGE)
        fail(m, status, "%s: the GPU is sm_%d", model, arch);
    if (status != 0) {
        aotc_cuda_unload(m);
        return status;
    }
    if (weight_bytes > 0 &&
        ((status = check(m, driver.alloc(&m->weights, weight_bytes), model,
                         "cuMemAlloc (weights)")) ||
         (status = check(m, driver.htod(m->weights, weights, weight_bytes), model,
                         "cuMemcpyHtoD (weights)")))) {
        aotc_cuda_unload(m);
        return status;
    }
    if (arena_bytes > 0 &&
        (status = check(m, driver.alloc(&m->arena, arena_bytes), model, "cuMemAlloc (arena)"))) {
        aotc_cuda_unload(m);
        return status;
    }
    m->ready = 1;
    m->error[0] = '\0';
    return 0;
}

int aotc_cuda_functions(aotc_cuda_model *m, const char *const *names, int count,
                        void **functions) {
    for (int i = 0; i < count; i++) {
        CUresult status = driver.function(&functions[i], m->module, names[i]);
        if (status != 0)
            return fail(m, status, "cuModuleGetFunction(%s)", names[i]);
    }
    return 0;
}

int aotc_cuda_enter(aotc_cuda_model *m) {
    if (m == NULL || !m->ready)
        return fail(m, AOTC_CUDA_ERROR_INVALID, "run");
    CUresult status = driver.set_current(m->context);
    return status == 0 ? 0 : fail(m, status, "cuCtxSetCurrent");
}

int aotc_cuda_launch(aotc_cuda_model *m, void *function, unsigned grid, unsigned block,
                     aotc_cuda_stream stream, void **params, const char *what) {
    CUresult status = driver.launch(function, grid, 1, 1, block, 1, 1, 0, stream, params, NULL);
    return status == 0 ? 0 : fail(m, status, "cuLaunchKernel(%s)", what);
}

int aotc_cuda_copy(aotc_cuda_model *m, aotc_cuda_ptr dst, aotc_cuda_ptr src, size_t bytes,
                   aotc_cuda_stream stream) {
    CUresult status = driver.dtod_async(dst, src, bytes, stream);
    return status == 0 ? 0 : fail(m, status, "cuMemcpyDtoDAsync (output copy)");
}

void aotc_cuda_unload(aotc_cuda_model *m) {
    if (m == NULL || driver_ready() != 0)
        return;
    if (m->context != NULL)
        driver.set_current(m->context);
    if (m->arena)
        driver.free(m->arena);
    if (m->weights)
        driver.free(m->weights);
    if (m->module != NULL)
        driver.unload(m->module);
    if (m->context != NULL)
        driver.release(m->device);
    m->arena = m->weights = 0;
    m->module = m->context = NULL;
    m->ready = 0;
}

int aotc_cuda_malloc(aotc_cuda_ptr *ptr, size_t bytes) {
    int status = driver_ready();
    return status != 0 ? status : driver.alloc(ptr, bytes ? bytes : 1);
}

int aotc_cuda_free(aotc_cuda_ptr ptr) {
    int status = driver_ready();
    return status != 0 ? status : driver.free(ptr);
}

int aotc_cuda_upload(aotc_cuda_ptr dst, const void *src, size_t bytes) {
    int status = driver_ready();
    return status != 0 ? status : bytes ? driver.htod(dst, src, bytes) : 0;
}

int aotc_cuda_download(void *dst, aotc_cuda_ptr src, size_t bytes) {
    int status = driver_ready();
    return status != 0 ? status : bytes ? driver.dtoh(dst, src, bytes) : 0;
}

int aotc_cuda_synchronize(aotc_cuda_stream stream) {
    int status = driver_ready();
    return status != 0 ? status : driver.synchronize(stream);
}

/* -- bounded dims: compact device buffers in and out (aotc_bounded.c) ---------------- */

typedef struct {
    aotc_cuda_model *model;
    aotc_cuda_run_fn run;
    void *ctx;
    aotc_cuda_stream stream;
} bounded_call;

static int device_copy(void *user, uintptr_t dst, uintptr_t src, size_t bytes) {
    bounded_call *call = (bounded_call *)user;
    CUresult status = driver.dtod_async(dst, src, bytes, call->stream);
    return status == 0 ? 0 : fail(call->model, status, "cuMemcpyDtoDAsync (bounded copy)");
}

static int device_put(void *user, uintptr_t dst, const void *src, size_t bytes) {
    bounded_call *call = (bounded_call *)user;
    CUresult status = bytes ? driver.htod(dst, src, bytes) : 0;
    return status == 0 ? 0 : fail(call->model, status, "cuMemcpyHtoD (input_dims)");
}

static int device_get(void *user, void *dst, uintptr_t src, size_t bytes) {
    bounded_call *call = (bounded_call *)user;
    CUresult status = driver.synchronize(call->stream);
    if (status == 0 && bytes)
        status = driver.dtoh(dst, src, bytes);
    return status == 0 ? 0 : fail(call->model, status, "cuMemcpyDtoH (output_dims)");
}

static int device_run(void *user, const uintptr_t *inputs, const uintptr_t *outputs) {
    bounded_call *call = (bounded_call *)user;
    return call->run(call->ctx, (const aotc_cuda_ptr *)inputs, (const aotc_cuda_ptr *)outputs,
                     call->stream);
}

int aotc_cuda_run_bounded(aotc_cuda_model *m, aotc_cuda_run_fn run, void *ctx,
                          aotc_cuda_ptr scratch, int n_inputs,
                          const aotc_bounded_tensor *inputs_desc, const aotc_cuda_ptr *inputs,
                          const int64_t *input_dims, int n_outputs,
                          const aotc_bounded_tensor *outputs_desc, const aotc_cuda_ptr *outputs,
                          int64_t *output_dims, int has_output_dims, aotc_cuda_stream stream) {
    static const aotc_bounded_memory device = {device_copy, device_put, device_get, device_run};
    int status = aotc_cuda_enter(m);
    if (status != 0)
        return status;
    if (scratch == 0 || scratch % 64u != 0)
        return fail(m, AOTC_CUDA_ERROR_INVALID, "bounded run: scratch NULL or not aligned");
    bounded_call call = {m, run, ctx, stream};
    uintptr_t in[n_inputs + 1], out[n_outputs + 1];
    for (int i = 0; i < n_inputs; ++i) in[i] = (uintptr_t)inputs[i];
    for (int i = 0; i < n_outputs; ++i) out[i] = (uintptr_t)outputs[i];
    status = aotc_bounded_run(&device, &call, (uintptr_t)scratch, n_inputs, inputs_desc, in,
                              input_dims, n_outputs, outputs_desc, out, output_dims,
                              has_output_dims);
    if (status == AOTC_BOUNDED_OUT_OF_RANGE)
        return fail(m, AOTC_CUDA_ERROR_EXTENT, "bounded run: an extent outside its range");
    return status;
}
