/* exit_guard.c: see exit_guard.h. */
#include "build-config.h"

#include "core/exit_guard.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>


/* The open contexts (one per job; a few for programs that open several).
 * Lock-free: the handler runs in whichever thread called exit(), perhaps
 * while another holds a lock. */
#define MAX_GUARDED 16
static _Atomic(ddph_ctx *) guarded[MAX_GUARDED];
/* The process that armed the handler: a forked child inherits it, and
 * its exit() must not touch the parent's job. */
static _Atomic pid_t guard_pid;

static void job_left_open(void)
{
    if (getpid() != atomic_load(&guard_pid))
        return;
    ddph_ctx *left = NULL;
    for (int i = 0; i < MAX_GUARDED; i++) {
        ddph_ctx *ctx = atomic_exchange(&guarded[i], NULL);
        if (!ctx)
            continue;
        char msg[256];
        snprintf(msg, sizeof msg,
                 "rank %d exited (exit(), quick_exit() or a return from "
                 "main) %s, without ddph_close",
                 ddph__rank(ctx),
                 ctx->in_step ? "in the middle of a step"
                              : "while its job was open");
        ddph__log(&ctx->log, DDPH_LOG_ERROR,
                  "%s: the job fails; exiting with status %d", msg,
                  DDPH__EXIT_JOB_LEFT_OPEN);
        if (ctx->job_up)
            ddph__ctl_fail(ctx->control, DDPH_ERR_STATE, msg);
        left = ctx;
    }
    if (!left)
        return;
    if (left->job_up)
        left->job.ops->linger(left->job.state, DDPH__EXIT_LINGER_S);
    fflush(NULL);
    /* The status the trainer gave (0, often) would read as success. */
    _exit(DDPH__EXIT_JOB_LEFT_OPEN);
}

void ddph__exit_guard_arm(ddph_ctx *ctx)
{
    static atomic_flag registered = ATOMIC_FLAG_INIT;
    atomic_store(&guard_pid, getpid());
    /* quick_exit() runs its own list, not atexit's. */
    if (!atomic_flag_test_and_set(&registered) &&
        (atexit(job_left_open) != 0 || at_quick_exit(job_left_open) != 0))
        ddph__log(&ctx->log, DDPH_LOG_WARN,
                  "cannot register the exit handler: a rank that exits "
                  "without ddph_close will not be reported");
    for (int i = 0; i < MAX_GUARDED; i++) {
        ddph_ctx *none = NULL;
        if (atomic_compare_exchange_strong(&guarded[i], &none, ctx))
            return;
    }
}

void ddph__exit_guard_disarm(ddph_ctx *ctx)
{
    for (int i = 0; i < MAX_GUARDED; i++) {
        ddph_ctx *mine = ctx;
        atomic_compare_exchange_strong(&guarded[i], &mine, NULL);
    }
}
