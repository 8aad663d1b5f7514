/* ddphook/types.h: element types and devices, shared by the runtime API and
 * the plugin ABI.  Values are part of the ABI: only ever appended. */
#ifndef DDPHOOK_TYPES_H
#define DDPHOOK_TYPES_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ddph_dtype {
    DDPH_F32 = 0,  /* IEEE binary32 */
    DDPH_F64 = 1,  /* IEEE binary64 */
    DDPH_F16 = 2,  /* IEEE binary16 */
    DDPH_BF16 = 3, /* bfloat16: the upper half of a binary32 */
    /* ABI minor 2: integer and byte data, for collectives only (indices of
     * a sparse hook, quantized values).  Gradients and the cast, divide
     * and element-wise services stay floating point. */
    DDPH_I32 = 4,  /* int32_t */
    DDPH_I64 = 5,  /* int64_t */
    DDPH_U8 = 6,   /* uint8_t: raw bytes */
    DDPH_I8 = 7,   /* int8_t */
    DDPH_DTYPE_COUNT /* grows when dtypes are appended: not an ABI value */
} ddph_dtype;

typedef enum ddph_device {
    DDPH_CPU = 0,  /* host memory, reduced over MPI */
    DDPH_CUDA = 1, /* device memory, reduced over NCCL */
    DDPH_DEVICE_COUNT
} ddph_device;

typedef enum ddph_redop {
    DDPH_SUM = 0,
    DDPH_MAX = 1,
    DDPH_MIN = 2,
} ddph_redop;

/* Log levels, most verbose first. */
typedef enum ddph_log_level {
    DDPH_LOG_DEBUG = 0,
    DDPH_LOG_INFO = 1,
    DDPH_LOG_WARN = 2,
    DDPH_LOG_ERROR = 3,
} ddph_log_level;

/* A named statistic a hook reports (e.g. PowerSGD's compression rate). */
typedef struct ddph_stat {
    const char *name; /* static storage of the plugin */
    double value;
} ddph_stat;

#ifdef __cplusplus
}
#endif
#endif /* DDPHOOK_TYPES_H */
