/* mpi_types.c: dtypes and reduction ops in MPI terms (mpi_internal.h). */
#include "build-config.h"

#include "backends/mpi/mpi_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device/cpu_ops.h"

/* ---- half types --------------------------------------------------------- */

#define HALF_OP(fn, dt, kernel)                                              \
    static void fn(void *in, void *inout, int *len, MPI_Datatype *type)      \
    {                                                                        \
        (void)type;                                                          \
        kernel(inout, in, dt, (size_t)*len);                                 \
    }
HALF_OP(f16_sum, DDPH_F16, ddph__cpu_add)
HALF_OP(f16_max, DDPH_F16, ddph__cpu_max)
HALF_OP(f16_min, DDPH_F16, ddph__cpu_min)
HALF_OP(bf16_sum, DDPH_BF16, ddph__cpu_add)
HALF_OP(bf16_max, DDPH_BF16, ddph__cpu_max)
HALF_OP(bf16_min, DDPH_BF16, ddph__cpu_min)
#undef HALF_OP

MPI_Datatype ddph__mpi_type(const ddph_mpi *m, ddph_dtype t)
{
    switch (t) {
    case DDPH_F32:
        return MPI_FLOAT;
    case DDPH_F64:
        return MPI_DOUBLE;
    case DDPH_F16:
    case DDPH_BF16:
        return m->half_type;
    case DDPH_I32:
        return MPI_INT32_T;
    case DDPH_I64:
        return MPI_INT64_T;
    case DDPH_U8:
        return MPI_UINT8_T;
    case DDPH_I8:
        return MPI_INT8_T;
    case DDPH_DTYPE_COUNT:
        break;
    }
    return MPI_DATATYPE_NULL;
}

MPI_Op ddph__mpi_op(const ddph_mpi *m, ddph_dtype t, ddph_redop op)
{
    if (t == DDPH_F16 || t == DDPH_BF16)
        return m->ops[t][op];
    switch (op) {
    case DDPH_SUM:
        return MPI_SUM;
    case DDPH_MAX:
        return MPI_MAX;
    case DDPH_MIN:
        return MPI_MIN;
    }
    return MPI_OP_NULL;
}

int ddph__mpi_valid(ddph_dtype t, ddph_redop op)
{
    return (unsigned)t < DDPH_DTYPE_COUNT && (unsigned)op <= DDPH_MIN;
}

void ddph__mpi_types_init(ddph_mpi *m)
{
    MPI_Type_contiguous(2, MPI_BYTE, &m->half_type);
    MPI_Type_commit(&m->half_type);
    MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min},
                                    {bf16_sum, bf16_max, bf16_min}};
    for (int k = 0; k < 3; k++) {
        MPI_Op_create(fns[0][k], 1, &m->ops[DDPH_F16][k]);
        MPI_Op_create(fns[1][k], 1, &m->ops[DDPH_BF16][k]);
    }
}

void ddph__mpi_types_free(ddph_mpi *m)
{
    for (int t = DDPH_F16; t <= DDPH_BF16; t++)
        for (int k = 0; k < 3; k++)
            if (m->ops[t][k] != MPI_OP_NULL && m->ops[t][k])
                MPI_Op_free(&m->ops[t][k]);
    if (m->half_type)
        MPI_Type_free(&m->half_type);
}
