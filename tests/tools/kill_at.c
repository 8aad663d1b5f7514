/* kill_at.c: an LD_PRELOAD library that SIGKILLs its process at a chosen
 * file operation, for tests/checkpoint_crash.sh: a crash at an exact point
 * of ddph_state_save, with no hook for it in the runtime.
 *
 *   KILL_AT=CALL:N:WHEN  CALL is mkstemp or rename, N counts the calls
 *                        (from 1) whose path contains KILL_MATCH (rename:
 *                        either path), WHEN is before or after the call.
 *   KILL_MATCH=TEXT      e.g. ".rank2"
 *   KILL_SIGNAL=STOP     stop the process there instead (SIGSTOP; it goes
 *                        on from there when sent SIGCONT)
 * Without KILL_AT the calls pass through untouched. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int counts[2];

/* Counts this call if its path matches: 1 to kill before it, 2 after it,
 * 0 to let it be. */
static int target(int which, const char *name, const char *a, const char *b)
{
    const char *at = getenv("KILL_AT"), *match = getenv("KILL_MATCH");
    if (!at || !match || (!strstr(a, match) && !(b && strstr(b, match))))
        return 0;
    counts[which]++;
    char call[16], phase[16];
    int n = 0;
    if (sscanf(at, "%15[a-z]:%d:%15[a-z]", call, &n, phase) != 3 ||
        strcmp(call, name) != 0 || counts[which] != n)
        return 0;
    return strcmp(phase, "before") == 0 ? 1 : 2;
}

static void die_now(void)
{
    const char *sig = getenv("KILL_SIGNAL");
    if (sig && strcmp(sig, "STOP") == 0) {
        kill(getpid(), SIGSTOP);
        return;
    }
    kill(getpid(), SIGKILL);
    pause();
}

int mkstemp(char *template)
{
    static int (*real)(char *);
    if (!real)
        real = (int (*)(char *))dlsym(RTLD_NEXT, "mkstemp");
    int when = target(0, "mkstemp", template, NULL);
    if (when == 1)
        die_now();
    int fd = real(template);
    if (when == 2)
        die_now();
    return fd;
}

int rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real)
        real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT,
                                                          "rename");
    int when = target(1, "rename", from, to);
    if (when == 1)
        die_now();
    int r = real(from, to);
    if (when == 2)
        die_now();
    return r;
}
