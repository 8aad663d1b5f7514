/* capi_layout: prints the C layout of every struct and constant that the
 * Python bridge (python/ddphook/_capi.py) mirrors through ctypes, one fact
 * a line, for tests/capi_layout.sh to hold against ctypes' own view:
 *
 *   size STRUCT BYTES
 *   field STRUCT MEMBER OFFSET
 *   const NAME VALUE
 *
 * STRUCT is the ctypes class's name.  A member or constant added to the C
 * side that the bridge copies must be added here too. */
#include <stddef.h>
#include <stdio.h>

#include <ddphook/ddphook.h>

#define SIZE(py, type) printf("size %s %zu\n", py, sizeof(type))
#define FIELD(py, type, m) printf("field %s %s %zu\n", py, #m, offsetof(type, m))
#define CONST(py, value) printf("const %s %ld\n", py, (long)(value))

int main(void)
{
    SIZE("BucketInfo", ddph_bucket_info);
    FIELD("BucketInfo", ddph_bucket_info, index);
    FIELD("BucketInfo", ddph_bucket_info, nparams);
    FIELD("BucketInfo", ddph_bucket_info, params);
    FIELD("BucketInfo", ddph_bucket_info, numel);
    FIELD("BucketInfo", ddph_bucket_info, bytes);
    FIELD("BucketInfo", ddph_bucket_info, dtype);
    FIELD("BucketInfo", ddph_bucket_info, device);
    FIELD("BucketInfo", ddph_bucket_info, hook_calls);
    FIELD("BucketInfo", ddph_bucket_info, bytes_on_wire);
    SIZE("Stat", ddph_stat);
    FIELD("Stat", ddph_stat, name);
    FIELD("Stat", ddph_stat, value);
    CONST("F32", DDPH_F32);
    CONST("F64", DDPH_F64);
    CONST("F16", DDPH_F16);
    CONST("BF16", DDPH_BF16);
    CONST("CPU", DDPH_CPU);
    CONST("CUDA", DDPH_CUDA);
    CONST("SUM", DDPH_SUM);
    CONST("MAX", DDPH_MAX);
    CONST("MIN", DDPH_MIN);
    CONST("STEP_DEFAULT", DDPH_STEP_DEFAULT);
    CONST("STEP_NO_SYNC", DDPH_STEP_NO_SYNC);
    CONST("STEP_FORCE_SYNC", DDPH_STEP_FORCE_SYNC);
    return 0;
}
