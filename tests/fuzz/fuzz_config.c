/* fuzz_config: libFuzzer target for the job-file parser (make fuzz).  Any
 * input must give DDPH_OK or an error with a message; never a crash, a
 * leak or undefined behaviour (built with ASan and UBSan).  Without
 * libFuzzer (FUZZ_REPLAY) it replays the files named on the command line:
 * that is how make check runs the regression inputs. */
#include "build-config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fmemopen((void *)data, size ? size : 1, "r");
    if (!f)
        return 0;
    if (!size) { /* fmemopen needs a non-empty buffer: read nothing */
        fclose(f);
        f = fopen("/dev/null", "r");
    }
    ddph_config cfg;
    ddph_err err;
    err.msg[0] = '\0';
    ddph_status st = ddph__config_parse(f, "/fuzz/job.ini", &cfg, &err);
    fclose(f);
    if (st == DDPH_OK)
        ddph__config_free(&cfg);
    else if (!err.msg[0])
        abort(); /* every error says why */
    return 0;
}

#ifdef FUZZ_REPLAY
int main(int argc, char **argv)
{
    int n = 0;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 1;
        }
        static uint8_t buf[1 << 22];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, len);
        n++;
    }
    printf("fuzz_config: replayed %d inputs without a crash\n", n);
    return 0;
}
#endif
