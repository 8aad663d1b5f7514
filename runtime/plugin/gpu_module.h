/* gpu_module.h: loading the GPU backend module (comm/gpu.h's table).
 *
 * The module is $DDPH_BACKEND_DIR/nccl.so when that variable is set (a
 * build tree, a relocated install), else the installed
 * <pkglibdir>/backends/nccl.so.  It is opened with the plugin loader's
 * checks (owner, mode, every folder and link on the way), loaded once per
 * process and never unloaded. */
#ifndef DDPH_GPU_MODULE_H
#define DDPH_GPU_MODULE_H

#include "comm/gpu.h"

/* Later calls return the same table.  The message names the file and why
 * it could not be used (not installed, a CUDA library missing, another
 * version). */
ddph_status ddph__gpu_load(const ddph_gpu_ops **out, ddph_err *err);

#endif
