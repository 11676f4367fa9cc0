/*
 * sim_trace — Chrome trace-event export; see sim_trace.h.
 */
#include "sim_trace.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

static void trace_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* Microseconds with picosecond precision, exact for integer ps. */
static void trace_us(FILE *f, uint64_t ps)
{
    fprintf(f, "%" PRIu64 ".%06" PRIu64, ps / 1000000u, ps % 1000000u);
}

kf_code sim_trace_write(const sim_profile *p, FILE *f, kf_err *err)
{
    const sim_record *r = p->rec;
    const sim_timing *tm = &p->tm;
    char nb[32], lb[512];

    fputs("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"kforge-sim\",\"target\":", f);
    trace_str(f, p->tgt.name);
    fputs("},\"traceEvents\":[\n", f);
    fputs("{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":", f);
    trace_str(f, "NeuronCore");
    fputs("}}", f);
    for (uint32_t t = 0; t < tm->n_tracks; t++) {
        if (t >= SIM_TRACK_DMA0 && !tm->track_count[t])
            continue;
        fprintf(f, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":",
                t + 1);
        trace_str(f, sim_timing_track_name(t, nb, sizeof(nb)));
        fprintf(f, "}},\n{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_sort_index\","
                   "\"args\":{\"sort_index\":%u}}", t + 1, t);
    }
    for (size_t i = 0; i < r->n_insns; i++) {
        const sim_insn *in = &r->insns[i];
        const sim_timed *x = &tm->t[i];
        uint64_t bytes = 0;
        for (unsigned k = 0; k < in->nsrc; k++)
            bytes += in->src[k].bytes;
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":%u,\"name\":", x->track + 1u);
        trace_str(f, sim_opcode_name((sim_opcode)in->opcode));
        fputs(",\"cat\":", f);
        trace_str(f, sim_engine_name((sim_engine)in->engine));
        fputs(",\"ts\":", f);
        trace_us(f, x->start_ps);
        fputs(",\"dur\":", f);
        trace_us(f, x->end_ps - x->start_ps);
        fprintf(f, ",\"args\":{\"index\":%zu,\"nki_source_location\":", i);
        trace_str(f, sim_profile_loc(p, in->loc, lb, sizeof(lb)));
        fprintf(f, ",\"bytes\":%" PRIu64 ",\"flops\":%" PRIu64 ",\"wait\":\"%s\",\"wait_us\":",
                bytes, in->flops, sim_wait_name((sim_wait)x->wait));
        trace_us(f, x->start_ps - x->free_ps);
        fputs("}}", f);
    }
    fputs("\n]}\n", f);
    if (fflush(f) != 0 || ferror(f))
        return kf_err_set(err, KF_IO, "writing the trace failed: %s", strerror(errno));
    return KF_OK;
}

kf_code sim_trace_write_file(const sim_profile *p, const char *path, kf_err *err)
{
    FILE *f = fopen(path, "w");
    kf_code rc;

    if (!f)
        return kf_err_set(err, KF_IO, "cannot write trace '%s': %s", path, strerror(errno));
    rc = sim_trace_write(p, f, err);
    if (fclose(f) != 0 && rc == KF_OK)
        rc = kf_err_set(err, KF_IO, "closing trace '%s' failed: %s", path, strerror(errno));
    return rc;
}
