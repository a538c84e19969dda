/* What the NVML libraries built here (the simulated GPU's, the remoting
 * client's) share. Include after nvml.h. */
#ifndef FLEXGV_NVML_UTIL_H
#define FLEXGV_NVML_UTIL_H

/* An entry point of a reference-counted NVML returns UNINITIALIZED while
 * the count is 0. */
#define FG_NVML_REQUIRE(refs)                                \
    do {                                                     \
        if (!__atomic_load_n(&(refs), __ATOMIC_ACQUIRE))     \
            return NVML_ERROR_UNINITIALIZED;                 \
    } while (0)

/* nvmlErrorString: NVIDIA's texts. */
static inline const char *fg_nvml_error_string(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

#endif
