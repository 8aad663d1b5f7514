/* plan_step.c: see plan_step.h. */
#include "build-config.h"

#include "plan_step.h"

#include <stdio.h>

double plan_estimate_compute(const plan_step_inputs *in, char *how,
                             size_t cap)
{
    preset_work w;
    int preset = in->model && preset_work_of(in->model, &w);
    if (!preset) /* every weight one multiply-add a sample: dense layers */
        w = (preset_work){2.0 * (double)in->numel, 32, "sample",
                          "2 FLOPs a weight: dense layers only; "
                          "convolutions and attention do more"};
    int batch = in->batch > 0 ? in->batch : w.batch;
    if (!in->device) {
        snprintf(how, cap, "no --compute and no --device to estimate it on: "
                           "give --compute TIME (your step's forward + "
                           "backward), or --device v100|a100|h100");
        return -1;
    }
    double rate = (in->f32 ? in->device->f32_flops : in->device->half_flops) *
                  in->utilization;
    double flops = 3 * w.forward_flops * batch;
    double s = flops / rate;
    snprintf(how, cap,
             "estimated: 3 x %.3g GFLOP a %s (%s) x %d a rank = %.3g TFLOP, "
             "on %s at %.0f%% of its %s rate (%.0f TFLOP/s); give "
             "--compute for your own",
             w.forward_flops / 1e9, w.sample, w.source, batch, flops / 1e12,
             in->device->label, in->utilization * 100,
             in->f32 ? "f32" : "f16/bf16 matrix", rate / 1e12);
    return s;
}

double plan_device_add(const preset_device *d)
{
    return 3.0 / d->mem_bw;
}

void plan_device_measured(const preset_device *base, const gpu_profile *p,
                          preset_device *out, char *label, size_t cap)
{
    *out = *base;
    out->mem_bw = p->copy_bytes_per_s;
    int one_host = p->ranks > 1 && p->per_host == p->ranks;
    if (one_host)
        out->nvlink_bw = p->allreduce_bus_bytes_per_s;
    snprintf(label, cap, "%s as measured (memory %.0f GB/s%s), %s's matrix "
             "rates", p->device, p->copy_bytes_per_s / 1e9,
             one_host ? ", between GPUs its allreduce's bus bandwidth" : "",
             base->label);
    out->label = label;
}

double plan_profile_hook(const gpu_profile *p, const char *hook,
                         double bytes)
{
    const gpu_profile_hook *h = gpu_profile_find(p, hook);
    return h && p->ranks == 1 ? h->seconds_per_byte * bytes : -1;
}
