/* plan_args.c: see plan_args.h. */
#include "build-config.h"

#include "plan_args.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan_calib.h"
#include "plan_step.h"

static const char plan_usage[] =
    "usage: ddphook plan [--model NAME | --shapes FILE | --trace DIR]\n"
    "           [--hosts H] [--ranks-per-host R] [--link-bandwidth RATE]\n"
    "           [--link-latency TIME] [--intra-bandwidth RATE]\n"
    "           [--intra-latency TIME] [--efficiency F] [--compute TIME]\n"
    "           [--device NAME] [--batch N] [--f32] [--utilization F]\n"
    "           [--collectives nccl|mpich]\n"
    "           [--backward-share F] [--job JOB.ini] [--bucket-cap-mb X]\n"
    "           [--first-bucket-cap-mb X] [--hooks LIST] [--rank R]\n"
    "           [--option NAME.KEY=VALUE]... [--calibration FILE]\n"
    "           [--recalibrate | --no-calibration] [--calibration-repeats N]\n"
    "           [--calibrate-busy] [--busy-load F] [--device-profile FILE]\n"
    "           [--plugin-path DIRS] [--csv FILE]\n"
    "       ddphook plan --collective KIND:BYTES [cluster options] [--csv FILE]\n"
    "\n"
    "Predicts, for each hook, the time of a training step and the bytes each\n"
    "rank sends, for a model on a cluster described by the options, and\n"
    "recommends the fastest hook with its speed-up over allreduce.  The\n"
    "figures are predictions of a cost model (docs/plan.md says what it\n"
    "leaves out: congestion, stragglers, topology, NIC offloads).\n"
    "\n"
    "The model (one of):\n"
    "  --model NAME           a preset: gpt2-124m, resnet50, resnet18-cifar,\n"
    "                         lstm-wikitext2 (the PowerSGD paper's LSTM),\n"
    "                         gpt-example (examples/train_gpt), mlp\n"
    "                         (default gpt2-124m)\n"
    "  --shapes FILE          a parameter a line, NAME D0 [D1 ...], in\n"
    "                         registration order (`ddphook bench shapes`)\n"
    "  --trace DIR            the parameters of a gradient trace\n"
    "                         (`ddphook replay`, docs/replay.md)\n"
    "Gradients are f32; the buckets are the runtime's for these caps.\n"
    "\n"
    "The cluster:\n"
    "  --hosts H              hosts (default 2)\n"
    "  --ranks-per-host R     ranks on each host, numbered host by host\n"
    "                         (default 1)\n"
    "  --link-bandwidth RATE  each host's link to the switch, each way:\n"
    "                         100mbit, 1gbit, 10gbit, 400gbit, or bytes:\n"
    "                         1.25GB/s (default 10gbit)\n"
    "  --link-latency TIME    one message's start-up across the link:\n"
    "                         25us, 0.1ms, 0 (default 25us)\n"
    "  --intra-bandwidth RATE between two ranks of one host: a rate, or\n"
    "                         pcie3, pcie4, pcie5 (12, 24, 48 GB/s: GPUs\n"
    "                         without NVLink) (default: --device's NVLink;\n"
    "                         80gbit with --device cpu)\n"
    "  --intra-latency TIME   between two ranks of one host (default 1us)\n"
    "  --collectives KIND     nccl (the default with a GPU --device: its\n"
    "                         ring or tree, the cheaper) or mpich (MPICH\n"
    "                         4.0's algorithms and the runtime's own, for\n"
    "                         host buckets; the default with --device cpu)\n"
    "  --efficiency F         the share of the link's rate that carries\n"
    "                         payload (default 0.94: TCP over Ethernet with\n"
    "                         1500-byte frames)\n"
    "\n"
    "The step:\n"
    "  --compute TIME         forward + backward of one step; 0: the\n"
    "                         communication alone (default: estimated from\n"
    "                         the model's FLOPs on --device, and said so)\n"
    "  --device NAME          the GPU: v100, a100, h100 (default a100), or\n"
    "                         cpu (this machine: give --compute); its matrix\n"
    "                         rate prices the compute estimate, its memory\n"
    "                         bandwidth the hooks' arithmetic (measured on\n"
    "                         this CPU, scaled) and the sums, its NVLink the\n"
    "                         default --intra-bandwidth\n"
    "  --device-profile FILE  the GPU as `ddphook bench gpu --profile FILE`\n"
    "                         measured it: its memory bandwidth, each hook's\n"
    "                         arithmetic (from a one-rank run) and, from a\n"
    "                         run on several GPUs of one host, the rate\n"
    "                         between them; --device still gives the matrix\n"
    "                         rates\n"
    "  --batch N              samples a rank takes in a step, for the\n"
    "                         estimate (default: the preset's, 32 else)\n"
    "  --f32                  the step's compute runs in f32 (default f16/bf16\n"
    "                         on tensor cores)\n"
    "  --utilization F        the share of the device's rate a step sustains\n"
    "                         (default 0.35)\n"
    "  --backward-share F     the share of --compute that is backward, during\n"
    "                         which finished buckets are sent (default 0.66);\n"
    "                         gradients are taken to finish in reverse\n"
    "                         registration order at a rate proportional to\n"
    "                         their size\n"
    "  --job JOB.ini          take bucket_cap_mb and first_bucket_cap_mb from\n"
    "                         the job's [runtime] (and its plugin_path)\n"
    "  --bucket-cap-mb X      bucket cap in MiB or auto (default: the\n"
    "                         runtime's, auto: docs/config.md)\n"
    "  --first-bucket-cap-mb X  the first bucket's cap, MiB or auto\n"
    "                         (default: the runtime's, auto)\n"
    "  --hooks LIST           hooks to predict (default\n"
    "                         " ALL_HOOKS ")\n"
    "  --rank R               PowerSGD's matrix_approximation_rank (default 4,\n"
    "                         as `bench hooks`)\n"
    "  --option NAME.KEY=VALUE  a hook option (repeatable): topk.ratio (default\n"
    "                         0.01), powersgd.min_compression_rate (default 2);\n"
    "                         every option also goes to the calibration run\n"
    "\n"
    "The calibration (each hook's own arithmetic, measured on this machine):\n"
    "  --calibration FILE     where it is kept (default ddphook-plan.cal in\n"
    "                         the current folder); a hook's step at one rank\n"
    "                         on these buckets is measured with `ddphook bench\n"
    "                         hooks` the first time a hook, model, caps and\n"
    "                         options are asked for (a model past 16 MiB on\n"
    "                         two samples of it, fitted), and read back after\n"
    "  --recalibrate          measure again, replacing the file's entries\n"
    "  --no-calibration       take the hooks' arithmetic as 0 (communication\n"
    "                         alone); reads and writes no file\n"
    "  --calibration-repeats N  steps measured, the median kept (default 5)\n"
    "  --busy-load F          the machine is busy from F runnable tasks a CPU\n"
    "                         (1-minute load average; default 0.75): plan\n"
    "                         then refuses to measure, and measures again a\n"
    "                         kept figure measured busy or with another CPU\n"
    "                         count\n"
    "  --calibrate-busy       measure (and reuse) on a busy machine anyway;\n"
    "                         the figures keep their load and are flagged\n"
    "  --plugin-path DIRS     folders searched for the hooks before the\n"
    "                         installed one\n"
    "\n"
    "Output:\n"
    "  --csv FILE             also write the table as CSV: hook,\n"
    "                         sent_bytes_per_rank, link_bytes_per_host,\n"
    "                         comm_seconds, arithmetic_seconds, step_seconds,\n"
    "                         speedup_over_allreduce\n"
    "  --collective KIND:BYTES  the cost of one collective instead (KIND:\n"
    "                         allreduce, allreduce-f16, allgather (BYTES from\n"
    "                         each rank), alltoall (BYTES to each peer),\n"
    "                         broadcast): time, algorithm, bytes on the\n"
    "                         busiest link; CSV: kind, bytes, ranks,\n"
    "                         algorithm, seconds, link_bytes\n";

/* "100mbit", "1gbit", "1.25GB/s", ... into bytes per second, or a named
 * GPU interconnect (what a x16 slot carries in practice); 0 if not. */
static double parse_rate(const char *s)
{
    static const struct {
        const char *name;
        double bytes;
    } named[] = {{"pcie3", 12e9}, {"pcie4", 24e9}, {"pcie5", 48e9}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (strcasecmp(s, named[i].name) == 0)
            return named[i].bytes;
    static const struct {
        const char *unit;
        double bytes;
    } units[] = {
        {"bit", 1.0 / 8}, {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8},
        {"gbit", 1e9 / 8}, {"tbit", 1e12 / 8}, {"b/s", 1}, {"kb/s", 1e3},
        {"mb/s", 1e6}, {"gb/s", 1e9}, {"tb/s", 1e12},
    };
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v <= 0)
        return 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(end, units[i].unit) == 0) {
            double r = v * units[i].bytes;
            return r <= 1e15 ? r : 0;
        }
    return 0;
}

/* "25us", "0.1ms", "2s", "0" into seconds; -1 if not. */
static double parse_time(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0)
        return -1;
    double unit = !*end                   ? (v == 0 ? 1 : -1)
                  : strcmp(end, "s") == 0  ? 1
                  : strcmp(end, "ms") == 0 ? 1e-3
                  : strcmp(end, "us") == 0 ? 1e-6
                  : strcmp(end, "ns") == 0 ? 1e-9
                                           : -1;
    return unit < 0 || v * unit > 1e6 ? -1 : v * unit;
}

int plan_parse_real(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}


static int bad(const char *opt, const char *value, const char *want)
{
    fprintf(stderr, "ddphook plan: %s %s: %s\n", opt, value, want);
    return 2;
}

int plan_args_parse(int argc, char **argv, plan_args *out)
{
    plan_args a = {
        .model = "gpt2-124m",
        .hooks = ALL_HOOKS,
        .calibration = "ddphook-plan.cal",
        .cluster = {.hosts = 2, .per_host = 1, .link_lat = 25e-6,
                    .intra_bw = 10e9, .intra_lat = 1e-6},
        .rate_bits = 10e9,
        .efficiency = 0.94,
        .backward_share = 0.66,
        .compute = -1,
        .device = "a100",
        .batch = -1,
        .utilization = PLAN_UTILIZATION,
        .cap_mb = -1,
        .first_cap_mb = -1,
        .psgd_rank = 4,
        .repeats = 5,
        .busy_load = PLAN_BUSY_LOAD,
    };
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'M'},
        {"shapes", required_argument, NULL, 'F'},
        {"trace", required_argument, NULL, 'T'},
        {"hosts", required_argument, NULL, 'H'},
        {"ranks-per-host", required_argument, NULL, 'R'},
        {"link-bandwidth", required_argument, NULL, 'b'},
        {"link-latency", required_argument, NULL, 'l'},
        {"intra-bandwidth", required_argument, NULL, 'B'},
        {"intra-latency", required_argument, NULL, 'L'},
        {"efficiency", required_argument, NULL, 'e'},
        {"compute", required_argument, NULL, 'c'},
        {"device", required_argument, NULL, 'D'},
        {"collectives", required_argument, NULL, 'O'},
        {"batch", required_argument, NULL, 'a'},
        {"f32", no_argument, NULL, '3'},
        {"utilization", required_argument, NULL, 'u'},
        {"backward-share", required_argument, NULL, 's'},
        {"job", required_argument, NULL, 'j'},
        {"bucket-cap-mb", required_argument, NULL, 'k'},
        {"first-bucket-cap-mb", required_argument, NULL, 'f'},
        {"hooks", required_argument, NULL, 'h' + 256},
        {"rank", required_argument, NULL, 'r'},
        {"option", required_argument, NULL, 'o'},
        {"calibration", required_argument, NULL, 'C'},
        {"recalibrate", no_argument, NULL, 'X'},
        {"no-calibration", no_argument, NULL, 'N'},
        {"calibration-repeats", required_argument, NULL, 'n'},
        {"calibrate-busy", no_argument, NULL, 'Y'},
        {"busy-load", required_argument, NULL, 'y'},
        {"device-profile", required_argument, NULL, 'P'},
        {"plugin-path", required_argument, NULL, 'p'},
        {"csv", required_argument, NULL, 'v'},
        {"collective", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    int c, models = 0;
    double x;
    opterr = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'M': a.model = optarg; models++; break;
        case 'F': a.shapes = optarg; models++; break;
        case 'T': a.trace = optarg; models++; break;
        case 'H':
        case 'R':
            if (!plan_parse_real(optarg, 1, c == 'H' ? 1e6 : 4096, &x) ||
                x != floor(x))
                return bad(c == 'H' ? "--hosts" : "--ranks-per-host", optarg,
                           c == 'H' ? "a whole number in [1, 1000000]"
                                    : "a whole number in [1, 4096]");
            *(c == 'H' ? &a.cluster.hosts : &a.cluster.per_host) = (int)x;
            break;
        case 'b':
        case 'B':
            if (!(x = parse_rate(optarg)))
                return bad(c == 'b' ? "--link-bandwidth" : "--intra-bandwidth",
                           optarg, "a rate like 100mbit, 10gbit, 1.25GB/s");
            if (c == 'b')
                a.rate_bits = x * 8;
            else
                a.cluster.intra_bw = x, a.intra_set = 1;
            break;
        case 'l':
        case 'L':
            if ((x = parse_time(optarg)) < 0)
                return bad(c == 'l' ? "--link-latency" : "--intra-latency",
                           optarg, "a time like 25us, 0.1ms, 0");
            *(c == 'l' ? &a.cluster.link_lat : &a.cluster.intra_lat) = x;
            break;
        case 'e':
            if (!plan_parse_real(optarg, 0.01, 1, &a.efficiency))
                return bad("--efficiency", optarg, "a share in [0.01, 1]");
            break;
        case 'c':
            if ((a.compute = parse_time(optarg)) < 0)
                return bad("--compute", optarg, "a time like 0.25s, 80ms, 0");
            break;
        case 'D':
            if (strcmp(optarg, "cpu") != 0 && !preset_device_find(optarg))
                return bad("--device", optarg, "v100, a100, h100 or cpu");
            a.device = optarg;
            break;
        case 'O':
            if (strcmp(optarg, "nccl") != 0 && strcmp(optarg, "mpich") != 0)
                return bad("--collectives", optarg, "nccl or mpich");
            a.collectives = optarg;
            break;
        case 'a':
            if (!plan_parse_real(optarg, 1, 1e9, &x) || x != floor(x))
                return bad("--batch", optarg, "a whole number in [1, 1e9]");
            a.batch = (int)x;
            break;
        case '3': a.f32 = 1; break;
        case 'u':
            if (!plan_parse_real(optarg, 0.01, 1, &a.utilization))
                return bad("--utilization", optarg, "a share in [0.01, 1]");
            break;
        case 's':
            if (!plan_parse_real(optarg, 0, 1, &a.backward_share))
                return bad("--backward-share", optarg, "a share in [0, 1]");
            break;
        case 'j': a.job = optarg; break;
        case 'k':
        case 'f':
            if (!bench_parse_cap(optarg, &x))
                return bad(c == 'k' ? "--bucket-cap-mb" : "--first-bucket-cap-mb",
                           optarg, "auto or MiB in [2^-20, 65536]");
            *(c == 'k' ? &a.cap_mb : &a.first_cap_mb) = x;
            break;
        case 'h' + 256: a.hooks = optarg; break;
        case 'r':
            if (!plan_parse_real(optarg, 1, 4096, &x) || x != floor(x))
                return bad("--rank", optarg, "a whole number in [1, 4096]");
            a.psgd_rank = (int)x;
            break;
        case 'o': {
            const char *dot = strchr(optarg, '.'), *eq = strchr(optarg, '=');
            if (!dot || !eq || dot > eq || dot == optarg || eq == dot + 1)
                return bad("--option", optarg, "NAME.KEY=VALUE (e.g. "
                                               "topk.ratio=0.05)");
            if (a.options.n == (int)(sizeof a.options.items /
                                     sizeof *a.options.items))
                return bad("--option", optarg, "too many --option");
            a.options.items[a.options.n++] = optarg;
            break;
        }
        case 'C': a.calibration = optarg; break;
        case 'X': a.recalibrate = 1; break;
        case 'N': a.no_calibration = 1; break;
        case 'n':
            if (!plan_parse_real(optarg, 1, 9, &x) || x != floor(x))
                return bad("--calibration-repeats", optarg,
                           "a whole number in [1, 9]");
            a.repeats = (int)x;
            break;
        case 'Y': a.calibrate_busy = 1; break;
        case 'y':
            if (!plan_parse_real(optarg, 0, 1e6, &a.busy_load))
                return bad("--busy-load", optarg,
                           "runnable tasks a CPU in [0, 1000000]");
            break;
        case 'P': a.device_profile = optarg; break;
        case 'p': a.plugin_path = optarg; break;
        case 'v': a.csv = optarg; break;
        case 'K': a.collective = optarg; break;
        case 'h':
            fputs(plan_usage, stdout);
            return 0;
        default:
            fprintf(stderr, "ddphook plan: see `ddphook plan --help`\n");
            return 2;
        }
    }
    if (optind < argc)
        return bad("argument", argv[optind], "not an option (see --help)");
    if (models > 1) {
        fprintf(stderr, "ddphook plan: one of --model, --shapes, --trace\n");
        return 2;
    }
    if (a.recalibrate && a.no_calibration) {
        fprintf(stderr, "ddphook plan: --recalibrate and --no-calibration "
                        "contradict each other\n");
        return 2;
    }
    if ((double)a.cluster.hosts * a.cluster.per_host > 1e7) {
        fprintf(stderr, "ddphook plan: more than 10 million ranks\n");
        return 2;
    }
    a.cluster.link_bw = a.rate_bits / 8 * a.efficiency;
    const preset_device *dev = preset_device_find(a.device);
    if (dev && !a.intra_set)
        a.cluster.intra_bw = dev->nvlink_bw;
    a.cluster.nccl = a.collectives ? strcmp(a.collectives, "nccl") == 0
                                   : dev != NULL;
    *out = a;
    return -1;
}
